"""vLLM under ``kvscope watch``: its whole cache configuration is the labels of one gauge,
``vllm:cache_config_info``; usage is ``vllm:kv_cache_usage_perc`` (``gpu_cache_usage_perc`` before V1).

Multi-engine servers (the DP ``engine`` label) have one KV cache per engine: tokens and requests are
summed over engines, the usage fraction is the fullest engine's (the one that preempts first).
"""

from __future__ import annotations

from kvscope.core.errors import WatchError
from kvscope.engines.watch_base import (
    Capacity,
    MetricsAdapter,
    Reading,
    ReadingFacts,
    ServerClient,
    WatchCapacityFacts,
    _finite,
    _group,
    _int,
    _label_num,
    _max,
    _start_time,
    _sum,
)
from kvscope.reading import prom


class VLLMAdapter(MetricsAdapter):
    engine = "vllm"
    metric_prefix = "vllm:"

    @staticmethod
    def answers(client: ServerClient) -> bool:
        """Without /metrics vLLM shows nothing kvscope can read."""
        return False

    def capacity(self, client: ServerClient, metrics: prom.Metrics) -> Capacity:
        cap = Capacity(engine=self.engine, url=client.shown, sources=["/metrics"])
        infos = metrics.get("vllm:cache_config_info")
        per_engine = _group(infos, "engine") if infos else {}
        cap.engines = max(1, len(per_engine))
        tokens: list[int] = []
        for series in per_engine.values():
            labels = series[0].labels
            blocks, block = _label_num(labels, "num_gpu_blocks"), _label_num(labels, "block_size")
            size = _label_num(labels, "kv_cache_size_tokens")
            if size is None and blocks is not None and block is not None:
                size = blocks * block
            if size is not None:
                tokens.append(int(size))
        if infos:
            labels = infos[0].labels
            cap.block_size = _int(_label_num(labels, "block_size"))
            cap.num_gpu_blocks = _int(_label_num(labels, "num_gpu_blocks"))
            cap.num_cpu_blocks = _int(_label_num(labels, "num_cpu_blocks"))
            cap.max_concurrency = _label_num(labels, "kv_cache_max_concurrency")
            cap.kv_cache_memory_bytes = _int(_label_num(labels, "kv_cache_memory_bytes"))
            cap.memory_fraction = _label_num(labels, "gpu_memory_utilization")
            cap.memory_fraction_flag = "--gpu-memory-utilization"
            cap.kv_cache_dtype = labels.get("cache_dtype")
            if "enable_prefix_caching" in labels:
                cap.prefix_caching = labels["enable_prefix_caching"] == "True"
            if cap.engines > 1 and cap.num_gpu_blocks is not None:
                WatchCapacityFacts(cap).num_gpu_blocks_per_engine = cap.num_gpu_blocks
        cap.kv_tokens = sum(tokens) if tokens else None
        self._models(client, cap)
        self._version(client, cap)
        return cap

    def _models(self, client: ServerClient, cap: Capacity) -> None:
        try:
            data = client.get_json("/v1/models")
        except WatchError as exc:  # auxiliary: vLLM guards /v1 with --api-key but not /metrics
            WatchCapacityFacts(cap).note_unread(exc.message)
            return
        models = data.get("data") if isinstance(data, dict) else None
        if isinstance(models, list) and models and isinstance(models[0], dict):
            cap.model = models[0].get("id")
            cap.max_model_len = _int(_label_num({"v": str(models[0].get("max_model_len"))}, "v"))
            cap.sources.append("/v1/models")

    def _version(self, client: ServerClient, cap: Capacity) -> None:
        try:
            data = client.get_json("/version")
        except WatchError as exc:
            WatchCapacityFacts(cap).note_unread(exc.message)
            return
        if isinstance(data, dict) and isinstance(data.get("version"), str):
            cap.version = data["version"]
            cap.sources.append("/version")

    def read(self, metrics: prom.Metrics, cap: Capacity) -> Reading:
        r = Reading(start_time=_start_time(metrics))
        usage = metrics.first("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
        r.kv_usage = _max(usage)
        if usage and cap.kv_tokens:
            per_engine = cap.kv_tokens / max(1, cap.engines)
            vals = _finite([s.value for s in usage])
            r.tokens_used = _int(sum(v * per_engine for v in vals)) if vals else None
        r.running = _int(_sum(metrics.get("vllm:num_requests_running")))
        r.waiting = _int(_sum(metrics.get("vllm:num_requests_waiting")))
        r.preemptions_total = _sum(metrics.first("vllm:num_preemptions_total", "vllm:num_preemptions"))
        r.prefix_hits_total = _sum(metrics.first("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"))
        r.prefix_queries_total = _sum(
            metrics.first("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
        )
        if r.prefix_queries_total is None:
            r.prefix_hit_rate = _max(metrics.get("vllm:gpu_prefix_cache_hit_rate"))
        swapped = _sum(metrics.get("vllm:num_requests_swapped"))
        if swapped is not None:
            ReadingFacts(r).swapped = _int(swapped)
        return r


def _adapter_class() -> type:
    """The adapter the registry hands kvscope watch (loaded only when watch runs)."""
    return VLLMAdapter
