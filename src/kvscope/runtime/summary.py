"""The ``runtime`` section: bounded stream state → plain numbers (JSON-ready, rounded).

When several schedulers printed samples (DP attention groups, vLLM DP engines), the detailed
summary is of the *hottest* one (most time at ≥ 90 % usage, then highest peak): each group has its
own pool, and the question is whether any of them ran out. The others get one line each.
"""

from __future__ import annotations

from typing import Any

from kvscope.runtime.stream import FULL, SATURATED, Stream


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def _usage(st: Stream) -> dict[str, Any]:
    timed_span = st.span_s if st.timed else None
    out: dict[str, Any] = {
        "samples": st.usage_n,
        "peak": _r(st.peak_u) if st.usage_n else None,
        "peak_at": st.peak_u_stamp,
        "p50": _r(st.percentile(0.50)),
        "p95": _r(st.percentile(0.95)),
        "p99": _r(st.percentile(0.99)),
        "mean": _r(st.usage_time / st.span_s) if st.span_s else None,
        "above_90_s": _r(st.above90_s, 1) if st.timed else None,
        "above_99_s": _r(st.above99_s, 1) if st.timed else None,
        "above_90_fraction": _r(st.above90_s / st.span_s) if st.span_s else None,
        "above_99_fraction": _r(st.above99_s / st.span_s) if st.span_s else None,
        "observed_s": _r(timed_span, 1),
    }
    if not st.timed and st.usage_n:
        # No timestamps: the fractions are of samples instead of time.
        above90 = sum(st.hist[int(SATURATED * 1000):])
        above99 = sum(st.hist[int(FULL * 1000):])
        out["above_90_fraction"] = _r(above90 / st.usage_n)
        out["above_99_fraction"] = _r(above99 / st.usage_n)
    return out


def _episode(ep: list[Any], timed: bool) -> dict[str, Any]:
    return {"start": ep[4], "length_s": _r(ep[1] - ep[0], 1) if timed else None, "peak_queued": ep[2],
            "peak_at": ep[3], "peak_usage": _r(ep[5])}


def _queue(st: Stream) -> dict[str, Any]:
    longest = st.top[0] if st.top else None
    return {
        "peak": st.peak_q,
        "peak_at": st.peak_q_stamp,
        "episodes": st.episodes,
        "queued_s": _r(st.queued_s, 1) if st.timed else None,
        "queued_fraction": _r(st.queued_s / st.span_s) if st.span_s else None,
        "queued_samples": st.queued_n,
        "samples_with_queue": st.q_seen,
        "usage_while_queued_p50": _r(st.queued_percentile(0.50)),
        "usage_while_queued_p95": _r(st.queued_percentile(0.95)),
        "samples_queued_below_80pct": st.low_queued_n,
        "running_peak_while_queued": st.peak_r_queued if st.queued_n else None,
        "running_mode_while_queued": max(st.queued_running, key=st.queued_running.__getitem__) if st.queued_running else None,
        "longest": _episode(longest, bool(st.timed)) if longest else None,
        "top": [_episode(e, bool(st.timed)) for e in st.top],
    }


def _saturation(st: Stream) -> dict[str, Any]:
    return {
        "samples": st.sat_n,
        "queued_samples": st.sat_queued_n,
        "peak_queued": st.peak_q_sat,
        "usage_per_request": _r(st.sat_u_per_req / st.sat_n, 6) if st.sat_n else None,
        "tokens_per_request": round(st.sat_tok_per_req / st.sat_tok_n) if st.sat_tok_n else None,
        "pool_tokens_estimate": st.pool_estimate(),
    }


def _rates(st: Stream) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, name in (("gen_tps", "generation_tokens_per_s"), ("prompt_tps", "prompt_tokens_per_s"),
                      ("input_tps", "prefill_tokens_per_s")):
        acc = st.rates.get(key)
        if acc and acc[1]:
            out[name] = {"mean": _r(acc[0] / acc[1], 1), "peak": _r(acc[2], 1)}
    return out


def _prefix(st: Stream, acc: Any) -> dict[str, Any] | None:
    """Prefix-cache hit rate where the log prints it: SGLang prefill token counts, vLLM's rate."""
    total = st.new_tokens + st.cached_tokens
    if total:
        return {"hit_rate": _r(st.cached_tokens / total), "source": "SGLang #cached-token / (#new-token + #cached-token)",
                "cached_tokens": st.cached_tokens, "prefilled_tokens": st.new_tokens}
    rate = st.rates.get("hit_pct")
    if rate and rate[1]:
        return {"hit_rate": _r(rate[3] / 100), "mean": _r(rate[0] / rate[1] / 100), "source": "printed rate (last)"}
    if acc.v0_hit:
        return {"hit_rate": _r(acc.v0_hit[2] / 100), "mean": _r(acc.v0_hit[0] / acc.v0_hit[1] / 100),
                "source": "vLLM V0 'Prefix cache hit rate: GPU'"}
    return None


def _graph(st: Stream) -> dict[str, Any] | None:
    """SGLang decode lines say whether the batch ran as a CUDA graph (only up to --cuda-graph-max-bs)."""
    n = st.graph_on + st.graph_off
    if not n:
        return None
    return {"decode_without_graph_fraction": _r(st.graph_off / n), "largest_batch_with_graph": st.graph_max_on or None,
            "smallest_batch_without_graph": st.graph_min_off}


def _timeline(st: Stream) -> dict[str, Any]:
    pts = st.timeline.finished()
    t0 = st.first_t or 0.0
    return {
        "start": st.first_stamp,
        "clock": "seconds" if st.timed else "samples",
        "bucket": _r(st.timeline.width, 3),
        "columns": ["offset", "usage_min", "usage_max", "queued_max", "running_max", "samples"],
        "points": [[_r(p[0] - t0, 1), _r(p[2]), _r(p[3]), int(p[4]), int(p[5]), int(p[6])] for p in pts],
    }


def _brief(st: Stream) -> dict[str, Any]:
    return {"group": st.label, "samples": st.n, "peak_usage": _r(st.peak_u) if st.usage_n else None,
            "p95_usage": _r(st.percentile(0.95)), "above_90_s": _r(st.above90_s, 1) if st.timed else None,
            "peak_queued": st.peak_q}


def summarize(acc: Any) -> dict[str, Any] | None:
    """The runtime dict of one startup, or None when nothing was seen at all."""
    streams = [st for st in acc.streams.values() if st.n]
    if not streams and not (acc.retract_lines or acc.preempted or acc.v0_hit):
        return None
    out: dict[str, Any] = {"samples": sum(st.n for st in streams)}
    if streams:
        for st in streams:
            st.close()
        hot = max(streams, key=lambda st: (st.above90_s, st.peak_u, st.n))
        out.update({
            "stream": hot.label,
            "lines": dict(hot.kinds),
            "timed": bool(hot.timed),
            "first": hot.first_stamp,
            "last": hot.last_stamp,
            "usage": _usage(hot),
            "queue": _queue(hot),
            "running": {"peak": hot.peak_r, "mean": _r(hot.sum_r / hot.r_n, 1) if hot.r_n else None},
            "saturation": _saturation(hot),
            "throughput": _rates(hot),
            "prefix_cache": _prefix(hot, acc),
            "other_pools": {k: _r(v) for k, v in hot.peaks.items() if k != "swapped"},
            "swapped_peak": hot.peaks.get("swapped"),
            "cuda_graph": _graph(hot),
            "timeline": _timeline(hot),
        })
        if hot.prefill_peak:  # SGLang's prefill batches: what the last one (a crash's) and the largest carried
            out["prefill_batch_new_tokens"] = {"last": hot.prefill_last, "peak": hot.prefill_peak}
        if len(streams) > 1:
            out["groups"] = [_brief(st) for st in streams]
    elif acc.v0_hit:
        out["prefix_cache"] = _prefix(Stream(None), acc)
    out["retracted"] = acc.retracted if acc.retract_lines else None
    out["retraction_warnings"] = acc.retract_lines
    out["preempted"] = max(acc.preempted, acc.preempt_cumulative or 0) if acc.preempted else None
    out["preemption_modes"] = acc.preempt_modes or None
    if acc.ignored:
        out["duplicate_lines_ignored"] = acc.ignored
    return out
