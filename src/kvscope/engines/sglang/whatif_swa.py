"""SGLang's ``swa_full_tokens_ratio`` on a sliding-window hybrid (gpt-oss, Gemma 3/4, MiMo): how the same memory
splits between the full-attention pool and the sliding-window pool.

SGLang sizes the two pools of a hybrid together (ModelRunner's hybrid token count): one budget M, a full
token costing ``f`` bytes (its full-attention layers) and a sliding-window token ``w`` bytes (its window
layers), and ``swa = ratio × full``, so

    full = M / (f + ratio × w),   swa = ratio × full.

The log's two pool lines give f and w (each pool's bytes ÷ its tokens) and M (their sum), so another ratio
is the same memory re-split: more sliding-window tokens mean fewer full ones. A count is always said with
its pool: ``max_total_num_tokens`` is the full pool's. GiB = 2^30 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvscope.core.startup import GIB, Startup, finite_number
from kvscope.engines.whatif_base import PredictionError, Scenario

DEFAULT_RATIO = 0.8  # SGLang's swa_full_tokens_ratio when the operator left it


@dataclass
class HybridCalibration:
    full_tokens: int
    full_gib: float
    swa_tokens: int
    swa_gib: float
    page: int
    context_len: int | None
    notes: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.swa_tokens / self.full_tokens

    @property
    def full_bytes(self) -> float:
        return self.full_gib * GIB / self.full_tokens

    @property
    def swa_bytes(self) -> float:
        return self.swa_gib * GIB / self.swa_tokens

    def as_dict(self) -> dict[str, Any]:
        return {"kv_tokens": self.full_tokens, "full_tokens": self.full_tokens, "swa_tokens": self.swa_tokens,
                "bytes_per_full_token": round(self.full_bytes), "bytes_per_swa_token": round(self.swa_bytes),
                "swa_full_tokens_ratio": round(self.ratio, 4), "page_size": self.page, "notes": self.notes}


def calibrate(s: Startup) -> HybridCalibration | None:
    """The two pools of a sliding-window hybrid, or None when the log does not show both with their tokens."""
    ref = s.reference_rank
    if ref is None:
        return None
    full, swa = ref.pool("target"), ref.pool("swa")
    if full is None or swa is None or not full.tokens or not swa.tokens or not full.size_gib() or not swa.size_gib():
        return None
    page = int(finite_number(s.setting("page_size")) or 1)
    cal = HybridCalibration(full.tokens, float(full.size_gib()), swa.tokens, float(swa.size_gib()), page,  # type: ignore[arg-type]
                            s.capacity.context_len)
    logged = finite_number(s.setting("swa_full_tokens_ratio"))
    if logged is not None and abs(logged - cal.ratio) > 0.01:
        cal.notes.append(f"the pools' tokens give a ratio of {cal.ratio:.3f}, the log's setting {logged}")
    cal.notes.append("pool bytes per token from the printed GiB ÷ tokens (rounded to 0.01 GiB)")
    return cal


def predict(cal: HybridCalibration, ratio: Any, label: str | None = None) -> Scenario:
    r = finite_number(ratio)
    if r is None or not 0 < r <= 1:
        raise PredictionError(f"swa_full_tokens_ratio must be in (0, 1], got {ratio!r}")
    budget = cal.full_gib * GIB + cal.swa_gib * GIB
    full = int(budget / (cal.full_bytes + r * cal.swa_bytes)) // cal.page * cal.page
    swa = int(full * r) // cal.page * cal.page
    spread = max(cal.page, round(0.005 * GIB / cal.full_bytes))  # the printed GiB's rounding, in full tokens
    ctx = cal.context_len
    notes = [f"full-attention pool {cal.full_tokens:,} → {full:,} tokens; sliding-window pool {cal.swa_tokens:,} → "
             f"{swa:,} tokens (the same {budget / GIB:.2f} GiB re-split)"]
    if ctx and full < ctx:
        notes.append(f"one request of the full context ({ctx:,}) no longer fits the full-attention pool")
    return Scenario(label=label or f"swa_full_tokens_ratio={r:g}", changes={"swa_full_tokens_ratio": r},
                    kv_tokens_low=max(0, full - spread), kv_tokens_high=full + spread,
                    node_kv_tokens_low=max(0, full - spread), node_kv_tokens_high=full + spread, context_tokens=ctx,
                    concurrency_at_context=round(full / ctx, 2) if ctx else None, reserve_left_gib=None,
                    reserve_basis="unchanged (the same memory)", risk="low",
                    risk_words="the ratio re-splits the same memory: nothing more is allocated",
                    flags=[f"--swa-full-tokens-ratio {r:g}"], notes=notes)


def build_prediction(startup: Startup, ratio: Any) -> dict[str, Any]:
    cal = calibrate(startup)
    if cal is None:
        raise PredictionError("swa_full_tokens_ratio needs a sliding-window hybrid's two pool lines (full and swa, "
                              "with their tokens and GiB)")
    as_logged = predict(cal, cal.ratio, "as logged")
    as_logged.kv_tokens_low = as_logged.kv_tokens_high = cal.full_tokens
    as_logged.node_kv_tokens_low = as_logged.node_kv_tokens_high = cal.full_tokens
    as_logged.flags, as_logged.changes, as_logged.notes = [], {}, []
    table = [predict(cal, r).as_dict() for r in (0.5, DEFAULT_RATIO, 1.0) if abs(r - cal.ratio) > 0.01]
    return {"engine": "sglang", "calibration": cal.as_dict(), "tokens_per_0_01_mfs": None,
            "baseline": as_logged.as_dict(), "requested": predict(cal, ratio).as_dict(), "table": table, "mfs_curve": []}
