"""vLLM's facts beyond the contract fields (``core/facts.py`` says why they are views over one store)."""

from __future__ import annotations

from typing import Any

from kvscope.core import facts
from kvscope.core.facts import Fact


class VllmRankFacts(facts.RankFacts):
    __slots__ = ()
    # the memory profile (gpu_worker's "Memory profiling takes …" and its successors)
    available_kv_gib: Fact[float] = Fact("'Available KV cache memory' of this worker (negative: no room)")
    available_kv_from: Fact[str] = Fact("how available_kv_gib was worked out where the log did not print it")
    init_free_gib: Fact[float] = Fact("free GiB when the worker initialised (the contention check)")
    free_after_profile_gib: Fact[float] = Fact()
    initial_memory_usage_gib: Fact[float] = Fact()
    memory_usage_post_profile_gib: Fact[float] = Fact()
    peak_torch_gib: Fact[float] = Fact("torch's peak during the profile run (weights + activations)")
    non_kv_gib: Fact[float] = Fact()
    consumed_gib: Fact[float] = Fact()
    device_used_after_weights_gib: Fact[float] = Fact()
    profile_seconds: Fact[float] = Fact()
    total_from_oom: Fact[bool] = Fact("the device total came from an out-of-memory message, not the profile")
    # TPU workers report HBM instead of a torch profile
    hbm_used_after_model_gib: Fact[float] = Fact()
    hbm_used_after_kv_gib: Fact[float] = Fact()
    device: Fact[str] = Fact()
    numa_node: Fact[int] = Fact()
    repeated_across_cluster: Fact[int] = Fact("how many workers printed the same line (Ray's dedup)")
    # CUDA graphs: the advisory (0.11+) and the capture
    cuda_graph_profiling: Fact[bool] = Fact("whether the profile counted CUDA graphs (the advisory says)")
    util_equivalent_without_graph_profiling: Fact[float] = Fact()
    util_suggested_with_graph_profiling: Fact[float] = Fact()
    cuda_graph_estimate_gib: Fact[float] = Fact("the graphs' memory as the engine estimated it")
    cuda_graph_estimate_from: Fact[str] = Fact()
    graph_reserved_gib: Fact[float] = Fact()
    graph_kind: Fact[str] = Fact()
    graph_capture_started: Fact[bool] = Fact()
    graph_capture_done: Fact[bool] = Fact()
    graph_capture_seconds: Fact[float] = Fact()
    died_in_capture: Fact[bool] = Fact("the worker's traceback ends inside graph capture")
    # kv_cache_memory_bytes: the operator's fixed KV size and what would fit
    kv_cache_memory_fixed: Fact[bool] = Fact()
    kv_cache_memory_fit_bytes: Fact[int] = Fact("the kv_cache_memory_bytes that would fit this worker")
    kv_cache_memory_full_bytes: Fact[int] = Fact("the kv_cache_memory_bytes that uses the whole budget")


class VllmCapacityFacts(facts.CapacityFacts):
    __slots__ = ()
    kv_cache_memory_bytes: Fact[int] = Fact("the operator's fixed KV size (overrides utilization)")
    available_kv_exact: Fact[bool] = Fact("available KV known to the byte (kv_cache_memory_bytes), not rounded")
    available_kv_gib_derived: Fact[float] = Fact()
    kv_tokens_derived: Fact[str] = Fact("how kv_tokens was worked out where the log did not print it")
    kv_tokens_per_worker: Fact[list[int]] = Fact("'GPU KV cache size' of each worker, in the log's order")
    max_concurrency_per_worker: Fact[list[float]] = Fact()
    estimated_max_model_len: Fact[int] = Fact("the max_model_len vLLM's error says would fit")
    blocks_device: Fact[str] = Fact()
    kv_device: Fact[str] = Fact()
    num_gpu_blocks_override_profiling: Fact[int] = Fact()
    init_engine_seconds: Fact[float] = Fact()
    ready: Fact[bool] = Fact("the server said it was ready (serving lines or the API banner)")
    # the hybrid KV-cache manager (sliding window, Mamba) and a speculative head's layers
    hybrid_signal: Fact[str] = Fact("the log line that shows the hybrid manager's grouping")
    hybrid_layout: Fact[dict[str, Any]] = Fact("the hybrid layout the pool was sized with (mode, block size, groups)")
    padding_layers: Fact[int] = Fact()
    padding_waste_percent: Fact[float] = Fact()
    draft_kv_layers: Fact[int] = Fact("KV layers a speculative-decoding head adds to the target's")
