"""What ``whatif`` and ``plan`` show, as one typed view every renderer draws: the answer first, one GPU's
memory as a bar, KV tokens against the memory fraction with the current value and the OOM-risk region,
the "change → tokens → concurrency → reserve" table in words, and what was measured, estimated or assumed.

Why a view: the predictions are JSON-ready dicts (the contract), shaped by each engine; the terminal,
markdown and HTML reports must say the same thing in the same order with the same rounding, and none of
them may print a contract key. The builders below read the dicts once, the renderers only format.
GiB = 2^30 bytes throughout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

from kvscope import engines
from kvscope.core.startup import Startup
from kvscope.engines.base import FractionBasis
from kvscope.render.html import SEGMENTS, fmt_gib, memory_segments
from kvscope.render.labels import setting_label

KNOB_FLAGS = {"mem_fraction_static": "--mem-fraction-static", "gpu_memory_utilization": "--gpu-memory-utilization"}
RISKY = ("tight", "high")
SETTING_FLAG_EXCEPTIONS = {"engine_version": "engine release",
                           "speculative (steps, topk, draft tokens)": "speculative steps, top-k, draft tokens"}
PROVENANCE_WORDS = (("measured_or_reported", "measured or reported"), ("assumed", "assumed"),
                    ("estimated", "estimated"), ("computed", "computed exactly"))


class ReportKind(str, Enum):
    PLAN = "plan"
    WHATIF = "whatif"


@dataclass(frozen=True)
class Segment:
    key: str  # the segment kind (render.html.SEGMENTS): its colour and legend
    label: str
    gib: float
    colour: str
    what: str


@dataclass(frozen=True)
class MemoryBar:
    title: str
    segments: tuple[Segment, ...]

    @property
    def total_gib(self) -> float:
        return sum(s.gib for s in self.segments)

    @property
    def total_text(self) -> str:
        """"95.59 GiB", or "144 MiB" below 1 GiB (fmt_gib carries the MiB unit itself)."""
        shown = fmt_gib(self.total_gib)
        return shown if shown.endswith("MiB") else f"{shown} GiB"


@dataclass(frozen=True)
class CurvePoint:
    x: float
    tokens: int
    reserve_gib: float | None
    risky: bool
    concurrency: float | None = None  # requests of the report's context length at once


@dataclass(frozen=True)
class Curve:
    knob: str  # the engine's setting name, as the operator types it in a config
    flag: str  # as on the command line
    current: float
    points: tuple[CurvePoint, ...]
    risk_from: float | None  # the lowest value rated tight or high; None when nothing rates the risk
    reserve_label: str

    def chart(self) -> dict[str, Any]:
        """The shape report.js's what-if chart draws (the explain report's curve)."""
        return {"knob": self.knob, "current": self.current, "reserve_label": self.reserve_label,
                "risk_from": self.risk_from, "margin_gib": 0.0,
                "risk_words": "rated tight or high" if self.risk_from is not None else "",
                "points": [{"x": p.x, "tokens": p.tokens, "reserve_gib": p.reserve_gib, "concurrency": p.concurrency}
                           for p in self.points]}

    def rows(self, around: int = 3) -> tuple[CurvePoint, ...]:
        """A few points around the current value and the edge of the risk region, for tables."""
        idx = min(range(len(self.points)), key=lambda i: abs(self.points[i].x - self.current))
        keep = set(range(max(0, idx - around), min(len(self.points), idx + around + 1)))
        edge = next((i for i, p in enumerate(self.points) if p.risky), None)
        if edge is not None:
            keep |= {edge, max(0, edge - 1)}
        keep |= {0, len(self.points) - 1}
        return tuple(self.points[i] for i in sorted(keep))


@dataclass(frozen=True)
class Row:
    change: str  # the flags, or "as logged" / "as planned"
    tokens: str
    delta: str  # against the first row
    concurrency: str
    reserve: str
    risk: str
    risk_words: str
    emphasis: bool
    approximate: bool
    notes: tuple[str, ...]


@dataclass(frozen=True)
class LedgerLine:
    item: str
    gib: str
    how: str


@dataclass(frozen=True)
class PredictionReport:
    kind: ReportKind
    title: str
    subtitle: str
    answer: tuple[str, ...]
    bar: MemoryBar | None
    curve: Curve | None
    rows: tuple[Row, ...]
    context_tokens: int | None
    provenance: tuple[tuple[str, tuple[str, ...]], ...]
    settings: tuple[tuple[str, str, str], ...]
    ledger: tuple[LedgerLine, ...]
    formula: str
    warnings: tuple[str, ...]
    footnotes: tuple[str, ...]
    tokens_label: str = "KV tokens per GPU"  # "KV cells" for an engine that sizes its cache in cells

    @property
    def concurrency_header(self) -> str:
        return f"requests of {self.context_tokens:,} tokens at once" if self.context_tokens else "requests at once"

    @property
    def risk_rated(self) -> bool:
        return any(r.risk not in ("—", "unknown", "") for r in self.rows)

    def charts(self) -> dict[str, Any]:
        """What the HTML page draws: one memory bar and the curve."""
        out: dict[str, Any] = {}
        if self.bar is not None:
            out["memory"] = {"labels": [self.bar.title], "datasets": [
                {"key": s.key, "label": s.label, "colour": s.colour, "what": s.what, "values": [round(s.gib, 4)],
                 "notes": [""]} for s in self.bar.segments]}
        if self.curve is not None:
            out["whatif"] = self.curve.chart()
        return out


# ---- formatting shared by the builders -------------------------------------------------------------------

def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _tokens(low: Any, high: Any = None) -> str:
    if not isinstance(low, int):
        return "—"
    return f"{low:,}" if high in (None, low) else f"{low:,} – {high:,}"


def _mid(sc: dict[str, Any]) -> int | None:
    v = sc.get("kv_tokens")
    if isinstance(v, int):
        return v
    lo, hi = sc.get("kv_tokens_low"), sc.get("kv_tokens_high")
    return (lo + hi) // 2 if isinstance(lo, int) and isinstance(hi, int) else lo if isinstance(lo, int) else None


def _delta(tokens: int | None, base: int | None) -> str:
    if tokens is None or base is None or tokens == base:
        return ""
    pct = f", {(tokens - base) / base:+.0%}" if base else ""
    return f"{tokens - base:+,}{pct}"


def _conc(value: Any, context: Any, common: Any = None) -> str:
    """Requests at once; "× context" only where a row's context differs from the table's."""
    n = _num(value)
    if n is None:
        return "—"
    shown = f"{n:.2f}" if not float(n).is_integer() else f"{int(n):,}"
    return f"{shown} × {context:,}" if isinstance(context, int) and context != common else shown


def _reserve(value: Any) -> str:
    n = _num(value)
    return "—" if n is None else (fmt_gib(n) if n >= 0 else f"{fmt_gib(n)} (over)")


def flag_of(key: str) -> str:
    """A setting as typed on the command line: ``gpu_memory_utilization`` → ``--gpu-memory-utilization``."""
    return SETTING_FLAG_EXCEPTIONS.get(key) or KNOB_FLAGS.get(key) or "--" + key.replace("_", "-")


def _segments(parts: list[tuple[str, str, float]]) -> tuple[Segment, ...]:
    info = {key: (colour, what) for key, _label, colour, what in SEGMENTS}
    return tuple(Segment(key, label, gib, *info.get(key, ("#95a5a6", label))) for key, label, gib in parts if gib > 0)


def _curve(points: list[dict[str, Any]], knob: str, current: Any, reserve_label: str) -> Curve | None:
    rows = [p for p in points if isinstance(p, dict) and _num(p.get(knob)) is not None and isinstance(p.get("kv_tokens"), int)]
    cur = _num(current)
    if len(rows) < 2 or cur is None:
        return None
    pts = tuple(CurvePoint(float(p[knob]), int(p["kv_tokens"]), _num(p.get("reserve_left_gib")),
                           str(p.get("risk")) in RISKY, _num(p.get("concurrency_at_context"))) for p in rows)
    risk_from = next((p.x for p in pts if p.risky), None)
    return Curve(knob, flag_of(knob), cur, pts, risk_from, reserve_label)


# ---- plan ------------------------------------------------------------------------------------------------

def from_plan(pred: dict[str, Any]) -> PredictionReport:
    cap, par, kv = pred["capacity"], pred["parallel"], pred.get("kv") or {}
    eng = engines.get(pred["engine"])
    mem = eng.knobs.memory
    knob = mem.setting if mem is not None else ""
    of_device = mem is not None and mem.basis is FractionBasis.DEVICE_TOTAL
    current = (pred["settings"].get(knob) or {}).get("value")
    layout = f"TP{par['tp']}" + "".join(f" {k.upper()}{par[k]}" for k in ("dp", "pp", "ep") if par.get(k, 1) > 1)
    engine = eng.label
    title = f"Plan: {pred['model']['name']} on {pred['gpu']['gpu']}, {layout}"
    subtitle = f"{engine} {pred['engine_version']} ({pred['era']}) · predicted from the model and the GPU; no log read"
    rows_in = [r for r in pred.get("table") or [] if isinstance(r, dict)]
    planned = next((r for r in rows_in if r.get("flag") == "(as planned)"), rows_in[0] if rows_in else None)
    reserve = planned.get("reserve_left_gib") if planned else None
    answer = [_plan_answer(pred, engine, knob, current)]
    if reserve is not None:
        where = f"outside {engine}'s budget (device total × {knob})" if of_device else \
            f"in {engine}'s reserve (1 − {knob}) for CUDA graphs and activations"
        answer.append(f"{_reserve(reserve)} GiB per GPU stays {where}.")
    answer += [w for w in pred.get("warnings") or [] if _decisive(w)][:2]
    base = planned.get("kv_tokens") if planned else None
    rows = []
    for r in rows_in:
        emphasis = r is planned
        rows.append(Row("as planned" if emphasis else str(r.get("flag")), _tokens(r.get("kv_tokens")),
                        _delta(r.get("kv_tokens"), base), _conc(r.get("concurrency_at_context"), cap.get("context_tokens"), cap.get("context_tokens")),
                        _reserve(r.get("reserve_left_gib")), str(r.get("oom_risk") or "—"), "", emphasis, False, ()))
    rows.sort(key=lambda r: not r.emphasis)
    bar_parts = [(str(p["part"]), str(p["label"]), float(p["gib"])) for p in pred.get("memory_bar") or []]
    bar = MemoryBar("per GPU, as planned", _segments(bar_parts)) if bar_parts else None
    reserve_label = "left outside the budget (GiB)" if of_device else "reserve left (GiB)"
    curve = _curve(pred.get("curve") or [], knob, current, reserve_label)
    prov = pred.get("measured_vs_estimated") or {}
    provenance = tuple((words, tuple(prov[key])) for key, words in PROVENANCE_WORDS if prov.get(key))
    settings = tuple((flag_of(k), _value(v.get("value")), str(v.get("from") or "")) for k, v in pred["settings"].items())
    ledger = tuple(LedgerLine(str(r["item"]), _signed(r["gib"]), str(r["how"])) for r in pred.get("ledger") or [])
    if any(str(r.get("oom_risk") or "—") not in ("—", "unknown") for r in rows_in):
        notes = (f"OOM risk compares what the plan leaves with {engine}'s own reserve estimate: 'tight' or 'high' "
                 "may run out of memory under load.",)
    else:
        notes = (f"{engine} does not rate this reserve; a negative one means the budget asks for more than the GPU "
                 "has free.",)
    return PredictionReport(ReportKind.PLAN, title, subtitle, tuple(answer), bar, curve, tuple(rows),
                            cap.get("context_tokens"), provenance, settings, ledger,
                            f"KV bytes per token per GPU: {kv['formula']}" if kv.get("formula") else "",
                            tuple(w for w in pred.get("warnings") or [] if w not in answer), notes)


def _plan_answer(pred: dict[str, Any], engine: str, knob: str, current: Any) -> str:
    cap = pred["capacity"]
    lo, hi = cap.get("kv_tokens_range") or (None, None)
    likely = f" (likely {lo:,} – {hi:,})" if isinstance(lo, int) and isinstance(hi, int) and lo != hi else ""
    conc = _num(cap.get("max_concurrency"))
    at = f"; {_conc(conc, None)} requests of {cap['context_tokens']:,} tokens at once" if conc is not None else ""
    setting = f" at {flag_of(knob)} {current}" if current is not None else ""
    return f"{engine}{setting} would hold {cap['kv_tokens']:,} KV tokens per GPU{likely}{at}."


def _decisive(warning: str) -> bool:
    """A warning that changes the answer (the server would not start, a request does not fit)."""
    w = warning.lower()
    return "would refuse" in w or "does not fit" in w or "no kv" in w or "would stop" in w


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v))
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10_000 else str(v)
    return "—" if v is None else str(v)


def _signed(gib: Any) -> str:
    n = _num(gib)
    if n is None:
        return "—"
    return ("−" + fmt_gib(-n)) if n < 0 else fmt_gib(n)


# ---- whatif ----------------------------------------------------------------------------------------------

def from_whatif(pred: dict[str, Any], startup: Startup | None, calibration_line: str) -> PredictionReport:
    base, req = pred["baseline"], pred.get("requested")
    eng = engines.get(pred["engine"])
    knob = eng.knobs.memory.setting if eng.knobs.memory is not None else ""
    cal = pred.get("calibration") or {}
    engine = eng.label
    base_tokens = _mid(base)
    title = "What if: " + (" ".join(req["flags"]) if req else "the usual changes")
    unit = "KV tokens per GPU" if eng.kv_budget is not None else "KV cells"
    model = startup.model if startup is not None else None
    subtitle = f"{engine}{' · ' + model if model else ''} · calibrated on the logged startup"
    answer = _whatif_answer(base, req, base_tokens, unit)
    seen = {tuple(base.get("flags") or ())}
    common = base.get("context_tokens")
    rows = [_scenario(base, base_tokens, "as logged", False, common)]
    if req:
        rows.append(_scenario(req, base_tokens, " ".join(req["flags"]), True, common))
        seen.add(tuple(req["flags"]))
    for sc in pred.get("table") or []:
        if isinstance(sc, dict) and tuple(sc.get("flags") or ()) not in seen:
            seen.add(tuple(sc.get("flags") or ()))
            rows.append(_scenario(sc, base_tokens, " ".join(sc.get("flags") or ()) or str(sc.get("label")), False,
                                  common))
    ref = startup.reference_rank if startup is not None else None
    bar = None
    if ref is not None:
        segs = [(x["key"], x["what"] + (f" ({x['note']})" if x.get("note") else ""), float(x["gib"]))
                for x in memory_segments(startup, ref)]
        bar = MemoryBar(f"{ref.rank}, as logged", _segments(segs)) if segs else None
    points = pred.get("mfs_curve") or pred.get("util_curve") or []
    curve = _curve(points, knob, cal.get(knob), "reserve left at ready (GiB)" if cal.get("free_at_ready_gib") is not None
                   else "reserve left (GiB)")
    provenance = _whatif_provenance(startup, calibration_line, cal)
    footnotes = ["* approximate: the change moves memory the log does not show."] if any(r.approximate for r in rows) else []
    if not any(r.risk not in ("unknown", "—") for r in rows):
        footnotes.append("OOM risk is unknown: the log does not show the memory left at ready.")
    return PredictionReport(ReportKind.WHATIF, title, subtitle, tuple(answer), bar, curve, tuple(rows),
                            base.get("context_tokens"), provenance, (), (), "", (), tuple(footnotes), unit)


def _scenario(sc: dict[str, Any], base_tokens: int | None, change: str, emphasis: bool, common: Any) -> Row:
    node = ""
    if isinstance(sc.get("node_kv_tokens_low"), int) and sc.get("node_kv_tokens_low") != sc.get("kv_tokens_low"):
        node = f"{_tokens(sc['node_kv_tokens_low'], sc.get('node_kv_tokens_high'))} across the node"
    host = sc.get("host") or {}
    notes = tuple(str(n) for n in sc.get("notes") or []) + ((node,) if node else ())
    if host:
        notes += (f"host tier: {host.get('host_tokens_per_rank', 0):,} tokens per rank, {host.get('total_gb')} GB pinned"
                  + (f"; {'fits' if host.get('fits') else 'does NOT fit'} in {host.get('host_ram_gb')} GB of host RAM"
                     if "fits" in host else ""),)
    return Row(change, _tokens(sc.get("kv_tokens_low", sc.get("kv_tokens")), sc.get("kv_tokens_high")),
               _delta(_mid(sc), base_tokens), _conc(sc.get("concurrency_at_context"), sc.get("context_tokens"), common),
               _reserve(sc.get("reserve_left_gib")), str(sc.get("risk") or "—"), str(sc.get("risk_words") or ""),
               emphasis, bool(sc.get("approximate")), notes)


def _whatif_answer(base: dict[str, Any], req: dict[str, Any] | None, base_tokens: int | None,
                   unit: str = "KV tokens per GPU") -> list[str]:
    if not req:
        return [f"As logged: {_tokens(base.get('kv_tokens_low', base.get('kv_tokens')), base.get('kv_tokens_high'))} "
                f"{unit}. No --set given: the table shows what the usual changes would give."]
    tokens = _tokens(req.get("kv_tokens_low", req.get("kv_tokens")), req.get("kv_tokens_high"))
    delta = _delta(_mid(req), base_tokens)
    out = [f"With {' '.join(req['flags'])}: {tokens} {unit}"
           + (f" ({delta} against {base_tokens:,} as logged)." if delta and base_tokens else " (as logged).")]
    ctx = req.get("context_tokens")
    if _num(req.get("concurrency_at_context")) is not None and isinstance(ctx, int):
        now = _num(base.get("concurrency_at_context"))
        n = _conc(req["concurrency_at_context"], None)
        one = n == "1"
        out.append(f"{n} request{'' if one else 's'} of {ctx:,} tokens {'fits' if one else 'fit'} at once"
                   + (f" (now {_conc(now, None)})." if now is not None else "."))
    risk, words = str(req.get("risk") or ""), str(req.get("risk_words") or "")
    if risk and risk != "unknown":
        out.append(f"OOM risk {risk}: {words}." if words else f"OOM risk {risk}.")
    elif words:
        out.append(f"OOM risk unknown: {words}.")
    return out


# facts kvscope adds to what the user assumed (the catalog's reading of --assume gpu=…), not said by them
DERIVED_ASSUMPTIONS = ("gpu_total_gib", "gpu_name")


def _assumed_value(key: Any, v: Any) -> str:
    unit = " GiB" if str(key).endswith("_gib") else " GB" if str(key).endswith("_gb") else ""
    if isinstance(v, float):
        return f"{v:.4g}{unit}"
    return f"{v}{unit}"


def _whatif_provenance(startup: Startup | None, calibration_line: str, cal: dict[str, Any]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    line = re.sub(r"^calibrated on the logged \w+:\s*", "", calibration_line or "", flags=re.I).rstrip(".")
    read = [line] if line else []
    derived = [str(n) for n in cal.get("notes") or []]
    assumed = [f"{setting_label(str(k))} {_assumed_value(k, v)}"
               for k, v in (startup.assumptions if startup is not None else {}).items()
               if not str(k).startswith("_") and v is not None and str(k) not in DERIVED_ASSUMPTIONS]
    out = [("calibrated on the log", tuple(read)), ("derived or estimated", tuple(derived)), ("assumed", tuple(assumed))]
    return tuple((k, v) for k, v in out if v)
