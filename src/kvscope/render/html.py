"""``--format html``: one self-contained report file that opens offline and is safe to share.

Design, and why:

* **jinja2 with autoescape on** renders the page: every string that came from a log (model
  path, server_args values, failure messages, rank labels, source lines) is HTML-escaped by the
  template engine, and jinja never evaluates ``{{ }}``/``{% %}`` found inside *data*.
* **Chart.js** (MIT, vendored minified UMD build in ``templates/``, ~210 kB) draws the charts in
  the browser. It is maintained, has stacked bars, dual axes, filled areas and tooltips, needs no
  other package, and draws on ``<canvas>``: labels and tooltips are painted text, never parsed as
  HTML, so a hostile rank label cannot inject markup. Server-side SVG (matplotlib, pygal) would add
  a heavy or network-loading dependency for less interactivity.
* Chart data travels as JSON in ``<script type="application/json">`` through jinja's ``tojson``
  (``<``, ``>``, ``&``, ``'`` become ``\\u003c``…), so ``</script>`` inside data cannot close the tag.
* A Content-Security-Policy ``<meta>`` allows only the two inline scripts and the style block by
  hash and forbids every fetch (``default-src 'none'``): the report makes no network request, and
  a script smuggled in by some future escaping bug would be refused by the browser.
* Every number is also in a table, so the report reads without JavaScript (mail previews, print).

The figure helpers (``memory_segments``, ``whatif_curve``, ``runtime_series``) are shared with
the markdown renderer and with ``whatif``/``plan`` through ``render(analysis, extra)``."""

from __future__ import annotations

import base64
import hashlib
import math
from datetime import datetime
from functools import cache, lru_cache
from importlib import resources
from typing import Any

from jinja2 import Environment, Template, select_autoescape
from markupsafe import Markup

from kvscope import __version__
from kvscope.analysis.answer import answer_lines
from kvscope.analysis.curve import (
    _free_last,
    _graphs,
    _num,
    _pool_sum,
    bytes_per_token,
    curve_from_prediction,
    device_total,
    pinned_kv,
    whatif_curve,
    whatif_rows,
)
from kvscope.core.facts import CapacityFacts, RankFacts
from kvscope.core.provenance import How
from kvscope.core.startup import CAPACITY_FIELDS, Rank, SourceRef, Startup
from kvscope.render.json_out import _clean
from kvscope.render.labels import (  # no NaN/inf: JSON.parse in the page would reject them
    capacity_label,
    series_label,
    serving_facts,
    setting_label,
)
from kvscope.render.ranks import differences
from kvscope.render.ranks import groups as rank_groups

CHARTJS_FILE = "chart.umd.min.js"


CHARTJS_VERSION = "4.6.1"


MAX_CHART_RANKS = 128


MAX_RUNTIME_POINTS = 1500


MAX_RUNTIME_SERIES = 8


# key, label, colour, what the part is (tooltip and legend text)
SEGMENTS = (
    ("context", "CUDA context & others", "#95a5a6", "taken before the weights loaded: CUDA context, NCCL, other processes"),
    ("weights", "weights", "#8e44ad", "model weights (this rank's shard)"),
    ("kv", "KV pool", "#27ae60", "KV cache pool of the served model"),
    ("draft", "draft", "#17a2b8", "speculative draft model: its KV pool and weights"),
    ("graphs", "CUDA graphs", "#f39c12", "memory held by captured CUDA graphs"),
    ("other", "other", "#e74c3c", "not itemized by the log: activations, request tables, allocator slack"),
    ("free", "free", "#d0d7de", "still free at the last figure the log printed: the reserve"),
    ("unlogged", "not logged for this rank", "#eceff1", "this rank's log lines do not itemize this memory"),
)


FIELD_LABELS = {
    "total_gib": "device total",
    "pre_load_free_gib": "free before weights",
    "weights_gib": "weights",
    "avail_after_weights_gib": "free after weights",
    "activation_peak_gib": "activation peak",
    "non_torch_gib": "non-torch memory",
    "usable_gib": "usable budget",
    "avail_after_pool_gib": "free after KV pool",
    "cuda_graph_gib": "CUDA graphs",
    "avail_at_ready_gib": "free at ready",
}


RANK_COLUMNS = ("pre_load_free_gib", "weights_gib", "avail_after_weights_gib", "avail_after_pool_gib",
                "cuda_graph_gib", "avail_at_ready_gib")
# A figure the log did not print is marked in every rank table by how it was known (Rank.figure: the one
# provenance the ledger's "how" column also shows), and each report's legend names only the marks it uses.
MARKS = {How.DERIVED: "*", How.ASSUMED: "†"}
MARK_MEANING = {How.DERIVED: "derived by kvscope, not printed in the log",
                How.ASSUMED: "assumed: given with --assume, not printed in the log"}


def mark(r: Rank, key: str) -> str:
    fig = r.figure(key)
    return MARKS.get(fig.how, "") if fig is not None else ""


def mark_legend(s: Startup, columns: tuple[str, ...] = RANK_COLUMNS) -> list[tuple[str, str]]:
    """(mark, meaning) for each mark some rank's figure in ``columns`` carries, in MARKS order."""
    used = {mark(r, k) for r in s.ranks for k in columns}
    return [(sym, MARK_MEANING[how]) for how, sym in MARKS.items() if sym in used]


def fmt_gib(x: float | None) -> str:
    """A GiB figure as the tables show it; below 1 GiB in MiB, where two decimals of GiB hide it (a 4 MiB
    pool is not "0.00"). Reports say GiB in their headers, so the MiB figure carries its unit."""
    if x is None:
        return "—"
    if x != 0 and abs(x) < 1:
        mib = x * 1024
        return f"{mib:.1f} MiB" if abs(mib) < 10 else f"{mib:,.0f} MiB"
    return f"{x:.2f}"


def fmt_int(x: Any) -> str:
    return f"{x:,}" if isinstance(x, int) and not isinstance(x, bool) else ("—" if x is None else str(x))


def memory_segments(s: Startup, r: Rank) -> list[dict[str, Any]]:
    """The parts of one GPU's memory, in GiB, from what the log shows for this rank.

    Where the rank's own lines stop short (other ranks often print only their pool), the rest of
    the device is one "not logged" part instead of a guess copied from another rank.
    """
    parts = {"weights": r.weights_gib or 0.0, "kv": _pool_sum(r, draft=False),
             "draft": _pool_sum(r, draft=True) + (_num(RankFacts(r).draft_weights_gib) or 0.0),
             "graphs": _graphs(r), "free": _free_last(r) or 0.0}
    total, pre = device_total(s, r), r.pre_load_free_gib
    notes = _segment_notes(r)
    if pre is not None:
        parts["other"] = max(0.0, pre - sum(parts.values())) if _free_last(r) is not None else 0.0
        if total is not None and total > pre:
            parts["context"] = total - pre
    elif r.usable_gib is not None and total is not None:
        _budget_parts(r, total, parts, notes)
    else:
        ref = s.reference_rank
        basis = total if total is not None else (ref.pre_load_free_gib if ref is not None else None)
        if basis is not None and sum(parts.values()) > 0:
            parts["unlogged"] = max(0.0, basis - sum(parts.values()))
    return [{"key": key, "label": label, "gib": round(parts[key], 4), "colour": colour, "what": what,
             "note": notes.get(key, "")}
            for key, label, colour, what in SEGMENTS if parts.get(key)]


def _budget_parts(r: Rank, total: float, parts: dict[str, float], notes: dict[str, str]) -> None:
    """vLLM-style budget (usable = total × utilization): what the budget holds besides weights and
    KV is "other" (activation peak, non-torch memory); what lies outside it, less graphs, is free."""
    usable = r.usable_gib or 0.0
    parts["other"] = max(0.0, usable - parts["weights"] - parts["kv"] - parts["draft"])
    parts["free"] = max(0.0, total - usable - parts["graphs"])
    known = [f"{label} {value:.2f} GiB" for label, value in (("activation peak", r.activation_peak_gib),
                                                              ("non-torch", r.non_torch_gib)) if value is not None]
    notes["other"] = "inside the budget: " + ", ".join(known) if known else "inside the budget, not itemized"
    notes["free"] = f"outside the {usable:.2f} GiB budget (device total × utilization)"


def _segment_notes(r: Rank) -> dict[str, str]:
    """Per-rank detail for tooltips: token counts of the pools, which free figure was used."""
    notes: dict[str, str] = {}
    kv = [f"{p.name} {p.tokens:,} tokens" for p in r.kv_pools if p.tokens and p.name not in ("draft", "host")]
    if kv:
        notes["kv"] = ", ".join(kv)
    draft = r.pool("draft")
    if draft is not None and draft.tokens:
        notes["draft"] = f"draft pool {draft.tokens:,} tokens"
    if r.avail_at_ready_gib is not None:
        notes["free"] = "free at ready"
    elif RankFacts(r).avail_after_graphs_gib is not None:
        notes["free"] = "free after CUDA graph capture"
    elif r.avail_after_pool_gib is not None:
        notes["free"] = "free after the KV pool (the log ends before graphs)"
    elif r.avail_after_weights_gib is not None:
        notes["free"] = "free after weights (the log shows no KV pool)"
    return notes


TIME_KEYS = ("offset", "t", "t_s", "time_s", "elapsed_s", "seconds", "time", "ts", "timestamp")


SERIES_KEYS = ("timeline", "samples", "series", "points", "data")


NOT_SERIES = ("line", "line_no", "rank", "samples")  # bookkeeping columns, not quantities


def _as_dict(runtime: Any) -> Any:
    if runtime is None or isinstance(runtime, (dict, list)):
        return runtime
    as_dict = getattr(runtime, "as_dict", None)
    return as_dict() if callable(as_dict) else None


def _column_rows(rt: dict[str, Any]) -> list[dict[str, Any]]:
    """``{"columns": [...], "points": [[...], ...]}`` (the runtime summary's timeline) as dicts."""
    cols = rt.get("columns")
    body = next((rt[k] for k in ("points", "rows", "data") if isinstance(rt.get(k), list)), None)
    if not isinstance(cols, list) or not body:
        return []
    return [dict(zip(map(str, cols), row, strict=False)) for row in body if isinstance(row, (list, tuple))]


def _rows(rt: Any) -> list[dict[str, Any]]:
    """Samples as a list of dicts: from a list of dicts, a columns + points table, a dict holding
    either under a series key, or columns of equal length."""
    if isinstance(rt, list):
        return [r for r in rt if isinstance(r, dict)]
    if not isinstance(rt, dict):
        return []
    rows = _column_rows(rt)
    if rows:
        return rows
    for key in SERIES_KEYS:
        value = rt.get(key)
        if isinstance(value, dict):
            rows = _rows(value)
            if rows:
                return rows
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            return [r for r in value if isinstance(r, dict)]
    columns = {k: v for k, v in rt.items() if isinstance(v, list) and v and not isinstance(v[0], (dict, list))}
    lengths = {len(v) for v in columns.values()}
    if len(columns) >= 2 and len(lengths) == 1:
        n = lengths.pop()
        return [{k: v[i] for k, v in columns.items()} for i in range(n)]
    return []


def _clock(rt: Any) -> str:
    """"samples" when the runtime summary says its offsets count samples, not seconds."""
    timeline = rt.get("timeline") if isinstance(rt, dict) else None
    return str(timeline.get("clock", "")) if isinstance(timeline, dict) else ""


def _seconds(value: Any) -> float | None:
    n = _num(value)
    if n is not None:
        return n
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.strip().replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def runtime_series(runtime: Any) -> dict[str, Any] | None:
    """A startup's serving-time samples as chart series: x in seconds from the first sample."""
    rt = _as_dict(runtime)
    rows = _rows(rt)
    if len(rows) < 2:
        return None
    if len(rows) > MAX_RUNTIME_POINTS:
        stride = math.ceil(len(rows) / MAX_RUNTIME_POINTS)
        rows = rows[::stride]
    tkey = next((k for k in TIME_KEYS if k in rows[0]), None)
    xs = [_seconds(r.get(tkey)) for r in rows] if tkey else [float(i) for i in range(len(rows))]
    if any(x is None for x in xs):
        xs, tkey = [float(i) for i in range(len(rows))], None
    x0 = xs[0]
    names = [k for k in rows[0] if k != tkey and k not in NOT_SERIES
             and any(isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool) for r in rows)]
    series = []
    for name in names[:MAX_RUNTIME_SERIES]:
        values = [_num(r.get(name)) for r in rows]
        finite = [v for v in values if v is not None]
        fraction = bool(finite) and all(0.0 <= v <= 1.0 for v in finite) and any(v % 1 for v in finite)
        entry = {"name": str(name), "label": series_label(str(name)), "values": values, "axis": "y2" if fraction else "y",
                 "min": min(finite, default=None), "max": max(finite, default=None),
                 "last": finite[-1] if finite else None}
        entry["shown"] = [series_value(entry, entry[k]) for k in ("min", "max", "last")]
        series.append(entry)
    if not series:
        return None
    timed = tkey is not None and _clock(rt) != "samples"
    return {"x": [round(x - x0, 3) for x in xs], "x_label": "seconds since first sample" if timed else "sample",
            "series": series, "samples": len(rows)}


def series_value(series: dict[str, Any], value: Any) -> str:
    """A series figure as its table shows it: a fraction (KV usage) in per cent, a count as a count."""
    n = _num(value)
    if n is None:
        return "—"
    if series.get("axis") == "y2":
        return f"{n * 100:.1f} %"
    return f"{n:,.0f}" if float(n).is_integer() else f"{n:,.2f}"


def runtime_facts(runtime: Any) -> list[tuple[str, str]]:
    """Scalar facts next to the series (peaks, counts), as (name, value) text pairs."""
    rt = _as_dict(runtime)
    if not isinstance(rt, dict):
        return []
    return serving_facts(_flatten({k: v for k, v in rt.items() if k != "timeline"}))


def _tokens_range(low: Any, high: Any) -> str:
    if low is None:
        return "—"
    return fmt_int(low) if high in (None, low) else f"{fmt_int(low)} – {fmt_int(high)}"


def _scenario_row(sc: dict[str, Any], requested: bool) -> dict[str, Any]:
    conc, ctx = sc.get("concurrency_at_context"), sc.get("context_tokens")
    node = sc.get("node_kv_tokens_low")
    return {"flags": " ".join(map(str, sc.get("flags") or [])) or str(sc.get("label") or "(as logged)"),
            "tokens": _tokens_range(sc.get("kv_tokens_low", sc.get("kv_tokens")), sc.get("kv_tokens_high")),
            "node": _tokens_range(node, sc.get("node_kv_tokens_high")) if node not in (None, sc.get("kv_tokens_low")) else "",
            "concurrency": f"{conc:.2f} @ {fmt_int(ctx)}" if isinstance(conc, (int, float)) and ctx else "—",
            "reserve": fmt_gib(_num(sc.get("reserve_left_gib"))), "risk": str(sc.get("risk") or "—"),
            "risk_words": str(sc.get("risk_words") or ""), "approximate": bool(sc.get("approximate")),
            "notes": [str(n) for n in sc.get("notes") or []], "requested": requested}


def prediction_view(pred: Any) -> dict[str, Any] | None:
    """The ``whatif`` prediction as a scenario table, or None when it has another shape."""
    if not isinstance(pred, dict) or not isinstance(pred.get("baseline"), dict):
        return None
    cal = pred.get("calibration") if isinstance(pred.get("calibration"), dict) else {}
    rows = [_scenario_row(pred["baseline"], False)]
    if isinstance(pred.get("requested"), dict):
        rows.append(_scenario_row(pred["requested"], True))
    rows += [_scenario_row(sc, False) for sc in pred.get("table") or [] if isinstance(sc, dict)]
    summary = []
    if cal.get("kv_tokens") is not None and cal.get("bytes_per_token"):
        summary.append(f"calibrated on {fmt_int(cal['kv_tokens'])} tokens × {fmt_int(cal['bytes_per_token'])} B per token")
    if cal.get("mem_fraction_static") is not None:
        summary.append(f"mem_fraction_static {cal['mem_fraction_static']}")
    if pred.get("tokens_per_0_01_mfs") is not None:
        summary.append(f"+0.01 mem_fraction_static = +{fmt_int(pred['tokens_per_0_01_mfs'])} tokens")
    return {"summary": "; ".join(summary), "notes": [str(n) for n in cal.get("notes") or []], "rows": rows,
            "startup": pred.get("startup_index")}


def generic_table(obj: Any) -> dict[str, Any]:
    """Any JSON-like value as a table: a list of dicts becomes rows × columns, a dict key → value."""
    if isinstance(obj, list) and obj and all(isinstance(r, dict) for r in obj):
        cols: list[str] = []
        for r in obj:
            cols += [str(k) for k in r if str(k) not in cols]
        return {"columns": cols, "rows": [[_cell(r.get(c)) for c in cols] for r in obj[:500]]}
    if isinstance(obj, dict):
        return {"columns": ["key", "value"], "rows": [[k, _cell(v)] for k, v in _flatten(obj)]}
    return {"columns": ["value"], "rows": [[_cell(obj)]]}


def _flatten(d: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out += _flatten(v, name + ".")
        else:
            out.append((name, v))
    return out[:500]


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    if isinstance(v, (list, tuple)):
        return ", ".join(_cell(x) for x in v[:50])
    return "—" if v is None else str(v)


def evidence_lines(s: Startup) -> list[dict[str, Any]]:
    """The log lines behind the figures, each with the figures it supports, in file/line order."""
    uses: dict[tuple[str, int], list[str]] = {}

    def use(ref: SourceRef | None, what: str) -> None:
        if ref is not None:
            uses.setdefault((ref.file, ref.line_no), []).append(what)

    for r in s.ranks:
        for key, ref in r.sources.items():
            use(ref, f"{r.rank} {FIELD_LABELS.get(key, key)}")
        for p in r.kv_pools:
            use(p.source, f"{r.rank} KV pool {p.name}")
    if s.failure is not None:
        use(s.failure.source, "failure")
    seen: dict[tuple[str, int], dict[str, Any]] = {}
    refs = list(s.evidence) + ([s.failure.source] if s.failure and s.failure.source else [])
    for ref in refs:
        key = (ref.file, ref.line_no)
        if key not in seen:
            seen[key] = {"file": ref.file, "line": ref.line_no, "text": ref.text, "uses": uses.get(key, [])}
    return sorted(seen.values(), key=lambda e: (e["file"], e["line"]))


def _rank_row(r: Rank) -> dict[str, Any]:
    cells = [{"value": fmt_gib(getattr(r, key)), "mark": mark(r, key)} for key in RANK_COLUMNS]
    pools = [{"name": p.name, "gib": fmt_gib(p.size_gib()), "tokens": fmt_int(p.tokens) if p.tokens else "",
              "dtype": p.dtype or ""} for p in r.kv_pools]
    return {"rank": r.rank, "cells": cells, "pools": pools}


NOT_CAPACITY_FIGURES = frozenset({"derived", "assumed"})


RANK_HEADERS = ("free before weights", "weights", "free after weights", "KV pools", "free after pool", "CUDA graphs",
                "free at ready")


def _plain_cells(r: Rank) -> list[str]:
    row = _rank_row(r)
    figures = [c["value"] + c["mark"] for c in row["cells"]]
    pools = ", ".join(f"{p['name']} {p['gib']}" + (f" ({p['tokens']} tok)" if p["tokens"] else "") for p in row["pools"])
    return figures[:3] + [pools or "—"] + figures[3:]


def _rank_rows(s: Startup) -> dict[str, Any]:
    """The rank table's rows, identical consecutive ranks as one (render/ranks.py), and how the others differ."""
    found = rank_groups(s.ranks, _plain_cells)
    rows = [{**_rank_row(g.ranks[0]), "rank": g.label} for g in found]
    return {"ranks": rows, "rank_differences": differences(found, RANK_HEADERS)}


def capacity_rows(s: Startup) -> list[tuple[str, str]]:
    out = []
    for key in CAPACITY_FIELDS:
        value = getattr(s.capacity, key)
        if value is not None:
            out.append((capacity_label(key), _cell(value)))
    facts = CapacityFacts(s.capacity)
    # a figure, not bookkeeping: which fields were derived is marked elsewhere; a list of pools has its own table
    out += [(capacity_label(str(k)), _cell(v)) for k, v in ((k, facts.get(k)) for k in facts.names())
            if v is not None and k not in NOT_CAPACITY_FIGURES
            and not (isinstance(v, dict) or (isinstance(v, (list, tuple)) and any(isinstance(x, (dict, list)) for x in v)))]
    return out


def settings_rows(s: Startup) -> list[tuple[str, str, str]]:
    rows = [(setting_label(str(k)), _cell(v), "logged") for k, v in s.settings.items() if v is not None]
    rows += [(setting_label(str(k)), _cell(v), "assumed") for k, v in s.assumptions.items()
             if not str(k).startswith("_") and k not in s.settings and v is not None]
    return rows


def finding_views(s: Startup) -> list[dict[str, Any]]:
    out = []
    for f in s.findings:
        sug = None
        if f.suggestion is not None:
            g = f.suggestion
            sug = {"flag": g.flag, "from": _cell(g.from_value), "to": _cell(g.to_value),
                   "command": f"{g.flag} {g.to_value}" if not isinstance(g.to_value, bool) else
                   (g.flag if g.to_value else f"(remove {g.flag})"),
                   "tokens_after": fmt_int(g.kv_tokens_after) if g.kv_tokens_after else "", "note": g.note}
        out.append({"code": f.code, "severity": f.severity, "title": f.title, "detail": f.detail, "suggestion": sug})
    return out


def _chart_memory(s: Startup) -> dict[str, Any]:
    ranks = s.ranks[:MAX_CHART_RANKS]
    per_rank = [{seg["key"]: seg for seg in memory_segments(s, r)} for r in ranks]
    datasets = []
    for key, label, colour, what in SEGMENTS:
        values = [pr[key]["gib"] if key in pr else None for pr in per_rank]
        if any(v for v in values):
            datasets.append({"key": key, "label": label, "colour": colour, "what": what, "values": values,
                             "notes": [pr[key]["note"] if key in pr else "" for pr in per_rank]})
    return {"labels": [r.rank for r in ranks], "datasets": datasets}


def kv_view(s: Startup, curve: dict[str, Any] | None) -> dict[str, Any]:
    ref = s.reference_rank
    rec = s.reconciliation
    bpt, bpt_how = bytes_per_token(s)
    view: dict[str, Any] = {"tokens": fmt_int(s.capacity.kv_tokens), "bytes_per_token": fmt_int(bpt),
                            "bytes_per_token_how": bpt_how, "pools": [], "architecture": [], "rank": ref.rank if ref else ""}
    if ref is not None:
        view["pools"] = [{"name": p.name, "tokens": fmt_int(p.tokens), "gib": fmt_gib(p.size_gib()),
                          "k": fmt_gib(p.k_gib) if p.k_gib is not None else "", "v": fmt_gib(p.v_gib) if p.v_gib is not None else "",
                          "dtype": p.dtype or ""} for p in ref.kv_pools]
    if rec is not None:
        view["reconciliation"] = {
            "verdict": {True: "reconciles", False: "does not reconcile", None: "not checked"}[rec.consistent],
            "ok": rec.consistent, "method": rec.method, "detail": rec.detail,
            "range": f"{fmt_int(rec.kv_tokens_low)} – {fmt_int(rec.kv_tokens_high)}" if rec.kv_tokens_low is not None else ""}
        view["architecture"] = [(str(k), _cell(v)) for k, v in rec.architecture.items()]
    if curve is not None:
        view["per_step"] = fmt_int(curve["tokens_per_step"])
        view["basis"] = f"{curve['basis_gib']:.2f}"
        view["basis_name"] = curve["basis_name"]
        view["knob"] = curve["knob"]
    return view


def startup_view(s: Startup, index: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(what the template shows, what the charts draw) for one startup."""
    curve = whatif_curve(s)
    runtime = runtime_series(s.runtime)
    ref = s.reference_rank
    view = {
        "index": index, "engine": s.engine, "version": s.engine_version or "", "era": s.era or "",
        "file": s.file, "first_line": s.first_line, "last_line": s.last_line, "model": s.model or "",
        "capacity": capacity_rows(s), "settings": settings_rows(s),
        **(_rank_rows(s) if any(r.has_figures() for r in s.ranks) else {"ranks": [], "rank_differences": []}),
        "serving_only": s.runtime is not None and not any(r.has_figures() for r in s.ranks),
        "marks": [{"mark": sym, "meaning": meaning} for sym, meaning in mark_legend(s)],
        "ledger": ([{"item": row.item, "gib": fmt_gib(row.gib), "how": row.how, "note": row.note} for row in ref.ledger]
                   if ref is not None else []),
        "ledger_rank": ref.rank if ref is not None else "",
        "derivation": str(RankFacts(ref).derivation or "") if ref is not None else "",
        "failure": ({"kind": s.failure.kind, "message": s.failure.message,
                     "line": s.failure.source.line_no if s.failure.source else None} if s.failure else None),
        "kv": kv_view(s, curve), "curve": curve, "whatif": whatif_rows(curve) if curve else [], "pinned": pinned_kv(s),
        "runtime": runtime, "runtime_facts": runtime_facts(s.runtime) if s.runtime is not None else [],
        "findings": finding_views(s), "evidence": evidence_lines(s), "answer": answer_lines(s),
        "warnings": [_cell(w.get("message") or w) for w in s.warnings],
    }
    chart = {"memory": _chart_memory(s), "whatif": curve, "runtime": runtime}
    view["segments"] = [seg for seg in SEGMENTS if any(d["key"] == seg[0] for d in chart["memory"]["datasets"])]
    return view, chart


@cache
def _asset(name: str) -> str:
    return resources.files("kvscope.render").joinpath("templates", name).read_text(encoding="utf-8")


def _inline(name: str, closing: str) -> Markup:
    """A packaged script/style for inlining; refuses one that could close its own tag early."""
    text = _asset(name)
    if closing in text.lower():
        raise ValueError(f"{name} contains {closing!r} and cannot be inlined")
    return Markup(text)


def _css() -> Markup:
    """The stylesheet plus one swatch rule per ledger part (colours live in SEGMENTS only)."""
    swatches = "".join(f".sw-{key}{{background:{colour}}}" for key, _, colour, _ in SEGMENTS)
    return Markup(_inline("report.css", "</style") + swatches + "\n")


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


@cache
def _template() -> Template:
    """The report template, compiled once per process (compiling costs more than rendering)."""
    return _environment().from_string(_asset("report.html.j2"))


@lru_cache(maxsize=1)
def _environment() -> Environment:
    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True), trim_blocks=True,
                      lstrip_blocks=True, keep_trailing_newline=False)
    env.filters["gib"] = fmt_gib
    env.filters["int"] = fmt_int
    return env


def _use_calibrated_curve(pred: Any, predicted: dict[str, Any] | None, views: list[dict[str, Any]],
                          charts: list[dict[str, Any]]) -> None:
    """A whatif prediction's calibrated curve replaces the estimate of the startup it was made for."""
    curve = curve_from_prediction(pred)
    index = predicted.get("startup") if predicted else None
    if curve is None or not isinstance(index, int) or not 0 <= index < len(views):
        return
    views[index]["curve"], views[index]["whatif"] = curve, whatif_rows(curve)
    views[index]["kv"].update(per_step=fmt_int(curve["tokens_per_step"]), basis=f"{curve['basis_gib']:.2f}",
                              basis_name=curve["basis_name"], knob=curve["knob"])
    charts[index]["whatif"] = curve


def render(analysis: Any, extra: dict[str, Any] | None = None) -> str:
    views, charts = [], []
    for i, s in enumerate(analysis.startups, 1):
        view, chart = startup_view(s, i)
        views.append(view)
        charts.append(chart)
    extra = dict(extra or {})
    report = extra.pop("report", None)
    prediction = extra.pop("prediction", None)
    predicted = prediction_view(prediction)
    _use_calibrated_curve(prediction, predicted, views, charts)
    css, chartjs, appjs = _css(), _inline(CHARTJS_FILE, "</script"), _inline("report.js", "</script")
    csp = ("default-src 'none'; "
           f"script-src {_sha256(chartjs)} {_sha256(appjs)}; style-src {_sha256(css)}; "
           "img-src data:; font-src data:; base-uri 'none'; form-action 'none'")
    st = analysis.stats
    template = _template()
    if report is not None and isinstance(predicted, dict) and isinstance(predicted.get("startup"), int) \
            and 0 <= predicted["startup"] < len(views):
        views[predicted["startup"]]["curve"] = None  # the prediction above draws this startup's what-if
        views[predicted["startup"]]["whatif"] = []
    heading, lede = (("kvscope plan", "Predicted from the model and the GPU; no log read.") if report is not None
                     and report.kind == "plan" else
                     ("kvscope what-if", "A prediction calibrated on the server's own log; the startup it was calibrated "
                      "on follows.") if report is not None else
                     ("kvscope report", "Where each GPU's memory went at startup, read from the server's own log."))
    return template.render(
        heading=heading, lede=lede, report=report,
        startups=views, data=_clean({"startups": charts, **({"prediction": report.charts()} if report is not None else {})}), css=css, chartjs=chartjs, appjs=appjs, csp=csp,
        version=__version__, chartjs_version=CHARTJS_VERSION, chartjs_license=_asset("chart.js.LICENSE.md"),
        prediction=predicted, prediction_table=generic_table(prediction) if prediction and not predicted else None,
        extras=[(str(k), generic_table(v)) for k, v in extra.items()],
        stats={"files": st.files, "bytes": st.bytes_read, "lines": st.lines, "overlong": st.overlong_lines,
               "warnings": list(st.warnings)},
    )
