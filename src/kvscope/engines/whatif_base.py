"""What every engine's ``whatif`` shares: the prediction's shape, the error it raises, how changed
settings are spelled, and the reserve-risk words."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvscope.core.margins import reserve_margin_gib


class PredictionError(ValueError):
    """The log lacks what a calibrated prediction needs; the message says what."""


@dataclass
class Scenario:
    label: str
    changes: dict[str, Any]
    kv_tokens_low: int
    kv_tokens_high: int
    node_kv_tokens_low: int
    node_kv_tokens_high: int
    context_tokens: int | None
    concurrency_at_context: float | None
    reserve_left_gib: float | None
    reserve_basis: str
    risk: str
    risk_words: str
    flags: list[str]
    notes: list[str] = field(default_factory=list)
    host: dict[str, Any] | None = None
    approximate: bool = False

    @property
    def kv_tokens(self) -> int:
        return (self.kv_tokens_low + self.kv_tokens_high) // 2

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["kv_tokens"] = self.kv_tokens
        return out


def normalise_changes(changes: dict[str, Any], supported: set[str], aliases: dict[str, str],
                      engine: str) -> dict[str, Any]:
    """--set keys in the engine's own option names; an unknown key is a usage error, not a silent no-op."""
    out = {}
    for key, value in changes.items():
        key = aliases.get(key, key)
        if key not in supported:
            raise PredictionError(f"--set {key}: not a{'n' if engine[0] in 'AEIOU' else ''} {engine} setting kvscope "
                                  f"can predict (known: {', '.join(sorted(supported))})")
        out[key] = value
    return out


def _truthy(v: Any) -> bool:
    return v in (True, 1) or str(v).lower() in ("true", "1", "yes", "on")


def _risk(reserve: float | None, pre: float) -> tuple[str, str]:
    margin = reserve_margin_gib(pre)
    if reserve is None:
        return "unknown", "the log does not show what CUDA graphs and activations need; compare with a run that logs them"
    if reserve >= margin:
        return "low", f"{reserve:.2f} GiB stays free at ready (≥ {margin:.1f} GiB margin)"
    if reserve >= 0.5:
        return "tight", f"only {reserve:.2f} GiB free at ready (< {margin:.1f} GiB): long prefills may OOM"
    return "high", f"{reserve:.2f} GiB free at ready: expect CUDA OOM at graph capture or under load"


def assemble_prediction(engine: str, cal: Any, predict_one: Any, scenarios: list[dict[str, Any]],
                        changes: dict[str, Any], step: tuple[str, int | None], curve: tuple[str, list]) -> dict[str, Any]:
    """The prediction object every engine's whatif returns: calibration, as logged, requested, table, curve."""
    requested = predict_one(changes, None) if changes else None
    return {
        "engine": engine,
        "calibration": cal.as_dict(),
        step[0]: step[1],
        "baseline": predict_one({}, "as logged").as_dict(),
        "requested": requested.as_dict() if requested else None,
        "table": [predict_one(ch, None).as_dict() for ch in scenarios],
        curve[0]: curve[1],
    }
