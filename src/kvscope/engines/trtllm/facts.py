"""TensorRT-LLM's facts beyond the contract fields (``core/facts.py`` says why they are views)."""

from __future__ import annotations

from kvscope.core import facts
from kvscope.core.facts import Fact


class TrtRankFacts(facts.RankFacts):
    __slots__ = ()
    # the PyTorch executor's report names each component it created
    families = ("component_*_free_before_after_gib",)
    kv_sizing_free_gib: Fact[float] = Fact("the free memory the KV fraction is taken of")
    estimation_kv_gib: Fact[list[float]] = Fact("the temporary KV pools of the estimation pass")
    profiling_kv_gib: Fact[float] = Fact()
    peak_memory_gib: Fact[float] = Fact()
    non_torch_at_load_gib: Fact[float] = Fact()
    engine_size_mib: Fact[float] = Fact()
    trt_managed_gpu_mib: Fact[int] = Fact()
    execution_context_gib: Fact[float] = Fact("the TensorRT engine's activations")
    runtime_buffers_gib: Fact[float] = Fact()
    decoder_gib: Fact[float] = Fact()
    free_before_failed_component_gib: Fact[float] = Fact()
    weights_label: Fact[str] = Fact()


class TrtCapacityFacts(facts.CapacityFacts):
    __slots__ = ()
    tokens_per_block: Fact[int] = Fact()
    kv_allocated_bytes: Fact[int] = Fact("the pool's size to the byte, as the allocation line prints it")
    implied_kv_cache_free_gpu_mem_fraction: Fact[float] = Fact()
    estimated_kv_gib: Fact[float] = Fact()
    max_blocks_per_seq: Fact[int] = Fact()
    max_tokens_in_paged_kv_cache: Fact[int] = Fact()
    window_size: Fact[int] = Fact()
