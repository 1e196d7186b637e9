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
driver/context overheads on GPUs nobody measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from kvscope.capacity.arch import Architecture, architecture_from_config, dtype_bytes
from kvscope.capacity.overheads import BudgetBasis, budget_basis
from kvscope.capacity.spread import Spread, sglang_spread, vllm_spread
from kvscope.capacity.weights import (
    GIB,
    ModelConfig,
    Parallel,
    WeightEstimate,
    estimate_weights,
    is_deepseek_v4,
    load_model_config,
    quant_plan,
    rope_dims,
    sglang_parallel,
    stage_layers,
    vision_profile_shape,
)
from kvscope.engines.sglang import defaults as sgd
from kvscope.engines.sglang import dsv4 as sg_dsv4
from kvscope.engines.sglang import eras as sg_eras
from kvscope.engines.sglang import rules as sg_rules
from kvscope.engines.sglang.load_memory import rope_table_bytes, sglang_load_memory
from kvscope.errors import InputError

if TYPE_CHECKING:
    from kvscope.capacity.plan_vllm_spec import VllmDraft

SGLANG_NEWEST = "0.5.23"
VLLM_NEWEST = "0.33.0"
ALIASES = {"mfs": "mem_fraction_static", "util": "gpu_memory_utilization", "kv_dtype": "kv_cache_dtype",
           "context_len": "context_length", "tp": "tp_size", "spec": "speculative_algorithm",
           "dp_attention": "enable_dp_attention", "max_model_len": "max_model_len"}
VLLM_GRAPH_GIB = 0.5  # typical CUDA-graph estimate vLLM ≥0.20 subtracts; assumed, not measured
# The dummy sampler run of the profile (max_num_seqs rows of logits, top-k and top-p both on, the
# PyTorch sort path) holds about ten fp32 copies of the logits at its peak: the model-dtype logits
# (½), their fp32 copy (1), sorted values (1) and int64 indices (2), the sort's double buffers (3),
# softmax (1), the scattered result (1), two masks (½). Measured: a torch peak increase of 5.62 GiB
# for 1,024 rows × 151,936 (Qwen3-235B-A22B-FP8, TP4, H200; vLLM PR #21429's debug line) = 38.8 B
# per logit; this count gives 40.
VLLM_SAMPLER_BYTES_PER_LOGIT = 40


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


def normalise_settings(raw: dict[str, Any]) -> dict[str, Any]:
    """Engine flag spellings (--mem-fraction-static, mem-fraction-static, mfs) → option names."""
    out = {}
    for key, value in raw.items():
        k = key.strip().lstrip("-").replace("-", "_").lower()
        out[ALIASES.get(k, k)] = value
    return out


def _sm_major(gpu_label: str) -> int | None:
    """The GPU's compute-capability major, from its catalog entry; None for a GPU given by size."""
    from kvscope.capacity.catalog import gpus

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


def resolve(req: PlanRequest) -> Context:
    """Model config, architecture and GPU basis; InputError when any is unknown."""
    if req.engine not in ("sglang", "vllm"):
        raise InputError(f"--engine must be sglang or vllm (plan does not model {req.engine!r} yet)")
    for name, value in (("--tp", req.tp), ("--dp", req.dp), ("--pp", req.pp), ("--ep", req.ep)):
        if value < 1:
            raise InputError(f"{name} must be at least 1")
    mc = load_model_config(req.model)
    if mc is None:
        raise InputError(f"model {req.model!r}: no config.json there and not in the built-in catalog "
                         "(give a local checkpoint directory or a catalog id; `kvscope plan --help`)")
    arch = architecture_from_config(mc.cfg, name=mc.name)
    if arch is None:
        raise InputError(f"model {req.model!r}: its config lacks the attention fields KV sizing needs")
    settings = normalise_settings(req.settings)
    basis = budget_basis(req.gpu, req.tp * req.pp, settings)
    ctx = Context(req, mc, arch, basis, settings, _sm_major(basis.gpu), _catalog_notes(req.model, mc))
    if is_deepseek_v4(mc.cfg) and req.engine != "sglang":
        raise InputError(_dsv4_refusal(ctx, "vLLM's DeepSeek-V4 block layout is not modelled by plan yet"))
    return ctx


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
    par = sglang_parallel(req.tp, ep=req.ep, pp=req.pp) if req.engine == "sglang" else \
        Parallel(tp=req.tp, ep=req.ep, pp=req.pp)
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
    est = estimate_weights(ctx.mc, par, quantization=ctx.settings.get("quantization"), engine=ctx.req.engine,
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


# ------------------------------------------------------------------------------------------------
# SGLang
# ------------------------------------------------------------------------------------------------


@dataclass
class SglangKnobs:
    """The server args a plan resolves (given or automatic)."""

    version: sg_eras.Version
    mfs: float
    mfs_choice: sgd.MfsChoice | None
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    kv_cache_dtype: str
    page_size: int
    spec: str | None
    spec_params: tuple[int, int, int] | None
    max_running_requests: int | None
    max_total_tokens: int | None
    dp_attention: bool
    context_len: int
    origin: dict[str, str]


def _sg_version(ctx: Context) -> tuple[sg_eras.Version, str]:
    text = ctx.req.engine_version or SGLANG_NEWEST
    v = sg_eras.parse_version(text)
    if v is None:
        raise InputError(f"--engine-version {text!r} is not a version number")
    return v, ("given" if ctx.req.engine_version else f"assumed (newest documented, {SGLANG_NEWEST})")


def _sg_knobs(ctx: Context) -> SglangKnobs:
    s, arch, req = ctx.settings, ctx.arch, ctx.req
    version, vhow = _sg_version(ctx)
    origin = {"engine_version": vhow}
    dp_attn = _truthy(s.get("enable_dp_attention")) and req.dp > 1
    spec = s.get("speculative_algorithm")
    spec = str(spec).upper() if spec and str(spec).lower() not in ("none", "null") else None
    gpu_mib = ctx.basis.nvidia_smi_total_mib
    chunk0, bs0 = sgd.gpu_bucket_defaults(version, gpu_mib, req.tp)
    chunk = _int(s.get("chunked_prefill_size")) or chunk0
    max_bs = _int(s.get("cuda_graph_max_bs")) or bs0
    origin["chunked_prefill_size"] = "given" if s.get("chunked_prefill_size") else "auto (GPU-size bucket)"
    origin["cuda_graph_max_bs"] = "given" if s.get("cuda_graph_max_bs") else "auto (GPU-size bucket)"
    mfs_given = _fraction(s, "mem_fraction_static")
    choice = None
    if mfs_given is None:
        piece = None
        if s.get("disable_piecewise_cuda_graph") is not None:
            piece = not _truthy(s["disable_piecewise_cuda_graph"])
        if s.get("enable_piecewise_cuda_graph") is not None:
            piece = _truthy(s["enable_piecewise_cuda_graph"])
        choice = sgd.auto_mem_fraction_static(version, sgd.MemoryInputs(
            gpu_mib, tp=req.tp, pp=req.pp, dp=req.dp, dp_attention=dp_attn, speculative_algorithm=spec,
            chunked_prefill_size=_int(s.get("chunked_prefill_size")), cuda_graph_max_bs=_int(s.get("cuda_graph_max_bs")),
            piecewise=piece, mla=arch.attention == "mla", deepep=str(s.get("moe_a2a_backend", "")).lower() == "deepep",
            post_capture=_truthy(s.get("post_capture_kv_sizing"))))
        mfs = choice.value
        origin["mem_fraction_static"] = "auto"
    else:
        mfs = mfs_given
        origin["mem_fraction_static"] = "given"
    page = _int(s.get("page_size")) or 1
    kv_dtype = str(s.get("kv_cache_dtype") or "auto")
    origin["kv_cache_dtype"] = "given" if s.get("kv_cache_dtype") else "auto (model dtype)"
    if arch.index_head_dim:
        page, kv_dtype = sgd.dsa_defaults(version, ctx.sm_major, s.get("kv_cache_dtype"))
        origin["page_size"] = "auto (DSA forces 64)"
        if not s.get("kv_cache_dtype"):
            origin["kv_cache_dtype"] = f"auto (DSA on SM{ctx.sm_major or '?'})"
    spec_params = None
    mrr = _int(s.get("max_running_requests"))
    if mrr is not None and mrr < 1:
        raise InputError(f"max_running_requests must be at least 1, got {mrr}")
    if is_deepseek_v4(ctx.mc.cfg):
        if version < sg_dsv4.FIRST_RELEASE:
            raise InputError(_dsv4_refusal(ctx, f"SGLang {sg_eras.fmt(version)} predates DeepSeek-V4 support "
                                                f"(0.5.12; name a newer --engine-version)"))
        given_page, given_kv = s.get("page_size"), s.get("kv_cache_dtype")
        page, kv_dtype = sg_dsv4.PAGE, "fp8_e4m3"
        origin["page_size"] = "forced by DeepSeek-V4" + (f" (the given {given_page} is replaced)"
                                                       if given_page and _int(given_page) != page else "")
        origin["kv_cache_dtype"] = "DeepSeek-V4's fp8 pools" + (f" (a given {given_kv} is not modelled)"
                                                              if given_kv and "fp8" not in str(given_kv) else "")
        if mrr is None:
            mrr, origin["max_running_requests"] = sg_dsv4.DEFAULT_MAX_RUNNING_REQUESTS, "auto (DeepSeek-V4: 256)"
    if spec:
        spec_params = sgd.spec_params((ctx.mc.cfg.get("architectures") or [""])[0], _int(s.get("speculative_num_steps")),
                                      _int(s.get("speculative_eagle_topk")), _int(s.get("speculative_num_draft_tokens")))
        auto_mrr = sgd.spec_default_max_running_requests(version, spec, mrr)
        if mrr is None and auto_mrr is not None:
            origin["max_running_requests"] = "auto (48 with speculative decoding)"
        mrr = auto_mrr
    context = _int(s.get("context_length")) or req.context or arch.max_position_embeddings or 4096
    return SglangKnobs(version, mfs, choice, chunk, max_bs, kv_dtype, page, spec, spec_params, mrr,
                       _int(s.get("max_total_tokens")), dp_attn, context, origin)


DSA_FP8_ROW_EXTRA = 80  # fp8 DSA stores 512 + 16 scale bytes + 2 × 64 rope = 656 B per layer, not 576


def _sg_cell(ctx: Context, k: SglangKnobs, era: sg_eras.Era, attn_tp: int, kv_dtype: str
             ) -> tuple[sg_rules.CellSize, int]:
    """(the cell the profile divides by, the bytes per token the pool really allocates)."""
    arch = ctx.arch
    kvb = dtype_bytes(kv_dtype, arch.torch_dtype)
    swa = arch.sliding_layers and arch.model_type not in sgd.HYBRID_SWA_DISABLED_TYPES
    n_layers = (arch.full_attention_layers or 0) + arch.sliding_layers if swa else None
    if ctx.req.pp > 1 and (swa or not arch.full_attention_layers):
        # each pipeline stage pools its own layers; the busiest stage sets the count (a sliding-window
        # model's stage keeps the model's full/sliding mix, which the split below applies)
        n_layers = max(len(stage_layers(arch.num_layers, ctx.req.pp, st)) for st in range(ctx.req.pp))
    real = sg_rules.cell_size(arch, kvb, attn_tp, era, layers=n_layers)
    profiled_arch = arch if sgd.dsa_indexer_in_profile(k.version) else replace(arch, index_head_dim=None)
    cell = sg_rules.cell_size(profiled_arch, kvb, attn_tp, era, layers=n_layers)
    alloc = real.bytes_per_token
    if arch.index_head_dim and kvb == 1:
        alloc += DSA_FP8_ROW_EXTRA * real.layers
        if era.mla_real_row:
            cell = replace(cell, bytes_per_token=cell.bytes_per_token + DSA_FP8_ROW_EXTRA * cell.layers,
                           formula=cell.formula + " + fp8 row scales/rope (≥0.5.18)")
    if era.draft_cell_inflation and k.spec:
        draft_layers = _int(ctx.settings.get("draft_layers")) or arch.nextn_layers or 1
        cell = replace(cell, bytes_per_token=cell.bytes_per_token + int(cell.bytes_per_token * draft_layers / cell.layers),
                       formula=cell.formula + f" + draft share × {draft_layers}/{cell.layers} layers (≥0.5.14)")
    return cell, alloc


def _sg_tokens(rest_bytes: int, cell: int, k: SglangKnobs, arch: Architecture) -> tuple[int, int, list[str]]:
    """(profiled, final full-layer tokens, steps) applying SGLang's clamps in code order (§2.3)."""
    steps = []
    profiled = max(0, rest_bytes) // cell
    tokens = profiled
    if k.max_total_tokens is not None and k.max_total_tokens < tokens:
        tokens = k.max_total_tokens
        steps.append(f"--max-total-tokens caps it at {tokens:,}")
    if k.page_size > 1:
        tokens = tokens // k.page_size * k.page_size
        steps.append(f"page floor ({k.page_size})")
    if arch.sliding_layers and arch.model_type not in sgd.HYBRID_SWA_DISABLED_TYPES and arch.full_attention_layers:
        nf, ns = arch.full_attention_layers, arch.sliding_layers
        tokens = int(tokens * (nf + ns) / (nf + sgd.SWA_FULL_TOKENS_RATIO * ns))
        steps.append(f"sliding-window split: full-layer tokens = tokens × {nf + ns}/({nf} + 0.8 × {ns})")
    return profiled, tokens, steps


def _sg_scenario(ctx: Context, k: SglangKnobs, basis_free: float, weights_gib: float, load_extra_gib: float,
                 attn_tp: int) -> dict[str, Any]:
    """Tokens, concurrency and reserve for one set of knobs (the table varies mfs and the KV dtype)."""
    if is_deepseek_v4(ctx.mc.cfg):
        return _sg_dsv4_scenario(ctx, k, basis_free * k.mfs - weights_gib - load_extra_gib, basis_free)
    era = sg_eras.era_for(k.version)
    cell, alloc_bpt = _sg_cell(ctx, k, era, attn_tp, k.kv_cache_dtype)
    rest_gib = basis_free * k.mfs - weights_gib - load_extra_gib
    profiled, tokens, steps = _sg_tokens(int(rest_gib * GIB), cell.bytes_per_token, k, ctx.arch)
    headroom = 0
    pool = sgd.request_pool(k.version, profiled, tokens, k.context_len, k.max_running_requests, ctx.req.dp,
                            k.dp_attention)
    if k.spec and k.spec_params and era.eagle_token_headroom:
        headroom = sgd.eagle_token_headroom(pool.rows, *k.spec_params, k.version)
        tokens += headroom
        steps.append(f"E0 EAGLE headroom +{headroom:,} tokens")
    req_pool_gib = sgd.request_pool_bytes(pool.rows, k.context_len, (k.spec_params or (0, 0, 0))[2], k.version) / GIB
    kv_gib = (tokens + max(1, k.page_size)) * alloc_bpt / GIB
    reserve = basis_free * (1 - k.mfs) - req_pool_gib - max(0.0, kv_gib - max(0.0, rest_gib))
    if alloc_bpt > cell.bytes_per_token:
        steps.append(f"the pool allocates {alloc_bpt:,} B/token but the profile budgeted {cell.bytes_per_token:,}: "
                     f"{kv_gib - tokens * cell.bytes_per_token / GIB:.2f} GiB comes out of the reserve")
    per_request = tokens // k.context_len if k.context_len else None
    concurrency = None if per_request is None else min(per_request, pool.max_running_requests)
    dp_groups = ctx.req.dp if k.dp_attention else 1
    return {"kv_tokens": tokens, "profiled_tokens": profiled, "rest_gib": rest_gib, "bytes_per_token": cell.bytes_per_token,
            "cell_formula": cell.formula, "kv_pool_gib": kv_gib, "alloc_bytes_per_token": alloc_bpt, "steps": steps, "eagle_headroom_tokens": headroom,
            "request_pool_rows": pool.rows, "request_pool_gib": req_pool_gib, "request_pool_rule": pool.rule,
            "max_running_requests": pool.max_running_requests, "requests_at_context": per_request,
            "concurrency": concurrency, "reserve_left_gib": reserve, "dp_groups": dp_groups,
            "system_kv_tokens": tokens * dp_groups}


def _sg_dsv4_scenario(ctx: Context, k: SglangKnobs, rest_gib: float, basis_free: float) -> dict[str, Any]:
    """DeepSeek-V4: the same budget, divided by V4's bytes per full token after its fixed states."""
    dp_groups = ctx.req.dp if k.dp_attention else 1
    requests = max(1, (k.max_running_requests or sg_dsv4.DEFAULT_MAX_RUNNING_REQUESTS) // dp_groups)
    given_ratio = ctx.settings.get("swa_full_tokens_ratio")
    ratio = sg_dsv4.SWA_RATIO if given_ratio is None else _float(given_ratio)
    try:
        sz = sg_dsv4.sizing(ctx.mc.cfg, k.version, bool(k.spec), requests, ctx.sm_major, ratio, ctx.req.pp)
    except ValueError as exc:
        raise InputError(f"DeepSeek-V4 pools: {exc}") from None
    tokens = sg_dsv4.full_tokens(int(rest_gib * GIB), sz, k.max_total_tokens)
    steps = [f"{sz.era}: ({rest_gib:.2f} GiB − {sz.fixed_bytes / GIB:.2f} GiB fixed) ÷ {sz.bytes_per_full_token:,.2f} B, "
             f"floored to a {sg_dsv4.PAGE}-token page"]
    kv_gib = (tokens * sz.bytes_per_full_token + sz.fixed_bytes) / GIB if tokens else 0.0
    req_pool_gib = sgd.request_pool_bytes(requests, k.context_len, 0, k.version) / GIB
    reserve = basis_free * (1 - k.mfs) - req_pool_gib - max(0.0, kv_gib - max(0.0, rest_gib))
    per_request = tokens // k.context_len if k.context_len else None
    concurrency = None if per_request is None else min(per_request, requests)
    no_room = None
    if tokens == 0 and rest_gib > 0 and sz.fixed_bytes >= rest_gib * GIB:
        no_room = (f"no KV room: the fixed ratio-128 compress states ({sz.fixed_bytes / GIB:.2f} GiB for {requests} "
                   f"request slots) take the whole {rest_gib:.2f} GiB budget; SGLang would refuse to start — lower "
                   "--max-running-requests or raise --mem-fraction-static")
    return {"kv_tokens": tokens, "profiled_tokens": tokens, "rest_gib": rest_gib,
            "bytes_per_token": round(sz.bytes_per_full_token), "cell_formula": sz.formula, "kv_pool_gib": kv_gib,
            "alloc_bytes_per_token": round(sz.bytes_per_full_token), "steps": steps, "eagle_headroom_tokens": 0,
            "request_pool_rows": requests, "request_pool_gib": req_pool_gib,
            "request_pool_rule": "DeepSeek-V4: max_running_requests per rank", "max_running_requests": requests,
            "requests_at_context": per_request, "concurrency": concurrency, "reserve_left_gib": reserve,
            "dp_groups": dp_groups, "system_kv_tokens": tokens * dp_groups, "no_room": no_room,
            "kv_pool_label": f"KV pools: {tokens:,} tokens × {sz.bytes_per_full_token:,.2f} B"
                             + (f" + {sz.fixed_bytes / GIB:.2f} GiB of ratio-128 states" if sz.fixed_bytes and tokens
                                else "")}


def plan_sglang(ctx: Context) -> dict[str, Any]:
    k = _sg_knobs(ctx)
    era = sg_eras.era_for(k.version)
    req = ctx.req
    attn_tp = max(1, req.tp // req.dp) if k.dp_attention else req.tp
    par = sglang_parallel(req.tp, attn_tp, ep=req.ep, pp=req.pp, dp_attention=k.dp_attention)
    w = _weights(ctx, par)
    rope, slack = _sg_load_extras(ctx, par, k.version)
    draft = _float(ctx.settings.get("draft_weights_gib")) or 0.0
    load_extra = rope + slack + (draft if era.draft_in_static_budget else 0.0)
    F = ctx.basis.free_before_weights_gib
    base = _sg_scenario(ctx, k, F, w.gib, load_extra, attn_tp)
    spread = sglang_spread(ctx.basis, k.mfs, w.as_dict(), replayed=slack > 0)
    token_range = [_sg_scenario(ctx, k, F, w.gib, load_extra + d, attn_tp)["kv_tokens"]
                   for d in (spread.gib, -spread.gib)]
    needed = None
    if k.mfs_choice is None:
        needed = sgd.auto_mem_fraction_static(k.version, sgd.MemoryInputs(
            ctx.basis.nvidia_smi_total_mib, tp=req.tp, pp=req.pp, dp=req.dp, dp_attention=k.dp_attention,
            speculative_algorithm=k.spec, chunked_prefill_size=k.chunked_prefill_size,
            cuda_graph_max_bs=k.cuda_graph_max_bs, mla=ctx.arch.attention == "mla"))
    else:
        needed = k.mfs_choice
    rows = _sg_table(ctx, k, F, w.gib, load_extra, attn_tp, needed)
    warnings = list(ctx.notes) + w.notes + ctx.basis.notes
    if k.spec and not era.draft_in_static_budget:
        warnings.append("draft model weights, KV and graphs come out of the (1 − mem_fraction_static) reserve in "
                        "this release (they are not in the KV budget)")
    if k.spec and era.draft_in_static_budget and not draft:
        warnings.append("≥0.5.14 charges the draft weights to the static budget: give --set draft_weights_gib=… "
                        "(not counted here)")
    if 0 < base["kv_tokens"] < k.context_len:
        warnings.append(f"one request of the full context ({k.context_len:,} tokens) does not fit in "
                        f"{base['kv_tokens']:,} KV tokens: SGLang caps requests at {base['kv_tokens'] - 1:,} tokens")
    if base.get("no_room"):
        warnings.append(base["no_room"])
    elif base["kv_tokens"] <= 0:
        warnings.append("no KV room: the weights do not fit under mem_fraction_static × free memory; the server "
                        "would stop with 'Not enough memory' / 'leave no GPU memory for the KV cache'")
    ledger = _sg_ledger(ctx, k, w, (rope, slack), draft if era.draft_in_static_budget else 0.0, base, needed)
    return {
        "engine": "sglang", "engine_version": sg_eras.fmt(k.version), "era": era.name,
        "settings": _effective_mrr(_sg_settings(ctx, k), base), "auto_mem_fraction_static": k.mfs_choice.as_dict() if k.mfs_choice else None,
        "sglang_reserve_estimate_gib": needed.reserved_gib if needed else None,
        "weights": w.as_dict(), "ledger": ledger,
        "kv": {"kv_cache_dtype": k.kv_cache_dtype, "page_size": k.page_size, "bytes_per_token": base["bytes_per_token"],
               "formula": base["cell_formula"], "kv_tokens": base["kv_tokens"], "kv_pool_gib": base["kv_pool_gib"],
               "profiled_tokens": base["profiled_tokens"], "steps": base["steps"],
               "system_kv_tokens": base["system_kv_tokens"], "dp_groups": base["dp_groups"]},
        "capacity": {"kv_tokens": base["kv_tokens"], "context_tokens": k.context_len,
                     "requests_at_context": base["requests_at_context"],
                     "max_running_requests": base["max_running_requests"], "max_concurrency": base["concurrency"],
                     "system_max_concurrency": None if base["concurrency"] is None
                     else base["concurrency"] * base["dp_groups"],
                     "kv_tokens_range": token_range, "range": spread.as_dict()},
        "table": rows, "warnings": warnings,
    }


def _sg_settings(ctx: Context, k: SglangKnobs) -> dict[str, Any]:
    kv = k.kv_cache_dtype
    if kv == "auto":
        kv = f"auto → {(ctx.arch.torch_dtype or 'bfloat16').replace('torch.', '')}"
    values = {"engine_version": sg_eras.fmt(k.version), "mem_fraction_static": k.mfs,
              "chunked_prefill_size": k.chunked_prefill_size, "cuda_graph_max_bs": k.cuda_graph_max_bs,
              "kv_cache_dtype": kv, "page_size": k.page_size, "context_length": k.context_len,
              "max_running_requests": k.max_running_requests, "speculative_algorithm": k.spec,
              "enable_dp_attention": k.dp_attention}
    if k.spec_params:
        values["speculative (steps, topk, draft tokens)"] = list(k.spec_params)
    origin = dict(k.origin)
    for key in values:
        if key in ctx.settings and key not in origin:
            origin[key] = "given"
    if "context_length" not in ctx.settings:
        origin["context_length"] = "given (--context)" if ctx.req.context else "model config (max_position_embeddings)"
    if k.spec_params:
        origin.setdefault("speculative (steps, topk, draft tokens)", "auto (by architecture)")
    return {key: {"value": v, "from": origin.get(key, "default")} for key, v in values.items()}


def _effective_mrr(settings: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """Show the request cap SGLang ends up with when the flag was not given."""
    entry = settings["max_running_requests"]
    if entry["value"] is None:
        settings["max_running_requests"] = {"value": base["max_running_requests"],
                                            "from": f"auto ({base['request_pool_rule']})"}
    return settings


def _sg_table(ctx: Context, k: SglangKnobs, F: float, w: float, extra: float, attn_tp: int,
              needed: sgd.MfsChoice | None) -> list[dict[str, Any]]:
    """flag → tokens → concurrency → reserve left, around the resolved mem_fraction_static."""
    rows = []
    fp8 = "fp8_e4m3"
    variants: list[tuple[str, SglangKnobs]] = [("(as planned)", k)]
    for delta in (-0.04, -0.02, 0.02, 0.04):
        mfs = round(k.mfs + delta, 3)
        if 0.3 < mfs < 0.99:
            variants.append((f"--mem-fraction-static {mfs}", replace(k, mfs=mfs)))
    if is_deepseek_v4(ctx.mc.cfg):
        slots = k.max_running_requests or sg_dsv4.DEFAULT_MAX_RUNNING_REQUESTS
        if k.version >= (0, 5, 15) and slots >= 8:  # fixed ratio-128 states scale with the slots
            variants.append((f"--max-running-requests {slots // 4}", replace(k, max_running_requests=slots // 4)))
    elif dtype_bytes(k.kv_cache_dtype, ctx.arch.torch_dtype) > 1:
        variants.append((f"--kv-cache-dtype {fp8}", replace(k, kv_cache_dtype=fp8)))
    need = needed.reserved_gib if needed and needed.reserved_gib else None
    for flag, kk in variants:
        sc = _sg_scenario(ctx, kk, F, w, extra, attn_tp)
        risk = "—" if need is None else _risk(sc["reserve_left_gib"], need)
        rows.append({"flag": flag, "mem_fraction_static": kk.mfs, "kv_tokens": sc["kv_tokens"],
                     "concurrency_at_context": sc["concurrency"], "reserve_left_gib": sc["reserve_left_gib"],
                     "oom_risk": risk})
    return rows


def _risk(reserve_gib: float, needed_gib: float) -> str:
    """Reserve left vs SGLang's own estimate R of what graphs and activations need (its default leaves ≈ R)."""
    if reserve_gib >= 0.9 * needed_gib:
        return "low"
    return "tight" if reserve_gib >= 0.6 * needed_gib else "high"


def _sg_load_extras(ctx: Context, par: Parallel, version: tuple[int, ...]) -> tuple[float, float]:
    """(rope tables, allocator slack) in GiB: what SGLang's load takes beyond the weights.

    Both come from replaying the load through the caching allocator (engines.sglang.load_memory); the
    slack is what its segments hold beyond the tensors. Without a replay (a DeepSeek-V4 model, whose
    load is not listed; the operator's own weights figure) the rope tables alone, and no slack.
    """
    cfg = ctx.mc.cfg
    if is_deepseek_v4(cfg):
        return rope_cache_bytes(cfg, 4) / GIB, 0.0
    if ctx.settings.get("weights_gib") is None:
        plan = quant_plan(cfg, ctx.settings.get("quantization"))
        loads = [sglang_load_memory(cfg, par, plan, version, stage=st) for st in range(par.pp)]
        lm = max((x for x in loads if x is not None), key=lambda x: x.reserved_bytes, default=None)
        if lm is not None:
            return lm.rope_bytes / GIB, lm.allocator_slack_bytes / GIB
    return rope_table_bytes(cfg, version) / GIB, 0.0


def _sg_ledger(ctx: Context, k: SglangKnobs, w: WeightEstimate, extras: tuple[float, float], draft: float,
               base: dict[str, Any], needed: sgd.MfsChoice | None) -> list[dict[str, Any]]:
    rope, slack = extras
    b = ctx.basis
    F = b.free_before_weights_gib
    rows = [
        ("nvidia-smi total", b.smi_total_gib, "catalog"),
        ("driver-reserved slice", b.torch_total.gib - b.smi_total_gib, b.torch_total.how),
        ("CUDA context", -b.cuda_context.gib, b.cuda_context.how),
        ("NCCL communicators", -b.nccl.gib, b.nccl.how),
        ("= free before weights (F)", F, "derived"),
        ("weights per rank", -w.gib, w.method),
        ("rope cos/sin tables (fp32)", -rope, "computed"),
    ]
    if slack:
        rows.append(("caching-allocator rounding and holes", -slack, "replayed"))
    if draft:
        rows.append(("draft weights (static budget ≥0.5.14)", -draft, "given"))
    rows += [
        (f"static budget F × mem_fraction_static {k.mfs}", F * k.mfs, k.origin.get("mem_fraction_static", "")),
        ("KV budget (rest)", base["rest_gib"], "derived"),
        (base.get("kv_pool_label") or f"KV pool {base['kv_tokens']:,} tokens × {base['bytes_per_token']:,} B",
         base["kv_pool_gib"], "derived"),
        (f"reserve F × (1 − {k.mfs})", F * (1 - k.mfs), "derived"),
        ("request pool (req_to_token)", -base["request_pool_gib"], "derived"),
        ("reserve left for graphs / activations / draft", base["reserve_left_gib"], "derived"),
    ]
    if needed and needed.reserved_gib:
        rows.append(("SGLang's own reserve estimate R", needed.reserved_gib, "auto-default recipe"))
    return [{"item": item, "gib": gib, "how": how} for item, gib, how in rows]


# ------------------------------------------------------------------------------------------------
# vLLM
# ------------------------------------------------------------------------------------------------


def _vllm_modules():
    """The vLLM helper's sizing rules (shared with explain/whatif)."""
    from kvscope.engines.vllm import eras as v_eras
    from kvscope.engines.vllm import rules as v_rules

    return v_eras, v_rules


def vllm_non_torch_parts(version: tuple[int, int, int], engine: str) -> tuple[tuple[str, ...], str]:
    """Which non-torch memory vLLM charges to its budget, by where its snapshot sits (doc §1.2–1.3)."""
    if engine == "V0":
        if version == (0, 6, 4):
            return ("context", "communicators", "cublas"), "V0 0.6.4: all non-torch memory (context, NCCL, cuBLAS)"
        return ("communicators", "cublas"), "V0: NCCL and cuBLAS (baseline taken before NCCL)"
    if version <= (0, 9, 0):
        return ("context", "communicators", "cublas"), "V1 ≤0.9.0: all non-torch memory (context, NCCL, cuBLAS)"
    if version < (0, 11, 0):
        return ("communicators", "cublas"), "V1 0.9.1–0.10: NCCL and cuBLAS (snapshot before NCCL)"
    return ("cublas",), "V1 ≥0.11: cuBLAS only (NCCL is initialised before the snapshot)"


def vllm_non_torch_gib(version: tuple[int, int, int], engine: str, basis: BudgetBasis) -> tuple[float, str]:
    """Non-torch memory vLLM charges to its budget (GiB) and why."""
    parts, how = vllm_non_torch_parts(version, engine)
    figures = {"context": basis.cuda_context.gib, "communicators": basis.profile_nccl.gib, "cublas": basis.cublas.gib}
    return sum(figures[p] for p in parts), how


def vllm_batch_defaults(version: tuple[int, int, int], engine: str, gpu_gib: float, gpu_label: str,
                        max_model_len: int, offline: bool) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) the profile run uses when not given."""
    if engine == "V0":
        tokens = max(max_model_len, 2048) if max_model_len <= 32768 else 2048
        return tokens, 256
    big = gpu_gib >= 70 and "A100" not in gpu_label.upper()
    if offline:
        return (16384, 1024) if big else (8192, 256)
    return (8192, 1024) if big else (2048, 256)


def vllm_activation_gib(cfg: dict[str, Any], tp: int, tokens: int, seqs: int) -> float:
    """Peak torch memory of the profile run beyond the weights (first principles, per rank).

    Forward: the MLP holds gate_up (2I) and its activation (I) next to ~3 hidden-size buffers per
    token (dense), or top-k × (3N + H) in the fused-MoE caches. Sampler: the dummy sampler run's
    copies of max_num_seqs rows of logits (VLLM_SAMPLER_BYTES_PER_LOGIT). The two are not alive at
    once. (On the V0 RTX 3090 Llama-3.1-8B log the forward gives 2.06 GiB at 20,000 tokens and 2.99
    at 29,000 vs the logged 2.07 and 2.99.)
    """
    forward_bytes, sampler_bytes = _vllm_profile_bytes(cfg, tp, tokens, seqs)
    return max(forward_bytes, sampler_bytes) / GIB


def vllm_sampler_dominates(cfg: dict[str, Any], tp: int, tokens: int, seqs: int) -> bool:
    """Whether the dummy sampler run, not the forward pass, sets the profile's activation peak (its spread
    is wider: which sampler path a deployment takes is not in the launch)."""
    forward_bytes, sampler_bytes = _vllm_profile_bytes(cfg, tp, tokens, seqs)
    return sampler_bytes > forward_bytes


def _vllm_profile_bytes(cfg: dict[str, Any], tp: int, tokens: int, seqs: int) -> tuple[int, int]:
    """(forward, dummy sampler run) bytes of vLLM's profile run on one rank."""
    h = int(cfg["hidden_size"])
    vocab = int(cfg.get("vocab_size") or 32000)
    mlp_values_per_token = 3 * max(1, int(cfg.get("intermediate_size") or 4 * h) // tp)
    if cfg.get("n_routed_experts") or cfg.get("num_experts") or cfg.get("num_local_experts"):
        n = int(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or h) // tp
        topk = int(cfg.get("num_experts_per_tok") or 8)
        dense = mlp_values_per_token if cfg.get("first_k_dense_replace") else 0
        mlp_values_per_token = max(dense, topk * (3 * n + h))
    forward_bytes = tokens * (mlp_values_per_token + 3 * h) * 2
    sampler_bytes = seqs * vocab * VLLM_SAMPLER_BYTES_PER_LOGIT + seqs * h * 2
    return forward_bytes, sampler_bytes


def vllm_encoder_profile(cfg: dict[str, Any], settings: dict[str, Any], batched_tokens: int
                         ) -> tuple[float, str] | None:
    """(GiB, what) of the profile run's dummy encoder batch for a multimodal model, V1 engine.

    vLLM profiles the vision encoder first, at its budget: max(max_num_batched_tokens, the most
    tokens one image makes), so that many images of the largest size (one, unless the batch budget
    is larger). The ViT runs over every patch before the merge (k² per token); its peak is the MLP's
    input, output and activation with the residual stream: ~(2·mlp + 4·h) values per patch, plus the
    pixel values. This is alive before the language model's dummy run, not with it: the peak is
    the larger of the two. None: text only (``limit_mm_per_prompt`` all zero, ``language_model_only``,
    ``skip_mm_profiling``) or a tower whose shape or image limit is not known.
    """
    if any(_truthy(settings.get(k)) for k in ("language_model_only", "skip_mm_profiling")):
        return None
    limits = settings.get("limit_mm_per_prompt")
    if isinstance(limits, dict) and not any(_int(limits.get(k)) for k in ("image", "video")):
        return None
    shape = vision_profile_shape(cfg)
    if shape is None:
        return None
    per_item = shape["tokens_per_item"]
    items = max(1, max(batched_tokens, per_item) // per_item)
    patches = items * per_item * shape["merge"] ** 2
    peak = patches * ((2 * shape["mlp"] + 4 * shape["hidden"]) + shape["pixel_values"]) * 2
    what = f"encoder dummy batch: {items} image(s) of {per_item:,} tokens = {patches:,} patches"
    return peak / GIB, what


def _vllm_version(ctx: Context) -> tuple[tuple[int, int, int], str]:
    v_eras, _ = _vllm_modules()
    text = ctx.req.engine_version or VLLM_NEWEST
    v = v_eras.parse_version(text)
    if v is None:
        raise InputError(f"--engine-version {text!r} is not a version number")
    return v, ("given" if ctx.req.engine_version else f"assumed (newest documented, {VLLM_NEWEST})")


def plan_vllm(ctx: Context) -> dict[str, Any]:
    v_eras, v_rules = _vllm_modules()
    s, req, arch, b = ctx.settings, ctx.req, ctx.arch, ctx.basis
    version, vhow = _vllm_version(ctx)
    engine = str(s.get("engine") or ("V1" if version >= (0, 8, 0) else "V0")).upper()
    era = v_eras.era_for(version, engine)
    util = _fraction(s, "gpu_memory_utilization") or era.default_util
    max_len = _int(s.get("max_model_len")) or req.context or arch.max_position_embeddings or 4096
    tokens_b, seqs = vllm_batch_defaults(version, engine, b.smi_total_gib, b.gpu, max_len, _truthy(s.get("offline")))
    tokens_b = _int(s.get("max_num_batched_tokens")) or tokens_b
    seqs = _int(s.get("max_num_seqs")) or seqs
    w = _weights(ctx, Parallel(tp=req.tp, ep=req.ep, pp=req.pp))
    rope = rope_cache_bytes(ctx.mc.cfg, 2) / GIB
    act = vllm_activation_gib(ctx.mc.cfg, req.tp, tokens_b, seqs)
    act_what = f"{tokens_b:,} batched tokens, {seqs} seqs"
    encoder = vllm_encoder_profile(ctx.mc.cfg, s, tokens_b) if engine == "V1" else None
    if encoder is not None and encoder[0] > act:
        act, act_what = encoder
    non_torch, nt_how = vllm_non_torch_gib(version, engine, b)
    graphs = _float(s.get("cuda_graph_gib"))
    if graphs is None:
        graphs = VLLM_GRAPH_GIB if (era.graphs_in_budget and not _truthy(s.get("enforce_eager"))) else 0.0
    kv_dtype = str(s.get("kv_cache_dtype") or "auto")
    kvb = dtype_bytes(kv_dtype, arch.torch_dtype)
    block = _int(s.get("block_size")) or (64 if arch.attention == "mla" and (ctx.sm_major or 0) >= 9 else 16)
    layers = max(v_rules.pp_layers(arch.full_attention_layers or arch.num_layers, req.pp))
    kv_override = _int(s.get("kv_cache_memory_bytes"))
    from kvscope.capacity.plan_vllm_spec import resolve_vllm_draft

    draft = resolve_vllm_draft(ctx.mc, arch, s, Parallel(tp=req.tp, ep=req.ep, pp=req.pp))
    draft_gib = draft.weights_gib if draft else 0.0

    prefix = _truthy(s.get("enable_prefix_caching"))  # off by default for hybrid models (v0.18–v0.24)

    def scenario(u: float, kv_bytes: int, k_shift: float = 0.0) -> dict[str, Any]:
        T = b.torch_total.gib
        budget = u * T
        K = kv_override / GIB if kv_override else budget - w.gib - draft_gib - rope - act - non_torch - graphs
        K += k_shift
        page = v_rules.page_size(arch, kv_bytes, req.tp)
        row = page.bytes_per_token_per_layer
        extra = draft.target_layer_equivalent(row, kv_bytes, req.tp) if draft else 0
        layout = _vllm_mamba_layout(ctx, row, block, prefix, extra, draft.num_speculative_tokens if draft else 0)
        if layout is not None:
            cap = v_rules.mamba_capacity(K, layout, max_len, era.capacity_rule)
        elif arch.sliding_layers and arch.full_attention_layers and arch.sliding_window:
            cap = v_rules.hybrid_capacity(K, row, arch.full_attention_layers + extra, arch.sliding_layers,
                                          arch.sliding_window, block, max_len, tokens_b, era.capacity_rule)
        else:
            block_bytes = v_rules.bytes_per_block(row, layers, block)
            if draft:
                block_bytes += v_rules.bytes_per_block(draft.row_bytes(kv_bytes, req.tp), draft.kv_layers, block)
            cap = v_rules.capacity(v_rules.blocks_for(K, block_bytes), block, max_len, era.capacity_rule)
        outside = T - budget - (b.cuda_context.gib + b.nccl.gib if version >= (0, 11, 0) else 0.0)
        if not era.graphs_in_budget:
            outside -= 0.5  # graphs are captured outside the budget
        return {"K": K, "blocks": cap.blocks, "tokens": cap.tokens, "concurrency": cap.concurrency,
                "page": page, "reserve_left_gib": outside, "mamba": layout}

    base = scenario(util, kvb)
    spread = Spread() if kv_override else vllm_spread(
        b, util, w.as_dict(), act, vllm_non_torch_parts(version, engine)[0],
        bool(graphs) and not s.get("cuda_graph_gib"),
        sampler_peak=encoder is None and vllm_sampler_dominates(ctx.mc.cfg, req.tp, tokens_b, seqs))
    token_range = [scenario(util, kvb, -spread.gib)["tokens"], scenario(util, kvb, spread.gib)["tokens"]]
    warnings = list(ctx.notes) + list(w.notes) + b.notes + (draft.notes if draft else [])
    if base["mamba"] is not None:
        warnings.append(_mamba_note(base["mamba"], arch.linear_layers, max_len))
    elif arch.full_attention_layers and not arch.sliding_layers and arch.full_attention_layers < arch.num_layers:
        warnings.append("hybrid linear-attention (Mamba-style) model: vLLM's state pages and enlarged attention "
                        "blocks are not modelled (state fields missing from the config, or PP > 1); the token "
                        "figure counts full-attention layers only")
    if base["K"] <= 0:
        warnings.append("no KV memory: the engine would stop with 'No available memory for the cache blocks'")
    elif base["tokens"] < max_len:
        warnings.append(f"one request of max_model_len {max_len:,} does not fit ({base['tokens']:,} tokens): the "
                        "engine would refuse to start; lower --max-model-len or raise --gpu-memory-utilization")
    rows = []
    for u in sorted({round(util + d, 2) for d in (-0.04, -0.02, 0.0, 0.02, 0.04) if 0.3 < util + d <= 0.99}):
        sc = scenario(u, kvb)
        rows.append({"flag": "(as planned)" if abs(u - util) < 1e-9 else f"--gpu-memory-utilization {u}",
                     "gpu_memory_utilization": u, "kv_tokens": sc["tokens"], "concurrency_at_context": sc["concurrency"],
                     "reserve_left_gib": sc["reserve_left_gib"]})
    if kvb > 1:
        sc = scenario(util, 1)
        rows.append({"flag": "--kv-cache-dtype fp8", "gpu_memory_utilization": util, "kv_tokens": sc["tokens"],
                     "concurrency_at_context": sc["concurrency"], "reserve_left_gib": sc["reserve_left_gib"]})
    T = b.torch_total.gib
    ledger = [
        ("nvidia-smi total", b.smi_total_gib, "catalog"),
        ("torch total (T)", T, b.torch_total.how),
        (f"budget T × gpu_memory_utilization {util}", util * T, "given" if s.get("gpu_memory_utilization")
         else f"default for {era.name}"),
        ("weights per rank", -w.gib, w.method),
        *([(f"draft weights ({draft.method}, loaded before profiling)", -draft_gib, draft.weights_from)]
          if draft_gib else []),
        ("rope cos/sin cache (model dtype)", -rope, "computed"),
        (f"activation peak ({act_what})", -act, "estimated"),
        ("non-torch memory charged", -non_torch, nt_how),
        ("CUDA graphs (in budget)", -graphs, "assumed typical" if graphs and not s.get("cuda_graph_gib") else "given"),
        ("= KV cache memory (K)", base["K"], "derived"),
        ("left outside the budget", base["reserve_left_gib"], "derived"),
    ]
    return {
        "engine": "vllm", "engine_version": v_eras.fmt(version), "era": era.name,
        "settings": {"engine_version": {"value": v_eras.fmt(version), "from": vhow},
                     "gpu_memory_utilization": {"value": util, "from": "given" if s.get("gpu_memory_utilization")
                                                else "default"},
                     "max_model_len": {"value": max_len, "from": "given" if (s.get("max_model_len") or req.context)
                                       else "model config"},
                     "max_num_batched_tokens": {"value": tokens_b, "from": "given" if s.get("max_num_batched_tokens")
                                                else "default"},
                     "max_num_seqs": {"value": seqs, "from": "given" if s.get("max_num_seqs") else "default"},
                     "kv_cache_dtype": {"value": kv_dtype, "from": "given" if s.get("kv_cache_dtype") else "default"},
                     "block_size": {"value": block, "from": "given" if s.get("block_size") else "platform default"},
                     **_vllm_spec_settings(draft)},
        "weights": w.as_dict(), "ledger": [{"item": i, "gib": g, "how": h} for i, g, h in ledger],
        "kv": {"kv_cache_dtype": kv_dtype, "block_size": base["mamba"].block_size if base["mamba"] else block,
               "bytes_per_token_per_layer": base["page"].bytes_per_token_per_layer, "layers": layers,
               "formula": base["page"].formula + _draft_formula(draft, kvb, req.tp), "available_kv_gib": base["K"],
               "num_gpu_blocks": base["blocks"], "kv_tokens": base["tokens"], **_mamba_kv(base["mamba"], max_len),
               **({"speculative": draft.as_dict(kvb, req.tp)} if draft else {})},
        "capacity": {"kv_tokens": base["tokens"], "context_tokens": max_len, "max_concurrency": base["concurrency"],
                     "kv_tokens_range": token_range, "range": spread.as_dict()},
        "table": rows, "warnings": warnings,
    }


def _vllm_mamba_layout(ctx: Context, attn_row_bytes: int, block: int, prefix: bool, draft_layers: int = 0,
                       num_spec: int = 0) -> Any:
    """vLLM's layout of a hybrid attention + Mamba/GDN model (None for other models or when not sizable).

    Speculative decoding adds the draft's attention layers to the attention groups and widens the
    state (conv window, spare blocks) by the draft tokens, as explain's kv_plan does.
    """
    _, v_rules = _vllm_modules()
    arch, s = ctx.arch, ctx.settings
    if not (arch.linear_layers and arch.linear_state and arch.full_attention_layers) or ctx.req.pp > 1:
        return None
    state = v_rules.mamba_page(arch, ctx.req.tp, s.get("dtype"), num_spec, s.get("mamba_cache_dtype"),
                               s.get("mamba_ssm_cache_dtype"))
    if state is None:
        return None
    mode = v_rules.mamba_cache_mode(prefix, arch.model_type)
    return v_rules.mamba_layout(attn_row_bytes, state, arch.full_attention_layers + draft_layers, arch.linear_layers,
                                mode, num_spec, block, arch.linear_state.chunk_size)


def _vllm_spec_settings(draft: VllmDraft | None) -> dict[str, Any]:
    """The speculative settings rows (same place as SGLang's), empty without speculative decoding."""
    if draft is None:
        return {}
    return {"speculative_config": {"value": {"method": draft.method, "model": draft.model,
                                             "num_speculative_tokens": draft.num_speculative_tokens},
                                   "from": "given" if draft.tokens_from == "given"
                                   else f"given; num_speculative_tokens {draft.tokens_from}"},
            "draft KV layers": {"value": draft.kv_layers, "from": draft.layers_from}}


def _draft_formula(draft: VllmDraft | None, kv_bytes: int, tp: int) -> str:
    """What the draft adds to the KV bytes per token, for the formula line."""
    if draft is None or not draft.kv_layers:
        return ""
    return f"; + {draft.kv_layers} draft layer(s) × {draft.row_bytes(kv_bytes, tp):,} B ({draft.method})"


def _mamba_note(layout: Any, linear_layers: int, max_len: int) -> str:
    """The hybrid layout in one sentence (why the block size and the token count are what they are)."""
    pad = f" (state padded {layout.page_bytes / layout.mamba_state_bytes - 1:.2%})" \
        if layout.page_bytes != layout.mamba_state_bytes else ""
    return (f"hybrid model ({linear_layers} Mamba/linear-attention layers): vLLM enlarges "
            f"the attention block to {layout.block_size:,} tokens so one page ({layout.page_bytes:,} B) holds a "
            f"{layout.mamba_state_bytes:,} B recurrent state{pad}; {layout.attn_groups} attention + "
            f"{layout.mamba_groups} state groups of {layout.group_size} layers, mamba_cache_mode '{layout.mode}' "
            f"(prefix caching {'on' if layout.mode != 'none' else 'off'}); one {max_len:,}-token request takes "
            f"{layout.blocks_per_request(max_len):,} blocks")


def _mamba_kv(layout: Any, max_len: int) -> dict[str, Any]:
    """The hybrid layout for the JSON 'kv' object (empty for other models)."""
    if layout is None:
        return {}
    return {"hybrid": {"mamba_cache_mode": layout.mode, "page_bytes": layout.page_bytes,
                       "mamba_state_bytes": layout.mamba_state_bytes, "group_size": layout.group_size,
                       "attention_groups": layout.attn_groups, "mamba_groups": layout.mamba_groups,
                       "blocks_per_request": layout.blocks_per_request(max_len)}}


# ------------------------------------------------------------------------------------------------


def plan(req: PlanRequest) -> dict[str, Any]:
    """The prediction object (JSON-ready): inputs as resolved, ledger, KV tokens, concurrency, table."""
    ctx = resolve(req)
    body = plan_sglang(ctx) if req.engine == "sglang" else plan_vllm(ctx)
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
    if body["engine"] == "vllm":
        estimated.append("activation peak: first-principles estimate from the config")
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
