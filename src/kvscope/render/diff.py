"""``kvscope diff`` reports: a terminal waterfall, a markdown table, an HTML page with a waterfall chart.

Every view says the same thing in the same order: the answer (A's tokens → B's, and the term that moved
them most), the waterfall (each term's GiB, tokens, running total and cause; they sum to the observed
difference, a residual is its own named row), what changed (settings, release, GPU), the release rules
that differ, and whatif's prediction from A against what B logged.
"""

from __future__ import annotations

from io import StringIO
from typing import Any

from rich.table import Table
from rich.text import Text

from kvscope import __version__, engines
from kvscope.analysis.diff import Diff, Term, as_dict
from kvscope.core.budget import TermKind
from kvscope.render.console import style, terminal_console
from kvscope.render.html import _css, _environment, _inline, _sha256, fmt_gib
from kvscope.render.markdown import _table, md_code, md_escape

PREDICTION_HOLDS = 0.02  # whatif's promise where its rule is approximate: within 2 %


def _gib(x: float | None) -> str:
    if x is None:
        return "—"
    return ("+" if x > 0 else "−" if x < 0 else "") + fmt_gib(abs(x)) if x else "0"


def _count(n: int | None) -> str:
    return "—" if n is None else f"{n:,}"


def _running(d: Diff, running: int) -> str:
    return "—" if d.observed_tokens is None else f"{running:,}"


def _rows(d: Diff) -> list[tuple[Term, int, int]]:
    """Each term with the running total before and after it: the one walk every view draws."""
    out, running = [], d.a.kv_tokens or 0
    for term in d.terms:
        out.append((term, running, running + term.tokens))
        running += term.tokens
    return out


def _ab_table(title: str, first: str, rows: list[tuple[str, str, str]]) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold")
    for col in (first, "A", "B"):
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(*row)
    return t


def _sums(d: Diff) -> str:
    if d.observed_tokens is None:
        return "A token count is not in both logs: the rows compare the KV memory (GiB into (+) or out of (−) the cache)."
    return (f"The terms sum to {d.explained_tokens:+,} tokens, the observed difference ({d.observed_tokens:+,}); GiB are "
            "memory into (+) or out of (−) the KV cache, counted in tokens at A's bytes per token.")


def _tokens(n: int) -> str:
    return f"{n:+,}" if n else "0"


def _where(d: Diff, which: str) -> str:
    s = d.a if which == "a" else d.b
    return f"{s.file}:{s.first_line} (startup {s.index})"


def headline(d: Diff) -> list[str]:
    """The answer first: the two capacities, and the terms that moved them most."""
    a, b = d.a, d.b
    label = engines.get(b.engine).label
    if d.observed_tokens is None:
        if a.kv_gib is not None and b.kv_gib is not None:
            cause = next((t.cause for t in d.terms if t.cause), "")
            return [f"KV memory {fmt_gib(a.kv_gib)} → {fmt_gib(b.kv_gib)} GiB ({_gib(b.kv_gib - a.kv_gib)}); "
                    f"{'A' if a.kv_tokens is None else 'B'} logs no token count."] + ([f"Cause: {cause}."] if cause else [])
        return [f"{label}: no KV capacity to compare ({'A' if a.kv_tokens is None else 'B'} shows none)."]
    obs = d.observed_tokens
    pct = f" ({obs / a.kv_tokens:+.1%})" if a.kv_tokens else ""
    failed = f"; B failed ({b.failed})" if b.failed else ""
    out = [f"KV capacity {a.kv_tokens:,} → {b.kv_tokens:,} tokens ({obs:+,}{pct}){failed}."]
    moved = [t for t in d.terms if t.tokens and t.kind is not TermKind.ROUNDING] or [t for t in d.terms if t.tokens]
    big = sorted(moved, key=lambda t: -abs(t.tokens))[:2]
    if big:
        out.append("Mostly: " + "; ".join(f"{t.kind.value} {_tokens(t.tokens)} tokens"
                                          + (f" ({t.cause})" if t.cause else "") for t in big) + ".")
    if d.predicted is not None:
        p = d.predicted
        verdict = "within its interval" if p.within else f"off by {p.error:+.2%}"
        rng = f"{p.low:,}" if p.low == p.high else f"{p.low:,} – {p.high:,}"
        out.append(f"Predicted from A with {p.flags}: {rng}; observed in B: {p.observed:,} ({verdict}).")
        if abs(p.error) > PREDICTION_HOLDS:
            out.append(f"The prediction does not hold: besides {p.flags}, something the logs do not show changed the "
                       "budget (another flag, the release, other processes on the GPU).")
    return out


def render_terminal(diffs: list[Diff]) -> str:
    buf = StringIO()
    console = terminal_console(buf)
    for i, d in enumerate(diffs):
        if i:
            console.print()
        console.print(Text(f"kvscope diff · {engines.get(d.b.engine).label}", style="bold"))
        console.print(Text(f"A: {_where(d, 'a')}\nB: {_where(d, 'b')}", style="dim"))
        for j, line in enumerate(headline(d)):
            console.print(Text(("→ " if j == 0 else "  ") + line, style="bold" if j == 0 else ""))
        if d.terms:
            console.print(_waterfall(d, console.width))
        if d.changes:
            console.print(_ab_table("What changed", "what", [(c.what, c.a, c.b) for c in d.changes]))
        if d.rule_changes:
            console.print(_ab_table("Release rules that differ", "rule", [(r.rule, r.a, r.b) for r in d.rule_changes]))
        for n in d.notes:
            console.print(Text("  · " + n, style="dim"))
    return buf.getvalue().rstrip() + "\n"


def _bar(t: Term, scale: float, width: int) -> Text:
    n = max(1, round(abs(t.tokens) * scale * width)) if t.tokens else 0
    return Text("█" * n, style="green" if t.tokens > 0 else "red") if style().color else Text(
        ("+" if t.tokens > 0 else "−") * n)


def _waterfall(d: Diff, width: int) -> Table:
    t = Table(title=f"Waterfall: A's {_count(d.a.kv_tokens)} tokens to B's {_count(d.b.kv_tokens)}",
              title_justify="left", header_style="bold")
    t.add_column("term", overflow="fold")
    t.add_column("GiB", justify="right", no_wrap=True)
    t.add_column("tokens", justify="right", no_wrap=True)
    t.add_column("running", justify="right", no_wrap=True)
    wide = width >= 120
    if wide:
        t.add_column("", no_wrap=True)
    t.add_column("cause", overflow="fold")
    largest = max((abs(x.tokens) for x in d.terms), default=0) or 1
    for term, _, running in _rows(d):
        cells: list[Any] = [f"{term.kind.value}: {term.label}", _gib(term.gib), _tokens(term.tokens), _running(d, running)]
        if wide:
            cells.append(_bar(term, 1 / largest, 16))
        cells.append(term.cause or "—")
        t.add_row(*cells)
    t.caption = _sums(d)
    t.caption_justify = "left"
    return t


def render_markdown(diffs: list[Diff]) -> str:
    out = ["# kvscope diff", "", "Why the KV capacity changed between two startups. GiB = 2^30 bytes.", ""]
    for i, d in enumerate(diffs, 1):
        out += [f"## {md_escape(engines.get(d.b.engine).label)}: A → B" + (f" ({i})" if len(diffs) > 1 else ""), "",
                f"A: {md_code(_where(d, 'a'))}  ", f"B: {md_code(_where(d, 'b'))}", ""]
        out += [f"- {'**' + md_escape(x) + '**' if j == 0 else md_escape(x)}" for j, x in enumerate(headline(d))] + [""]
        if d.terms:
            rows = []
            for term, _, running in _rows(d):
                rows.append([md_escape(f"{term.kind.value}: {term.label}"), _gib(term.gib), _tokens(term.tokens),
                             _running(d, running), md_escape(term.cause or "—")])
            out += ["### Waterfall", ""] + _table(["term", "GiB", "tokens", "running total", "cause"], rows,
                                                  right={1, 2, 3})
            out += [md_escape(_sums(d)), ""]
        if d.changes:
            out += ["### What changed", ""] + _table(["what", "A", "B"], [[md_escape(c.what), md_code(c.a), md_code(c.b)]
                                                                       for c in d.changes])
        if d.rule_changes:
            out += ["### Release rules that differ", ""] + _table(
                ["rule", "A", "B"], [[md_escape(r.rule), md_escape(r.a), md_escape(r.b)] for r in d.rule_changes])
        out += [f"- {md_escape(n)}" for n in d.notes] + ([""] if d.notes else [])
    out.append(f"<sub>kvscope {__version__}</sub>")
    return "\n".join(out).rstrip() + "\n"


def _chart(d: Diff) -> dict[str, Any]:
    """Floating bars: A's tokens, each term from the running total before it to after it, B's tokens."""
    walk = _rows(d)
    bars = [{"label": "A", "from": 0, "to": d.a.kv_tokens or 0, "kind": "total", "cause": ""}]
    bars += [{"label": term.kind.value, "from": before, "to": after, "kind": "up" if term.tokens >= 0 else "down",
              "cause": term.cause, "gib": term.gib} for term, before, after in walk]
    bars.append({"label": "B", "from": 0, "to": walk[-1][2] if walk else d.a.kv_tokens or 0, "kind": "total",
                 "cause": ""})
    return {"bars": bars}


def render_html(diffs: list[Diff]) -> str:
    from kvscope.render.html import CHARTJS_FILE, CHARTJS_VERSION, _asset
    from kvscope.render.json_out import _clean

    env = _environment()
    template = env.from_string(_asset("diff.html.j2"))
    css, chartjs, appjs = _css(), _inline(CHARTJS_FILE, "</script"), _inline("report.js", "</script")
    csp = ("default-src 'none'; "
           f"script-src {_sha256(chartjs)} {_sha256(appjs)}; style-src {_sha256(css)}; "
           "img-src data:; font-src data:; base-uri 'none'; form-action 'none'")
    views = []
    for d in diffs:
        rows = []
        for term, _, running in _rows(d):
            rows.append({"term": f"{term.kind.value}: {term.label}", "gib": _gib(term.gib), "tokens": _tokens(term.tokens),
                         "running": _running(d, running), "cause": term.cause or "—"})
        views.append({"engine": engines.get(d.b.engine).label, "a": _where(d, "a"), "b": _where(d, "b"),
                      "headline": headline(d), "rows": rows, "changes": d.changes, "rules": d.rule_changes,
                      "notes": d.notes, "sums": _sums(d)})
    return template.render(diffs=views, data=_clean({"diff": [{"waterfall": _chart(d)} for d in diffs]}), css=css, chartjs=chartjs,
                           appjs=appjs, csp=csp, version=__version__, chartjs_version=CHARTJS_VERSION,
                           chartjs_license=_asset("chart.js.LICENSE.md"))


def render_json(diffs: list[Diff]) -> str:
    from kvscope.analysis.diff import SCHEMA
    from kvscope.render.json_out import dumps

    return dumps({"schema": SCHEMA, "kvscope_version": __version__, "diffs": [as_dict(d) for d in diffs]})


RENDERERS = {"terminal": render_terminal, "markdown": render_markdown, "html": render_html, "json": render_json}
