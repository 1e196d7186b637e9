"""TensorRT-LLM's whatif: the paged KV cache for another kv_cache_free_gpu_mem_fraction, token cap, block size,
max_seq_len or batch size, calibrated on the logged pool.

The KV cache manager (kvCacheManager.cpp) sizes the pool from the free memory it measured after the engine,
its activations and buffers were in place (finish.py):

    max_tokens = fraction × free / bytes_per_token;  max_tokens = min(max_tokens, max_tokens_in_paged_kv_cache)
    blocks = ceil(max_tokens / tokens_per_block);    tokens = blocks × tokens_per_block

Calibration: the logged tokens and bytes per token, and the free memory when the log prints it. Without
it the budget is known only from the logged pool (when no cap bound it), and a fraction change scales it:
the free memory the fraction is taken of does not move with the fraction. max_seq_len and the batch size
change how many requests fit at once; max_num_tokens changes the PyTorch backend's profiled activations,
which the log cannot show beforehand (approximate). GiB = 2^30 bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kvscope.core.startup import GIB, Startup, finite_number
from kvscope.engines.trtllm.facts import TrtCapacityFacts, TrtRankFacts
from kvscope.engines.trtllm.finish import DEFAULT_FRACTION, effective_fraction
from kvscope.engines.whatif_base import PredictionError, Scenario, assemble_prediction, normalise_changes

SUPPORTED = {"kv_cache_free_gpu_mem_fraction", "max_tokens_in_paged_kv_cache", "max_seq_len", "max_batch_size",
             "max_num_tokens", "tokens_per_block"}
ALIASES = {"free_gpu_memory_fraction": "kv_cache_free_gpu_mem_fraction", "fraction": "kv_cache_free_gpu_mem_fraction",
           "max_tokens": "max_tokens_in_paged_kv_cache", "max_num_requests": "max_batch_size"}
FLAGS = {"kv_cache_free_gpu_mem_fraction": "kv_cache_free_gpu_mem_fraction=", "max_tokens_in_paged_kv_cache":
         "max_tokens_in_paged_kv_cache=", "max_seq_len": "--max_seq_len", "max_batch_size": "--max_batch_size",
         "max_num_tokens": "--max_num_tokens", "tokens_per_block": "tokens_per_block="}
HALF_CENT = 0.005  # the log prints GiB to two decimals
SIZING = {"kv_cache_free_gpu_mem_fraction", "max_tokens_in_paged_kv_cache", "tokens_per_block"}


@dataclass
class TrtCalibration:
    tokens: int
    bytes_per_token: float
    tokens_per_block: int
    fraction: float
    fraction_how: str
    free_gib: float | None  # the free memory the fraction was taken of, when logged
    cap: int | None  # max_tokens_in_paged_kv_cache as set
    max_seq_len: int | None
    max_batch: int | None
    notes: list[str] = field(default_factory=list)

    @property
    def capped(self) -> bool:
        return self.cap is not None and self.tokens <= math.ceil(self.cap / self.tokens_per_block) * self.tokens_per_block

    def budget_tokens(self) -> tuple[float, float]:
        """max_tokens before the cap and the block rounding: from the free memory, else from the logged pool."""
        if self.free_gib is not None:
            per = GIB / self.bytes_per_token
            return (self.fraction * (self.free_gib - HALF_CENT) * per, self.fraction * (self.free_gib + HALF_CENT) * per)
        if self.capped:
            raise PredictionError("the pool was bound by max_tokens_in_paged_kv_cache and the log does not print the "
                                  "free memory the fraction is taken of ('Memory usage when calculating max tokens')")
        return float(self.tokens - self.tokens_per_block + 1), float(self.tokens)

    def as_dict(self) -> dict[str, Any]:
        return {"kv_tokens": self.tokens, "bytes_per_token": round(self.bytes_per_token),
                "tokens_per_block": self.tokens_per_block, "kv_cache_free_gpu_mem_fraction": self.fraction,
                "fraction_from": self.fraction_how, "free_gib": self.free_gib,
                "max_tokens_in_paged_kv_cache": self.cap, "max_seq_len": self.max_seq_len,
                "max_batch_size": self.max_batch, "notes": self.notes}


def _int(v: Any) -> int | None:
    n = finite_number(v)
    return int(n) if n is not None and n == int(n) and n > 0 else None


def can_calibrate(s: Startup) -> bool:
    return bool(s.capacity.kv_tokens) and s.reference_rank is not None and s.reference_rank.pool("target") is not None


def calibrate(s: Startup) -> TrtCalibration:
    ref = s.reference_rank
    tokens = s.capacity.kv_tokens
    target = ref.pool("target") if ref is not None else None
    if not tokens or target is None:
        raise PredictionError("the log shows no paged KV cache allocation with its tokens")
    notes: list[str] = []
    cap_facts = TrtCapacityFacts(s.capacity)
    exact = cap_facts.kv_allocated_bytes
    per = finite_number(s.setting("kv_size_per_token")) or (exact / tokens if exact else None)
    if per is None and target.size_gib():
        per = target.size_gib() * GIB / tokens  # type: ignore[operator]
        notes.append("bytes per token from the pool's printed GiB ÷ its tokens (rounded)")
    if not per:
        raise PredictionError("bytes per token unknown: the log prints neither the pool's size nor kv_size_per_token")
    tpb = cap_facts.tokens_per_block
    if not tpb:
        tpb = 1
        notes.append("tokens per block not in the log: blocks not rounded (pass --assume tokens_per_block=…)")
    frac, how = effective_fraction(s)
    if frac is None:
        frac, how = DEFAULT_FRACTION, "assumed: TensorRT-LLM's default"
        notes.append(f"kv_cache_free_gpu_mem_fraction not in the log: the default {DEFAULT_FRACTION} assumed")
    free = TrtRankFacts(ref).kv_sizing_free_gib if ref is not None else None
    return TrtCalibration(tokens, float(per), int(tpb), float(frac), how, free,
                          _int(s.setting("max_tokens_in_paged_kv_cache")), _int(s.setting("max_seq_len")),
                          _int(s.setting("max_batch_size")) or _int(s.setting("max_num_requests")), notes)


def predict(cal: TrtCalibration, changes: dict[str, Any], label: str | None = None) -> Scenario:
    changes = normalise_changes(changes, SUPPORTED, ALIASES, "TensorRT-LLM")
    notes: list[str] = []
    approximate = False
    tpb = _int(changes.get("tokens_per_block")) or cal.tokens_per_block
    resized = bool(SIZING & set(changes))  # only these move the pool; the rest change what fits in it
    low, high = cal.budget_tokens() if resized else (float(cal.tokens), float(cal.tokens))
    if "kv_cache_free_gpu_mem_fraction" in changes:
        f = finite_number(changes["kv_cache_free_gpu_mem_fraction"])
        if f is None or not 0 < f <= 1:
            raise PredictionError("kv_cache_free_gpu_mem_fraction is a fraction in (0, 1]")
        low, high = low * f / cal.fraction, high * f / cal.fraction
    cap = _int(changes.get("max_tokens_in_paged_kv_cache")) if "max_tokens_in_paged_kv_cache" in changes else cal.cap
    if resized:
        low, high = (min(x, cap) if cap else x for x in (low, high))
        t_low, t_high = (math.ceil(math.floor(x) / tpb) * tpb for x in (low, high))
    else:
        t_low = t_high = cal.tokens
    if "max_num_tokens" in changes:
        approximate = True
        notes.append("max_num_tokens changes the activations the PyTorch backend profiles before sizing the pool: "
                     "the free memory, hence the pool, moves by an amount the log cannot show")
    seq = _int(changes.get("max_seq_len")) or cal.max_seq_len
    batch = _int(changes.get("max_batch_size")) or cal.max_batch
    conc = None
    if seq:
        conc = t_low / seq
        if batch:
            conc = min(conc, float(batch))
    flags = [f"{FLAGS[k]}{'' if FLAGS[k].endswith('=') else ' '}{v}" for k, v in changes.items()]
    if resized and cal.free_gib is None:
        notes.append("budget from the logged pool (the free memory it was taken of is not printed)")
    return Scenario(label=label or (", ".join(f"{k}={v}" for k, v in changes.items()) or "as logged"), changes=changes,
                    kv_tokens_low=t_low, kv_tokens_high=t_high, node_kv_tokens_low=t_low, node_kv_tokens_high=t_high,
                    context_tokens=seq, concurrency_at_context=round(conc, 2) if conc is not None else None,
                    reserve_left_gib=None, reserve_basis="unknown", risk="unknown",
                    risk_words="the log does not show the memory left after the pool", flags=flags, notes=notes,
                    approximate=approximate)


def standard_scenarios(cal: TrtCalibration) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for f in (round(cal.fraction - 0.1, 2), round(cal.fraction + 0.05, 2)):
        if 0 < f <= 0.98 and not (cal.capped and cal.free_gib is None):
            out.append({"kv_cache_free_gpu_mem_fraction": f})
    if cal.max_seq_len:
        out.append({"max_seq_len": max(cal.tokens_per_block, cal.max_seq_len // 2)})
    return out


def tokens_per_step(cal: TrtCalibration) -> int | None:
    try:
        low, high = cal.budget_tokens()
    except PredictionError:
        return None
    return round((low + high) / 2 * 0.01 / cal.fraction)


def build_prediction(startup: Startup, changes: dict[str, Any], context: int | None,
                     host_ram_gb: float | None) -> dict[str, Any]:
    changes = normalise_changes(changes, SUPPORTED, ALIASES, "TensorRT-LLM")
    cal = calibrate(startup)
    return assemble_prediction("trtllm", cal, lambda ch, label: predict(cal, ch, label=label),
                               standard_scenarios(cal), changes, ("tokens_per_0_01_fraction", tokens_per_step(cal)),
                               ("fraction_curve", []))


def calibration_line(pred: dict[str, Any]) -> str:
    cal = pred["calibration"]
    free = f", {cal['free_gib']:.2f} GiB free when sized" if cal["free_gib"] is not None else ""
    return (f"Calibrated on the logged pool: {cal['kv_tokens']:,} tokens × {cal['bytes_per_token']:,} B, "
            f"kv_cache_free_gpu_mem_fraction {cal['kv_cache_free_gpu_mem_fraction']} ({cal['fraction_from']}){free}, "
            f"{cal['tokens_per_block']} tokens per block")


def kv_budget(s: Startup) -> Any:
    """For kvscope diff: the pool is fraction × the free memory measured when it was sized (no deductions:
    the engine, activations and buffers were already in place)."""
    from kvscope.core.budget import KvBudget

    ref = s.reference_rank
    if ref is None:
        return None
    frac, _ = effective_fraction(s)
    return KvBudget("free memory when the pool was sized", TrtRankFacts(ref).kv_sizing_free_gib,
                    "kv_cache_free_gpu_mem_fraction", frac, ())
