"""``kvscope plan`` for vLLM: K = T × gpu_memory_utilization − W − activation − non-torch [− graphs];
blocks = K // page, with the release's batch defaults, profile run and hybrid layout replayed."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kvscope.core.errors import InputError
from kvscope.core.memory_bar import BarPart, Part, fill
from kvscope.core.startup import finite_number
from kvscope.engines.vllm import eras as v_eras
from kvscope.engines.vllm import rules as v_rules
from kvscope.engines.vllm.layout import KvLayout, StateDtypes, kv_layout
from kvscope.engines.vllm.plan_spec import EAGLE_DROPPED_KEYS, VllmDraft, resolve_vllm_draft
from kvscope.model.arch import dtype_bytes
from kvscope.model.overheads import BudgetBasis, torch_cublas_workspace_bytes
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
from kvscope.model.spread import Spread, vllm_spread
from kvscope.model.weights import (
    GIB,
    Parallel,
    is_deepseek_v4,
    routed_experts,
    vision_profile_shape,
)

VLLM_NEWEST = "0.33.0"


VLLM_GRAPH_GIB = 0.5  # typical CUDA-graph estimate vLLM ≥0.20 subtracts; assumed, not measured


# The dummy sampler run of the profile (max_num_seqs rows of logits, top-k and top-p both on, the
# PyTorch sort path) holds about ten fp32 copies of the logits at its peak: the model-dtype logits
# (½), their fp32 copy (1), sorted values (1) and int64 indices (2), the sort's double buffers (3),
# softmax (1), the scattered result (1), two masks (½). Measured: a torch peak increase of 5.62 GiB
# for 1,024 rows × 151,936 (Qwen3-235B-A22B-FP8, TP4, H200; vLLM PR #21429's debug line) = 38.8 B
# per logit; this count gives 40.
VLLM_SAMPLER_BYTES_PER_LOGIT = 40

# Model Runner V2 (vllm/v1/worker/gpu/model_runner.py), the default runner for most models in our v0.26.0
# truth runs (tests/fixtures/gpu: "Using V2 Model Runner"). Its profile differs from V1's in two rules:
# - the dummy sampler run skips top-k / top-p / logprobs ("During the initial memory profiling, the sampler may
#   skip top_k, top_p, and logprobs", _dummy_sampler_run): about two fp32 copies of the logits, 8 B per logit
#   (run 022: a 1.01 GiB peak for 1,024 rows × 128,256 at 2,048 batched tokens, where the forward is 0.2 GiB);
# - on v0.26–v0.27, no CUDA-graph estimate is profiled or charged: K = T·u − W − A − N, the graphs are captured after the KV
#   cache, outside the budget (every V2 run: "Actual usage is … 0.99 GiB for CUDAGraph memory" with K equal to
#   the budget minus weights, activation and non-torch; V1 runs of the same release log "Estimated CUDA graph
#   memory" and subtract it).
VLLM_V2_SAMPLER_BYTES_PER_LOGIT = 8
VLLM_V2_RUNNER_FROM = (0, 26, 0)  # the earliest release measured with it as the default
# MoE architectures V2 takes by default (vllm/config/vllm.py _is_default_v2_model_runner_model: a listed
# architecture, or any model that is not MoE); measured: DeepSeek-V2-Lite on V2 (truth 010, 030), Qwen3-MoE on V1
# (009, 028). Other MoE architectures are taken to run on V1.
VLLM_V2_MOE_ARCHITECTURES = frozenset({"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"})


@dataclass(frozen=True)
class SamplerRule:
    """What the profile's dummy sampler run holds at its peak, per release and model runner: bytes per logit of its
    own copies, and what else is still alive then."""

    bytes_per_logit: int
    triton_rows: int = 0  # rows of the Triton top-k/top-p kernel's cached fp32 buffer (one per SM), × vocab × 4 B
    keeps_hidden: bool = False  # the forward's hidden states (tokens × hidden, model dtype) are still referenced
    moe_workspace: bool = False  # the fused-MoE workspaces the forward grew persist (a global WorkspaceManager)


VLLM_SAMPLER = SamplerRule(VLLM_SAMPLER_BYTES_PER_LOGIT)
VLLM_V2_SAMPLER = SamplerRule(VLLM_V2_SAMPLER_BYTES_PER_LOGIT)
# The V1 runner of v0.26.0 (gpu_model_runner.py _dummy_sampler_run, flashinfer absent, Triton present): bf16 logits
# (2 B) stay referenced while Sampler.forward's fp32 copy (4), the softmax (4) and random_sample's noise (4) are alive
# (temperature, top-k/top-p and the division work in place: apply_top_k_top_p_triton for ≥ 8 rows, whose
# (SMs × vocab) fp32 buffer is cached): 14 B per logit. profile_run still holds the forward's hidden states, and a MoE's
# TritonExperts workspaces (workspace1 (M, topk, max(act, K)) + workspace2 (M, topk, max(N, K)), modular_kernel) stay
# in the global WorkspaceManager. With the 32 MiB cuBLAS workspace this gives 3.205 / 2.922 / 3.645 / 3.211 GiB for
# Qwen3-30B-A3B, Nemotron-3-Nano, Qwen3.5-27B at 1,024 and 891 sequences, measured 3.21 / 2.92 / 3.64 / 3.21
# (truth 009, 049, 041, 046).
VLLM_V1_026_SAMPLER_BYTES_PER_LOGIT = 14


def vllm_sampler_rule(version: tuple[int, int, int], runner: str, sm_count: int | None) -> SamplerRule:
    """The sampler rule of this release and runner (sm_count sizes the Triton buffer; 132, an H200's, if unknown)."""
    if runner == "V2":
        return VLLM_V2_SAMPLER
    if (0, 26, 0) <= version < (0, 27, 0):
        return SamplerRule(VLLM_V1_026_SAMPLER_BYTES_PER_LOGIT, triton_rows=sm_count or H200_SMS, keeps_hidden=True,
                           moe_workspace=True)
    return VLLM_SAMPLER


H200_SMS = 132


def gpu_sm_count(gpu_label: str | None) -> int | None:
    """The catalog's SM count for this GPU kind (None: a GPU given by size, or not in the catalog)."""
    from kvscope.model.catalog import find_gpu

    count = (find_gpu(gpu_label) or {}).get("sm_count") if gpu_label else None
    return int(count) if count else None


def moe_workspace_bytes(cfg: dict[str, Any], tp: int, tokens: int) -> int:
    """TritonExperts' two workspaces at ``tokens`` (modular_kernel._allocate_buffers, model dtype): the gated
    activations (SiLU and kin) take 2 × the expert width for N and half for the activation output, relu² (Nemotron-H)
    the width for both; K is the hidden size. 0 for a dense model."""
    if not routed_experts(cfg):
        return 0
    h = int(cfg["hidden_size"])
    width = max(1, int(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or h) // tp)
    topk = int(cfg.get("num_experts_per_tok") or 8)
    gated = str(cfg.get("mlp_hidden_act") or cfg.get("hidden_act") or "silu") not in ("relu2",)
    n, act = (2 * width, width) if gated else (width, width)
    return tokens * topk * (max(act, h) + max(n, h)) * 2
# Non-torch memory v0.26.0 charges on one H200: 0.22 GiB dense, 0.23–0.24 MoE, compiled or eager (every truth
# run's "Free memory on device" line); more than cuBLAS's workspace alone (the earlier releases' figure)
VLLM_026_NON_TORCH_GIB = 0.22


def vllm_model_runner(version: tuple[int, int, int], engine: str, cfg: dict[str, Any], settings: dict[str, Any]
                      ) -> tuple[str, str]:
    """("V2" | "V1", why): which GPU model runner a V1-engine release picks for this model."""
    forced = settings.get("use_v2_model_runner")
    if forced is not None:
        return ("V2" if _truthy(forced) else "V1"), "given (VLLM_USE_V2_MODEL_RUNNER)"
    if engine != "V1" or version < VLLM_V2_RUNNER_FROM:
        return "V1", "the release's only GPU model runner"
    archs = set(cfg.get("architectures") or [])
    text = cfg.get("text_config")
    cfg = {**cfg, **text} if isinstance(text, dict) else cfg  # a multimodal config's language model decides
    moe = bool(routed_experts(cfg))
    hybrid = any(k in cfg for k in ("mamba_d_state", "ssm_state_size", "linear_attn_config", "layers_block_type",
                                    "hybrid_override_pattern")) \
        or "linear_attention" in str(cfg.get("layer_types") or "")
    if hybrid and not archs & VLLM_V2_MOE_ARCHITECTURES:
        return "V1", "hybrid model: not a default V2 architecture"
    if moe and not archs & VLLM_V2_MOE_ARCHITECTURES:
        return "V1", "MoE architecture not on V2's default list"
    return "V2", "default for this architecture from v0.26"


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
    figures = {"context": basis.cuda_context.value, "communicators": basis.profile_nccl.value, "cublas": basis.cublas.value}
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


def vllm_activation_gib(cfg: dict[str, Any], tp: int, tokens: int, seqs: int,
                        rule: SamplerRule = VLLM_SAMPLER) -> float:
    """Peak torch memory of the profile run beyond the weights (first principles, per rank).

    Forward: the MLP holds gate_up (2I) and its activation (I) next to ~3 hidden-size buffers per
    token (dense), or top-k × (3N + H) in the fused-MoE caches. Sampler: the dummy sampler run's
    copies of max_num_seqs rows of logits, with what the release's rule says is still alive then
    (SamplerRule: the forward's hidden states, the Triton buffer, a MoE's workspaces). The two phases
    are not alive at once. (On the V0 RTX 3090 Llama-3.1-8B log the forward gives 2.06 GiB at 20,000 tokens and 2.99
    at 29,000 vs the logged 2.07 and 2.99.)
    """
    forward_bytes, sampler_bytes = _vllm_profile_bytes(cfg, tp, tokens, seqs, rule)
    return max(forward_bytes, sampler_bytes) / GIB


def vllm_activation_with_draft_gib(cfg: dict[str, Any], tp: int, tokens: int, seqs: int, rule: SamplerRule,
                                   draft: VllmDraft | None) -> tuple[float, float | None]:
    """(activation peak GiB, the drafter's share of it or None when its profile is not modelled): the drafter's
    prefill runs inside the forward phase, so it adds to the forward peak, not to the sampler's."""
    forward_bytes, sampler_bytes = _vllm_profile_bytes(cfg, tp, tokens, seqs, rule)
    extra = draft_profile_extra_gib(draft, cfg, tp, tokens)
    peak = max(forward_bytes + (extra or 0.0) * GIB, sampler_bytes) / GIB
    return peak, extra


def vllm_sampler_dominates(cfg: dict[str, Any], tp: int, tokens: int, seqs: int,
                           rule: SamplerRule = VLLM_SAMPLER) -> bool:
    """Whether the dummy sampler run, not the forward pass, sets the profile's activation peak (its spread
    is wider: which sampler path a deployment takes is not in the launch)."""
    forward_bytes, sampler_bytes = _vllm_profile_bytes(cfg, tp, tokens, seqs, rule)
    return sampler_bytes > forward_bytes


def _vllm_profile_bytes(cfg: dict[str, Any], tp: int, tokens: int, seqs: int,
                        rule: SamplerRule = VLLM_SAMPLER) -> tuple[int, int]:
    """(forward, dummy sampler run) bytes of vLLM's profile run on one rank."""
    h = int(cfg["hidden_size"])
    vocab = int(cfg.get("vocab_size") or 32000)
    forward_bytes = tokens * forward_values_per_token(cfg, tp) * 2
    rows = min(seqs, tokens)  # the dummy batch has at most one request per token
    if rule.triton_rows:
        sampler_bytes = rows * vocab * rule.bytes_per_logit + 4 * rows * h  # the last hidden states and their rand copy
        sampler_bytes += min(_next_pow2(rows), rule.triton_rows) * vocab * 4 if rows >= 8 else 0
    else:
        sampler_bytes = rows * vocab * rule.bytes_per_logit + rows * h * 2
    if rule.keeps_hidden:
        sampler_bytes += tokens * h * 2
    if rule.moe_workspace:
        sampler_bytes += moe_workspace_bytes(cfg, tp, tokens)
    return forward_bytes, sampler_bytes


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def forward_values_per_token(cfg: dict[str, Any], tp: int) -> int:
    """Values alive per token at one decoder layer's peak in the profile's forward pass (one rank)."""
    h = int(cfg["hidden_size"])
    mlp_values_per_token = 3 * max(1, int(cfg.get("intermediate_size") or 4 * h) // tp)
    if routed_experts(cfg):
        n = int(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or h) // tp
        topk = int(cfg.get("num_experts_per_tok") or 8)
        dense = mlp_values_per_token if cfg.get("first_k_dense_replace") else 0
        # shared experts (DeepSeek's n_shared_experts × moe_intermediate_size, Qwen2-MoE's
        # shared_expert_intermediate_size) run in the same layer as the routed ones: their gate_up and activation
        # are alive beside the fused-MoE caches (DeepSeek-V2-Lite on v0.26: 1.66 GiB measured, 1.34 without them)
        shared = int(cfg.get("n_shared_experts") or 0) * n + int(cfg.get("shared_expert_intermediate_size") or 0) // tp
        mlp_values_per_token = max(dense, topk * (3 * n + h) + 3 * shared)
    return mlp_values_per_token + 3 * h


# EAGLE-3 feeds the drafter three of the target's hidden states (use_aux_hidden_state; eagle_config may turn it off)
EAGLE3_AUX_LAYERS = 3


def draft_profile_extra_gib(draft: VllmDraft | None, target_cfg: dict[str, Any], tp: int, tokens: int) -> float | None:
    """GiB the profile's forward peak grows by with this EAGLE drafter: the draft layer's forward with the target's
    aux and last hidden states and the fc output alive, less the target's own layer peak. Derived from v0.26's V2
    runner (``_dummy_run``, plan_spec's module docstring) and measured there; other runners and releases are given
    the same rule, unmeasured. None for a method whose profile is not modelled, 0 without a drafter."""
    if draft is None or not draft.kv_layers:
        return 0.0
    if not draft.method.startswith("eagle"):
        return None
    h = int(target_cfg["hidden_size"])
    cfg = draft.cfg or {k: v for k, v in target_cfg.items() if k not in EAGLE_DROPPED_KEYS}
    h_draft = int(cfg.get("hidden_size") or h)
    aux = EAGLE3_AUX_LAYERS if draft.method == "eagle3" else 0
    eagle_config = cfg.get("eagle_config")
    if aux and isinstance(eagle_config, dict) and eagle_config.get("use_aux_hidden_state") is False:
        aux = 0
    alive = (aux + 1) * h + h_draft  # aux + the target's last hidden state, the fc output (the draft's input)
    draft_peak = forward_values_per_token({**cfg, "hidden_size": h_draft}, tp) - h_draft + alive
    return max(0, draft_peak - forward_values_per_token(target_cfg, tp)) * tokens * 2 / GIB


# A multimodal model's towers are built inside ``_mark_tower_model`` (vllm/model_executor/models/interfaces.py), which
# skips them (no_init_weights → StageMissingLayer) when --limit-mm-per-prompt sets every modality they serve to 0:
# Qwen3.5-27B text-only loads 50.22 GiB on v0.26.0, its language model and rope exactly (tests/fixtures/gpu/041).
VLLM_TOWER_SKIP_FROM = (0, 26, 0)  # read and measured there; earlier releases not read


VISION_MODALITIES = ("image", "video")  # what a vision tower serves; both must be off for vLLM to skip it


def mm_limit(settings: dict[str, Any], modality: str) -> int | None:
    """A modality's --limit-mm-per-prompt: a count, or a dict's "count" (vLLM takes both); None when not given (vLLM's
    own default then applies: 999, i.e. on)."""
    limits = settings.get("limit_mm_per_prompt")
    value = limits.get(modality) if isinstance(limits, dict) else None
    if isinstance(value, dict):
        value = value.get("count")
    number = finite_number(value)
    return None if number is None else int(number)


def vllm_text_only(settings: dict[str, Any]) -> bool:
    """--language-model-only, or --limit-mm-per-prompt turning off every modality a vision tower serves."""
    if _truthy(settings.get("language_model_only")):
        return True
    return all(mm_limit(settings, m) == 0 for m in VISION_MODALITIES)


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
    if _truthy(settings.get("skip_mm_profiling")) or vllm_text_only(settings):
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
    text = ctx.req.engine_version or VLLM_NEWEST
    v = v_eras.parse_version(text)
    if v is None:
        raise InputError(f"--engine-version {text!r} is not a version number")
    return v, ("given" if ctx.req.engine_version else f"assumed (newest documented, {VLLM_NEWEST})")


def plan_vllm(ctx: Context) -> dict[str, Any]:
    s, req, arch, b = ctx.settings, ctx.req, ctx.arch, ctx.basis
    if is_deepseek_v4(ctx.mc.cfg):
        raise InputError(_dsv4_refusal(ctx, "vLLM's DeepSeek-V4 block layout is not modelled by plan yet"))
    version, vhow = _vllm_version(ctx)
    engine = str(s.get("engine") or ("V1" if version >= (0, 8, 0) else "V0")).upper()
    era = v_eras.era_for(version, engine)
    util = _fraction(s, "gpu_memory_utilization") or era.default_util
    max_len = _int(s.get("max_model_len")) or req.context or arch.max_position_embeddings or 4096
    tokens_b, seqs = vllm_batch_defaults(version, engine, b.smi_total_gib, b.gpu, max_len, _truthy(s.get("offline")))
    tokens_b = _int(s.get("max_num_batched_tokens")) or tokens_b
    seqs = _int(s.get("max_num_seqs")) or seqs
    w = _weights(ctx, Parallel(tp=req.tp, ep=req.ep, pp=req.pp))
    if version >= VLLM_TOWER_SKIP_FROM and engine == "V1" and vllm_text_only(s) and w.by_component.get("vision"):
        tower = w.by_component.pop("vision")
        w = replace(w, bytes_per_rank=w.bytes_per_rank - tower,
                    notes=[n for n in w.notes if not n.startswith("vision tower")]
                    + [f"text only: vLLM does not build the {tower / GIB:.2f} GiB vision tower (every modality limited "
                       "to 0: _mark_tower_model)"])
    rope = rope_cache_bytes(ctx.mc.cfg, 2) / GIB
    runner, runner_why = vllm_model_runner(version, engine, ctx.mc.cfg, s)
    sampler_rule = vllm_sampler_rule(version, runner, gpu_sm_count(b.gpu))
    draft = resolve_vllm_draft(ctx.mc, arch, s, Parallel(tp=req.tp, ep=req.ep, pp=req.pp))
    act, draft_act = vllm_activation_with_draft_gib(ctx.mc.cfg, req.tp, tokens_b, seqs, sampler_rule, draft)
    act_what = f"{tokens_b:,} batched tokens, {seqs} seqs" + (
        f", the drafter's prefill {draft_act:.2f} GiB" if draft_act else
        ", the drafter's prefill not modelled" if draft is not None and draft_act is None else "")
    encoder = vllm_encoder_profile(ctx.mc.cfg, s, tokens_b) if engine == "V1" else None
    if encoder is not None and encoder[0] > act:
        act, act_what = encoder
    non_torch, nt_how = vllm_non_torch_gib(version, engine, b)
    if (0, 26, 0) <= version < (0, 27, 0) and engine == "V1":
        # the measured non-torch figure leaves out PyTorch's cuBLAS workspace, a torch tensor the profile's first
        # matmul allocates and its peak therefore holds (CublasHandlePool.cpp: 32 MiB on sm90, also sm100/sm120 from
        # torch 2.11, which v0.26 runs on; 8 MiB elsewhere): Llama-3.1-8B's warm peak is the forward's 1.6875 + 0.03
        act += torch_cublas_workspace_bytes(ctx.sm_major) / GIB
        act_what += ", cuBLAS workspace"
        non_torch, nt_how = max(non_torch, VLLM_026_NON_TORCH_GIB), "v0.26: measured on an H200 (cuBLAS and the rest)"
    # V2 of v0.26–v0.27 profiles no CUDA-graph estimate (measured on v0.26.0); later V2 releases profile one
    graphs_charged = era.graphs_in_budget and not (runner == "V2" and version < (0, 28, 0))
    graphs = _float(s.get("cuda_graph_gib"))
    if graphs is None:
        graphs = VLLM_GRAPH_GIB if (graphs_charged and not _truthy(s.get("enforce_eager"))) else 0.0
    elif not graphs_charged:
        graphs = 0.0  # captured after the KV cache, outside the budget
    kv_dtype = str(s.get("kv_cache_dtype") or "auto")
    kvb = dtype_bytes(kv_dtype, arch.torch_dtype)
    block = _int(s.get("block_size")) or (64 if arch.attention == "mla" and (ctx.sm_major or 0) >= 9 else 16)
    layers = max(v_rules.pp_layers(arch.full_attention_layers or arch.num_layers, req.pp))
    kv_override = _int(s.get("kv_cache_memory_bytes"))
    draft_gib = draft.weights_gib if draft else 0.0

    prefix = _truthy(s.get("enable_prefix_caching"))  # off by default for hybrid models (v0.18–v0.24)

    def scenario(u: float, kv_bytes: int, k_shift: float = 0.0) -> dict[str, Any]:
        T = b.torch_total.value
        budget = u * T
        K = kv_override / GIB if kv_override else budget - w.gib - draft_gib - rope - act - non_torch - graphs
        K += k_shift
        layout = _vllm_layout(ctx, kv_bytes, block, prefix, draft)
        if layout is None:
            raise InputError("the model's attention layers hold no KV bytes (config without head dims)")
        cap = layout.capacity(K, block, max_len, tokens_b, era.capacity_rule)
        page = layout.page
        outside = T - budget - (b.cuda_context.value + b.nccl.value if version >= (0, 11, 0) else 0.0)
        if not graphs_charged:
            outside -= 0.5  # graphs are captured outside the budget
        return {"K": K, "blocks": cap.blocks, "tokens": cap.tokens, "concurrency": cap.concurrency,
                "page": page, "reserve_left_gib": outside, "mamba": layout.mamba}

    base = scenario(util, kvb)
    spread = Spread() if kv_override else vllm_spread(
        b, util, w.as_dict(), act, vllm_non_torch_parts(version, engine)[0],
        bool(graphs) and not s.get("cuda_graph_gib"),
        sampler_peak=encoder is None and vllm_sampler_dominates(ctx.mc.cfg, req.tp, tokens_b, seqs, sampler_rule))
    token_range = [scenario(util, kvb, -spread.gib)["tokens"], scenario(util, kvb, spread.gib)["tokens"]]
    warnings = list(ctx.notes) + list(w.notes) + b.notes + (draft.notes if draft else [])
    if base["mamba"] is not None:
        warnings.append(_mamba_note(base["mamba"], arch.linear_layers, max_len))
    elif arch.full_attention_layers and not arch.sliding_layers and arch.full_attention_layers < arch.num_layers:
        warnings.append("hybrid linear-attention (Mamba-style) model: vLLM's state pages and enlarged attention "
                        "blocks are not modelled (state fields missing from the config, or PP > 1); the token "
                        "figure counts full-attention layers only")
    if arch.sliding_layers and req.pp > 1:
        warnings.append("sliding-window model with pipeline parallelism: which window layers each stage holds is not "
                        "modelled, so every layer of the busiest stage is counted as full attention (a lower bound "
                        "on the tokens)")
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
    T = b.torch_total.value
    bar = fill(b.smi_total_gib, [
        BarPart(Part.CONTEXT, "driver-reserved slice, CUDA context, NCCL (outside the budget)",
                b.smi_total_gib - util * T - base["reserve_left_gib"] - (0.0 if graphs_charged else 0.5)),
        BarPart(Part.WEIGHTS, "weights", w.gib),
        BarPart(Part.DRAFT, "draft weights", draft_gib),
        BarPart(Part.OTHER, f"activation peak ({act_what}), rope cache, non-torch memory", act + rope + non_torch),
        BarPart(Part.GRAPHS, "CUDA graphs", graphs + (0.0 if graphs_charged else 0.5)),
        BarPart(Part.KV, f"KV cache ({base['tokens']:,} tokens)", base["K"]),
        BarPart(Part.FREE, "left outside the budget", base["reserve_left_gib"]),
    ])
    curve = []
    for u in sorted({round(util + 0.01 * i, 3) for i in range(-10, 11)} | {util}):  # steps of 0.01 through the value
        if not 0.3 <= u <= 0.99:
            continue
        sc = scenario(u, kvb)
        # vLLM refuses to start when the budget asks for more than is free (the reserve outside it < 0)
        curve.append({"gpu_memory_utilization": u, "kv_tokens": sc["tokens"],
                      "concurrency_at_context": sc["concurrency"], "reserve_left_gib": round(sc["reserve_left_gib"], 4),
                      "risk": "high" if sc["reserve_left_gib"] < 0 or sc["K"] <= 0 else "unknown"})
    ledger = [
        ("nvidia-smi total", b.smi_total_gib, "catalog"),
        ("torch total (T)", T, b.torch_total.how),
        (f"budget T × gpu_memory_utilization {util}", util * T, "given" if s.get("gpu_memory_utilization")
         else f"default for {era.name}"),
        ("weights per rank", -w.gib, w.method),
        *([(f"draft weights ({draft.method}, loaded before profiling)", -draft_gib, draft.weights_from)]
          if draft_gib and draft is not None else []),  # draft_gib is 0.0 without a draft
        ("rope cos/sin cache (model dtype)", -rope, "computed"),
        (f"activation peak ({act_what})", -act, "estimated"),
        ("non-torch memory charged", -non_torch, nt_how),
        ("CUDA graphs (in budget)" if graphs_charged else f"CUDA graphs (outside the budget: model runner {runner})",
         -graphs, "assumed typical" if graphs and not s.get("cuda_graph_gib") else "given" if graphs_charged
         else runner_why),
        ("= KV cache memory (K)", base["K"], "derived"),
        ("left outside the budget", base["reserve_left_gib"], "derived"),
    ]
    return {
        "engine": "vllm", "engine_version": v_eras.fmt(version), "era": era.name,
        "model_runner": {"value": runner, "from": runner_why},
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
        "table": rows, "memory_bar": [p.as_dict() for p in bar], "curve": curve, "warnings": warnings,
    }


def _vllm_layout(ctx: Context, kv_bytes: int, block: int, prefix: bool, draft: VllmDraft | None) -> KvLayout | None:
    """The worker's layout as explain builds it (layout.kv_layout), under the planned settings.

    Speculative decoding adds the draft's attention layers (in their own shape where it differs) and, on a
    hybrid Mamba/GDN model, widens the state (conv window, spare blocks) by the draft tokens.
    """
    arch, s = ctx.arch, ctx.settings
    dtypes = StateDtypes(*(str(s[k]) if isinstance(s.get(k), str) and s.get(k) else None
                           for k in ("dtype", "mamba_cache_dtype", "mamba_ssm_cache_dtype")))
    draft_row = draft.row_bytes(kv_bytes, ctx.req.tp) if draft is not None and draft.kv_layers else None
    return kv_layout(arch, kv_bytes, ctx.req.tp, ctx.req.pp, block_size=block,
                     hybrid_manager=not _truthy(s.get("disable_hybrid_kv_cache_manager")), prefix_caching=prefix,
                     dtypes=dtypes, draft_layers=draft.kv_layers if draft is not None else 0, draft_row_bytes=draft_row,
                     num_spec=draft.num_speculative_tokens if draft is not None else 0)


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
