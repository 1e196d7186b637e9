"""vLLM's KV sizing rules as pure functions (docs/research/vllm-memory.md §1–2, §7).

    budget  R = T × gpu_memory_utilization                 (T = device total, never free memory)
    KV      K = R − non-KV terms (weights, activation peak, non-torch, [CUDA graphs])   — by era
    blocks  B = floor(K / (P × L))                          P = block_size × bytes/token/layer
    tokens  B × block_size   (v0.22+: int(concurrency × max_model_len))
    conc.   B / cdiv(max_model_len, block_size)   (V0 and V1 ≤ v0.9.0: B × block_size / max_model_len)

vLLM prints K with two decimals (±0.005 GiB), so a printed K maps to a small range of blocks;
token counts are exact and pin it down. Nothing here reads logs: finish.py feeds it numbers.

Hybrid attention + Mamba / linear-attention models (Qwen3-Next, Qwen3.5/3.6, Nemotron-H, Jamba,
Granite-4) follow the rules at the end of this file: one page size for every layer (the attention
block grows until its page holds a Mamba state), layers cut into equal KV cache groups, and a
request needing cdiv(M, bs) blocks per attention group but a fixed 1–2 blocks per Mamba group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvscope.model.arch import Architecture, dtype_bytes
from kvscope.model.kv_spec import FullAttentionSpec, MLASpec, attention_spec, mamba_spec, window_tokens_held
from kvscope.model.layout import WeightRules

GIB = 1 << 30
HALF_CENT = 0.005  # half a unit of the last digit of "%.2f GiB" / format_gib
DEFAULT_BLOCK_SIZE = 16
# Platforms whose port defaults to another block size, by the device name of ``# <device> blocks`` (Gaudi's
# vllm-fork: 128, its docs' example log sizes 16 MiB blocks = 128 tokens of an 8B GQA model).
PLATFORM_BLOCK_SIZE = {"hpu": 128}
OWN_CONTEXT_GIB = 1.0  # CUDA context + NCCL a process itself holds before its snapshot (typical, not logged)
CONTENTION_GIB = 2.0  # memory used by others beyond that, counted as another tenant
# ``--kv-cache-memory-bytes`` (CacheConfig.kv_cache_memory_bytes): from v0.10.2 (V0 and V1), still in v0.33. vLLM's own
# hint spells it ``--kv-cache-memory=`` (argparse's prefix matching takes it), so both spellings work wherever
# either does; before v0.10.2 neither exists (doc §1.4).
KV_CACHE_MEMORY_FLAG = "--kv-cache-memory-bytes"
VLLM_WEIGHTS = WeightRules("vLLM", marlin_mxfp4_off_hopper=True)  # Marlin MoE off Hopper (kvscope.model.weights)
KV_CACHE_MEMORY_FROM = (0, 10, 2)
SUGGESTION_SAFETY = 150 / 1024  # vLLM's own 150 MiB margin in its --kv-cache-memory suggestion, in GiB


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# --- failure classification ------------------------------------------------------------------------------


# What a worker of a multi-GPU run holds itself before vLLM's snapshot beyond its CUDA context (v0.11+ initialises
# the distributed environment first): NCCL, and on EFA / DeepEP clusters their communication buffers. Seen: an EP16
# decode group on B200 held 4.55 GiB per GPU before the snapshot with no other process on it.
DISTRIBUTED_INIT_GIB = 2.0


def classify_shortfall(free_gib: float | None, total_gib: float | None, device: str = "gpu",
                       multi_gpu: bool = False) -> str:
    """'Free memory on device (F/T) … less than desired utilization': contention or plain over-asking.

    vLLM checks F0 ≥ T × util. When T − F0 is more than the process's own context and NCCL buffers (larger in a
    multi-GPU run), someone else holds memory on that GPU (another vLLM instance, a notebook, a stuck process).
    """
    if free_gib is None or total_gib is None:
        return "not-enough-memory"
    others = total_gib - free_gib - OWN_CONTEXT_GIB - (DISTRIBUTED_INIT_GIB if multi_gpu else 0.0)
    if device == "gpu" and others >= CONTENTION_GIB:
        return "multi-instance-contention"
    return "not-enough-memory"


# --- bytes per token / per block ------------------------------------------------------------------------


@dataclass(frozen=True)
class PageSize:
    """KV bytes of one token in one layer on one worker, and how it was built."""

    bytes_per_token_per_layer: int
    formula: str


def page_size(arch: Architecture, kv_bytes: int, tp_size: int) -> PageSize:
    """Per-token-per-layer KV bytes on one TP rank (the layer's spec: model/kv_spec.py).

    MHA/GQA: heads split over TP (at least one, replicated beyond) × (K + V head dims) × element size.
    MLA: one latent row, never split over TP (vLLM builds the MLA layer with one KV head).
    """
    return page_of(attention_spec(arch, kv_bytes, tp_size))


def page_of(spec: FullAttentionSpec | MLASpec) -> PageSize:
    """The page row of an attention spec, with the formula vLLM's terms explain it by."""
    row = spec.row_bytes
    if isinstance(spec, MLASpec):
        return PageSize(row, f"MLA ({spec.kv_lora_rank} + {spec.rope_dim}) × {spec.dtype_bytes} B = {row:,} B")
    shown = f"2 × {spec.head_dim}" if spec.head_dim == spec.v_head_dim else f"({spec.head_dim} + {spec.v_head_dim})"
    return PageSize(row, f"{spec.kv_heads} KV head(s) × {shown} × {spec.dtype_bytes} B = {row:,} B")


def pp_layers(num_layers: int, pp_size: int) -> list[int]:
    """Layers per pipeline stage: an even split, the remainder going to the stages before the last."""
    pp_size = max(1, pp_size)
    base, rest = divmod(num_layers, pp_size)
    parts = [base] * pp_size
    for i in range(rest):
        parts[(pp_size - 2 - i) % pp_size] += 1
    return parts


def bytes_per_block(row_bytes: int, layers: int, block_size: int) -> int:
    """One block id costs one page (block_size × row) in every KV layer of the worker."""
    return block_size * row_bytes * layers


# --- speculative decoding (V1): the drafter's KV layers ----------------------------------------------------

NO_KV_DRAFT_METHODS = ("ngram", "ngram_gpu", "medusa", "mlp_speculator", "suffix")
EAGLE_HEAD_LAYERS = 1  # published EAGLE / EAGLE-3 heads are one decoder layer (llama_eagle*.py)


def spec_method(spec: object) -> str:
    """The method of a speculative_config (dict), lower-cased; '' when none is named."""
    if not isinstance(spec, dict):
        return ""
    return str(spec.get("method") or "").strip().lower()


def is_mtp(method: str) -> bool:
    """vLLM's MTP family: 'mtp' and the per-model spellings (deepseek_mtp, qwen3_next_mtp, glm4_moe_mtp …)."""
    return method == "mtp" or method.endswith("_mtp")


def draft_kv_layers(method: str, nextn_layers: int, head_layers: int = EAGLE_HEAD_LAYERS) -> int | None:
    """Attention layers a V1 drafter registers in the KV cache spec, next to the target's.

    The drafter is built in the same forward context, so each of its attention layers gets a KV
    spec like a target layer (vllm/v1/worker/gpu_model_runner.py get_kv_cache_spec). EAGLE/EAGLE-3:
    the head's own decoder layers, numbered after the target's (``start_layer_id`` in
    llama_eagle.py / llama_eagle3.py) — one for the published heads. MTP: the model's
    ``num_nextn_predict_layers`` (``mtp_num_hidden_layers`` on Qwen3-Next/3.5), which
    SpeculativeConfig.hf_config_override turns into ``n_predict``. n-gram, Medusa, MLP speculator,
    suffix decoding: no attention layer, no KV. None: a method whose layers are the draft model's own
    (``draft_model``) or unknown here.
    """
    if method in NO_KV_DRAFT_METHODS:
        return 0
    if is_mtp(method):
        return nextn_layers
    if method.startswith("eagle"):
        return head_layers
    return None


# --- memory → blocks → tokens → concurrency -------------------------------------------------------------


def blocks_for(kv_gib: float, block_bytes: int) -> int:
    """vLLM's ``int(K // P // L)`` with K given in GiB."""
    if block_bytes <= 0:
        return 0
    return max(0, int(kv_gib * GIB // block_bytes))


def blocks_range(kv_gib_printed: float, block_bytes: int, half_unit: float = HALF_CENT) -> tuple[int, int]:
    """Blocks a printed K can mean: K stands for [K − half, K + half)."""
    return blocks_for(kv_gib_printed - half_unit, block_bytes), blocks_for(kv_gib_printed + half_unit, block_bytes)


@dataclass(frozen=True)
class Capacity:
    blocks: int
    tokens: int
    concurrency: float


def capacity(blocks: int, block_size: int, max_model_len: int | None, rule: str) -> Capacity:
    """Tokens and 'Maximum concurrency' from blocks, by the release's formula.

    rule: "v0" (V0 and V1 ≤ 0.9.0: conc = tokens / M), "v1" (0.9.1–0.20: conc = B / cdiv(M, bs)),
    "v1-conc" (0.22+: tokens = int(conc × M)).
    """
    tokens = blocks * block_size
    if not max_model_len:
        return Capacity(blocks, tokens, 0.0)
    if rule == "v0":
        return Capacity(blocks, tokens, tokens / max_model_len)
    conc = blocks / cdiv(max_model_len, block_size)
    if rule == "v1-conc":
        tokens = int(conc * max_model_len)
    return Capacity(blocks, tokens, conc)


def hybrid_capacity(kv_gib: float, row_bytes: int, full_layers: int, sliding_layers: int, window: int,
                    block_size: int, max_model_len: int, max_batched: int, rule: str) -> Capacity:
    """Sliding-window + full-attention model under the hybrid KV cache manager (v0.9.1+).

    Layers of one type are cut into groups of the smaller type's count (the larger when it is under
    1.5×: gpt-oss + an EAGLE layer, 18 sw + 19 full, pads to two groups of 19, not three of 18 —
    layer_group_size); one block id costs a page in each of ``group_size`` shared tensors. A full
    group needs cdiv(M, bs) blocks per request, a window group cdiv(min(window − 1 + max_batched, M), bs) + 1.
    """
    group = layer_group_size([full_layers, sliding_layers])
    full_groups, sw_groups = cdiv(full_layers, group), cdiv(sliding_layers, group)
    blocks = blocks_for(kv_gib, block_size * row_bytes * group)
    per_request = full_groups * cdiv(max_model_len, block_size)
    per_request += sw_groups * (cdiv(window_tokens_held(window, max_model_len, max_batched), block_size) + 1)
    conc = blocks / per_request
    tokens = int(conc * max_model_len) if rule == "v1-conc" else blocks // (full_groups + sw_groups) * block_size
    return Capacity(blocks, tokens, conc)


def printed_concurrency_matches(value: float, printed: float) -> bool:
    """'%.2fx' rounding: the printed figure is within half a cent of the exact one."""
    return abs(value - printed) <= HALF_CENT + 1e-9


# --- the other direction: what the printed numbers imply --------------------------------------------------


def implied_block_bytes(kv_gib: float, blocks: int, half_unit: float = HALF_CENT) -> tuple[float, float]:
    """Bytes per block consistent with a printed K and an exact block count (K ∈ [K ± half])."""
    if blocks <= 0:
        return (0.0, 0.0)
    return ((kv_gib - half_unit) * GIB / (blocks + 1), (kv_gib + half_unit) * GIB / blocks)


def implied_bytes_per_token(needed_gib: float, max_model_len: int, half_unit: float = HALF_CENT) -> tuple[float, float]:
    """From 'X GiB KV cache is needed' for one request of max_model_len tokens."""
    return ((needed_gib - half_unit) * GIB / max_model_len, (needed_gib + half_unit) * GIB / max_model_len)


def max_len_that_fits(kv_gib: float, block_bytes: int, block_size: int) -> int:
    """vLLM's estimate_max_model_len for a plain model: whole blocks that fit, times block_size."""
    return blocks_for(kv_gib, block_bytes) * block_size


def kv_after_util(kv_gib: float, total_gib: float, util_from: float, util_to: float) -> float:
    """K for another utilization: every non-KV term is independent of util, so K moves by ΔU × T."""
    return kv_gib + (util_to - util_from) * total_gib


def util_for_kv(kv_needed_gib: float, kv_gib: float, total_gib: float, util: float) -> float:
    """The utilization at which K would reach kv_needed_gib (rounded up to the next 0.01)."""
    exact = util + (kv_needed_gib - kv_gib) / total_gib
    return math.ceil(round(exact * 100, 6)) / 100


def tokens_per_util_step(total_gib: float, block_bytes: int, block_size: int, step: float = 0.01) -> int:
    """KV tokens that +step of gpu_memory_utilization buys (whole blocks)."""
    return blocks_for(step * total_gib, block_bytes) * block_size


def graph_gib_from_advisory(util: float, util_equivalent: float, total_gib: float) -> float:
    """v0.18+ prints 'util u is equivalent to u_eq without CUDA graph profiling': G = (u − u_eq) × T."""
    return (util - util_equivalent) * total_gib


def suggested_kv_cache_bytes(budget_gib: float, non_kv_gib: float, graphs_gib: float) -> int:
    """vLLM's own ``--kv-cache-memory`` suggestion: R − non-KV − CUDA graphs − 150 MiB."""
    return int((budget_gib - non_kv_gib - graphs_gib - SUGGESTION_SAFETY) * GIB)


# --- hybrid attention + Mamba / linear attention (vllm-memory.md §2.1, §2.2, §2.6) -----------------------
#
# Read in vLLM v0.18.0, v0.20.0, v0.22.0, v0.24.0: HybridAttentionMambaModelConfig.verify_and_update_config
# (vllm/model_executor/models/config.py, v0.18) → Platform._align_hybrid_block_size (vllm/platforms/
# interface.py, v0.20+); MambaModelConfig.verify_and_update_config (mamba_cache_mode); MambaSpec
# (vllm/v1/kv_cache_interface.py: page = Σ state tensor bytes, max_memory_usage_bytes);
# _get_kv_cache_groups_uniform_page_size, get_kv_cache_config_from_groups, get_num_blocks,
# get_max_concurrency_for_kv_cache_config, get_kv_cache_capacity (vllm/v1/core/kv_cache_utils.py).

KERNEL_BLOCK_ALIGN = 16  # smallest kernel block of FlashAttention / FlashInfer / Triton (MLA: 64, CUTLASS MLA: 128)
DEFAULT_MAMBA_CHUNK = 2048  # ModelConfig.get_mamba_chunk_size when the config names none
GROUP_SIZE_SLACK = 1.5  # groups take the larger layer count when max < 1.5 × min (v0.18+)
# Model types whose vLLM class implements SupportsMambaPrefixCaching (v0.18–v0.24; Bamba until v0.22):
# with prefix caching they run mamba_cache_mode "all"; every other hybrid (Gated DeltaNet: Qwen3-Next,
# Qwen3.5/3.6) falls back to "align".
MAMBA_MODE_ALL_TYPES = frozenset({"nemotron_h", "jamba", "mamba", "mamba2", "falcon_mamba", "zamba2",
                                  "granitemoehybrid", "falcon_h1", "bamba"})
# The SSM state dtype vLLM uses when --mamba-ssm-cache-dtype is "auto" and the config declares none
# (NemotronHForCausalLMConfig: float32); otherwise the conv state's dtype (the model dtype).
SSM_DTYPE_DEFAULT = {"nemotron_h": "float32"}


def mamba_cache_mode(prefix_caching: bool, model_type: str) -> str:
    """'none' without prefix caching (the default for hybrid models), else 'all' or 'align'."""
    if not prefix_caching:
        return "none"
    return "all" if model_type in MAMBA_MODE_ALL_TYPES else "align"


@dataclass(frozen=True)
class MambaPage:
    """Bytes of one Mamba / linear-attention layer's state for one request on one worker."""

    bytes: int
    formula: str


def mamba_page(arch: Architecture, tp_size: int, model_dtype: str | None, num_spec: int = 0,
               mamba_cache_dtype: str | None = None, mamba_ssm_cache_dtype: str | None = None) -> MambaPage | None:
    """MambaSpec.page_size_bytes: conv state in the mamba cache dtype (auto: the model dtype), SSM state
    in --mamba-ssm-cache-dtype, else the dtype the config declares (Qwen3.5 mamba_ssm_dtype, Nemotron-H
    mamba_ssm_cache_dtype, float32 by default), else the conv dtype."""
    state = arch.linear_state
    if state is None:
        return None
    conv_b = dtype_bytes(mamba_cache_dtype, model_dtype or arch.torch_dtype)
    declared = state.ssm_dtype or SSM_DTYPE_DEFAULT.get(arch.model_type)
    ssm_name = mamba_ssm_cache_dtype if mamba_ssm_cache_dtype not in (None, "auto") else declared
    ssm_b = dtype_bytes(ssm_name, None) if ssm_name else conv_b
    spec = mamba_spec(state, tp_size, conv_b, ssm_b, num_spec)
    total = spec.page_bytes
    return MambaPage(total, f"{state.kind} state: conv {spec.conv_elements:,} × {conv_b} B + SSM "
                            f"{spec.ssm_elements:,} × {ssm_b} B = {total:,} B")


def hybrid_block_size(attn_row_bytes: int, mamba_page_bytes: int, mode: str, block_size: int = DEFAULT_BLOCK_SIZE,
                      chunk_size: int | None = None, kernel_align: int = KERNEL_BLOCK_ALIGN) -> int:
    """The attention block size vLLM forces so one attention page holds one Mamba state.

    Alignment is the backend's kernel block (16) or the configured block size if larger. Mode 'all'
    rounds the token count up to lcm(mamba chunk, alignment); otherwise to the alignment. A larger
    configured block size is kept. ("Setting attention block size to %d tokens …")
    """
    align = max(kernel_align, block_size)
    if mode == "all":
        chunk = math.lcm(chunk_size or DEFAULT_MAMBA_CHUNK, align)
        need = chunk * cdiv(cdiv(mamba_page_bytes, attn_row_bytes), chunk)
    else:
        need = align * cdiv(mamba_page_bytes, align * attn_row_bytes)
    return max(block_size, need)


def layer_group_size(layer_counts: list[int]) -> int:
    """_get_kv_cache_groups_uniform_page_size: the smallest type's layer count, or the largest when
    max < 1.5 × min (a drafter's extra layer is padded instead of doubling the groups)."""
    counts = [c for c in layer_counts if c > 0]
    low, high = min(counts), max(counts)
    return high if high < low * GROUP_SIZE_SLACK else low


@dataclass(frozen=True)
class MambaLayout:
    """KV cache groups of a hybrid attention + Mamba model on one worker."""

    block_size: int  # the (enlarged) attention block size
    page_bytes: int  # one page, attention and (padded) Mamba alike
    group_size: int  # layers per group = shared tensors; one block id costs a page in each
    attn_groups: int
    mamba_groups: int
    mode: str  # mamba_cache_mode: none | align | all
    num_spec: int
    mamba_state_bytes: int  # before padding
    attn_row_bytes: int = 0  # one token of one attention layer
    attn_layers: int = 0
    mamba_layers: int = 0
    configured_block_size: int = DEFAULT_BLOCK_SIZE
    chunk_size: int | None = None

    @property
    def block_bytes(self) -> int:
        return self.page_bytes * self.group_size

    def mamba_block_size(self, max_model_len: int) -> int:
        """MambaSpec.block_size: max_model_len without prefix caching, the attention block size with it."""
        return max_model_len if self.mode == "none" else self.block_size

    def blocks_per_request(self, max_model_len: int) -> int:
        """Σ over groups of cdiv(max_memory_usage_bytes, page): attention cdiv(M, bs); Mamba 1 + spec
        ('none'), 2 + spec ('align'), cdiv(M, bs) + spec ('all')."""
        attn = cdiv(max_model_len, self.block_size)
        mamba = {"none": 1, "align": 2}.get(self.mode, attn) + self.num_spec
        return self.attn_groups * attn + self.mamba_groups * mamba

    def request_bytes(self, max_model_len: int) -> int:
        """_max_memory_usage_bytes_from_groups: group_size × page × blocks one request needs."""
        return self.block_bytes * self.blocks_per_request(max_model_len)


def mamba_layout(attn_row_bytes: int, state: MambaPage, attn_layers: int, mamba_layers: int, mode: str,
                 num_spec: int = 0, block_size: int = DEFAULT_BLOCK_SIZE, chunk_size: int | None = None) -> MambaLayout:
    """Block size, page and groups as vLLM derives them for a hybrid model (hybrid KV cache manager on)."""
    bs = hybrid_block_size(attn_row_bytes, state.bytes, mode, block_size, chunk_size)
    group = layer_group_size([attn_layers, mamba_layers])
    return MambaLayout(bs, bs * attn_row_bytes, group, cdiv(attn_layers, group), cdiv(mamba_layers, group), mode,
                       num_spec, state.bytes, attn_row_bytes, attn_layers, mamba_layers, block_size, chunk_size)


def mamba_relayout(layout: MambaLayout, attn_row_bytes: int | None = None, block_size: int | None = None) -> MambaLayout:
    """The layout after a KV dtype or --block-size change: the block is enlarged again for the same state."""
    state = MambaPage(layout.mamba_state_bytes, "")
    return mamba_layout(attn_row_bytes or layout.attn_row_bytes, state, layout.attn_layers, layout.mamba_layers,
                        layout.mode, layout.num_spec, block_size or layout.configured_block_size, layout.chunk_size)


def mamba_capacity_of_blocks(blocks: int, layout: MambaLayout, max_model_len: int, rule: str) -> Capacity:
    """Concurrency = blocks / blocks per request; tokens by era: int(conc × M) from v0.22
    (get_kv_cache_capacity), blocks // groups × smallest block size before (v0.9.1–v0.20)."""
    conc = blocks / layout.blocks_per_request(max_model_len)
    if rule == "v1-conc":
        tokens = int(conc * max_model_len)
    else:
        smallest = min(layout.block_size, layout.mamba_block_size(max_model_len))
        tokens = blocks // (layout.attn_groups + layout.mamba_groups) * smallest
    return Capacity(blocks, tokens, conc)


def mamba_capacity(kv_gib: float, layout: MambaLayout, max_model_len: int, rule: str) -> Capacity:
    """Blocks = K // (page × group_size) (get_num_blocks), then the capacity of those blocks."""
    return mamba_capacity_of_blocks(blocks_for(kv_gib, layout.block_bytes), layout, max_model_len, rule)
