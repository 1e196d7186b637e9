"""``kvscope plan``: predict the KV pool of a deployment that has not run yet (no log).

A plan rebuilds, from catalog facts alone, the numbers a startup log would print:

    budget basis  F  = torch total − CUDA context − NCCL            (overheads.py; H200 measured)
    weights       W  = config.json × quantization, sharded per rank (weights.py)
    SGLang        rest = F × mem_fraction_static − W − load extras; tokens = rest // cell
    vLLM          K = T × gpu_memory_utilization − W − activation − non-torch [− graphs]; blocks = K // page

and applies the engine's automatic defaults the way the named release would (SGLang's auto
mem_fraction_static, chunk and graph buckets, spec-decoding request cap; vLLM's default
utilization and batch budget). Every figure carries how it was obtained, because a plan is only
as trustworthy as its least-known input — usually the weights on quantized MoE models and the
driver/context overheads on GPUs nobody measured."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvscope import engines
from kvscope.core.errors import InputError
from kvscope.model.arch import architecture_from_config
from kvscope.model.overheads import budget_basis
from kvscope.model.weights import (
    load_model_config,
)

if TYPE_CHECKING:
    pass
from kvscope.model.planning import (
    Context,
    PlanRequest,
    _catalog_notes,
    _sm_major,
    normalise_settings,
)

MAX_PARALLEL = 1 << 16


def resolve(req: PlanRequest) -> Context:
    """Model config, architecture and GPU basis; InputError when any is unknown."""
    planners = [e.name for e in engines.with_capability("plan")]
    if req.engine not in planners:
        raise InputError(f"--engine must be {' or '.join(planners)} (plan does not model {req.engine!r} yet)")
    engine = engines.get(req.engine)
    for name, value in (("--tp", req.tp), ("--dp", req.dp), ("--pp", req.pp), ("--ep", req.ep)):
        if value < 1:
            raise InputError(f"{name} must be at least 1")
        if value > MAX_PARALLEL:  # a loop runs per stage and rank: 2^31 of them is no deployment, and no answer
            raise InputError(f"{name} {value:,}: at most {MAX_PARALLEL:,} (no engine runs one model over more GPUs)")
    mc = load_model_config(req.model)
    if mc is None:
        raise InputError(f"model {req.model!r}: no config.json there and not in the built-in catalog "
                         "(give a local checkpoint directory or a catalog id; `kvscope plan --help`)")
    arch = architecture_from_config(mc.cfg, name=mc.name)
    if arch is None:
        raise InputError(f"model {req.model!r}: its config lacks the attention fields KV sizing needs")
    settings = normalise_settings(req.settings)
    basis = budget_basis(req.gpu, req.tp * req.pp, settings)
    return Context(req, mc, arch, basis, settings, _sm_major(basis.gpu), _catalog_notes(req.model, mc),
                   weight_rules=engine.weights)


def plan(req: PlanRequest) -> dict[str, Any]:
    """The prediction object (JSON-ready): inputs as resolved, ledger, KV tokens, concurrency, table."""
    ctx = resolve(req)
    body = engines.get(req.engine).plan(ctx)  # type: ignore[misc]
    arch = ctx.arch
    head = {
        "model": {"name": ctx.mc.name, "config_from": ctx.mc.source, "model_type": arch.model_type,
                  "attention": arch.attention, "layers": arch.num_layers,
                  "full_attention_layers": arch.full_attention_layers, "sliding_layers": arch.sliding_layers,
                  "kv_heads": arch.num_kv_heads, "head_dim": arch.head_dim},
        "gpu": ctx.basis.as_dict(),
        "parallel": {"tp": req.tp, "dp": req.dp, "pp": req.pp, "ep": req.ep},
        "inputs_from_log": False,
    }
    out = {**head, **body}
    out["measured_vs_estimated"] = _provenance(ctx, body)
    return out


def _provenance(ctx: Context, body: dict[str, Any]) -> dict[str, list[str]]:
    """Which inputs are measured, reported, computed or assumed — the plan's error bars in words."""
    b = ctx.basis
    measured, assumed, estimated = [], [], []
    for label, fig in (("torch total", b.torch_total), ("CUDA context", b.cuda_context), ("NCCL", b.nccl),
                       ("cuBLAS", b.cublas)):
        kind = measured if fig.how in ("measured", "reported", "given") else estimated if fig.how == "estimated" \
            else assumed
        kind.append(f"{label}: {fig.how}")
    weights = body["weights"]
    estimated.append(f"weights: {weights['method']} ({weights['quantization']})")
    estimated += engines.get(ctx.req.engine).plan_estimates
    computed = ["KV bytes per token: exact from config.json", "engine defaults: replayed from the release's recipe"]
    return {"measured_or_reported": measured, "assumed": assumed, "estimated": estimated, "computed": computed}


def summary_line(pred: dict[str, Any]) -> str:
    cap = pred["capacity"]
    conc = cap.get("max_concurrency")
    conc_s = "—" if conc is None else (f"{conc:.2f}" if isinstance(conc, float) else f"{conc:,}")
    return (f"{pred['engine']} {pred['engine_version']}: {cap['kv_tokens']:,} KV tokens per GPU{range_note(cap)}, "
            f"{conc_s} concurrent requests at {cap['context_tokens']:,} tokens")


def range_note(cap: dict[str, Any]) -> str:
    """' (likely 158,000–170,800: ±0.25 GiB of estimated inputs, the largest the activation peak)' — empty
    when nothing is uncertain."""
    lo, hi = cap.get("kv_tokens_range") or (None, None)
    spread = cap.get("range") or {}
    if lo is None or hi is None or lo == hi or not spread.get("gib"):
        return ""
    terms = spread.get("terms_gib") or {}
    largest = f", the largest the {next(iter(terms))}" if terms else ""
    return f" (likely {lo:,}–{hi:,}: ±{spread['gib']:.2f} GiB of estimated inputs{largest})"
