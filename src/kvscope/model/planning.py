"""What a plan starts from, for every engine: the operator's request resolved to a model config,
an architecture and the GPU's budget basis, and the --set value checks every engine's plan shares."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from kvscope.core.errors import InputError
from kvscope.model.arch import Architecture
from kvscope.model.overheads import BudgetBasis
from kvscope.model.weights import (
    GIB,
    ModelConfig,
    Parallel,
    WeightEstimate,
    WeightRules,
    estimate_weights,
    is_deepseek_v4,
    rope_dims,
)

if TYPE_CHECKING:
    pass


ALIASES = {"mfs": "mem_fraction_static", "util": "gpu_memory_utilization", "kv_dtype": "kv_cache_dtype",
           "context_len": "context_length", "tp": "tp_size", "spec": "speculative_algorithm",
           "dp_attention": "enable_dp_attention", "max_model_len": "max_model_len"}


@dataclass
class PlanRequest:
    """What the operator tells ``plan``: model, GPU, parallelism, engine, flags."""

    model: str
    gpu: str
    engine: str = "sglang"
    engine_version: str | None = None
    tp: int = 1
    dp: int = 1
    pp: int = 1
    ep: int = 1
    settings: dict[str, Any] = field(default_factory=dict)
    context: int | None = None


@dataclass
class Context:
    """Everything both engines share once the request is resolved."""

    req: PlanRequest
    mc: ModelConfig
    arch: Architecture
    basis: BudgetBasis
    settings: dict[str, Any]
    sm_major: int | None
    notes: list[str] = field(default_factory=list)
    weight_rules: WeightRules = field(default_factory=WeightRules)  # the engine's (engines/<engine>/__init__.py)


def normalise_settings(raw: dict[str, Any]) -> dict[str, Any]:
    """Engine flag spellings (--mem-fraction-static, mem-fraction-static, mfs) → option names."""
    out = {}
    for key, value in raw.items():
        k = key.strip().lstrip("-").replace("-", "_").lower()
        out[ALIASES.get(k, k)] = value
    return out


def _sm_major(gpu_label: str) -> int | None:
    """The GPU's compute-capability major, from its catalog entry; None for a GPU given by size."""
    from kvscope.model.catalog import gpus

    for g in gpus():
        if g["name"] == gpu_label and g.get("compute_capability"):
            return int(str(g["compute_capability"]).split(".")[0])
    return None


def _truthy(v: Any) -> bool:
    return v is True or str(v).lower() in ("1", "true", "yes", "on")


def _int(v: Any) -> int | None:
    """A count from --set: a whole number ≥ 0 (sizes and lengths are never negative)."""
    try:
        out = None if v is None else int(v)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"expected a whole number, got {v!r}") from None
    if out is not None and out < 0:
        raise InputError(f"expected a whole number ≥ 0, got {v!r}")
    return out


def _float(v: Any) -> float | None:
    """A figure from --set: finite (nan and inf would turn into nonsense token counts)."""
    try:
        out = None if v is None else float(v)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"expected a number, got {v!r}") from None
    if out is not None and not math.isfinite(out):
        raise InputError(f"expected a finite number, got {v!r}")
    return out


def _fraction(settings: dict[str, Any], key: str) -> float | None:
    """A share of the GPU (mem_fraction_static, gpu_memory_utilization): in (0, 1], else an input error."""
    value = _float(settings.get(key))
    if value is not None and not (0 < value <= 1):
        raise InputError(f"{key} is a share of the GPU, between 0 and 1; got {settings.get(key)!r}")
    return value


def _catalog_notes(asked: str, mc: ModelConfig) -> list[str]:
    """Say when the catalog stands in for another publisher's checkpoint of the same name (unsloth/… for
    nvidia/…): the architecture is the same, the quantization layout may not be."""
    if mc.local_dir is not None or "/" not in asked or "/" not in mc.name:
        return []
    publisher, used = asked.strip().split("/")[0], mc.name.split("/")[0]
    if not publisher or publisher.lower() == used.lower() or asked.startswith((".", "~")):
        return []
    return [f"{asked} is planned with the built-in catalog's {mc.name}: same name, another publisher; its "
            "quantization may be laid out differently (give the checkpoint's config.json to be sure)"]


def _dsv4_refusal(ctx: Context, why: str) -> str:
    """What plan can say about a DeepSeek-V4 model without a token count (its KV pools are not modelled).

    Why refuse: V4's pools are sized by engine rules of their own (SGLang's are replayed from 0.5.12,
    engines.sglang.dsv4; vLLM's are not); a token figure from the MLA/GQA formulas would be wrong by
    an order of magnitude. The weights and the budget basis are still worth saying.
    """
    req = ctx.req
    par = Parallel(tp=req.tp, ep=req.ep, pp=req.pp)  # no DP attention asked: every engine shards alike
    w = _weights(ctx, par)
    rope = rope_cache_bytes(ctx.mc.cfg, 4) / GIB
    free = ctx.basis.free_before_weights_gib
    left = free - w.gib - rope
    room = (f"leaving {left:.1f} GiB of the ≈ {free:.1f} GiB free before weights on {ctx.basis.gpu}" if left > 0
            else f"{-left:.1f} GiB more than the ≈ {free:.1f} GiB free before weights on {ctx.basis.gpu}: it does not fit")
    kept = next((n for n in w.notes if "float32 expert scales" in n), None)
    return (f"{ctx.mc.name}: DeepSeek-V4 keeps a 128-token sliding window, c4/c128-compressed pools and "
            f"indexer state per request; {why}, so plan gives no token count. What it can say: weights ≈ "
            f"{w.gib:.1f} GiB per GPU at TP{req.tp} ({w.quantization}) plus ≈ {rope:.1f} GiB of rope tables, {room}"
            + (f" ({kept})" if kept else "") + ". Start the server and run `kvscope explain` on its log for the "
            "real pool sizes.")


def _weights(ctx: Context, par: Parallel) -> WeightEstimate:
    """The weight estimate, or the operator's own figure (--set weights_gib=…) plus extras."""
    est = estimate_weights(ctx.mc, par, quantization=ctx.settings.get("quantization"), rules=ctx.weight_rules,
                           sm_major=ctx.sm_major)
    given = _float(ctx.settings.get("weights_gib"))
    if given is not None:
        est = replace(est, bytes_per_rank=int(given * GIB), by_component={"given": int(given * GIB)},
                      method="given (--set weights_gib)")
    extra = _float(ctx.settings.get("extra_weights_gib"))
    if extra:
        est.bytes_per_rank += int(extra * GIB)
        est.by_component["extra (given)"] = int(extra * GIB)
    return est


def rope_cache_bytes(cfg: dict[str, Any], element_bytes: int) -> int:
    """The cos/sin table both engines build at load time: positions × rotary dim × element size.

    SGLang keeps it in fp32 on CUDA, vLLM in the model dtype (vLLM's "Model loading took" for
    Llama-3.1-8B is exactly weights + 131072 × 128 × 2 B).
    """
    dims = rope_dims(cfg)
    if is_deepseek_v4(cfg):
        # two complex64 tables of rotary_dim / 2 (attention's and the compressor's rope; SGLang's
        # precompute_freqs_cis is an lru_cache of two): positions × rotary_dim × 8 B, whatever the engine
        return dims.positions * dims.rotary_dim * 8
    return dims.positions * dims.rotary_dim * element_bytes
