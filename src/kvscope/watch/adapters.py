"""What vLLM and SGLang expose about KV capacity and usage, and where each keeps it.

vLLM publishes its whole cache configuration as the labels of one gauge, ``vllm:cache_config_info``
(num_gpu_blocks, block_size, kv_cache_size_tokens, kv_cache_max_concurrency, kv_cache_memory_bytes,
gpu_memory_utilization), and its usage as ``vllm:kv_cache_usage_perc`` (``gpu_cache_usage_perc``
before V1). SGLang publishes capacity in ``/get_server_info`` (``/server_info`` since 2026):
``max_total_num_tokens``, ``max_running_requests``, ``mem_fraction_static``, ``context_length``, and
the effective per-DP values in ``internal_states``; its usage needs ``--enable-metrics``
(``sglang:token_usage``, ``num_used_tokens``, ``num_running_reqs``, ``num_queue_reqs``). Releases
rename metrics, so each reading tries the known names in order.

Multi-engine servers (vLLM DP ``engine`` label, SGLang ``dp_rank``) have one KV cache per engine:
tokens and requests are summed over engines, while the usage fraction is the fullest engine's,
because that is the one that preempts first.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from kvscope.watch import prom
from kvscope.watch.http import Client, NotFound, WatchError


@dataclass
class Capacity:
    """What the server said, once, about how much KV cache it has."""

    engine: str
    url: str
    version: str | None = None
    model: str | None = None
    kv_tokens: int | None = None  # whole server (summed over DP engines)
    engines: int = 1
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    num_cpu_blocks: int | None = None
    max_model_len: int | None = None
    max_concurrency: float | None = None
    max_running_requests: int | None = None
    kv_cache_memory_bytes: int | None = None
    memory_fraction: float | None = None  # gpu_memory_utilization / mem_fraction_static
    memory_fraction_flag: str | None = None
    kv_cache_dtype: str | None = None
    prefix_caching: bool | None = None
    metrics: bool = True  # False: the server serves no usage metrics (SGLang without --enable-metrics)
    extras: dict[str, Any] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and v != {} and v != []}


@dataclass
class Reading:
    """One scrape's raw numbers (counters still cumulative; the sampler turns them into deltas)."""

    kv_usage: float | None = None  # 0..1, the fullest engine
    tokens_used: int | None = None
    running: int | None = None
    waiting: int | None = None
    preemptions_total: float | None = None  # counter (vLLM preemptions, SGLang retractions)
    preemptions_gauge: float | None = None  # SGLang's per-interval gauge when no counter exists
    prefix_hits_total: float | None = None
    prefix_queries_total: float | None = None
    prefix_hit_rate: float | None = None  # a gauge, when the engine only gives that
    start_time: float | None = None  # process_start_time_seconds: changes when the server restarts
    extras: dict[str, Any] = field(default_factory=dict)


def _label_num(labels: dict[str, str], key: str) -> float | None:
    raw = labels.get(key)
    if raw is None or raw in ("None", "", "null"):
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _int(value: float | None) -> int | None:
    return None if value is None or not math.isfinite(value) else int(round(value))


def _finite(values: list[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


def _group(series: list[prom.Series], key: str) -> dict[str, list[prom.Series]]:
    out: dict[str, list[prom.Series]] = {}
    for s in series:
        out.setdefault(s.labels.get(key, ""), []).append(s)
    return out


def _sum(series: list[prom.Series]) -> float | None:
    vals = _finite([s.value for s in series])
    return sum(vals) if vals else None


def _max(series: list[prom.Series]) -> float | None:
    vals = _finite([s.value for s in series])
    return max(vals) if vals else None


def _start_time(metrics: prom.Metrics) -> float | None:
    return _max(metrics.get("process_start_time_seconds"))


class VLLMAdapter:
    engine = "vllm"

    def capacity(self, client: Client, metrics: prom.Metrics) -> Capacity:
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
                cap.extras["num_gpu_blocks_per_engine"] = cap.num_gpu_blocks
        cap.kv_tokens = sum(tokens) if tokens else None
        self._models(client, cap)
        self._version(client, cap)
        return cap

    def _models(self, client: Client, cap: Capacity) -> None:
        try:
            data = client.get_json("/v1/models")
        except WatchError as exc:  # auxiliary: vLLM guards /v1 with --api-key but not /metrics
            cap.extras.setdefault("unread", []).append(exc.message)
            return
        models = data.get("data") if isinstance(data, dict) else None
        if isinstance(models, list) and models and isinstance(models[0], dict):
            cap.model = models[0].get("id")
            cap.max_model_len = _int(_label_num({"v": str(models[0].get("max_model_len"))}, "v"))
            cap.sources.append("/v1/models")

    def _version(self, client: Client, cap: Capacity) -> None:
        try:
            data = client.get_json("/version")
        except WatchError as exc:
            cap.extras.setdefault("unread", []).append(exc.message)
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
            r.extras["swapped"] = _int(swapped)
        return r


class SGLangAdapter:
    engine = "sglang"

    def capacity(self, client: Client, metrics: prom.Metrics | None) -> Capacity:
        cap = Capacity(engine=self.engine, url=client.shown, metrics=metrics is not None)
        info = server_info(client)
        if info is not None:
            path, data = info
            cap.sources.append(path)
            self._from_info(cap, data)
        if metrics is not None:
            cap.sources.append("/metrics")
            self._from_metrics(cap, metrics)
        return cap

    @staticmethod
    def _from_info(cap: Capacity, data: dict[str, Any]) -> None:
        states = data.get("internal_states")
        state = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
        memory = state.get("memory_usage") if isinstance(state.get("memory_usage"), dict) else {}
        tokens = data.get("max_total_num_tokens") or memory.get("token_capacity")
        dp = data.get("dp_size") if isinstance(data.get("dp_size"), int) and data.get("dp_size") > 0 else 1
        cap.engines = dp
        if isinstance(tokens, (int, float)):
            cap.extras["max_total_num_tokens"] = int(tokens)
            cap.kv_tokens = int(tokens) * dp
        effective = state.get("effective_max_running_requests_per_dp")
        running = effective if isinstance(effective, int) else data.get("max_running_requests")
        if isinstance(running, int):
            cap.max_running_requests = running * dp if isinstance(effective, int) else running
        if isinstance(data.get("mem_fraction_static"), (int, float)):
            cap.memory_fraction = float(data["mem_fraction_static"])
            cap.memory_fraction_flag = "--mem-fraction-static"
        if isinstance(data.get("context_length"), int):
            cap.max_model_len = data["context_length"]
        if isinstance(data.get("max_req_input_len"), int):
            cap.extras["max_req_input_len"] = data["max_req_input_len"]
        if isinstance(data.get("page_size"), int):
            cap.block_size = data["page_size"]
        cap.kv_cache_dtype = data.get("kv_cache_dtype") if isinstance(data.get("kv_cache_dtype"), str) else None
        if isinstance(data.get("disable_radix_cache"), bool):
            cap.prefix_caching = not data["disable_radix_cache"]
        cap.model = data.get("served_model_name") or data.get("model_path")
        cap.version = data.get("version") if isinstance(data.get("version"), str) else None
        for key in ("tp_size", "pp_size", "dp_size", "chunked_prefill_size", "max_prefill_tokens"):
            if isinstance(data.get(key), int):
                cap.extras[key] = data[key]
        if isinstance(memory.get("kvcache"), (int, float)):
            cap.extras["kv_pool_gib"] = float(memory["kvcache"])
        if isinstance(memory.get("weight"), (int, float)):
            cap.extras["weights_gib"] = float(memory["weight"])
        if data.get("enable_metrics") is False:
            cap.extras["enable_metrics"] = False

    @staticmethod
    def _from_metrics(cap: Capacity, metrics: prom.Metrics) -> None:
        """2024-era servers put capacity in gauges too; fill what server info did not give."""
        groups = _schedulers(metrics.get("sglang:max_total_num_tokens"))
        if cap.kv_tokens is None and groups:
            cap.kv_tokens = _int(sum(s.value for s in groups))
            cap.engines = max(cap.engines, len(groups))
            cap.extras["max_total_num_tokens"] = _int(groups[0].value)
        running = _schedulers(metrics.get("sglang:max_running_requests"))
        if cap.max_running_requests is None and running:
            cap.max_running_requests = _int(sum(s.value for s in running))
        if cap.kv_tokens is None:
            _estimate_pool(cap, metrics)
        context = _max(metrics.get("sglang:context_len"))
        if cap.max_model_len is None and context is not None:
            cap.max_model_len = _int(context)
        if cap.model is None:
            for series in metrics.series.values():
                label = series[0].labels.get("model_name") or series[0].labels.get("name")
                if series[0].name.startswith("sglang:") and label:
                    cap.model = label
                    break

    def read(self, metrics: prom.Metrics, cap: Capacity) -> Reading:
        r = Reading(start_time=_start_time(metrics))
        usage = _schedulers(metrics.get("sglang:token_usage"))
        used = _schedulers(metrics.get("sglang:num_used_tokens"))
        r.kv_usage = _max(usage)
        r.tokens_used = _int(_sum(used))
        if r.tokens_used is None and r.kv_usage is not None and cap.kv_tokens:
            r.tokens_used = _int(_sum(usage) * cap.kv_tokens / max(1, len(usage)))  # type: ignore[operator]
        if r.kv_usage is None and r.tokens_used is not None and cap.kv_tokens:
            r.kv_usage = r.tokens_used / cap.kv_tokens
        r.running = _int(_sum(_schedulers(metrics.get("sglang:num_running_reqs"))))
        r.waiting = _int(_sum(_schedulers(metrics.get("sglang:num_queue_reqs"))))
        r.preemptions_total = _sum(_schedulers(metrics.get("sglang:num_retractions_sum")))
        if r.preemptions_total is None:
            r.preemptions_gauge = _sum(_schedulers(metrics.get("sglang:num_retracted_reqs")))
        r.prefix_hits_total = _sum(_schedulers(metrics.get("sglang:cached_tokens_total")))
        r.prefix_queries_total = _sum(_schedulers(metrics.get("sglang:prompt_tokens_total")))
        if r.prefix_hits_total is None:
            r.prefix_queries_total = None
            hit = _max(_schedulers(metrics.get("sglang:cache_hit_rate")))
            r.prefix_hit_rate = hit / 100 if hit is not None and hit > 1 else hit
        gen = _sum(_schedulers(metrics.get("sglang:gen_throughput")))
        if gen is not None:
            r.extras["gen_throughput"] = gen
        return r


def _estimate_pool(cap: Capacity, metrics: prom.Metrics) -> None:
    """No server info and no capacity gauge: pool ≈ num_used_tokens / token_usage, per scheduler.

    Only from a scheduler at least 5 % full: SGLang rounds token_usage to two decimals, so below
    that the quotient is noise. Marked as an estimate wherever it is shown.
    """
    used = {(s.labels.get("dp_rank", ""), s.labels.get("pp_rank", "0")): s.value
            for s in _schedulers(metrics.get("sglang:num_used_tokens"))}
    total, n = 0.0, 0
    for s in _schedulers(metrics.get("sglang:token_usage")):
        u = used.get((s.labels.get("dp_rank", ""), s.labels.get("pp_rank", "0")))
        if u is not None and s.value >= 0.05:
            total += u / s.value
            n += 1
    if n:
        cap.kv_tokens = int(round(total))
        cap.extras["kv_tokens_estimated_from"] = "num_used_tokens / token_usage"


def _schedulers(series: list[prom.Series]) -> list[prom.Series]:
    """One series per SGLang scheduler: per DP rank, the lowest TP rank (others repeat its numbers)."""
    best: dict[tuple[str, str], prom.Series] = {}
    for s in series:
        key = (s.labels.get("dp_rank", ""), s.labels.get("pp_rank", "0"))
        tp = s.labels.get("tp_rank", "0")
        cur = best.get(key)
        if cur is None or _rank(tp) < _rank(cur.labels.get("tp_rank", "0")):
            best[key] = s
    return list(best.values())


def _rank(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 1 << 30


def server_info(client: Client) -> tuple[str, dict[str, Any]] | None:
    """SGLang's server info from whichever endpoint this release serves; None when neither exists."""
    for path in ("/get_server_info", "/server_info"):
        try:
            data = client.get_json(path)
        except NotFound:
            continue
        if isinstance(data, dict) and ("max_total_num_tokens" in data or "internal_states" in data):
            return path, data
    return None


Adapter = VLLMAdapter | SGLangAdapter


class NotAnEngine(WatchError):
    """The URL answers, but not as vLLM or SGLang."""

    kind = "not-an-engine"
    retry = False


def detect(client: Client) -> tuple[Adapter, prom.Metrics | None]:
    """Which engine serves at the URL, and its first /metrics page (None: it serves none).

    /metrics first: both engines serve it (SGLang only with --enable-metrics) and its metric
    prefix names the engine. Without it, SGLang still answers /get_server_info or /server_info.
    """
    metrics: prom.Metrics | None = None
    try:
        metrics = prom.parse(client.get("/metrics").text())
    except NotFound:
        metrics = None
    if metrics is not None and metrics.has_prefix("vllm:"):
        return VLLMAdapter(), metrics
    if metrics is not None and metrics.has_prefix("sglang:"):
        return SGLangAdapter(), metrics
    if server_info(client) is not None:
        return SGLangAdapter(), None
    if metrics is not None:
        raise NotAnEngine(f"{client.shown}/metrics has no vllm: or sglang: metrics: not a vLLM or SGLang server "
                          "(or vLLM started with --disable-log-stats, which turns its metrics off)")
    raise NotAnEngine(f"{client.shown}: no /metrics and no SGLang server info: not a vLLM or SGLang server")
