"""vLLM's KV sizing rules as pure functions (../shared/docs/vllm-memory.md §1–2, §7).

    budget  R = T × gpu_memory_utilization                 (T = device total, never free memory)
    KV      K = R − non-KV terms (weights, activation peak, non-torch, [CUDA graphs])   — by era
    blocks  B = floor(K / (P × L))                          P = block_size × bytes/token/layer
    tokens  B × block_size   (v0.22+: int(concurrency × max_model_len))
    conc.   B / cdiv(max_model_len, block_size)   (V0 and V1 ≤ v0.9.0: B × block_size / max_model_len)

vLLM prints K with two decimals (±0.005 GiB), so a printed K maps to a small range of blocks;
token counts are exact and pin it down. Nothing here reads logs: finish.py feeds it numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvscope.capacity.arch import Architecture, kv_heads_per_rank, mla_row_bytes

GIB = 1 << 30
HALF_CENT = 0.005  # half a unit of the last digit of "%.2f GiB" / format_gib
DEFAULT_BLOCK_SIZE = 16
OWN_CONTEXT_GIB = 1.0  # CUDA context + NCCL a process itself holds before its snapshot (typical, not logged)
CONTENTION_GIB = 2.0  # memory used by others beyond that, counted as another tenant
SUGGESTION_SAFETY = 150 / 1024  # vLLM's own 150 MiB margin in its --kv-cache-memory suggestion, in GiB


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# --- failure classification ------------------------------------------------------------------------------


def classify_shortfall(free_gib: float | None, total_gib: float | None, device: str = "gpu") -> str:
    """'Free memory on device (F/T) … less than desired utilization': contention or plain over-asking.

    vLLM checks F0 ≥ T × util. When T − F0 is more than the process's own context and NCCL buffers,
    someone else holds memory on that GPU (another vLLM instance, a notebook, a stuck process).
    """
    if free_gib is None or total_gib is None:
        return "not-enough-memory"
    others = total_gib - free_gib - OWN_CONTEXT_GIB
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
    """Per-token-per-layer KV bytes on one TP rank.

    MHA/GQA: heads split over TP (at least one, replicated beyond) × (K + V head dims) × element size.
    MLA: one latent row, never split over TP (vLLM builds the MLA layer with one KV head).
    """
    if arch.attention == "mla":
        row = mla_row_bytes(arch, kv_bytes)
        return PageSize(row, f"MLA ({arch.kv_lora_rank} + {arch.qk_rope_head_dim}) × {kv_bytes} B = {row:,} B")
    heads = kv_heads_per_rank(arch, tp_size)
    head_k = arch.head_dim or 0
    head_v = arch.v_head_dim or head_k
    row = heads * (head_k + head_v) * kv_bytes
    shown = f"2 × {head_k}" if head_k == head_v else f"({head_k} + {head_v})"
    return PageSize(row, f"{heads} KV head(s) × {shown} × {kv_bytes} B = {row:,} B")


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

    Layers of one type are cut into groups of the smaller type's count; one block id costs a page in
    each of ``group_size`` shared tensors. A full group needs cdiv(M, bs) blocks per request, a
    window group cdiv(min(window − 1 + max_batched, M), bs) + 1.
    """
    group = min(full_layers, sliding_layers) or max(full_layers, sliding_layers)
    full_groups, sw_groups = cdiv(full_layers, group), cdiv(sliding_layers, group)
    blocks = blocks_for(kv_gib, block_size * row_bytes * group)
    per_request = full_groups * cdiv(max_model_len, block_size)
    per_request += sw_groups * (cdiv(min(window - 1 + max_batched, max_model_len), block_size) + 1)
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
