"""Terminal report with rich: per-rank ledger table, a memory bar per rank, reconciliation, findings."""

from __future__ import annotations

from io import StringIO
from typing import Any

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from kvscope.analysis.answer import answer_lines
from kvscope.core.facts import RankFacts
from kvscope.core.startup import Rank, Startup
from kvscope.render.console import style, terminal_console
from kvscope.render.html import fmt_gib, mark, mark_legend
from kvscope.render.ranks import RankGroup, differences, groups
from kvscope.render.runtime_terminal import render_runtime

SEGMENTS = (  # (label, colour)
    ("weights", "magenta"),
    ("KV pool", "green"),
    ("draft", "cyan"),
    ("graphs", "yellow"),
    ("other", "red"),
    ("free", "bright_black"),
)
BAR_WIDTH = 48


def _g(x: float | None) -> str:
    return fmt_gib(x)


def _segments(r: Rank) -> list[tuple[str, float]]:
    """Split the rank's pre-load free memory into bar segments (only figures the ledger has)."""
    if r.pre_load_free_gib is None:
        return []
    kv = sum((p.size_gib() or 0) for p in r.kv_pools if p.name not in ("draft", "host"))
    draft = (r.pool("draft").size_gib() or 0) if r.pool("draft") else 0
    draft += RankFacts(r).draft_weights_gib or 0
    graphs = sum(g.get("graph_gib") or 0 for g in (RankFacts(r).graphs or []))
    weights = r.weights_gib or 0
    free = r.avail_at_ready_gib if r.avail_at_ready_gib is not None else r.avail_after_pool_gib
    if free is None:
        return [("weights", weights), ("KV pool", kv)]
    other = max(0.0, r.pre_load_free_gib - weights - kv - draft - graphs - free)
    return [("weights", weights), ("KV pool", kv), ("draft", draft), ("graphs", graphs), ("other", other), ("free", free)]


def _bar(r: Rank) -> Text:
    segs = _segments(r)
    total = sum(v for _, v in segs)
    text = Text()
    if total <= 0:
        return text
    colours = dict(SEGMENTS)
    width = BAR_WIDTH if style().width >= 200 else BAR_WIDTH // 2  # the table's other columns keep their room
    for label, value in segs:
        n = round(width * value / total)
        if n:
            text.append("█" * n, style=colours[label])
    return text


def _legend() -> Text:
    t = Text("  ")
    for label, colour in SEGMENTS:
        t.append("■ ", style=colour)
        t.append(f"{label}  ")
    return t


def _mark(r: Rank, key: str) -> str:
    return _g(getattr(r, key)) + mark(r, key)


COLUMNS = (("free before weights", "pre_load_free_gib"), ("weights", "weights_gib"),
           ("free after weights", "avail_after_weights_gib"), ("KV pools", None),
           ("free after pool", "avail_after_pool_gib"), ("CUDA graphs", "cuda_graph_gib"),
           ("free at ready", "avail_at_ready_gib"))
MAX_ROWS = 64
BAR_MIN_WIDTH = 110  # a narrower terminal cuts the bar to a stub: it is left out


def show_bar() -> bool:
    """The bar says something only in colour, and only with room for it (its legend goes with it)."""
    st = style()
    return st.color and st.width >= BAR_MIN_WIDTH


def _cells(r: Rank) -> list[str]:
    pools = ", ".join(f"{p.name} {_g(p.size_gib())}" + (f" ({p.tokens:,} tok)" if p.tokens else "") for p in r.kv_pools)
    return [pools or "—" if key is None else _mark(r, key) for _, key in COLUMNS]


def _runs(s: Startup) -> list[RankGroup]:
    """Consecutive ranks whose figures (and bar) read the same, as one row each: eight identical TP ranks are one
    line. The bar is a hidden last cell, so two ranks whose bars differ stay apart."""
    return groups(s.ranks, lambda r: [*_cells(r), _bar(r).plain])


def _rank_table(s: Startup) -> Table:
    runs = [(list(g.ranks), list(g.cells[:-1])) for g in _runs(s)]
    shown = [i for i in range(len(COLUMNS)) if any(cells[i] != "—" for _, cells in runs)]  # empty columns go
    bar = show_bar() and any(_bar(ranks[0]).plain for ranks, _ in runs)
    t = Table(title="Per-rank memory (GiB = 2^30 B)", show_lines=False, header_style="bold")
    t.add_column("rank")
    for i in shown:
        t.add_column(COLUMNS[i][0], justify="left" if COLUMNS[i][1] is None else "right")
    if bar:
        t.add_column("bar", no_wrap=True, overflow="crop")
    for ranks, cells in runs[:MAX_ROWS]:
        row: list[Any] = [RankGroup(tuple(ranks), tuple(cells)).label, *(cells[i] for i in shown)]
        t.add_row(*row, *([_bar(ranks[0])] if bar else []))
    captions = []
    if len(runs) > MAX_ROWS:
        captions.append(f"… {sum(len(r) for r, _ in runs[MAX_ROWS:])} more ranks in --format json")
    captions += differences([RankGroup(tuple(r), tuple(c)) for r, c in runs], [name for name, _ in COLUMNS])
    legend = mark_legend(s)
    captions += ["; ".join(f"{sym} {meaning}" for sym, meaning in legend)] if legend else []
    t.caption = "\n".join(captions) or None
    t.caption_justify = "left"
    return t


def _ledger(s: Startup) -> Table | None:
    ref = s.reference_rank
    if ref is None or not ref.ledger:
        return None
    t = Table(title=f"Ledger of {ref.rank}", header_style="bold")
    t.add_column("item")
    t.add_column("GiB", justify="right")
    t.add_column("how")
    for row in ref.ledger:
        t.add_row(row.item, fmt_gib(row.gib), row.how)
    return t


def _header(s: Startup, index: int) -> Text:
    t = Text()
    t.append(f"Startup {index}: {s.engine}", style="bold")
    if s.engine_version:
        t.append(f" {s.engine_version}")
    if s.era:
        t.append(f"  era {s.era}", style="dim")
    t.append(f"\n{s.file}:{s.first_line}-{s.last_line}", style="dim")
    if s.model:
        t.append(f"\nmodel: {s.model}")
    cap = s.capacity
    facts = []
    if cap.kv_tokens is not None:
        facts.append(f"KV capacity {cap.kv_tokens:,} tokens")
    if cap.max_running_requests:
        facts.append(f"max running requests {cap.max_running_requests}")
    if cap.context_len:
        facts.append(f"context {cap.context_len:,}")
    if cap.max_concurrency:
        facts.append(f"max concurrency {cap.max_concurrency}×")
    if facts:
        t.append("\n" + " · ".join(facts))
    if s.failure:
        t.append(f"\nFAILED: {s.failure.kind}", style="bold red")
    return t


def _findings(s: Startup) -> list[Any]:
    out: list[Any] = []
    style = {"error": "red", "warning": "yellow", "info": "blue"}
    for f in s.findings:
        body = Text(f.detail)
        if f.suggestion is not None:
            sg = f.suggestion
            before = "(not set)" if sg.from_value is None else sg.from_value
            body.append(f"\n→ {sg.flag} {before} → {sg.to_value}", style="bold")
            if sg.kv_tokens_after:
                body.append(f"  ({sg.kv_tokens_after:,} KV tokens)")
            if sg.note:
                body.append(f"  [{sg.note}]", style="dim")
        title = Text(f.severity, style=style.get(f.severity, "white")) + Text(f": {f.title}")
        out.append(Panel(body, title=title, title_align="left"))
    return out


def render_startup(s: Startup, index: int) -> Group:
    parts: list[Any] = [_header(s, index)]
    answer = answer_lines(s)
    if answer:
        style = "red" if s.failure is not None else "yellow" if any(f.severity == "warning" for f in s.findings) else "green"
        parts.append(Panel(Text("\n".join(answer)), title="Answer", title_align="left", border_style=style))
    if any(r.has_figures() for r in s.ranks):
        parts += [_rank_table(s), *([_legend()] if show_bar() else [])]
    elif s.runtime is not None:
        parts.append(Text("No startup memory lines in this input: the ledger is unknown; serving lines only.", style="dim"))
    ledger = _ledger(s)
    if ledger is not None:
        parts.append(ledger)
    parts += render_runtime(s)
    parts += _findings(s)
    return Group(*parts)


def render(analysis: Any, extra: dict[str, Any] | None = None) -> str:
    buf = StringIO()
    console = terminal_console(buf)
    if not analysis.startups:
        console.print("No engine startup found in the input.")
    for i, s in enumerate(analysis.startups, 1):
        console.print(render_startup(s, i))
        console.print()
    st = analysis.stats
    if st.overlong_lines or st.warnings or st.truncated_gzip:
        console.print(Text(f"input: {st.overlong_lines} over-long lines skipped; {'; '.join(st.warnings)}", style="dim"))
    return buf.getvalue().rstrip()
