"""A whatif or plan report (render.prediction.PredictionReport) in the terminal, fitted to its width.

The answer comes first, in bold; then the change table, one GPU's memory (a coloured bar on a colour
terminal wide enough, always a table of its parts), KV tokens against the fraction with the risk region
marked, and what was measured, estimated or assumed. Tables fold their cells rather than overflow, so
no line is wider than the terminal.
"""

from __future__ import annotations

from io import StringIO

from rich import box
from rich.table import Table
from rich.text import Text

from kvscope.render.console import style, terminal_console
from kvscope.render.html import fmt_gib
from kvscope.render.prediction import MemoryBar, PredictionReport

COLOURS = {"context": "bright_black", "weights": "magenta", "kv": "green", "draft": "cyan", "graphs": "yellow",
           "other": "red", "free": "white"}


def _bar(bar: MemoryBar, width: int) -> Text:
    text = Text()
    total = bar.total_gib
    if total <= 0:
        return text
    for seg in bar.segments:
        n = round(width * seg.gib / total)
        if n:
            text.append("█" * n, style=COLOURS.get(seg.key, "white"))
    return text


def _change_table(report: PredictionReport, width: int) -> Table:
    """The change table at the widest layout that fits: with the "vs first row" column and borders, then
    without the column, then without borders; the change column folds last (rich crops a table that cannot
    fit, so the layout is chosen here instead of left to it)."""
    rated = report.risk_rated
    rows = []
    for r in report.rows:
        risk = [r.risk + ("*" if r.approximate else "")] if rated else []
        rows.append(([r.change, r.tokens, r.delta, r.concurrency, r.reserve, *risk], r))
    heads = ["change", "KV cells" if report.tokens_label == "KV cells" else "KV tokens", "vs first row", "at once",
             "reserve"] + (["OOM risk"] if rated else [])

    def needed(columns: list[int], bordered: bool) -> int:
        widest = [max(len(heads[i]), *(len(cells[i]) for cells, _ in rows)) for i in columns]
        return sum(widest) + (3 * len(columns) + 1 if bordered else 2 * len(columns))

    everything = list(range(len(heads)))
    narrow = [i for i in everything if i != 2]
    layouts = [(everything, True), (narrow, True), (narrow, False)]
    columns, bordered = next(((c, b) for c, b in layouts if needed(c, b) <= width), layouts[-1])
    at = f"requests of {report.context_tokens:,} tokens" if report.context_tokens else "requests"
    t = Table(title=f"change → {report.tokens_label} → {at} at once → reserve left (GiB)", header_style="bold",
              title_justify="left", expand=False, box=box.HEAVY_HEAD if bordered else None)
    for i in columns:
        if i == 0:
            t.add_column(heads[i], overflow="fold", ratio=None)
        elif i == 1:
            t.add_column(heads[i], justify="right", min_width=9)  # a range wraps at its dash, never inside a number
        elif heads[i] == "OOM risk":
            t.add_column(heads[i], no_wrap=True, min_width=8)
        else:
            t.add_column(heads[i], justify="right", overflow="fold")
    for cells, r in rows:
        risk_style = "red" if r.risk == "high" else "yellow" if r.risk == "tight" else None
        t.add_row(*(cells[i] for i in columns), style="bold" if r.emphasis else risk_style)
    return t


def render(report: PredictionReport) -> str:
    buf = StringIO()
    console = terminal_console(buf)
    width = console.width
    console.print(Text(report.title, style="bold"))
    console.print(Text(report.subtitle, style="dim"))
    for i, line in enumerate(report.answer):
        console.print(Text(("→ " if i == 0 else "  ") + line, style="bold" if i == 0 else ""))
    if report.rows:
        console.print(_change_table(report, width))
        for r in report.rows:  # below the table: a note is a sentence, a cell would squeeze it into a column
            for note in r.notes:
                console.print(Text(f"  · {r.change}: ", style="dim") + Text(note))
        req = next((r for r in report.rows if r.emphasis and r.risk_words), None)
        if req is not None and report.risk_rated:
            console.print(f"  OOM risk {req.risk}: {req.risk_words}")
    if report.bar is not None:
        bar = report.bar
        console.print(Text(f"Memory {bar.title} ({bar.total_text})", style="bold"))
        if style().color and width >= 60:
            console.print(_bar(bar, min(72, width - 4)))
        t = Table(show_header=False, box=None, pad_edge=False, padding=(0, 1))
        t.add_column("")
        t.add_column("", justify="right")
        t.add_column("", overflow="fold")
        for seg in bar.segments:
            swatch = Text("■ ", style=COLOURS.get(seg.key, "white")) if style().color else Text("")
            t.add_row(swatch + Text(seg.key if seg.key != "kv" else "KV"), fmt_gib(seg.gib), seg.label)
        console.print(t)
    if report.curve is not None:
        c = report.curve
        head = f"KV tokens against {c.flag} (now {c.current:g}"
        head += f"; OOM risk from {c.risk_from:g})" if c.risk_from is not None else ")"
        t = Table(title=head, title_justify="left", header_style="bold")
        t.add_column(c.flag.lstrip("-"), justify="right")
        t.add_column("KV tokens", justify="right")
        t.add_column(c.reserve_label, justify="right", overflow="fold")
        t.add_column("", overflow="fold")
        for p in c.rows():
            current = abs(p.x - c.current) < 1e-9
            t.add_row(f"{p.x:g}", f"{p.tokens:,}", fmt_gib(p.reserve_gib),
                      " ".join(w for w in ("current" if current else "", "⚠ OOM risk" if p.risky else "") if w),
                      style="bold" if current else ("yellow" if p.risky else None))
        console.print(t)
    if report.formula:
        console.print(report.formula)
    if report.provenance:
        console.print(Text("What is measured, estimated and assumed", style="bold"))
        for k, v in report.provenance:
            console.print(Text(f"  {k}: ", style="bold") + Text("; ".join(v)))
    for w in report.warnings:
        console.print(Text("  ! " + w, style="yellow"))
    if report.ledger:
        t = Table(title="Ledger per GPU (GiB)", title_justify="left", header_style="bold")
        t.add_column("item", overflow="fold")
        t.add_column("GiB", justify="right")
        t.add_column("how", overflow="fold")
        for x in report.ledger:
            t.add_row(x.item, x.gib, x.how)
        console.print(t)
    if report.settings:
        t = Table(title="Settings as the release would resolve them", title_justify="left", header_style="bold")
        t.add_column("setting", overflow="fold")
        t.add_column("value", overflow="fold")
        t.add_column("from", overflow="fold")
        for k, v, f in report.settings:
            t.add_row(k, v, f)
        console.print(t)
    for n in report.footnotes:
        console.print(Text(n, style="dim"))
    return buf.getvalue().rstrip() + "\n"
