"""Write a tiny randomly initialised Llama (config, safetensors weights, BPE tokenizer) to a directory.

Run with the vLLM venv's python (it has torch, transformers and tokenizers); kvscope itself never
imports it. Why a random model: the watch tests need a real vLLM server sizing and filling a real
KV cache, not meaningful text, and nothing may be downloaded from a model hub.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def build_tokenizer(out: Path, vocab: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    words = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "kv", "cache", "pages", "fill", "and", "drain"]
    corpus = [" ".join(words[(i + j) % len(words)] for j in range(24)) + f" {i} {i * 7919 % 10007}" for i in range(4000)]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    fast.save_pretrained(out)


def build_model(out: Path, vocab: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=1,
        eos_token_id=2,
        torch_dtype="float32",
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(out, safe_serialization=True)


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    vocab = 2048
    build_tokenizer(out, vocab)
    build_model(out, vocab)
    cfg = json.loads((out / "config.json").read_text())
    print(json.dumps({"dir": str(out), "layers": cfg["num_hidden_layers"], "vocab": cfg["vocab_size"]}))


if __name__ == "__main__":
    main()
