"""Terminal view of the runtime section: usage and queue sparklines over time, then the summaries.

The sparklines are drawn from the bounded timeline (each bucket keeps its max), so a one-second
spike to 100 % shows even in a week-long journal squeezed into 60 columns.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from kvscope.core.startup import Startup

BARS = "▁▂▃▄▅▆▇█"
WIDTH = 60


def _columns(points: list[list[Any]], width: int) -> list[tuple[float, int]]:
    """(max usage, max queued) per column, spreading the timeline's buckets over ``width`` columns."""
    if not points:
        return []
    start, end = points[0][0], points[-1][0]
    span = end - start
    n = min(width, len(points))
    cols: list[list[float]] = [[-1.0, -1] for _ in range(n)]
    for p in points:
        i = 0 if span <= 0 else min(n - 1, int((p[0] - start) / span * n))
        c = cols[i]
        c[0] = max(c[0], p[2])
        c[1] = max(c[1], p[3])
    # an empty column (no bucket fell into it) repeats its left neighbour: the state did not change
    for i in range(1, n):
        if cols[i][0] < 0:
            cols[i] = list(cols[i - 1])
    return [(max(0.0, u), max(0, int(q))) for u, q in cols]


def _bar(level: float) -> str:
    return BARS[max(0, min(len(BARS) - 1, round(level * (len(BARS) - 1))))]


def sparklines(timeline: dict[str, Any], width: int = WIDTH) -> tuple[Text, Text]:
    """Usage (0–100 %) and queue (0–peak) sparklines."""
    cols = _columns(timeline.get("points") or [], width)
    peak_q = max((q for _, q in cols), default=0)
    usage, queue = Text(), Text()
    for u, q in cols:
        style = "red" if u >= 0.99 else "yellow" if u >= 0.9 else "green"
        usage.append(_bar(u), style=style)
        queue.append(_bar(q / peak_q) if q else " ", style="magenta")
    return usage, queue


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.0%}"


def _s(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:,.0f} s" if x < 3600 else f"{x / 3600:,.1f} h"


def _head(rt: dict[str, Any]) -> Text:
    t = Text("Serving", style="bold")
    span = (rt.get("usage") or {}).get("observed_s")
    when = f" {rt.get('first')} → {rt.get('last')}" if rt.get("first") else ""
    t.append(f"{when}  ({_s(span) + ', ' if span else ''}{rt.get('samples', 0):,} samples", style="dim")
    if rt.get("stream"):
        t.append(f", {rt['stream']}", style="dim")
    t.append(")", style="dim")
    return t


INDENT = " " * 9


def _usage_lines(rt: dict[str, Any], spark: Text) -> list[Text]:
    u = rt.get("usage") or {}
    t = Text("KV usage ")
    t.append_text(spark)
    t.append(f"  peak {_pct(u.get('peak'))}")
    detail = [f"p95 {_pct(u.get('p95'))}"]
    if u.get("above_90_s") is not None:
        detail.append(f"≥90 % for {_s(u['above_90_s'])} ({_pct(u.get('above_90_fraction'))})")
        detail.append(f"≥99 % for {_s(u.get('above_99_s'))}")
    elif u.get("above_90_fraction") is not None:
        detail.append(f"≥90 % in {_pct(u['above_90_fraction'])} of samples")
    if u.get("peak_at"):
        detail.append(f"peak at {u['peak_at']}")
    return [t, Text(INDENT + " · ".join(detail), style="dim")]


def _queue_lines(rt: dict[str, Any], spark: Text) -> list[Text]:
    q = rt.get("queue") or {}
    t = Text("queued   ")
    t.append_text(spark)
    t.append(f"  peak {q.get('peak', 0):,}")
    detail = []
    if q.get("episodes"):
        longest = (q.get("longest") or {}).get("length_s")
        detail.append(f"{q['episodes']} episode(s)" + (f", longest {_s(longest)}" if longest is not None else ""))
        if q.get("queued_fraction") is not None:
            detail.append(f"requests waiting {_pct(q['queued_fraction'])} of the time")
    if q.get("peak_at"):
        detail.append(f"peak at {q['peak_at']}")
    return [t] + ([Text(INDENT + " · ".join(detail), style="dim")] if detail else [])


def _facts(rt: dict[str, Any]) -> Text:
    parts: list[str] = []
    running = rt.get("running") or {}
    if running.get("peak"):
        parts.append(f"running peak {running['peak']:,}")
    gen = (rt.get("throughput") or {}).get("generation_tokens_per_s")
    if gen:
        parts.append(f"generation {gen['mean']:,.0f} tok/s (peak {gen['peak']:,.0f})")
    prompt = (rt.get("throughput") or {}).get("prompt_tokens_per_s")
    if prompt:
        parts.append(f"prompt {prompt['mean']:,.0f} tok/s")
    prefix = rt.get("prefix_cache")
    if prefix and prefix.get("hit_rate") is not None:
        parts.append(f"prefix-cache hit {_pct(prefix['hit_rate'])}")
    if rt.get("retracted"):
        parts.append(f"{rt['retracted']:,} requests retracted")
    if rt.get("preempted"):
        parts.append(f"{rt['preempted']:,} requests preempted")
    for pool, peak in (rt.get("other_pools") or {}).items():
        parts.append(f"{pool.replace('_usage', '')} pool peak {_pct(peak)}")
    if rt.get("swapped_peak"):
        parts.append(f"swapped peak {rt['swapped_peak']:,}")
    return Text(" · ".join(parts), style="dim")


def render_runtime(s: Startup) -> list[Any]:
    """Renderables for the runtime section of one startup ([] when it printed no serving lines)."""
    rt = s.runtime
    if not isinstance(rt, dict):
        return []
    out: list[Any] = [_head(rt)]
    if rt.get("timeline"):
        usage, queue = sparklines(rt["timeline"])
        out += _usage_lines(rt, usage) + _queue_lines(rt, queue)
    facts = _facts(rt)
    if facts.plain:
        out.append(facts)
    for g in rt.get("groups") or []:
        out.append(Text(f"  {g['group']}: peak {_pct(g['peak_usage'])}, p95 {_pct(g['p95_usage'])}, "
                        f"≥90 % {_s(g['above_90_s'])}, queue peak {g['peak_queued']:,}", style="dim"))
    return out
