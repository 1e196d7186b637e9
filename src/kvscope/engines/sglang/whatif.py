"""``whatif``: calibrate SGLang's sizing rule on an observed run, then predict changed settings.

Calibration pins what the log never prints. The pool holds N tokens of c bytes, so the exact
profiled budget ``rest`` lies in [N·c, (N+page)·c). A change of mem_fraction_static by Δ moves it
by Δ·F (F = free memory before weights, printed to ±0.005 GiB), so predictions inherit only Δ·ΔF
of uncertainty: a few tokens, not the ±100 of recomputing from the rounded figures."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kvscope.core.startup import Startup
from kvscope.engines.sglang import rules
from kvscope.engines.sglang import whatif_dsv4 as p4
from kvscope.engines.sglang.facts import SGLangCapacityFacts, SGLangRankFacts
from kvscope.engines.sglang.finish import attn_tp_size, kv_dtype_name, model_name, page_size, tp_size
from kvscope.engines.sglang.rules import GIB, Interval
from kvscope.engines.whatif_base import (
    PredictionError,
    Scenario,
    _risk,
    _truthy,
    assemble_prediction,
    normalise_changes,
)
from kvscope.model.arch import Architecture, dtype_bytes
from kvscope.model.catalog import load_architecture
from kvscope.model.weights import sglang_parallel, weights_estimate_gib

HOST_RESERVE_GIB = 10.0  # SGLang refuses host pools that leave less than this much RAM free


SUPPORTED = {
    "mem_fraction_static", "kv_cache_dtype", "context_length", "max_total_tokens", "page_size",
    "max_running_requests", "speculative_algorithm", "enable_dp_attention", "dp_size", "tp_size",
    "hicache_ratio", "hicache_size", "enable_hierarchical_cache", "swa_full_tokens_ratio",
}


ALIASES = {"mfs": "mem_fraction_static", "tp": "tp_size", "dp": "dp_size", "context_len": "context_length",
           "enable_hicache": "enable_hierarchical_cache", "kv_dtype": "kv_cache_dtype",
           "swa_ratio": "swa_full_tokens_ratio"}


@dataclass
class Calibration:
    tokens: int
    page: int
    cell: int
    mfs: float
    pre_load_free: Interval
    rest_bytes: Interval
    kv_bytes: int
    tp: int
    attn_tp: int
    arch: Architecture | None
    era: str
    weights_gib: float | None
    after_pool_gib: float | None
    free_at_ready_gib: float | None
    draft_gib: float
    context_len: int | None
    pre_load_free_derived: bool
    model: str | None = None  # the model id or path, to estimate how its weights shard
    pp: int = 1  # pipeline stages: weights per GPU are one stage's
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kv_tokens": self.tokens, "bytes_per_token": self.cell, "page_size": self.page,
            "mem_fraction_static": self.mfs, "pre_load_free_gib": round(self.pre_load_free.mid, 4),
            "pre_load_free_gib_low": round(self.pre_load_free.low, 4), "pre_load_free_gib_high": round(self.pre_load_free.high, 4),
            "pre_load_free_derived": self.pre_load_free_derived,
            "rest_bytes_low": int(self.rest_bytes.low), "rest_bytes_high": int(self.rest_bytes.high),
            "tp_size": self.tp, "attn_tp_size": self.attn_tp, "era": self.era, "weights_gib": self.weights_gib,
            "free_after_pool_gib": self.after_pool_gib, "free_at_ready_gib": self.free_at_ready_gib,
            "context_len": self.context_len, "notes": self.notes,
        }


def calibrate(s: Startup) -> Calibration:
    """Pin the exact profiled budget of an SGLang startup from its logged token count."""
    if s.engine != "sglang":
        raise PredictionError(f"calibrated what-if for {s.engine} is not available yet; only SGLang logs are calibrated")
    ref = s.reference_rank
    target = ref.pool("target") if ref else None
    if ref is None or target is None or not target.tokens:
        raise PredictionError("the log has no 'KV Cache is allocated. #tokens: …' line to calibrate on")
    if s.reconciliation is None:
        raise PredictionError("bytes per token unknown (no pool size and no architecture); pass --model")
    mfs = s.setting_number("mem_fraction_static")
    if mfs is None:
        implied = SGLangCapacityFacts(s.capacity).implied_mem_fraction_static
        if implied is None:
            raise PredictionError("mem_fraction_static is not in the log; pass --assume mem_fraction_static=…")
        mfs = float(implied)
    pre_values = [r.pre_load_free_gib for r in s.ranks if r.pre_load_free_gib is not None and "pre_load_free_gib" not in r.derived]
    derived = not pre_values
    basis = SGLangRankFacts(ref).basis_gib  # the pool showed F measured before the printed figure (rules.py)
    if basis is not None:
        pre = Interval(*basis)
    elif pre_values:
        pre = Interval.printed(min(pre_values))  # SGLang budgets from the minimum over ranks
    elif ref.pre_load_free_gib is not None:
        half = (rules.HALF_CENT + 0.003) / (1 - mfs)  # printed reserve ±0.005, request-table estimate ±0.003
        pre = Interval(ref.pre_load_free_gib - half, ref.pre_load_free_gib + half)
    else:
        raise PredictionError("free memory before weights is unknown (no 'Load weight' or 'Memory pool end' line)")
    cell = s.reconciliation.bytes_per_token
    page = page_size(s)
    model = model_name(s)
    arch, _ = load_architecture(model)
    graphs = sum(g.get("graph_gib") or 0 for g in (SGLangRankFacts(ref).graphs or []))
    draft_pool = ref.pool("draft")
    draft_gib = (draft_pool.size_gib() or 0 if draft_pool else 0) + (SGLangRankFacts(ref).draft_weights_gib or 0)
    cal = Calibration(
        tokens=target.tokens, page=page, cell=cell, mfs=mfs, pre_load_free=pre,
        rest_bytes=Interval(target.tokens * cell, (target.tokens + page) * cell - 1),
        kv_bytes=dtype_bytes(kv_dtype_name(s), SGLangRankFacts(ref).weights_dtype), tp=tp_size(s), attn_tp=attn_tp_size(s),
        arch=arch, era=s.era or "", weights_gib=ref.weights_gib, after_pool_gib=ref.avail_after_pool_gib,
        free_at_ready_gib=ref.avail_at_ready_gib, draft_gib=draft_gib,
        context_len=s.capacity.context_len or _int(s.setting("context_length")) or (arch.max_position_embeddings if arch else None),
        pre_load_free_derived=derived, model=model,
        pp=_int(s.setting("pp_size")) or _int(s.setting("pipeline_parallel_size")) or 1,
    )
    if derived:
        cal.notes.append("free memory before weights was derived from the reserve (no 'Load weight begin' line)")
    if graphs:
        cal.notes.append(f"CUDA graphs took {graphs:.2f} GiB in the observed run")
    return cal


def _int(v: Any) -> int | None:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def _cell_for(cal: Calibration, kv_dtype: str | None, attn_tp: int) -> int:
    """Bytes per token under a new dtype / attention-TP: from the architecture when known, else scaled."""
    new_bytes = dtype_bytes(kv_dtype) if kv_dtype else cal.kv_bytes
    if cal.arch is not None:
        from kvscope.engines.sglang.eras import ERAS

        era = next((e for e in ERAS if e.name in cal.era), ERAS[1])
        base = rules.cell_size(cal.arch, cal.kv_bytes, cal.attn_tp, era).bytes_per_token
        new = rules.cell_size(cal.arch, new_bytes, attn_tp, era).bytes_per_token
        if base == cal.cell:
            return new
        return round(cal.cell * new / base)  # keep what the log proved (e.g. extra indexer bytes), scale the rest
    scale = new_bytes / cal.kv_bytes
    if cal.arch is None and attn_tp != cal.attn_tp:
        scale *= max(1, cal.attn_tp) / max(1, attn_tp)
    return max(1, round(cal.cell * scale))


def _tokens(rest: Interval, cell: int, page: int, cap: int | None) -> tuple[int, int]:
    low, high = rules.tokens_from_rest(rest, cell, page)
    if cap is not None:
        low, high = min(low, cap), min(high, cap)
    return low, high


def _flags(changes: dict[str, Any], cal: Calibration) -> list[str]:
    flags: list[str] = []
    names = {
        "mem_fraction_static": "--mem-fraction-static", "kv_cache_dtype": "--kv-cache-dtype",
        "context_length": "--context-length", "max_total_tokens": "--max-total-tokens", "page_size": "--page-size",
        "max_running_requests": "--max-running-requests", "tp_size": "--tp-size", "dp_size": "--dp-size",
        "hicache_ratio": "--hicache-ratio", "hicache_size": "--hicache-size",
    }
    for key, value in changes.items():
        if key == "enable_dp_attention":
            flags.append("--enable-dp-attention" if _truthy(value) else "(remove --enable-dp-attention)")
            if _truthy(value) and "dp_size" not in changes:
                tp, attn_tp = _parallel_after(cal, changes)
                flags.append(f"--dp-size {tp // attn_tp}")
        elif key == "enable_hierarchical_cache":
            flags.append("--enable-hierarchical-cache" if _truthy(value) else "(remove --enable-hierarchical-cache)")
        elif key == "speculative_algorithm":
            flags.append("(remove --speculative-algorithm and its draft flags)" if value in (None, "", "none", "None")
                         else f"--speculative-algorithm {value}")
        elif key in names:
            flags.append(f"{names[key]} {value}")
    if ("hicache_ratio" in changes or "hicache_size" in changes) and "enable_hierarchical_cache" not in changes:
        flags.insert(0, "--enable-hierarchical-cache")
    return flags


def predict(cal: Calibration, changes: dict[str, Any], context: int | None = None, host_ram_gb: float | None = None,
            label: str | None = None) -> Scenario:
    """One scenario: the calibrated run with ``changes`` applied, in SGLang's code order."""
    changes = normalise_changes(changes, SUPPORTED, ALIASES, "SGLang")
    notes: list[str] = []
    approximate = False
    mfs = float(changes.get("mem_fraction_static", cal.mfs))
    delta = mfs - cal.mfs
    rest = Interval(cal.rest_bytes.low / GIB, cal.rest_bytes.high / GIB)
    shift = cal.pre_load_free.scale(delta)
    rest = Interval(rest.low + shift.low, rest.high + shift.high)
    reserve_delta = -delta * cal.pre_load_free.mid

    tp, attn_tp = _parallel_after(cal, changes)
    growth_unknown = False
    if tp != cal.tp or attn_tp != cal.attn_tp:
        growth = _weights_growth(cal, tp, attn_tp, notes)
        growth_unknown = growth is None
        rest = Interval(rest.low - (growth or 0.0), rest.high - (growth or 0.0))  # GiB here
        approximate = True
    cell = _cell_for(cal, changes.get("kv_cache_dtype"), attn_tp)

    spec_off = "speculative_algorithm" in changes and changes["speculative_algorithm"] in (None, "", "none", "None")
    if spec_off and cal.draft_gib:
        reserve_delta += cal.draft_gib
        notes.append(f"without the draft model its {cal.draft_gib:.2f} GiB (weights + KV) return to the reserve")
        if "E3" in cal.era or "E4" in cal.era:
            notes.append("≥0.5.14 charges draft weights to the static budget: the pool would also grow")
            approximate = True

    cap = _int(changes.get("max_total_tokens"))
    page = _int(changes.get("page_size")) or cal.page
    low, high = _tokens(rest, cell, page, cap)
    no_pool = high == 0 and cap != 0
    if no_pool:
        first_page = page * cell / GIB  # GiB one page of the pool needs
        notes.append(f"no KV pool fits: the weights fill mem_fraction_static {mfs} of the {cal.pre_load_free.mid:.2f} GiB "
                     f"free before weights (SGLang would stop with 'Not enough memory'); a pool starts above "
                     f"{mfs + (first_page - rest.mid) / cal.pre_load_free.mid:.3f}")
    pools = tp // attn_tp  # DP attention: one pool per attention-TP group, each for its own requests
    node_low, node_high = low * pools, high * pools

    ctx = context or _int(changes.get("context_length")) or cal.context_len
    concurrency = (node_low / ctx) if ctx else None

    if cal.free_at_ready_gib is not None:
        reserve, basis = cal.free_at_ready_gib + reserve_delta, "free at ready (observed, adjusted)"
    elif cal.after_pool_gib is not None:
        reserve, basis = None, "free after pool only; CUDA graphs and draft not in the log"
        notes.append(f"reserve after the pool would be {cal.after_pool_gib + reserve_delta:.2f} GiB "
                     "(graphs, the draft model and activations then take their share)")
    else:
        reserve, basis = None, "unknown"
    risk, words = _risk(reserve, cal.pre_load_free.mid)
    if growth_unknown:
        risk, words = "unknown", "the weights' change per GPU is not known for this model"
    if no_pool:
        risk, words = "high", "no KV pool: the server would not start"
    if reserve is None and cal.after_pool_gib is not None and cal.after_pool_gib + reserve_delta < 1.0:
        risk, words = "high", f"only {cal.after_pool_gib + reserve_delta:.2f} GiB left after the pool for graphs and activations"

    host = _host_tier(changes, cal, low, cell, host_ram_gb)
    return Scenario(
        label=label or (", ".join(f"{k}={v}" for k, v in changes.items()) or "as logged"),
        changes=changes, kv_tokens_low=low, kv_tokens_high=high, node_kv_tokens_low=node_low, node_kv_tokens_high=node_high,
        context_tokens=ctx, concurrency_at_context=round(concurrency, 2) if concurrency is not None else None,
        reserve_left_gib=round(reserve, 2) if reserve is not None else None, reserve_basis=basis, risk=risk,
        risk_words=words, flags=_flags(changes, cal), notes=notes, host=host, approximate=approximate,
    )


def _parallel_after(cal: Calibration, changes: dict[str, Any]) -> tuple[int, int]:
    """(tp, attention TP) of the scenario: what the log ran unless the changes say otherwise.

    DP attention stays as logged unless ``enable_dp_attention`` is set; turned on without a
    ``dp_size`` it takes dp = tp (attention TP 1); a logged DP-attention run keeps its attention TP
    when only tp changes. dp must divide tp.
    """
    tp = _int(changes.get("tp_size")) if "tp_size" in changes else cal.tp
    if tp is None or tp < 1:
        raise PredictionError(f"tp_size must be a positive integer, got {changes.get('tp_size')!r}")
    logged_dp = cal.attn_tp < cal.tp
    on = _truthy(changes["enable_dp_attention"]) if "enable_dp_attention" in changes else logged_dp
    if not on:
        return tp, tp
    dp = _int(changes.get("dp_size")) or (max(1, tp // cal.attn_tp) if logged_dp else tp)
    if dp < 1 or dp > tp or tp % dp:
        raise PredictionError(f"dp_size {dp} must divide tp_size {tp} (DP attention splits the TP ranks into "
                              "dp groups)")
    return tp, tp // dp


def _weights_growth(cal: Calibration, tp: int, attn_tp: int, notes: list[str]) -> float | None:
    """GiB per GPU the weights grow by under a new TP / attention-TP (negative: they shrink).

    From the model's config where it is known (DP attention keeps attention and the input embedding
    whole on every rank; MLA's down-projections are replicated at any TP), else weights scaled by
    TP with the replicated parts ignored; noted either way.
    """
    change = f"TP {cal.tp} → {tp}" if tp != cal.tp else ""
    if attn_tp != cal.attn_tp and (attn_tp != tp or cal.attn_tp != cal.tp):
        change += (", " if change else "") + f"attention TP {cal.attn_tp} → {attn_tp}"
    logged_estimate = weights_estimate_gib(cal.model, sglang_parallel(cal.tp, cal.attn_tp, pp=cal.pp), rules.SGLANG_WEIGHTS)
    new_estimate = weights_estimate_gib(cal.model, sglang_parallel(tp, attn_tp, pp=cal.pp), rules.SGLANG_WEIGHTS)
    delta = None if logged_estimate is None or new_estimate is None else new_estimate - logged_estimate
    if delta is not None and logged_estimate is not None and cal.weights_gib and abs(logged_estimate - cal.weights_gib) > 0.25 * cal.weights_gib:
        notes.append(f"{change}: the config's estimate at the logged TP ({logged_estimate:.2f} GiB) is far from the "
                     f"{cal.weights_gib:.2f} GiB the log shows; check the model and the logged TP (--assume tp_size=…)")
        delta = None
    if delta is not None:
        why = ("; attention and the input embedding are whole on every rank under DP attention" if attn_tp < tp
               else "")
        notes.append(f"{change}: weights per GPU {'grow' if delta >= 0 else 'shrink'} by {abs(delta):.2f} GiB "
                     f"(estimated from {cal.model}'s config{why}); the pool "
                     f"{'gives that up' if delta >= 0 else 'gains it'}")
        return delta
    if tp != cal.tp and attn_tp == tp and cal.weights_gib is not None:
        new_weights = cal.weights_gib * cal.tp / tp
        notes.append(f"{change}: weights per GPU assumed to scale to {new_weights:.2f} GiB (replicated parts ignored; "
                     "name the model with --assume model=… to count them)")
        return new_weights - cal.weights_gib
    why = "no model named (--assume model=…)" if not cal.model else f"{cal.model} is not in the catalog"
    notes.append(f"{change}: the weights' change per GPU is not known ({why}); the pool is shown as if it stayed the "
                 "same")
    return None


def _host_tier(changes: dict[str, Any], cal: Calibration, device_tokens: int, cell: int, host_ram_gb: float | None):
    """HiCache host pool: per-rank pinned bytes × ranks on the host, checked against free RAM."""
    ratio, size_gb = changes.get("hicache_ratio"), changes.get("hicache_size")
    if ratio is None and size_gb is None and not _truthy(changes.get("enable_hierarchical_cache", False)):
        return None
    if size_gb:
        host_tokens = int(float(size_gb) * 1e9 // cell)
    else:
        host_tokens = int(device_tokens * float(ratio if ratio is not None else 2.0))
    pages = host_tokens // cal.page + 1
    host_tokens = pages * cal.page
    per_rank_bytes = host_tokens * cell
    ranks = cal.tp
    total_bytes = per_rank_bytes * ranks
    out: dict[str, Any] = {
        "host_tokens_per_rank": host_tokens,
        "extra_cacheable_tokens": max(0, host_tokens - device_tokens),
        "per_rank_gb": round(per_rank_bytes / 1e9, 2), "per_rank_gib": round(per_rank_bytes / GIB, 2),
        "ranks_on_host": ranks, "total_gb": round(total_bytes / 1e9, 2),
        "replicated": cal.arch is not None and cal.arch.attention == "mla" and ranks > 1,
    }
    if out["replicated"]:
        out["note"] = f"MLA: each of the {ranks} TP ranks keeps its own copy of the latent cache in host RAM"
    if host_ram_gb is not None:
        margin = host_ram_gb - total_bytes / 1e9
        out.update(host_ram_gb=host_ram_gb, fits=margin >= HOST_RESERVE_GIB * GIB / 1e9, margin_gb=round(margin, 2))
    return out


def standard_scenarios(cal: Calibration) -> list[dict[str, Any]]:
    """The knobs an operator asks about, for the table: mfs steps, fp8 KV, DP attention (MLA), host tier."""
    out: list[dict[str, Any]] = []
    for step in (-0.02, 0.01, 0.02, 0.04):
        value = round(cal.mfs + step, 2)
        if 0 < value < 1:
            out.append({"mem_fraction_static": value})
    if cal.kv_bytes > 1:
        out.append({"kv_cache_dtype": "fp8_e4m3"})
    if cal.arch is not None and cal.arch.attention == "mla" and cal.tp > 1 and cal.attn_tp == cal.tp:
        out.append({"enable_dp_attention": True})
    out.append({"hicache_ratio": 2})
    return out


def mfs_curve(cal: Calibration, points: int = 21) -> list[dict[str, Any]]:
    """KV tokens and reserve against mem_fraction_static, for charts."""
    out = []
    lo, hi = max(0.5, cal.mfs - 0.1), min(0.98, cal.mfs + 0.1)
    for i in range(points):
        mfs = round(lo + (hi - lo) * i / (points - 1), 3)
        sc = predict(cal, {"mem_fraction_static": mfs})
        after_pool = (cal.after_pool_gib - (mfs - cal.mfs) * cal.pre_load_free.mid) if cal.after_pool_gib is not None else None
        out.append({"mem_fraction_static": mfs, "kv_tokens": sc.kv_tokens, "reserve_left_gib": sc.reserve_left_gib,
                    "free_after_pool_gib": round(after_pool, 3) if after_pool is not None else None, "risk": sc.risk})
    return out


def tokens_per_step(cal: Calibration) -> int:
    return math.floor(0.01 * cal.pre_load_free.mid * GIB / cal.cell)


def can_calibrate(s: Startup) -> bool:
    """A reconciled pool, or DeepSeek-V4's own sizing line."""
    return s.reconciliation is not None or p4.is_dsv4(s)


def build_prediction(startup: Startup, changes: dict[str, Any], context: int | None,
                     host_ram_gb: float | None) -> dict[str, Any]:
    """Calibrate on the startup and predict: the requested change, the standard knobs, the fraction curve."""
    if p4.is_dsv4(startup):  # calibrated on its sizing line
        changes = {k.replace("-", "_"): v for k, v in changes.items()}
        cal4 = p4.calibrate(startup)
        return assemble_prediction("sglang", cal4, lambda ch, label: p4.predict(cal4, ch, context, label=label),
                                   p4.standard_scenarios(cal4), changes,
                                   ("tokens_per_0_01_mfs", p4.tokens_per_step(cal4)), ("mfs_curve", []))
    changes = {ALIASES.get(k, k): v for k, v in changes.items()}
    if "swa_full_tokens_ratio" in changes:  # re-splits the hybrid's two pools: its own calibration
        from kvscope.engines.sglang import whatif_swa

        if len(changes) > 1:
            raise PredictionError("swa_full_tokens_ratio is predicted on its own (it re-splits the same memory)")
        return whatif_swa.build_prediction(startup, changes["swa_full_tokens_ratio"])
    changes = normalise_changes(changes, SUPPORTED, ALIASES, "SGLang")
    cal = calibrate(startup)
    return assemble_prediction("sglang", cal, lambda ch, label: predict(cal, ch, context, host_ram_gb, label=label),
                               standard_scenarios(cal), changes, ("tokens_per_0_01_mfs", tokens_per_step(cal)),
                               ("mfs_curve", mfs_curve(cal)))


def calibration_line(pred: dict[str, Any]) -> str:
    """What the prediction was calibrated on, in one line for the terminal."""
    cal = pred["calibration"]
    if "bytes_per_swa_token" in cal:
        return (f"Calibrated on the logged pools: full {cal['full_tokens']:,} tokens × {cal['bytes_per_full_token']:,} B, "
                f"sliding-window {cal['swa_tokens']:,} × {cal['bytes_per_swa_token']:,} B "
                f"(swa_full_tokens_ratio {cal['swa_full_tokens_ratio']})")
    return (f"Calibrated on the logged run: {cal['kv_tokens']:,} tokens × {cal['bytes_per_token']:,} B, "
            f"mem_fraction_static {cal['mem_fraction_static']}, free before weights "
            f"{cal['pre_load_free_gib_low']:.3f} – {cal['pre_load_free_gib_high']:.3f} GiB; "
            f"+0.01 mfs = +{pred['tokens_per_0_01_mfs']:,} tokens")
