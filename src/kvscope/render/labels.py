"""Human words for the contract's keys, for the reports people read (terminal, markdown, HTML).

The JSON contract names things for scripts (``queue.usage_while_queued_p95``, ``available_kv_gib``); a
report shows "usage while requests waited, p95 · 98 %". Every key a report prints goes through here: the
curated tables below say it the way an operator would, and ``humanize`` turns any key they do not list
(a fact a newer engine added) into words rather than leaking the identifier. The engine's own setting
names (``mem_fraction_static``, ``--gpu-memory-utilization``) are not contract keys: they are what the
operator types, so reports keep them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

CAPACITY_LABELS = {
    "kv_tokens": "KV tokens",
    "max_total_num_tokens": "max total tokens",
    "max_running_requests": "max running requests",
    "context_len": "context length",
    "available_kv_gib": "KV cache memory",
    "num_gpu_blocks": "GPU KV blocks",
    "num_cpu_blocks": "CPU swap blocks",
    "max_model_len": "max model length",
    "max_concurrency": "max concurrency at max length",
}

# settings kvscope names itself (what the log showed under another name, or an --assume fact)
SETTING_LABELS = {
    "kv_cache_dtype_resolved": "KV cache dtype (resolved)",
    "avail_at_ready_gib": "free at ready",
    "gpu_total_gib": "GPU total",
    "gpu_name": "GPU name",
    "gpu": "GPU",
    "model": "model",
    "host_ram_gb": "free host RAM",
    "engine_version": "engine release",
}

SERIES_LABELS = {
    "usage_min": "KV usage, lowest in the interval",
    "usage_max": "KV usage, highest in the interval",
    "queued_max": "requests waiting, most in the interval",
    "running_max": "requests running, most in the interval",
}

_UNIT_SUFFIXES = (("_gib", " (GiB)"), ("_gb", " (GB)"), ("_mib", " (MiB)"), ("_bytes", " (bytes)"),
                  ("_per_s", " per second"), ("_s", " (s)"), ("_pct", " (%)"))
_WORDS = {"p50": "median", "p95": "p95", "p99": "p99", "kv": "KV", "tp": "TP", "dp": "DP", "pp": "PP",
          "swa": "sliding-window", "cpu": "CPU", "gpu": "GPU", "cuda": "CUDA", "mla": "MLA"}


def humanize(key: str) -> str:
    """Any contract key in words: ``queue.longest.length_s`` → "queue · longest · length (s)"."""
    parts = []
    for piece in str(key).split("."):
        unit = ""
        for suffix, words in _UNIT_SUFFIXES:
            if piece.endswith(suffix) and len(piece) > len(suffix):
                piece, unit = piece[: -len(suffix)], words
                break
        words_ = [_WORDS.get(w, w) for w in re.split(r"[_\s]+", piece) if w]
        parts.append(" ".join(words_) + unit)
    return " · ".join(p for p in parts if p)


def capacity_label(key: str) -> str:
    return CAPACITY_LABELS.get(key) or humanize(key)


def setting_label(key: str) -> str:
    """A setting as the log or the operator named it keeps its name (it is what they type); the names
    kvscope gave what it read (a figure with its unit in the name) get words."""
    if key in SETTING_LABELS:
        return SETTING_LABELS[key]
    return humanize(key) if any(key.endswith(suffix) for suffix, _ in _UNIT_SUFFIXES[:4]) else key


def series_label(name: str) -> str:
    return SERIES_LABELS.get(name) or humanize(name)


def _pct(v: Any) -> str:
    return f"{v * 100:.0f} %" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def _count(v: Any) -> str:
    if isinstance(v, float) and not v.is_integer():
        return f"{v:,.1f}"
    return f"{int(v):,}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def _seconds(v: Any) -> str:
    return f"{_count(v)} s" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def _rate(v: Any) -> str:
    return f"{v:,.1f} tokens/s" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def _text(v: Any) -> str:
    return str(v)


# (key, label, how to show the value): the serving summary an operator reads, in reading order;
# bookkeeping (line counts, sample counts, the verdict the answer already states) is left out
SERVING_FACTS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("first", "first sample", _text),
    ("last", "last sample", _text),
    ("usage.peak", "KV usage, peak", _pct),
    ("usage.peak_at", "KV usage peaked at", _text),
    ("usage.p50", "KV usage, median", _pct),
    ("usage.p95", "KV usage, p95", _pct),
    ("usage.mean", "KV usage, mean", _pct),
    ("usage.above_90_s", "time with KV usage ≥ 90 %", _seconds),
    ("usage.above_90_fraction", "share of the time ≥ 90 %", _pct),
    ("usage.above_99_s", "time with KV usage ≥ 99 %", _seconds),
    ("usage.observed_s", "time observed", _seconds),
    ("queue.peak", "requests waiting, peak", _count),
    ("queue.peak_at", "most requests waited at", _text),
    ("queue.episodes", "queueing episodes", _count),
    ("queue.queued_s", "time with requests waiting", _seconds),
    ("queue.queued_fraction", "share of the time with requests waiting", _pct),
    ("queue.usage_while_queued_p50", "KV usage while requests waited, median", _pct),
    ("queue.usage_while_queued_p95", "KV usage while requests waited, p95", _pct),
    ("queue.running_peak_while_queued", "requests running while others waited, peak", _count),
    ("queue.longest.start", "longest queueing episode, start", _text),
    ("queue.longest.length_s", "longest queueing episode, length", _seconds),
    ("queue.longest.peak_queued", "longest queueing episode, most waiting", _count),
    ("running.peak", "requests running, peak", _count),
    ("running.mean", "requests running, mean", _count),
    ("swapped_peak", "requests swapped to CPU, peak", _count),
    ("retracted", "requests retracted (pool full)", _count),
    ("retraction_warnings", "retraction warnings", _count),
    ("prefix_cache.hit_rate", "prefix-cache hit rate", _pct),
    ("prefix_cache.cached_tokens", "prefix-cache tokens reused", _count),
    ("prefix_cache.prefilled_tokens", "tokens prefilled", _count),
    ("saturation.tokens_per_request", "KV tokens per running request while saturated", _count),
    ("saturation.pool_tokens_estimate", "KV pool size implied by usage", _count),
    ("throughput.generation_tokens_per_s.mean", "generation throughput, mean", _rate),
    ("throughput.generation_tokens_per_s.peak", "generation throughput, peak", _rate),
    ("throughput.prompt_tokens_per_s.mean", "prompt throughput, mean", _rate),
    ("throughput.prompt_tokens_per_s.peak", "prompt throughput, peak", _rate),
    ("throughput.prefill_tokens_per_s.mean", "prefill throughput, mean", _rate),
    ("throughput.prefill_tokens_per_s.peak", "prefill throughput, peak", _rate),
    ("prefill_batch_new_tokens.peak", "new tokens in one prefill batch, peak", _count),
    ("cuda_graph.largest_batch_with_graph", "largest decode batch run with a CUDA graph", _count),
    ("cuda_graph.smallest_batch_without_graph", "smallest decode batch run without one", _count),
    ("cuda_graph.decode_without_graph_fraction", "decode batches without a CUDA graph", _pct),
    ("other_pools.swa_usage", "sliding-window pool usage, peak", _pct),
)


# bookkeeping of the summary itself (how many lines and samples it read, the verdict the answer states)
NOT_SHOWN_PREFIXES = ("lines.", "verdict.", "saturation.samples", "saturation.queued_samples", "usage.samples")
NOT_SHOWN = frozenset({"samples", "timed", "stream", "duplicate_lines_ignored", "queue.queued_samples",
                       "queue.samples_with_queue", "queue.samples_queued_below_80pct", "queue.running_mode_while_queued",
                       "queue.longest.peak_at", "queue.longest.peak_usage", "usage.above_99_fraction",
                       "saturation.peak_queued", "saturation.usage_per_request", "prefix_cache.mean",
                       "prefix_cache.source", "prefill_batch_new_tokens.last"})


def serving_facts(flat: Iterable[tuple[str, Any]]) -> list[tuple[str, str]]:
    """(label, value) rows of a flattened serving summary: the curated ones in reading order, then any other
    figure (one a newer summary added) in words."""
    values = {k: v for k, v in flat if v is not None and not isinstance(v, (dict, list))}
    out = [(label, show(values[key])) for key, label, show in SERVING_FACTS if key in values]
    curated = {key for key, _, _ in SERVING_FACTS}
    out += [(humanize(k), _count(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v))
            for k, v in values.items()
            if k not in curated and k not in NOT_SHOWN and not k.startswith(NOT_SHOWN_PREFIXES)]
    return out
