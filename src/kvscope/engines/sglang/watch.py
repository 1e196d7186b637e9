"""SGLang under ``kvscope watch``: capacity from ``/get_server_info`` (``/server_info`` since 2026) —
``max_total_num_tokens``, ``max_running_requests``, ``mem_fraction_static``, ``context_length`` and the
per-DP ``internal_states``; usage only with ``--enable-metrics`` (``sglang:token_usage``, …). Releases
rename metrics, so each reading tries the known names in order.
"""

from __future__ import annotations

from typing import Any

from kvscope.engines.watch_base import (
    Capacity,
    MetricsAdapter,
    Reading,
    ReadingFacts,
    ServerClient,
    WatchCapacityFacts,
    _int,
    _max,
    _start_time,
    _sum,
    server_info,
)
from kvscope.reading import prom


class SGLangAdapter(MetricsAdapter):
    engine = "sglang"
    metric_prefix = "sglang:"

    @staticmethod
    def answers(client: ServerClient) -> bool:
        """SGLang without --enable-metrics still serves its server info."""
        return server_info(client) is not None

    def capacity(self, client: ServerClient, metrics: prom.Metrics | None) -> Capacity:
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
        facts = WatchCapacityFacts(cap)
        states = data.get("internal_states")
        state = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
        memory_usage = state.get("memory_usage")
        memory: dict[str, Any] = memory_usage if isinstance(memory_usage, dict) else {}
        tokens = data.get("max_total_num_tokens") or memory.get("token_capacity")
        dp_size = data.get("dp_size")
        dp: int = dp_size if isinstance(dp_size, int) and dp_size > 0 else 1
        cap.engines = dp
        if isinstance(tokens, (int, float)):
            facts.max_total_num_tokens = int(tokens)
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
            facts.max_req_input_len = data["max_req_input_len"]
        if isinstance(data.get("page_size"), int):
            cap.block_size = data["page_size"]
        cap.kv_cache_dtype = data.get("kv_cache_dtype") if isinstance(data.get("kv_cache_dtype"), str) else None
        if isinstance(data.get("disable_radix_cache"), bool):
            cap.prefix_caching = not data["disable_radix_cache"]
        cap.model = data.get("served_model_name") or data.get("model_path")
        cap.version = data.get("version") if isinstance(data.get("version"), str) else None
        for key in ("tp_size", "pp_size", "dp_size", "chunked_prefill_size", "max_prefill_tokens"):
            if isinstance(data.get(key), int):
                facts.put(key, data[key])
        if isinstance(memory.get("kvcache"), (int, float)):
            facts.kv_pool_gib = float(memory["kvcache"])
        if isinstance(memory.get("weight"), (int, float)):
            facts.weights_gib = float(memory["weight"])
        if data.get("enable_metrics") is False:
            facts.enable_metrics = False

    @staticmethod
    def _from_metrics(cap: Capacity, metrics: prom.Metrics) -> None:
        """2024-era servers put capacity in gauges too; fill what server info did not give."""
        groups = _schedulers(metrics.get("sglang:max_total_num_tokens"))
        if cap.kv_tokens is None and groups:
            cap.kv_tokens = _int(sum(s.value for s in groups))
            cap.engines = max(cap.engines, len(groups))
            WatchCapacityFacts(cap).max_total_num_tokens = _int(groups[0].value)
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
            ReadingFacts(r).gen_throughput = gen
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
        WatchCapacityFacts(cap).kv_tokens_estimated_from = "num_used_tokens / token_usage"


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


def _adapter_class() -> type:
    """The adapter the registry hands kvscope watch (loaded only when watch runs)."""
    return SGLangAdapter
