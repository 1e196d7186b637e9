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
WIDE = 100  # below this the change table drops its "vs first row" column


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


def render(report: PredictionReport) -> str:
    buf = StringIO()
    console = terminal_console(buf)
    width = console.width
    console.print(Text(report.title, style="bold"))
    console.print(Text(report.subtitle, style="dim"))
    for i, line in enumerate(report.answer):
        console.print(Text(("→ " if i == 0 else "  ") + line, style="bold" if i == 0 else ""))
    if report.rows:
        wide = width >= WIDE
        at = f"requests of {report.context_tokens:,} tokens" if report.context_tokens else "requests"
        t = Table(title=f"change → KV tokens per GPU → {at} at once → reserve left (GiB)", header_style="bold",
                  title_justify="left", expand=False, box=None if width < WIDE else box.HEAVY_HEAD)
        longest = max(len(r.change) for r in report.rows)
        t.add_column("change", overflow="fold", min_width=min(longest, max(12, width // 3)))
        t.add_column("KV tokens", justify="right", min_width=9)  # a range wraps at its dash, never inside a number
        if wide:
            t.add_column("vs first row", justify="right", overflow="fold")
        t.add_column("at once", justify="right", overflow="fold", max_width=16)
        t.add_column("reserve", justify="right", overflow="fold", max_width=11)
        rated = report.risk_rated
        if rated:
            t.add_column("OOM risk", no_wrap=True, min_width=8)
        for r in report.rows:
            cells = [r.change, r.tokens] + ([r.delta] if wide else []) + [r.concurrency, r.reserve]
            if rated:
                cells.append(r.risk + ("*" if r.approximate else ""))
            risk_style = "red" if r.risk == "high" else "yellow" if r.risk == "tight" else None
            t.add_row(*cells, style="bold" if r.emphasis else risk_style)
        console.print(t)
        for r in report.rows:  # below the table: a note is a sentence, a cell would squeeze it into a column
            for note in r.notes:
                console.print(Text(f"  · {r.change}: ", style="dim") + Text(note))
        req = next((r for r in report.rows if r.emphasis and r.risk_words), None)
        if req is not None and rated:
            console.print(f"  OOM risk {req.risk}: {req.risk_words}")
    if report.bar is not None:
        bar = report.bar
        console.print(Text(f"Memory {bar.title} ({fmt_gib(bar.total_gib)} GiB)", style="bold"))
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
