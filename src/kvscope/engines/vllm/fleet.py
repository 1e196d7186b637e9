"""vLLM's Prometheus metrics as ``kvscope fleet`` reads them, every era's name (V0 first exported
``gpu_cache_usage_perc`` and a prefix hit-rate gauge; V1 renamed usage to ``kv_cache_usage_perc`` and
counts prefix hits and queries). One server with several DP engines labels each engine's series
``engine``: each has its own pool."""

from __future__ import annotations

from kvscope.engines.base import FleetMetrics

FLEET = FleetMetrics(
    usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    waiting=("vllm:num_requests_waiting",),
    running=("vllm:num_requests_running",),
    preemptions=("vllm:num_preemptions_total",),
    prefix_hits=("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    prefix_queries=("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    hit_rate=("vllm:gpu_prefix_cache_hit_rate",),
    capacity_info=("vllm:cache_config_info",),
    scheduler_labels=("engine",),
)
