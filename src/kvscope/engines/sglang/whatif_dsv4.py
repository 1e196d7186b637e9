"""``whatif`` for a DeepSeek-V4 startup on SGLang, calibrated on its own sizing line.

V4 prints what its pools cost ("DSV4 memory calculation: bytes_per_full_token=B, available_bytes=A GB,
c128_state_fixed=X GB, full_token=N"); tokens = floor₂₅₆((A − X) / B) (engines.sglang.dsv4). The
budget A moves with mem_fraction_static by F × Δ (F: free memory before weights); the fixed states X
scale with the request slots by their ring rows; B changes only with the sliding-window share, which
needs the model's layer counts. So each prediction is exact up to the rounding of the printed GB:
the token count N pins A − X to one 256-token page, the printed A and X to ±0.005 GiB each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvscope.core.startup import GIB, Startup, finite_number
from kvscope.engines.sglang import dsv4
from kvscope.engines.sglang.facts import SGLangCapacityFacts
from kvscope.engines.whatif_base import PredictionError, Scenario, _risk

SUPPORTED = {"mem_fraction_static", "max_running_requests", "max_total_tokens", "context_length",
             "swa_full_tokens_ratio"}
PRINTED_GIB = 0.005  # the sizing line prints GB with two decimals


@dataclass
class DsV4Calibration:
    tokens: int
    bytes_per_full_token: float
    budget_low: float  # bytes the pools may take (A − X), as the token count and the printed figures bound it
    budget_high: float
    fixed_gib: float
    mfs: float | None
    pre_load_free_gib: float | None
    slots: int | None  # per rank, as the ready line prints them (per DP group under DP attention)
    spec: bool
    context_len: int | None
    free_at_ready_gib: float | None
    model: str | None
    swa_ratio: float | None
    dp_groups: int = 1  # --max-running-requests counts every DP group's slots
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"kv_tokens": self.tokens, "bytes_per_token": round(self.bytes_per_full_token),
                "bytes_per_full_token": self.bytes_per_full_token, "fixed_states_gib": self.fixed_gib,
                "budget_bytes_low": int(self.budget_low), "budget_bytes_high": int(self.budget_high),
                "mem_fraction_static": self.mfs, "pre_load_free_gib": self.pre_load_free_gib,
                "pre_load_free_gib_low": self.pre_load_free_gib or 0.0, "pre_load_free_gib_high": self.pre_load_free_gib or 0.0,
                "max_running_requests": self.slots, "context_len": self.context_len,
                "free_at_ready_gib": self.free_at_ready_gib, "notes": self.notes}


def is_dsv4(s: Startup) -> bool:
    return bool(SGLangCapacityFacts(s.capacity).dsv4_bytes_per_full_token)


def calibrate(s: Startup) -> DsV4Calibration:
    x, ref = SGLangCapacityFacts(s.capacity), s.reference_rank
    bpft, tokens = finite_number(x.dsv4_bytes_per_full_token), s.capacity.kv_tokens
    if not bpft or bpft <= 0 or tokens is None:
        raise PredictionError("the DeepSeek-V4 sizing line lacks bytes_per_full_token or full_token")
    fixed = finite_number(x.dsv4_c128_state_fixed_gib) or 0.0
    avail = finite_number(x.dsv4_available_gib)
    low, high = tokens * bpft, (tokens + dsv4.PAGE) * bpft
    if avail is not None:
        low = max(low, (avail - fixed - 2 * PRINTED_GIB) * GIB)
        high = min(high, (avail - fixed + 2 * PRINTED_GIB) * GIB)
    notes = []
    if high < low:  # a page of tokens and the printed figures disagree: trust the token count
        low, high = tokens * bpft, (tokens + dsv4.PAGE) * bpft
        notes.append("the printed budget and the token count disagree by more than their rounding; the count wins")
    pre = ref.pre_load_free_gib if ref else None
    ratio = None
    swa, full = x.dsv4_swa_tokens, x.dsv4_full_tokens
    if isinstance(swa, int) and isinstance(full, int) and full:
        ratio = swa / full
    from kvscope.engines.sglang.finish import attn_tp_size, model_name, tp_size

    return DsV4Calibration(tokens, bpft, low, high, fixed, s.setting_number("mem_fraction_static"), pre,
                           s.capacity.max_running_requests, bool(s.setting("speculative_algorithm")),
                           s.capacity.context_len, ref.avail_at_ready_gib if ref else None,
                           model_name(s), ratio,
                           max(1, tp_size(s) // attn_tp_size(s)), notes)


def _positive_int(changes: dict[str, Any], key: str) -> int | None:
    if key not in changes:
        return None
    value = finite_number(changes[key])
    if value is None or value < 1:
        raise PredictionError(f"{key} must be a whole number ≥ 1, got {changes[key]!r}")
    return int(value)


def predict(cal: DsV4Calibration, changes: dict[str, Any], context: int | None = None,
            label: str | None = None) -> Scenario:
    unknown = set(changes) - SUPPORTED
    if unknown:
        raise PredictionError(f"whatif on a DeepSeek-V4 startup prices {', '.join(sorted(SUPPORTED))}; "
                              f"not {', '.join(sorted(unknown))}")
    notes: list[str] = []
    delta_gib = 0.0
    if "mem_fraction_static" in changes:
        mfs = finite_number(changes["mem_fraction_static"])
        if mfs is None or not (0 < mfs <= 1):
            raise PredictionError(f"mem_fraction_static must be in (0, 1], got {changes['mem_fraction_static']!r}")
        if cal.mfs is None or cal.pre_load_free_gib is None:
            raise PredictionError("the log shows neither mem_fraction_static nor the free memory before weights "
                                  "(--assume mem_fraction_static=…)")
        delta_gib += cal.pre_load_free_gib * (mfs - cal.mfs)
    slots = _positive_int(changes, "max_running_requests")
    fixed_after = cal.fixed_gib
    if slots is not None and cal.fixed_gib:
        if not cal.slots:
            raise PredictionError("the log does not show max_running_requests, which the fixed states are sized by")
        per_rank = max(1, slots // cal.dp_groups)
        fixed_after = dsv4.fixed_for(cal.fixed_gib, cal.slots, per_rank, cal.spec)
        notes.append(f"fixed ratio-128 compress states {cal.fixed_gib:.2f} → {fixed_after:.2f} GiB "
                     f"({cal.slots} → {per_rank} request slots per rank)")
    elif slots is not None:
        notes.append("this release prices the ratio-128 states per token: the slots do not move the pools")
    delta_gib += cal.fixed_gib - fixed_after
    bpft = cal.bytes_per_full_token
    if "swa_full_tokens_ratio" in changes:
        bpft = _bpft_at_ratio(cal, changes["swa_full_tokens_ratio"], notes)
    cap = _positive_int(changes, "max_total_tokens")

    def tokens_for(budget: float) -> int:
        return dsv4.full_tokens(int(budget + delta_gib * GIB), dsv4.Sizing(bpft, 0, "", ""), cap)

    low, high = tokens_for(cal.budget_low + 1), tokens_for(cal.budget_high - 1)  # inside the interval: float-safe
    ctx = _positive_int(changes, "context_length") or context or cal.context_len
    conc = (low / ctx) if ctx else None
    pool_growth = (low - cal.tokens) * bpft / GIB + (fixed_after - cal.fixed_gib)
    reserve = None if cal.free_at_ready_gib is None else cal.free_at_ready_gib - pool_growth
    risk, words = _risk(reserve, cal.pre_load_free_gib or 0.0)
    if high == 0:
        risk, words = "high", "no KV room: SGLang would refuse to start"
    flags = [f"--{k.replace('_', '-')} {v}" for k, v in changes.items()]
    if low == 0 and high == 0 and changes:
        notes.append("no KV room: SGLang would refuse to start (the fixed states or the weights take the budget)")
    return Scenario(label or (" ".join(flags) or "as logged"), dict(changes), low, high, low, high, ctx, conc, reserve,
                    "free at ready in the log, less what the pools grow by", risk, words, flags, notes)


def _bpft_at_ratio(cal: DsV4Calibration, value: Any, notes: list[str]) -> float:
    """Bytes per full token at another sliding-window share: the model's layer counts say by how much."""
    from kvscope.model.weights import load_model_config

    ratio = finite_number(value)
    if ratio is None or not (0 < ratio <= 1):
        raise PredictionError(f"swa_full_tokens_ratio must be in (0, 1], got {value!r}")
    mc = load_model_config(cal.model) if cal.model else None
    if mc is None or cal.swa_ratio is None:
        raise PredictionError("pricing swa_full_tokens_ratio needs the model's layers (--model or --assume model=…) "
                              "and the log's 'DSV4 pool sizes' line")
    version = (0, 5, 21)  # the share enters every era as ratio × (per-layer window bytes); scale the logged B
    old = dsv4.sizing(mc.cfg, version, cal.spec, cal.slots, swa_ratio=cal.swa_ratio).bytes_per_full_token
    new = dsv4.sizing(mc.cfg, version, cal.spec, cal.slots, swa_ratio=ratio).bytes_per_full_token
    notes.append(f"sliding-window share {cal.swa_ratio:.2f} → {ratio:.2f}: bytes per full token scaled by the "
                 f"model's layers ({old:,.0f} → {new:,.0f} B in the ≥0.5.21 layout)")
    return cal.bytes_per_full_token + (new - old)


def standard_scenarios(cal: DsV4Calibration) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if cal.mfs is not None and cal.pre_load_free_gib is not None:
        out += [{"mem_fraction_static": round(cal.mfs + d, 3)} for d in (-0.02, 0.01, 0.02)
                if 0.3 < cal.mfs + d < 0.99]
    if cal.fixed_gib and cal.slots and cal.slots >= 8:
        out.append({"max_running_requests": cal.slots // 4 * cal.dp_groups})
    return out


def tokens_per_step(cal: DsV4Calibration) -> int:
    if cal.pre_load_free_gib is None:
        return 0
    return int(cal.pre_load_free_gib * 0.01 * GIB / cal.bytes_per_full_token)
