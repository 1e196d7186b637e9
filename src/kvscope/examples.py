"""Bundled examples: real logs with the facts their posters stated, runnable offline."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from kvscope.core.errors import InputError


@dataclass(frozen=True)
class Example:
    name: str
    file: str
    title: str
    assumptions: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # where the log was posted (each example is a real log, verbatim)


EXAMPLES: dict[str, Example] = {
    "kimi-k2.5-tp8": Example(
        "kimi-k2.5-tp8",
        "kimi-k2.5-tp8.log",
        "Kimi-K2.5 INT4 (MLA) on 8× RTX PRO 6000 96 GB, SGLang TP8, --mem-fraction-static 0.88, EAGLE3 draft",
        {
            "model": "moonshotai/Kimi-K2.5",
            "gpu": "RTX PRO 6000",
            "mem_fraction_static": 0.88,
            "tp_size": 8,
            "speculative_algorithm": "EAGLE3",
            "host_ram_gb": 396,
            # stated by the operator in the same thread (seen after CUDA-graph capture), not in the excerpt
            "avail_at_ready_gib": 7.9,
        },
        source="an operator's journalctl of a SGLang service, 2026-02-28 (the project's founding case study)",
    ),
    "vllm-max-len-too-large": Example(
        "vllm-max-len-too-large",
        "vllm-max-len-too-large.log",
        "vLLM 0.6 (V0) fails: --max-model-len 29000 does not fit the KV cache of Llama-3.1-8B on an RTX 3090",
        {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "RTX 3090"},
        source="https://github.com/vllm-project/vllm/issues/10517",
    ),
    "vllm-kv-full-queue": Example(
        "vllm-kv-full-queue",
        "vllm-kv-full-queue.log",
        "vLLM V1 serving at 88–98 % KV cache usage with 23–43 requests waiting (serving pressure)",
        source="https://github.com/vllm-project/vllm/issues/43295",
    ),
    "llamacpp-kv-cache": Example(
        "llamacpp-kv-cache",
        "llamacpp-4080-kv-cache.log",
        "llama.cpp (through LLamaSharp) on an RTX 4080 SUPER: a 4,096-cell f16 KV cache of 144 MiB",
        source="https://github.com/SciSharp/LLamaSharp/issues/1099",
    ),
    "ollama-layers-on-cpu": Example(
        "ollama-layers-on-cpu",
        "ollama-layers-on-cpu.log",
        "ollama on 4 GPUs puts 37 of 81 layers on the CPU at num_ctx 64000 (its scheduler's offload estimate)",
        source="https://github.com/ollama/ollama/issues/9181",
    ),
}


def example_path(name: str) -> tuple[Example, str]:
    ex = EXAMPLES.get(name)
    if ex is None:
        raise InputError(f"no example named {name!r}; `kvscope examples` lists them")
    path = resources.files("kvscope.data").joinpath("examples").joinpath(ex.file)
    return ex, str(Path(str(path)))
