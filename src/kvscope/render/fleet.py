"""``kvscope fleet`` reports: the answer first (how many replicas are KV-bound, what a fleet-wide change buys,
memory left idle), then one row per replica, hottest first. Terminal, markdown, HTML (small multiples of
each replica's usage over the range) and JSON (``kvscope.fleet/1``)."""

from __future__ import annotations

import time
from io import StringIO
from typing import Any

from markupsafe import Markup
from rich.table import Table
from rich.text import Text

from kvscope import __version__, engines
from kvscope.fleet.report import FleetReport, Replica, Verdict
from kvscope.render.console import terminal_console
from kvscope.render.html import _css, _environment, _sha256
from kvscope.render.markdown import _table, md_code, md_escape

_MULTIPLES_CSS = (".multiples{display:grid;grid-template-columns:repeat(auto-fill,minmax(250px,1fr));gap:8px}"
                  ".mult{margin:0;border:1px solid var(--line);border-radius:6px;padding:4px 8px}"
                  ".mult.bound{border-color:var(--bad)}.mult p{margin:0}\n")
DEFAULT_TOP = 40  # rows in the terminal and markdown tables; JSON and HTML hold every replica
_ORDER = {Verdict.CAPACITY_BOUND: 0, Verdict.QUEUE_BOUND: 1, Verdict.NOT_BOUND: 2, Verdict.IDLE: 3, Verdict.NO_DATA: 4}


def ranked(report: FleetReport) -> list[Replica]:
    """KV-bound first, then by time at ≥ 90 %, then by peak usage."""
    return sorted(report.replicas, key=lambda r: (_ORDER[r.verdict], -(r.usage.above_90_s or 0), -(r.usage.peak or 0),
                                                  r.name))


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.0%}" if x >= 0.1 or x == 0 else f"{x:.1%}"


def _n(x: int | None) -> str:
    return "—" if x is None else f"{x:,}"


def _dur(s: float | None) -> str:
    if s is None:
        return "—"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


def where(r: FleetReport) -> str:
    sel = f" · {r.selector}" if r.selector else ""
    return (f"{r.prometheus}{sel} · {_when(r.range.start)} → {_when(r.range.end)} at {r.range.step_s:g} s "
            f"({r.range.steps:,} steps)")


def headline(r: FleetReport) -> list[str]:
    s = r.summary
    bound = s.by_verdict.get(Verdict.CAPACITY_BOUND.value, 0)
    parts = [f"{bound} of {s.replicas} replica{'s' if s.replicas != 1 else ''} "
             f"{'was' if bound == 1 else 'were'} KV-bound (the pool was the limit: evictions, or a queue while ≥ 90 % full)"]
    rest = [(Verdict.QUEUE_BOUND, "queued with room in the pool (the request cap or compute was the limit)"),
            (Verdict.NOT_BOUND, "never ran out"), (Verdict.IDLE, "saw no load"), (Verdict.NO_DATA, "had no usage samples")]
    more = [f"{s.by_verdict[v.value]} {text}" for v, text in rest if s.by_verdict.get(v.value)]
    out = [parts[0] + (": " + ", ".join(s.kv_bound[:5]) + (f" and {len(s.kv_bound) - 5} more" if len(s.kv_bound) > 5
                                                          else "") if s.kv_bound else "") + "."]
    if more:
        out.append("Of the others, " + "; ".join(more) + ".")
    for c in s.changes:
        line = f"Fleet-wide, {c.text} ({c.replicas} replica{'s' if c.replicas != 1 else ''}) adds ≈ +{c.tokens_added:,} KV tokens"
        if c.kv_bound_replicas:
            line += f", +{c.kv_bound_tokens_added:,} of them on the {c.kv_bound_replicas} KV-bound"
        out.append(line + ".")
    if s.idle_kv_tokens:
        gib = f" ({s.idle_kv_gib:,.1f} GiB)" if s.idle_kv_gib is not None else ""
        out.append(f"Memory left idle: {s.idle_kv_tokens:,} KV tokens{gib} were never used even at each non-KV-bound "
                   "replica's peak — room for a lower memory fraction, a longer context or fewer replicas.")
    return out


def _short_fix(rep: Replica) -> str:
    f = rep.fix
    if f is None:
        return "—"
    text = f"{f.flag} {f.to}" if f.flag != "replicas" else f"{f.to} replica(s)"
    if f.tokens_added:
        text += f" (+{f.tokens_added:,} tokens)"
    return text


def _row(rep: Replica, short: bool = True) -> list[str]:
    fix = _short_fix(rep) if short else (rep.fix.text if rep.fix else "—")
    return [rep.name, engines.get(rep.engine).label, _n(rep.capacity.kv_tokens), _pct(rep.usage.peak), _pct(rep.usage.p95),
            _dur(rep.usage.above_90_s) if rep.usage.samples else "—", _n(rep.queue.running_peak), _n(rep.queue.peak),
            str(rep.queue.episodes),
            _n(rep.preemptions), _pct(rep.prefix_hit_rate), rep.verdict.value, fix]


COLUMNS = ["replica", "engine", "KV tokens", "peak", "p95", "≥ 90 %", "running", "queued", "episodes", "evicted",
           "hits", "verdict", "cheapest fix"]
# what the short headers mean, under the table
LEGEND = ("peak / p95 / ≥ 90 %: KV usage and the time at or above 90 %; running / queued: peak requests; episodes: "
          "stretches with a queue; evicted: preempted / retracted requests; hits: prefix-cache hit rate")


def render_terminal(report: FleetReport, top: int = DEFAULT_TOP) -> str:
    buf = StringIO()
    console = terminal_console(buf)
    console.print(Text(f"kvscope fleet · {len(report.replicas):,} replicas", style="bold"))
    console.print(Text(where(report), style="dim"))
    for j, line in enumerate(headline(report)):
        console.print(Text(("→ " if j == 0 else "  ") + line, style="bold" if j == 0 else ""))
    t = Table(header_style="bold", title_justify="left")
    for i, c in enumerate(COLUMNS):
        t.add_column(c, justify="right" if 2 <= i <= 10 else "left", overflow="fold", no_wrap=i <= 10)
    rows = ranked(report)
    for rep in rows[:top]:
        style = "bold red" if rep.verdict.kv_bound else ""
        t.add_row(*_row(rep), style=style)
    console.print(t)
    for line in _why(rows[:top]):
        console.print(Text("  " + line))
    if len(rows) > top:
        console.print(Text(f"  … {len(rows) - top:,} more replicas (--top N, or --format json / html for all)",
                           style="dim"))
    for n in _notes(report):
        console.print(Text("  · " + n, style="dim"))
    return buf.getvalue().rstrip() + "\n"


def _why(rows: list[Replica]) -> list[str]:
    """The KV-bound replicas in words: what showed it, what the queue needed, the fix and its amount."""
    out = []
    for r in rows:
        if not r.verdict.kv_bound:
            continue
        line = f"{r.name}: {r.verdict_text}."
        if r.extra_kv_tokens:
            line += (f" At the queue's peak ≈ {r.extra_kv_tokens:,} more KV tokens would have kept it empty "
                     f"({r.extra_kv_tokens / r.capacity.kv_tokens:.0%} of the {r.capacity.kv_tokens:,}-token pool)."
                     if r.capacity.kv_tokens else "")
        if r.fix:
            line += f" Cheapest: {r.fix.text}."
        out.append(line)
    return out


def _notes(report: FleetReport) -> list[str]:
    changed = [r for r in report.replicas if r.capacity.earlier_kv_tokens]
    out = [LEGEND, *report.notes]
    if changed:
        out.append(f"{len(changed)} replica(s) restarted with another capacity in the range (the table shows the last): "
                   + ", ".join(f"{r.name} {'/'.join(f'{t:,}' for t in r.capacity.earlier_kv_tokens)} → "
                               f"{_n(r.capacity.kv_tokens)}" for r in changed[:3]))
    restarted = sum(1 for r in report.replicas if r.restarts)
    if restarted:
        out.append(f"{restarted} replica(s) restarted in the range (their counters reset); increases count across "
                   "each restart")
    out.append(f"{report.requests:,} requests to Prometheus, {report.bytes_read / 1e6:,.1f} MB read. Usage is the "
               "fullest pool of each replica; requests and evictions are summed over its schedulers.")
    return out


def render_markdown(report: FleetReport, top: int = DEFAULT_TOP) -> str:
    out = ["# kvscope fleet", "", md_escape(where(report)), ""]
    out += [f"- {'**' + md_escape(x) + '**' if j == 0 else md_escape(x)}" for j, x in enumerate(headline(report))] + [""]
    rows = ranked(report)
    out += _table(COLUMNS, [[md_escape(c) if i != 0 else md_code(c) for i, c in enumerate(_row(r))] for r in rows[:top]],
                  right=set(range(2, 11)))
    why = _why(rows[:top])
    if why:
        out += ["### KV-bound replicas", ""] + [f"- {md_escape(w)}" for w in why] + [""]
    if len(rows) > top:
        out += [f"… {len(rows) - top:,} more replicas (the JSON and HTML reports hold every one).", ""]
    out += [f"- {md_escape(n)}" for n in _notes(report)] + [""]
    out.append(f"<sub>kvscope {__version__}</sub>")
    return "\n".join(out).rstrip() + "\n"


def _spark_points(spark: tuple[float | None, ...], width: int = 240, height: int = 48) -> list[str]:
    """SVG polyline runs (a gap where the replica was not seen)."""
    if not spark:
        return []
    runs, cur = [], []
    step = width / max(1, len(spark) - 1)
    for i, v in enumerate(spark):
        if v is None:
            if cur:
                runs.append(" ".join(cur))
                cur = []
            continue
        cur.append(f"{i * step:.1f},{height - min(1.0, max(0.0, v)) * height:.1f}")
    if cur:
        runs.append(" ".join(cur))
    return runs


def render_html(report: FleetReport, top: int | None = None) -> str:
    from kvscope.render.html import _asset

    env = _environment()
    template = env.from_string(_asset("fleet.html.j2"))
    css = _css() + Markup(_MULTIPLES_CSS)
    csp = f"default-src 'none'; style-src {_sha256(css)}; img-src data:; base-uri 'none'; form-action 'none'"
    rows = ranked(report)
    cards = [{"name": r.name, "verdict": r.verdict.value, "bound": r.verdict.kv_bound, "runs": _spark_points(r.spark),
              "line": f"peak {_pct(r.usage.peak)} · p95 {_pct(r.usage.p95)} · queue peak {_n(r.queue.peak)} · "
                      f"{_n(r.capacity.kv_tokens)} tokens"} for r in rows]
    return template.render(where=where(report), headline=headline(report), columns=COLUMNS,
                           rows=[_row(r) for r in rows], why=_why(rows), cards=cards, notes=_notes(report), css=css, csp=csp,
                           version=__version__, count=len(rows))


def render_json(report: FleetReport, top: int | None = None) -> str:
    from kvscope.render.json_out import dumps

    doc: dict[str, Any] = report.as_json()
    doc["kvscope_version"] = __version__
    doc["headline"] = headline(report)
    return dumps(doc)


RENDERERS = {"terminal": render_terminal, "markdown": render_markdown, "html": render_html, "json": render_json}
