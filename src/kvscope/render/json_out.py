"""``--format json``: exactly the contract in docs/json-contract.md, plus additive keys.

Contract keys are built explicitly (not dumped from the dataclasses) so an internal rename can
never change the public interface.
"""

from __future__ import annotations

import json
import math
from typing import Any

from kvscope import __version__
from kvscope.api import Analysis
from kvscope.core.startup import CAPACITY_FIELDS, RANK_FIELDS, KvPool, Rank, Startup

SCHEMA = "kvscope.explain/1"
SETTING_KEYS = ("mem_fraction_static", "tp_size", "kv_cache_dtype", "gpu_memory_utilization", "max_model_len")


def _clean(value: Any) -> Any:
    """JSON-safe: no NaN/inf (invalid JSON), no arbitrary objects."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


def _pool(p: KvPool) -> dict[str, Any]:
    return {"name": p.name, "tokens": p.tokens, "gib": p.size_gib() if p.gib is None and p.k_gib is not None else p.gib,
            "k_gib": p.k_gib, "v_gib": p.v_gib, "dtype": p.dtype}


def _rank(r: Rank) -> dict[str, Any]:
    out: dict[str, Any] = {"rank": r.rank}
    for key in RANK_FIELDS:
        if key == "avail_after_pool_gib":
            out["kv_pools"] = [_pool(p) for p in r.kv_pools]
        out[key] = getattr(r, key)
    out["derived"] = list(r.derived)
    out["ledger"] = [{"item": row.item, "gib": row.gib, "how": row.how, "note": row.note} for row in r.ledger]
    out["extras"] = r.extras
    return out


def _settings(s: Startup) -> dict[str, Any]:
    out = {key: s.settings.get(key) for key in SETTING_KEYS}
    if out["tp_size"] is None and s.settings.get("tensor_parallel_size") is not None:
        out["tp_size"] = s.settings["tensor_parallel_size"]
    out.update({k: v for k, v in s.settings.items() if k not in out})
    return out


def startup_dict(s: Startup) -> dict[str, Any]:
    cap = {key: getattr(s.capacity, key) for key in CAPACITY_FIELDS}
    cap["extras"] = s.capacity.extras
    rec = None
    if s.reconciliation is not None:
        r = s.reconciliation
        rec = {"bytes_per_token": r.bytes_per_token, "kv_tokens_low": r.kv_tokens_low, "kv_tokens_high": r.kv_tokens_high,
               "consistent": r.consistent, "method": r.method, "detail": r.detail, "architecture": r.architecture}
    findings = [{"code": f.code, "severity": f.severity, "title": f.title, "detail": f.detail,
                 "suggestion": _suggestion(f.suggestion)} for f in s.findings]
    failure = None
    if s.failure is not None:
        failure = {"kind": s.failure.kind, "message": s.failure.message,
                   "line": s.failure.source.line_no if s.failure.source else None, **s.failure.data}
    out = {
        "engine": s.engine,
        "engine_version": s.engine_version,
        "era": s.era,
        "source": {"file": s.file, "first_line": s.first_line, "last_line": s.last_line},
        "model": s.model,
        "settings": _settings(s),
        "assumptions": {k: v for k, v in s.assumptions.items() if not k.startswith("_")},
        "ranks": [_rank(r) for r in s.ranks],
        "capacity": cap,
        "reconciliation": rec,
        "findings": findings,
        "failure": failure,
        "warnings": s.warnings,
    }
    if s.answer is not None:
        a = s.answer
        out["answer"] = {"situation": a.situation, "cause": a.cause, "suggestion": _suggestion(a.suggestion, nested=False),
                         "alternatives": [_suggestion(x, nested=False) for x in a.alternatives],
                         "confidence": a.confidence, "missing": a.missing}
    if s.runtime is not None:
        out["runtime"] = s.runtime if isinstance(s.runtime, dict) else getattr(s.runtime, "as_dict", lambda: None)()
    return out


def _suggestion(sug: Any, nested: bool = True) -> dict[str, Any] | None:
    """A suggestion as the contract has it; ``alternatives`` (additive) only where there are some."""
    if sug is None:
        return None
    out = {"flag": sug.flag, "from": sug.from_value, "to": sug.to_value, "kv_tokens_after": sug.kv_tokens_after,
           "note": sug.note}
    if nested and sug.alternatives:
        out["alternatives"] = [_suggestion(a, nested=False) for a in sug.alternatives]
    return out


def to_dict(analysis: Analysis, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "kvscope_version": __version__,
        "startups": [startup_dict(s) for s in analysis.startups],
        "input": {"files": analysis.stats.files, "bytes": analysis.stats.bytes_read, "lines": analysis.stats.lines,
                  "overlong_lines_skipped": analysis.stats.overlong_lines, "warnings": analysis.stats.warnings},
    }
    if extra:
        doc.update(extra)
    return _clean(doc)


def render(analysis: Analysis, extra: dict[str, Any] | None = None) -> str:
    return dumps(to_dict(analysis, extra))


_SCALARS = (str, int, float, bool, type(None))
_compact = json.JSONEncoder(ensure_ascii=False, separators=(", ", ": ")).encode  # C-accelerated (no indent)


def _leaf(items: list[Any]) -> bool:
    """A list of scalars, or of lists of scalars: the runtime series and their points."""
    return all(isinstance(v, _SCALARS) or (isinstance(v, list) and all(isinstance(x, _SCALARS) for x in v))
               for v in items)


def dumps(doc: Any, indent: str = "") -> str:
    """``json.dumps(doc, indent=2, ensure_ascii=False)``, except that a list of scalars (or of lists
    of scalars) stays on one line: a runtime series of 2,000 points is one line to scroll past,
    not 6,000, and it is encoded by json's C encoder (``indent`` makes json use its pure-Python one,
    a tenth of a second on a large report). The same values, parsed back, as json.dumps gives."""
    if isinstance(doc, dict):
        if not doc:
            return "{}"
        inner = indent + "  "
        body = ",\n".join(f"{inner}{_compact(str(k))}: {dumps(v, inner)}" for k, v in doc.items())
        return "{\n" + body + "\n" + indent + "}"
    if isinstance(doc, (list, tuple)):
        if not doc or _leaf(doc):
            return _compact(list(doc))
        inner = indent + "  "
        return "[\n" + ",\n".join(inner + dumps(v, inner) for v in doc) + "\n" + indent + "]"
    return _compact(doc)
