"""``--format markdown``: a report to paste into a GitHub issue or discussion.

GitHub renders tables, so every figure is a table row; the log lines go in a collapsed
``<details>`` block inside a fenced code block. Text from a log is never trusted as markdown:

* literals (model paths, failure messages, setting values) go in code spans whose backtick run
  is longer than any run inside them, so nothing in them is parsed as markup;
* prose that embeds log values (finding titles and details) is escaped: ``& < >`` become
  entities (no raw HTML) and markdown punctuation gets a backslash;
* the fence around the log lines is one backtick longer than the longest run in any line, so
  no line can close it early (and ``</details>`` inside it is just text).

Table cells escape ``|`` (GitHub honours ``\\|`` even inside code spans) and fold newlines.
"""

from __future__ import annotations

import re
from typing import Any

from kvscope import __version__
from kvscope.analysis.answer import answer_lines
from kvscope.core.facts import RankFacts
from kvscope.core.startup import Startup
from kvscope.render.html import (
    RANK_COLUMNS,
    capacity_rows,
    curve_from_prediction,
    evidence_lines,
    finding_views,
    fmt_gib,
    generic_table,
    kv_view,
    mark,
    mark_legend,
    pinned_kv,
    prediction_view,
    runtime_facts,
    runtime_series,
    series_value,
    settings_rows,
    whatif_curve,
    whatif_rows,
)
from kvscope.render.ranks import differences
from kvscope.render.ranks import groups as rank_groups

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_MD_SPECIAL = re.compile(r"([\\`*_\[\]{}#!|~])")


def _clean(text: Any) -> str:
    """One line of text: control characters out, newlines folded."""
    return _CONTROL.sub("?", str(text)).replace("\r", " ").replace("\n", " ")


def md_escape(text: Any) -> str:
    """Text shown as text: no raw HTML, no emphasis, links, tables or code spans from the data."""
    t = _clean(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", t)


def longest_backtick_run(text: str) -> int:
    return max((len(m) for m in re.findall(r"`+", text)), default=0)


def md_code(text: Any) -> str:
    """An inline code span that ``text`` cannot close; ``|`` escaped for table cells."""
    t = _clean(text)
    if not t:
        return ""
    fence = "`" * (longest_backtick_run(t) + 1)
    pad = " " if t[0] in "` " or t[-1] in "` " else ""
    return f"{fence}{pad}{t.replace('|', chr(92) + '|')}{pad}{fence}"


def code_block(lines: list[str], info: str = "text") -> str:
    """A fenced block no line can break out of: the fence outruns every backtick run in the content."""
    body = "\n".join(_CONTROL.sub("?", line).replace("\r", "") for line in lines)
    fence = "`" * max(3, longest_backtick_run(body) + 1)
    return f"{fence}{info}\n{body}\n{fence}"


def _table(header: list[str], rows: list[list[str]], right: set[int] | None = None) -> list[str]:
    """A GitHub table; cells must already be escaped or code spans."""
    right = right or set()
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---:" if i in right else "---" for i in range(len(header))) + "|"]
    out += ["| " + " | ".join(c if c else " " for c in row) + " |" for row in rows]
    return out + [""]


def _header(s: Startup, index: int) -> list[str]:
    title = f"## Startup {index}: {md_escape(s.engine)}"
    if s.engine_version:
        title += f" {md_escape(s.engine_version)}"
    if s.model:
        title += f" · {md_code(s.model)}"
    where = f"{md_code(f'{s.file}:{s.first_line}-{s.last_line}')}"
    if s.era:
        where += f" · era {md_escape(s.era)}"
    out = [title, "", where, ""]
    if s.failure is not None:
        line = f" (line {s.failure.source.line_no})" if s.failure.source else ""
        out += [f"> **Startup failed: {md_escape(s.failure.kind)}**{line}: {md_code(s.failure.message[:500])}", ""]
    facts = [f"**{md_escape(k)}** {md_escape(v)}" for k, v in capacity_rows(s)]
    if facts:
        out += [" · ".join(facts), ""]
    return out


def _ranks(s: Startup) -> list[str]:
    if not any(r.has_figures() for r in s.ranks):
        return ["_No startup memory lines in this input: the ledger is unknown; serving lines only._", ""] \
            if s.runtime is not None else []
    def cells(r) -> list[str]:  # plain text: escaped where it is written out
        figures = [fmt_gib(getattr(r, k)) + mark(r, k) for k in RANK_COLUMNS]
        pools = ", ".join(f"{p.name} {fmt_gib(p.size_gib())}" + (f" ({p.tokens:,} tok)" if p.tokens else "")
                          for p in r.kv_pools) or "—"
        return figures[:3] + [pools] + figures[3:]

    header = ["free before weights", "weights", "free after weights", "KV pools", "free after pool",
              "CUDA graphs", "free at ready"]
    found = rank_groups(s.ranks, cells)  # identical consecutive ranks are one row; differences named below
    shown = [i for i in range(len(header)) if any(g.cells[i] != "—" for g in found)]
    rows = [[md_code(g.label)] + [md_escape(g.cells[i]) for i in shown] for g in found]
    right = {n + 1 for n, i in enumerate(shown) if i != 3}
    out = ["### Memory per GPU (GiB)", ""] + _table(["rank"] + [header[i] for i in shown], rows, right=right)
    named = differences(found, header)
    out += [f"- {md_escape(line)}" for line in named] + ([""] if named else [])
    for sym, meaning in mark_legend(s):
        out += [f"{md_escape(sym)} {meaning}", ""]
    return out


def _ledger(s: Startup) -> list[str]:
    ref = s.reference_rank
    if ref is None or not ref.ledger:
        return []
    rows = [[md_escape(row.item), fmt_gib(row.gib), md_escape(row.how), md_escape(row.note)] for row in ref.ledger]
    out = [f"### Ledger of {md_code(ref.rank)}", ""] + _table(["item", "GiB", "how", "note"], rows, right={1})
    if RankFacts(ref).derivation:
        out += [md_code(RankFacts(ref).derivation), ""]
    return out


def _kv(s: Startup) -> list[str]:
    kv = kv_view(s, None)
    line = f"- **{kv['tokens']}** tokens of KV cache"
    if kv["tokens"] == "—":
        line = "- The log gives the KV pool in GiB but no token count" if kv["pools"] else "- The log shows no KV pool"
    if kv["rank"]:
        line += f" on {md_code(kv['rank'])}"
    if kv["bytes_per_token"] != "—":
        line += f", **{kv['bytes_per_token']}** bytes per token per GPU ({md_escape(kv['bytes_per_token_how'])})"
    out = ["### KV pool", "", line]
    rec = kv.get("reconciliation")
    if rec:
        out.append(f"- Reconciliation: **{rec['verdict']}**" + (f" (engine rule: {rec['range']} tokens)" if rec["range"] else ""))
        out.append(f"- Why this many bytes per token: {md_escape(rec['method'])}")
        out.append(f"- {md_escape(rec['detail'])}")
    else:
        out.append("- Not reconciled with the engine's sizing rule: pass `--model` (config.json or model id).")
    return out + [""]


def _whatif(s: Startup, curve: dict[str, Any] | None) -> list[str]:
    if curve is None:
        pinned = pinned_kv(s)
        return ["### What if", "", md_escape(pinned) + ".", ""] if pinned else []
    knob = curve["knob"]
    out = [f"### What if: `{knob}`", "",
           f"Each +0.01 of `{knob}` moves {0.01 * curve['basis_gib']:.2f} GiB ({curve['basis_name']} "
           f"{curve['basis_gib']:.2f} GiB × 0.01) between the reserve and the KV pool: **{curve['tokens_per_step']:,}** "
           f"tokens. OOM risk (under {curve['margin_gib']:.1f} GiB left) from about **{curve['risk_from']:.2f}**."]
    if not curve["ready_known"]:
        out[-1] += " The log ends before CUDA graphs / the draft model took their share, so the real risk starts earlier."
    out.append("")
    rows = [[f"**{p['x']:.2f}**" if p["current"] else f"{p['x']:.2f}", f"{p['tokens']:,}",
             f"{p['delta']:+,}" if p["delta"] else "", f"{p['reserve_gib']:.2f}",
             " ".join(x for x in ("current" if p["current"] else "", "⚠ OOM risk" if p["risk"] else "") if x)]
            for p in whatif_rows(curve)]
    return out + _table([f"`{knob}`", "KV tokens", "change", md_escape(curve["reserve_label"]), ""], rows, right={1, 2, 3})


def _runtime(s: Startup) -> list[str]:
    if s.runtime is None:
        return []
    series = runtime_series(s.runtime)
    facts = runtime_facts(s.runtime)
    if series is None and not facts:
        return []
    out = ["### Runtime", ""]
    if series is not None:
        rows = [[md_escape(x["label"])] + [series_value(x, x[k]) for k in ("min", "max", "last")] for x in series["series"]]
        out += [f"{series['samples']} samples.", ""] + _table(["series", "lowest", "highest", "last"], rows, right={1, 2, 3})
    if facts:
        out += _table(["serving", "value"], [[md_escape(k), md_escape(v)] for k, v in facts])
    return out


def _findings_md(s: Startup) -> list[str]:
    items = finding_views(s)
    if not items:
        return []
    out = ["### Findings", ""]
    for f in items:
        out.append(f"- **{md_escape(f['severity'])}** · {md_escape(f['title'])}  ")
        out.append(f"  {md_escape(f['detail'])}")
        sug = f["suggestion"]
        if sug:
            tail = f"{md_escape(sug['flag'])}: {md_escape(sug['from'])} → {md_escape(sug['to'])}"
            if sug["tokens_after"]:
                tail += f"; {sug['tokens_after']} KV tokens"
            if sug["note"]:
                tail += f"; {md_escape(sug['note'])}"
            out[-1] += "  "
            out.append(f"  Suggested: {md_code(sug['command'])} ({tail})")
    return out + [""]


def _settings_md(s: Startup) -> list[str]:
    rows = settings_rows(s)
    if not rows:
        return []
    body = _table(["setting", "value", "from"], [[md_code(k), md_code(v), how] for k, v, how in rows])
    return [f"<details><summary>Settings ({len(rows)})</summary>", ""] + body + ["</details>", ""]


def _evidence(s: Startup) -> list[str]:
    lines = evidence_lines(s)
    if not lines:
        return []
    width = max(len(str(e["line"])) for e in lines)
    files = sorted({e["file"] for e in lines})
    text = []
    for e in lines:
        where = (f"{e['file']}:" if len(files) > 1 else "") + str(e["line"]).rjust(width)
        text.append(f"{where}  {e['text']}")
    head = f"Log lines ({len(lines)})" + (f" from {files[0].rsplit('/', 1)[-1]}" if len(files) == 1 else "")
    return ["<details><summary>" + md_escape(head) + "</summary>", "", code_block(text), "", "</details>", ""]


def render_startup(s: Startup, index: int, curve: dict[str, Any] | None = None, predicted: bool = False) -> str:
    """One startup; ``curve`` replaces the estimated what-if curve (a whatif prediction's calibrated one);
    ``predicted``: a prediction report above already shows this startup's what-if, so it is not repeated."""
    answer = answer_lines(s)
    head = ["### Answer", "", *[f"- {md_escape(x)}" for x in answer], ""] if answer else []
    whatif = [] if predicted else _whatif(s, curve or whatif_curve(s))
    parts = (_header(s, index) + head + _ranks(s) + _ledger(s) + _kv(s) + whatif + _runtime(s)
             + _findings_md(s) + _settings_md(s) + _evidence(s))
    return "\n".join(parts)


def _prediction(view: dict[str, Any]) -> list[str]:
    out = ["## What-if prediction", ""]
    if view["summary"]:
        out += [md_escape(view["summary"]) + ".", ""]
    out += [f"- {md_escape(n)}" for n in view["notes"]] + ([""] if view["notes"] else [])
    rows = []
    for r in view["rows"]:
        risk = md_escape(r["risk"]) + ("\\*" if r["approximate"] else "")
        if r["risk_words"]:
            risk += f" ({md_escape(r['risk_words'])})"
        flags = md_code(r["flags"])
        rows.append([f"**{flags}**" if r["requested"] else flags, r["tokens"], r["node"], r["concurrency"], r["reserve"], risk])
    header = ["flags", "KV tokens per GPU", "across the node", "requests at context", "reserve left (GiB)", "OOM risk"]
    return out + _table(header, rows, right={1, 2, 3, 4}) + ["\\* approximate: the change moves memory the log does not show", ""]


def _extra(extra: dict[str, Any] | None) -> list[str]:
    out: list[str] = []
    for key, value in (extra or {}).items():
        view = prediction_view(value) if key == "prediction" else None
        if view is not None:
            out += _prediction(view)
            continue
        table = generic_table(value)
        title = "What-if prediction" if key == "prediction" else md_escape(key)
        rows = [[md_code(c) if c else "" for c in row] for row in table["rows"]]
        out += [f"## {title}", ""] + _table([md_escape(c) for c in table["columns"]], rows)
    return out


def render(analysis: Any, extra: dict[str, Any] | None = None) -> str:
    extra = dict(extra or {})
    report = extra.pop("report", None)
    if report is not None and report.kind == "plan":
        return "\n".join(["# kvscope plan", "", "Predicted from the model and the GPU; no log read. GiB = 2^30 bytes.",
                          "", render_prediction(report), f"<sub>kvscope {__version__}</sub>"]).rstrip() + "\n"
    lede = ("A what-if prediction calibrated on the server log; the startup it was calibrated on follows."
            if report is not None else "GPU memory at startup, read from the server log.")
    parts = ["# kvscope report", "", f"{lede} GiB = 2^30 bytes.", ""]
    if report is not None:
        parts.append(render_prediction(report))
        parts += _extra({k: v for k, v in extra.items() if k != "prediction"})
    else:
        parts += _extra(extra)
    if not analysis.startups:
        parts += ["No engine startup found in the input.", ""]
    pred = (extra or {}).get("prediction")
    view = prediction_view(pred)
    target = view.get("startup") if view else None
    for i, s in enumerate(analysis.startups, 1):
        parts.append(render_startup(s, i, curve_from_prediction(pred) if target == i - 1 else None,
                                    predicted=report is not None and target == i - 1))
    parts.append(f"<sub>kvscope {__version__}</sub>")
    return "\n".join(parts).rstrip() + "\n"


def _bar_md(bar: Any) -> list[str]:
    total = bar.total_gib or 1.0
    rows = [[md_escape(s.key if s.key != "kv" else "KV"), md_escape(s.label), fmt_gib(s.gib), f"{s.gib / total:.0%}"]
            for s in bar.segments]
    return [f"### Memory {md_escape(bar.title)} ({bar.total_text})", ""] + \
        _table(["part", "what", "GiB", "share"], rows, right={2, 3})


def _curve_md(curve: Any) -> list[str]:
    head = (f"### KV tokens against {md_code(curve.flag)}", "",
            f"Current value **{curve.current:g}**. "
            + (f"Rated tight or high (OOM risk) from **{curve.risk_from:g}**." if curve.risk_from is not None
               else "No release rule rates the OOM risk here; watch the memory left."), "")
    rows = []
    for p in curve.rows():
        current = abs(p.x - curve.current) < 1e-9
        x = f"**{p.x:g}**" if current else f"{p.x:g}"
        rows.append([x, f"{p.tokens:,}", fmt_gib(p.reserve_gib),
                     " ".join(w for w in ("current" if current else "", "⚠ OOM risk" if p.risky else "") if w)])
    return list(head) + _table([md_code(curve.flag), "KV tokens", md_escape(curve.reserve_label), ""], rows, right={1, 2})


def render_prediction(report: Any) -> str:
    """A whatif or plan report (render.prediction.PredictionReport) as markdown: the answer first."""
    out = [f"## {md_escape(report.title)}", "", f"_{md_escape(report.subtitle)}_", ""]
    out += [f"- {'**' + md_escape(a) + '**' if i == 0 else md_escape(a)}" for i, a in enumerate(report.answer)] + [""]
    if report.rows:
        header = ["change", md_escape(report.tokens_label), "vs first row", md_escape(report.concurrency_header), "reserve left (GiB)"]
        rated = report.risk_rated
        header += ["OOM risk"] if rated else []
        rows = []
        for r in report.rows:
            change = md_code(r.change)
            cells = [f"**{change}**" if r.emphasis else change, r.tokens, r.delta, r.concurrency, r.reserve]
            if rated:
                risk = md_escape(r.risk) + ("\\*" if r.approximate else "")
                words = r.risk_words if r.emphasis or r.risk in ("tight", "high") else ""  # "low" needs no sentence
                cells.append(risk + (f" — {md_escape(words)}" if words else ""))
            rows.append(cells)
            rows += [["", f"· {md_escape(n)}", "", "", ""] + ([""] if rated else []) for n in r.notes]
        out += ["### Change → KV tokens → concurrency → reserve", ""] + _table(header, rows, right={1, 2, 3, 4})
    if report.bar is not None:
        out += _bar_md(report.bar)
    if report.curve is not None:
        out += _curve_md(report.curve)
    if report.formula:
        out += [md_escape(report.formula), ""]
    if report.provenance:
        out += ["### What is measured, estimated and assumed", ""]
        out += [f"- **{md_escape(k)}**: {md_escape('; '.join(v))}" for k, v in report.provenance] + [""]
    if report.warnings:
        out += [f"> ⚠ {md_escape(w)}" + "  " for w in report.warnings] + [""]
    if report.ledger:
        rows = [[md_escape(x.item), x.gib, md_escape(x.how)] for x in report.ledger]
        out += ["<details><summary>Ledger per GPU (GiB)</summary>", ""] + _table(["item", "GiB", "how"], rows, right={1}) \
            + ["</details>", ""]
    if report.settings:
        rows = [[md_code(k), md_code(v), md_escape(f)] for k, v, f in report.settings]
        out += [f"<details><summary>Settings ({len(rows)})</summary>", ""] + _table(["setting", "value", "from"], rows) \
            + ["</details>", ""]
    out += [md_escape(n) for n in report.footnotes] + ([""] if report.footnotes else [])
    return "\n".join(out)
