"""``kvscope plan`` for SGLang: replay the release's automatic defaults and sizing rule from catalog
facts alone (no log): rest = F × mem_fraction_static − W − load extras; tokens = rest // cell."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kvscope.core.errors import InputError
from kvscope.core.memory_bar import BarPart, Part, fill
from kvscope.engines.sglang import defaults as sgd
from kvscope.engines.sglang import dsv4 as sg_dsv4
from kvscope.engines.sglang import eras as sg_eras
from kvscope.engines.sglang import rules as sg_rules
from kvscope.engines.sglang.load_memory import (
    is_eagle3_draft,
    rope_table_bytes,
    sglang_eagle3_draft_load,
    sglang_load_memory,
)
from kvscope.model.arch import Architecture, dtype_bytes
from kvscope.model.kv_spec import MLASpec
from kvscope.model.planning import (
    Context,
    _dsv4_refusal,
    _float,
    _fraction,
    _int,
    _truthy,
    _weights,
    rope_cache_bytes,
)
from kvscope.model.spread import sglang_spread
from kvscope.model.weights import (
    GIB,
    Parallel,
    WeightEstimate,
    is_deepseek_v4,
    load_model_config,
    quant_plan,
    sglang_parallel,
    stage_layers,
)

SGLANG_NEWEST = "0.5.23"


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
        for off in ("disable_piecewise_cuda_graph", "disable_prefill_cuda_graph"):  # the latter: 0.5.17's name
            if s.get(off) is not None:
                piece = not _truthy(s[off])
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


def _sg_cell(ctx: Context, k: SglangKnobs, era: sg_eras.Era, attn_tp: int, kv_dtype: str
             ) -> tuple[sg_rules.CellSize, int]:
    """(the cell the profile divides by, the bytes per token the pool really allocates)."""
    arch = ctx.arch
    kvb = dtype_bytes(kv_dtype, arch.torch_dtype)
    swa = arch.sliding_layers and arch.model_type not in sgd.HYBRID_SWA_DISABLED_TYPES
    # hybrid SWA off (Gemma 2/3): every layer in the one pool, sliding or not
    n_layers = (arch.full_attention_layers or 0) + arch.sliding_layers if swa else (
        arch.num_layers if arch.sliding_layers else None)
    if ctx.req.pp > 1 and (swa or not arch.full_attention_layers):
        # each pipeline stage pools its own layers; the busiest stage sets the count (a sliding-window
        # model's stage keeps the model's full/sliding mix, which the split below applies)
        n_layers = max(len(stage_layers(arch.num_layers, ctx.req.pp, st)) for st in range(ctx.req.pp))
    real = sg_rules.cell_size(arch, kvb, attn_tp, era, layers=n_layers)
    profiled_arch = arch if sgd.dsa_indexer_in_profile(k.version) else replace(arch, index_head_dim=None)
    cell = sg_rules.cell_size(profiled_arch, kvb, attn_tp, era, layers=n_layers)
    alloc = real.bytes_per_token
    if arch.index_head_dim and kvb == 1:
        # fp8 DSA stores the latent with its scales and a 16-bit rope (512 + 16 + 2 × 64 = 656 B, not 576)
        mla = MLASpec(arch.kv_lora_rank or 0, arch.qk_rope_head_dim or 0, 1)
        extra = mla.fp8_row_bytes - mla.row_bytes
        alloc += extra * real.layers
        if era.mla_real_row:
            cell = replace(cell, bytes_per_token=cell.bytes_per_token + extra * cell.layers,
                           formula=cell.formula + " + fp8 row scales/rope (≥0.5.18)")
    if era.draft_cell_inflation and k.spec:
        draft_cfg = _draft_config(ctx) or {}
        # a separate draft (EAGLE, STANDALONE) is all its layers; an MTP / NextN draft read from the target's own
        # checkpoint is only its next-token layers
        separate = (k.spec or "") in ("EAGLE", "EAGLE3", "STANDALONE")
        own = _int(draft_cfg.get("num_nextn_predict_layers")) or (_int(draft_cfg.get("num_hidden_layers")) if separate
                                                                    else None)
        draft_layers = _int(ctx.settings.get("draft_layers")) or own or arch.nextn_layers or 1
        cell = replace(cell, bytes_per_token=sg_rules.with_draft_share(cell.bytes_per_token, draft_layers, cell.layers),
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
    given_ratio = _float(ctx.settings.get("swa_full_tokens_ratio"))
    ratio = sg_dsv4.SWA_RATIO if given_ratio is None else given_ratio
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
    draft_how = "given"
    if not draft and k.spec and era.draft_in_static_budget:
        draft, draft_how = _sg_draft_load_gib(ctx, k, par)
    start = _start_overhead(ctx, k)
    load_extra = rope + slack + (draft if era.draft_in_static_budget else 0.0) + (start.before_profile_gib if start else 0.0)
    F = ctx.basis.free_before_weights_gib - (start.init_gib if start else 0.0)
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
                        "or the draft's config as --speculative-draft-model-path (not counted here)")
    if 0 < base["kv_tokens"] < k.context_len:
        warnings.append(f"one request of the full context ({k.context_len:,} tokens) does not fit in "
                        f"{base['kv_tokens']:,} KV tokens: SGLang caps requests at {base['kv_tokens'] - 1:,} tokens")
    if base.get("no_room"):
        warnings.append(base["no_room"])
    elif base["kv_tokens"] <= 0:
        warnings.append("no KV room: the weights do not fit under mem_fraction_static × free memory; the server "
                        "would stop with 'Not enough memory' / 'leave no GPU memory for the KV cache'")
    ledger = _sg_ledger(ctx, k, w, (rope, slack), draft if era.draft_in_static_budget else 0.0, base, needed, F, start,
                        draft_how)
    bar = fill(ctx.basis.smi_total_gib, [
        BarPart(Part.CONTEXT, "driver-reserved slice, CUDA context, NCCL", ctx.basis.smi_total_gib - F),
        BarPart(Part.WEIGHTS, "weights", w.gib),
        BarPart(Part.DRAFT, "draft weights", draft if era.draft_in_static_budget else 0.0),
        BarPart(Part.OTHER, "rope tables, allocator slack, request table", rope + slack + base["request_pool_gib"]),
        BarPart(Part.KV, f"KV pool ({base['kv_tokens']:,} tokens)", base["kv_pool_gib"]),
        BarPart(Part.FREE, "reserve left for CUDA graphs, activations" + ("" if era.draft_in_static_budget or not k.spec
                                                                       else ", the draft"),
                base["reserve_left_gib"]),
    ], other_label="budget rounding")
    curve = _sg_curve(ctx, k, F, w.gib, load_extra, attn_tp, needed)
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
        "table": rows, "memory_bar": [p.as_dict() for p in bar], "curve": curve, "warnings": warnings,
    }


def _sg_curve(ctx: Context, k: SglangKnobs, F: float, w: float, extra: float, attn_tp: int,
              needed: sgd.MfsChoice | None, points: int = 21) -> list[dict[str, Any]]:
    """KV tokens and the reserve against mem_fraction_static, in steps of 0.01 around the resolved value, for charts."""
    need = needed.reserved_gib if needed and needed.reserved_gib else None
    out = []
    half = points // 2
    for mfs in sorted({round(k.mfs + 0.01 * i, 3) for i in range(-half, half + 1)} | {k.mfs}):  # through the value
        if not 0.3 <= mfs <= 0.98:
            continue
        sc = _sg_scenario(ctx, replace(k, mfs=mfs), F, w, extra, attn_tp)
        out.append({"mem_fraction_static": mfs, "kv_tokens": sc["kv_tokens"],
                    "concurrency_at_context": sc["concurrency"], "reserve_left_gib": round(sc["reserve_left_gib"], 4),
                    "risk": "unknown" if need is None else _risk(sc["reserve_left_gib"], need)})
    return out


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


def _draft_config(ctx: Context) -> dict[str, Any] | None:
    """The draft's config.json, when --speculative-draft-model-path names a local checkpoint or a catalog id."""
    path = ctx.settings.get("speculative_draft_model_path")
    mc = load_model_config(str(path)) if path else None
    return mc.cfg if mc is not None else None


def _sg_draft_load_gib(ctx: Context, k: SglangKnobs, par: Parallel) -> tuple[float, str]:
    """(GiB, how) the draft's load takes from the static budget (≥0.5.14), from its config: an EAGLE-3 head's load
    replayed (load_memory.sglang_eagle3_draft_load), its rope table over the target's context, which SGLang writes
    into the draft's max_position_embeddings when it is the longer; (0, why) for other drafts."""
    cfg = _draft_config(ctx)
    if cfg is None or not is_eagle3_draft(cfg):
        return 0.0, ""  # the warning below asks for the figure
    own = _int(cfg.get("max_position_embeddings")) or 0
    load = sglang_eagle3_draft_load({**cfg, "max_position_embeddings": max(own, k.context_len)}, par, k.version)
    return load.reserved_bytes / GIB, "the draft's config: its load replayed (the parent's replaced layers kept)"


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


@dataclass(frozen=True)
class StartOverhead:
    """What one release takes on one GPU, measured, around the budget basis (GiB = 2^30 B).

    ``init_gib``: torch distributed init's own use at TP 1 (its 'Init torch distributed ends. mem usage=…'
    line), before F is measured; ``before_profile_gib``: what the model runner takes after F and before the
    profile besides the weights (its forward stream, sampler, token oracle; rules.BASIS_GAP_MAX_GIB), which
    the static budget pays."""

    init_gib: float
    before_profile_gib: float
    source: str


# Measured only where a truth run shows it; another release plans without (its logs read as before).
START_OVERHEADS = {
    "0.5.17": StartOverhead(0.09, 0.07, "tests/fixtures/gpu-sglang s01-s05 (H200, TP 1): init 0.09 GiB, F 0.06 GiB "
                                        "above 'Load weight begin' and 0.01 GiB taken after 'Load weight end'"),
}


def _start_overhead(ctx: Context, k: SglangKnobs) -> StartOverhead | None:
    """The release's measured start-up overheads, at TP 1 (no communicators), where a truth run shows them."""
    return START_OVERHEADS.get(sg_eras.fmt(k.version)) if ctx.basis.nccl.value == 0 else None


def _sg_ledger(ctx: Context, k: SglangKnobs, w: WeightEstimate, extras: tuple[float, float], draft: float,
               base: dict[str, Any], needed: sgd.MfsChoice | None, F: float,  # noqa: N803 (the doc's F)
               start: StartOverhead | None, draft_how: str = "given") -> list[dict[str, Any]]:
    rope, slack = extras
    b = ctx.basis
    rows = [
        ("nvidia-smi total", b.smi_total_gib, "catalog"),
        ("driver-reserved slice", b.torch_total.value - b.smi_total_gib, b.torch_total.how),
        ("CUDA context", -b.cuda_context.value, b.cuda_context.how),
        ("NCCL communicators", -b.nccl.value, b.nccl.how),
    ]
    if start:
        rows.append(("torch distributed init (TP 1)", -start.init_gib, f"measured: {start.source}"))
    rows += [
        ("= free before weights (F)", F, "derived"),
        ("weights per rank", -w.gib, w.method),
        ("rope cos/sin tables (fp32)", -rope, "computed"),
    ]
    if start:
        rows.append(("model runner before the profile (stream, sampler, token oracle)", -start.before_profile_gib,
                     "measured"))
    if slack:
        rows.append(("caching-allocator rounding and holes", -slack, "replayed"))
    if draft:
        rows.append(("draft weights (static budget ≥0.5.14)", -draft, draft_how))
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
