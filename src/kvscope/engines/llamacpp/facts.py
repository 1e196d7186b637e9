"""llama.cpp's (and ollama's) facts beyond the contract fields (``core/facts.py`` says why they are views)."""

from __future__ import annotations

from typing import Any

from kvscope.core import facts
from kvscope.core.facts import Fact


class LlamaRankFacts(facts.RankFacts):
    __slots__ = ()
    # the per-kind sums of the buffer lines (finish folds one line per buffer into these)
    families = ("*_kv_buffer_gib",)  # one per cache kind (target, draft, recurrent)
    model_buffers_mib: Fact[dict[str, float]] = Fact("weights per buffer type (CUDA0, CPU_Mapped…)")
    compute_buffers_mib: Fact[dict[str, float]] = Fact()
    # a buffer name printed on several lines: each line's MiB, in order (the per-name figure above is their sum)
    model_buffer_lines_mib: Fact[dict[str, list[float]]] = Fact()
    compute_buffer_lines_mib: Fact[dict[str, list[float]]] = Fact()
    output_buffer_lines_mib: Fact[dict[str, list[float]]] = Fact()
    input_buffer_lines_mib: Fact[dict[str, list[float]]] = Fact()
    output_buffers_mib: Fact[dict[str, float]] = Fact()
    input_buffers_mib: Fact[dict[str, float]] = Fact()
    compute_gib: Fact[float] = Fact()
    output_gib: Fact[float] = Fact()
    input_gib: Fact[float] = Fact()
    kv_split_gib: Fact[float] = Fact("this device's KV share under split-mode graph")
    breakdown_mib: Fact[dict[str, Any]] = Fact("llama_memory_breakdown_print's row for this device")
    total_vram_used_gib: Fact[float] = Fact()
    gpu_name: Fact[str] = Fact()
    aggregate: Fact[bool] = Fact("a row that sums the devices (the log printed no per-device figures)")


class LlamaCapacityFacts(facts.CapacityFacts):
    __slots__ = ()
    kv_caches: Fact[list[dict[str, Any]]] = Fact("one entry per cache (target, draft, recurrent): cells, types, GiB")
    n_ctx_train: Fact[int] = Fact()
