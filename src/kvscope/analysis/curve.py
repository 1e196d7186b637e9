"""The memory-fraction curve: KV tokens and the reserve left against the engine's memory knob.

Computed here, once, for every renderer (HTML draws it, the terminal and markdown quote its rows):
each +0.01 of the knob moves 0.01 × basis GiB from the reserve into the KV pool, where the basis is
what the engine's fraction is a fraction of (its ``MemoryKnob.basis``)."""

from __future__ import annotations

import math
from typing import Any

from kvscope import engines
from kvscope.core.facts import RankFacts
from kvscope.core.margins import OUTSIDE_BUDGET_HEADROOM_GIB, reserve_margin_gib
from kvscope.core.startup import GIB, KvPool, Rank, Startup, finite_number
from kvscope.engines.base import FractionBasis


def _num(x: Any) -> float | None:
    """A finite float, or None: settings arrive as logged (strings, ints) or assumed."""
    return finite_number(x)


def device_total(s: Startup, r: Rank) -> float | None:
    return r.total_gib if r.total_gib is not None else _num(s.assumptions.get("gpu_total_gib"))


def _pool_sum(r: Rank, draft: bool) -> float:
    return sum((p.size_gib() or 0.0) for p in r.kv_pools if (p.name == "draft") == draft and p.name != "host")


def _free_last(r: Rank) -> float | None:
    for value in (r.avail_at_ready_gib, RankFacts(r).avail_after_graphs_gib, r.avail_after_pool_gib,
                  r.avail_after_weights_gib):
        if _num(value) is not None:
            return float(value)
    return None


def _graphs(r: Rank) -> float:
    if r.cuda_graph_gib is not None:
        return r.cuda_graph_gib
    return sum(_num(g.get("graph_gib")) or 0.0 for g in (RankFacts(r).graphs or []) if isinstance(g, dict))


def _knob(s: Startup) -> tuple[str, float | None, str]:
    """The memory fraction setting of the engine: its name, current value, and where the value came from."""
    knob = engines.get(s.engine).knobs.memory
    if knob is None:
        return "", None, "assumed"
    value = _num(s.setting(knob.setting))
    if value is None and knob.default is not None:
        return knob.setting, knob.default, "default"
    origin = "logged" if s.settings.get(knob.setting) is not None else "assumed"
    return knob.setting, value, origin


def bytes_per_token(s: Startup) -> tuple[int | None, str]:
    """Bytes of KV per token per GPU: the reconciled engine rule, else the logged pool ÷ tokens."""
    if s.reconciliation is not None and s.reconciliation.bytes_per_token:
        return s.reconciliation.bytes_per_token, "see the reconciliation below"
    ref = s.reference_rank
    target = _target_pool(ref) if ref is not None else None
    if target is not None and target.tokens and target.size_gib():
        return int(target.size_gib() * GIB / target.tokens), "logged pool ÷ tokens"
    cap = s.capacity
    if cap.available_kv_gib and cap.kv_tokens:
        return int(cap.available_kv_gib * GIB / cap.kv_tokens), "logged KV memory ÷ tokens"
    return None, ""


def _target_pool(r: Rank) -> KvPool | None:
    return r.pool("target") or r.pool("kv") or next((p for p in r.kv_pools if p.name not in ("draft", "host")), None)


def _curve_basis(s: Startup) -> dict[str, Any] | None:
    """The numbers the what-if line needs: basis GiB per 1.0 of the knob, tokens and free GiB now."""
    ref = s.reference_rank
    if ref is None:
        return None
    knob, current, origin = _knob(s)
    of_device = _of_device(s)
    if of_device:
        basis = device_total(s, ref)
        tokens = s.capacity.kv_tokens
        free_now = basis * (1 - current) if basis is not None and current is not None else None
        spent_after = 0.0
    else:
        basis = ref.pre_load_free_gib
        target = _target_pool(ref)
        tokens = target.tokens if target is not None else None
        free_now = ref.avail_after_pool_gib
        last = _free_last(ref)
        spent_after = (free_now - last) if free_now is not None and last is not None else 0.0
    if basis is None or current is None or free_now is None:
        return None
    ready_known = of_device or ref.avail_at_ready_gib is not None or RankFacts(ref).has(RankFacts.avail_after_graphs_gib)
    return {"knob": knob, "current": current, "origin": origin, "basis": basis, "tokens": tokens,
            "free_now": free_now, "spent_after": max(0.0, spent_after), "ready_known": ready_known}


PINNING = {  # settings that fix the KV size whatever the memory fraction
    "max_total_tokens": "--max-total-tokens", "kv_cache_memory_bytes": "--kv-cache-memory",
    "kv_cache_memory": "--kv-cache-memory", "num_gpu_blocks_override": "--num-gpu-blocks-override",
}


def pinned_kv(s: Startup) -> str | None:
    """Why the memory-fraction knob does not size this KV cache (a flag that pins it), or None."""
    for key, flag in PINNING.items():
        if s.setting(key) not in (None, 0, False, ""):
            return f"{flag} {s.setting(key)} fixes the KV cache size; {_knob(s)[0]} does not change it"
    return None


def whatif_curve(s: Startup) -> dict[str, Any] | None:
    """KV tokens and reserve left against mem_fraction_static (SGLang) or gpu_memory_utilization (vLLM).

    Each +0.01 of the knob moves 0.01 × basis GiB from the reserve into the KV pool, where the basis
    is the free memory before weights (SGLang) or the device total (vLLM): tokens per step =
    0.01 × basis × 2^30 / bytes per token. The OOM-risk region starts where the memory left after
    the pool, less what CUDA graphs / the draft model took after it, falls under a safety margin:
    SGLang max(2 GiB, 5 % of the basis), as in its findings; vLLM 2 GiB outside the budget for the
    CUDA context, graphs and sampler (its graphs take 1–3 GiB), as in the vLLM findings.
    No curve when a setting pins the KV size (see ``pinned_kv``): the knob would not move it.
    """
    b = _curve_basis(s)
    bpt, bpt_how = bytes_per_token(s)
    if b is None or not bpt or pinned_kv(s):
        return None
    m, basis = b["current"], b["basis"]
    step = int(0.01 * basis * GIB // bpt)
    margin = OUTSIDE_BUDGET_HEADROOM_GIB if _of_device(s) else reserve_margin_gib(basis)
    need = margin + b["spent_after"]
    risk_from = round(m + (b["free_now"] - need) / basis, 4)
    tokens_now = b["tokens"]
    if tokens_now is None:
        return None
    lo = max(0.05, round(m - 0.10, 2))
    hi = min(0.99, round(max(m + 0.06, risk_from + 0.03), 2))
    points = []
    for i in range(round((hi - lo) * 100) + 1):
        x = round(lo + i / 100, 2)
        k = round((x - m) * 100)
        free = b["free_now"] - (x - m) * basis - b["spent_after"]
        points.append({"x": x, "tokens": max(0, tokens_now + k * step), "reserve_gib": round(free, 3),
                       "risk": free < margin})
    return {"knob": b["knob"], "current": m, "origin": b["origin"], "basis_gib": basis, "bytes_per_token": bpt,
            "bytes_per_token_how": bpt_how, "tokens_now": tokens_now, "tokens_per_step": step, "margin_gib": margin,
            "spent_after_gib": b["spent_after"], "risk_from": risk_from, "ready_known": b["ready_known"],
            "basis_name": engines.get(s.engine).knobs.memory.basis.value, "points": points,  # type: ignore[union-attr]
            "reserve_label": _reserve_label(s, b["spent_after"])}


def _of_device(s: Startup) -> bool:
    """Whether the engine's fraction is of the whole device (vLLM) rather than of the free memory."""
    knob = engines.get(s.engine).knobs.memory
    return knob is not None and knob.basis is FractionBasis.DEVICE_TOTAL


def _reserve_label(s: Startup, spent_after: float) -> str:
    if _of_device(s):
        return engines.get(s.engine).knobs.memory.reserve_label  # type: ignore[union-attr]
    return "free at ready, after graphs and draft (GiB)" if spent_after else "free after the KV pool (GiB)"


def whatif_rows(curve: dict[str, Any]) -> list[dict[str, Any]]:
    """A short table of the curve: a few steps around the current value and the edge of the risk region."""
    m = curve["current"]
    wanted = {round(m + d, 2) for d in (-0.04, -0.02, 0.0, 0.01, 0.02, 0.04, 0.06)}
    edge = math.floor(curve["risk_from"] * 100) / 100
    wanted |= {round(edge, 2), round(edge + 0.01, 2)}
    return [p | {"current": abs(p["x"] - m) < 1e-9, "delta": p["tokens"] - curve["tokens_now"]}
            for p in curve["points"] if round(p["x"], 2) in wanted]


def curve_from_prediction(pred: Any) -> dict[str, Any] | None:
    """The calibrated ``mfs_curve`` of a whatif prediction, in the shape ``whatif_curve`` returns."""
    if not isinstance(pred, dict) or not isinstance(pred.get("mfs_curve"), list):
        return None
    cal = pred.get("calibration") if isinstance(pred.get("calibration"), dict) else {}
    current, pre = _num(cal.get("mem_fraction_static")), _num(cal.get("pre_load_free_gib"))
    points = []
    for p in pred["mfs_curve"]:
        x = _num(p.get("mem_fraction_static")) if isinstance(p, dict) else None
        left = _num(p.get("reserve_left_gib")) if x is not None else None
        left = left if left is not None else _num(p.get("free_after_pool_gib")) if x is not None else None
        if x is None or left is None or p.get("kv_tokens") is None:
            continue
        points.append({"x": round(x, 3), "tokens": int(p["kv_tokens"]), "reserve_gib": left,
                       "risk": p.get("risk") not in ("low", "unknown")})
    if len(points) < 2 or current is None or pre is None:
        return None
    risky = [p["x"] for p in points if p["risk"]]
    known = all(_num(p.get("reserve_left_gib")) is not None for p in pred["mfs_curve"] if isinstance(p, dict))
    return {"knob": "mem_fraction_static", "current": current, "origin": "calibrated by kvscope whatif",
            "basis_gib": pre, "bytes_per_token": cal.get("bytes_per_token"), "bytes_per_token_how": "calibration",
            "tokens_now": cal.get("kv_tokens"), "tokens_per_step": pred.get("tokens_per_0_01_mfs") or 0,
            "margin_gib": reserve_margin_gib(pre), "spent_after_gib": 0.0,
            "risk_from": min(risky) if risky else points[-1]["x"] + 0.01, "ready_known": known,
            "basis_name": "free memory before weights", "points": points,
            "reserve_label": "reserve left at ready (GiB)" if known else "free after the KV pool (GiB)"}
