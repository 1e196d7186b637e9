"""SGLang's KV sizing rule, replayed (docs/research/sglang-memory.md §2).

    rest   = A − F × (1 − mem_fraction_static)      # GiB; F = free before weights, A = free at profile
    tokens = floor(int(rest × 2^30) / cell) → page floor → clamps

The log prints F and A with two decimals, so we carry intervals: every printed figure x stands for
[x − 0.005, x + 0.005]. Exact integers (token counts) then pin the unprinted exact values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvscope.engines.sglang.eras import Era
from kvscope.model.arch import Architecture
from kvscope.model.kv_spec import IndexerSpec, MLASpec, attention_spec
from kvscope.model.layout import WeightRules

GIB = 1 << 30
HALF_CENT = 0.005  # half a unit of the last printed digit of "x.xx GB"
SEGMENT_BYTES = 2 << 20  # the caching allocator rounds large tensors up to 2 MiB
# How SGLang lays a checkpoint out: contiguous absorbed-MLA copies, the float32 MXFP4 scales its Hopper
# Marlin path keeps, MoonViT attention split over attention-TP (kvscope.model.weights says why each).
SGLANG_WEIGHTS = WeightRules("SGLang", copies_absorbed_mla=True, keeps_fp32_mxfp4_scales_on_hopper=True,
                             shards_moonvit_attention=True)


@dataclass
class Interval:
    low: float
    high: float

    @classmethod
    def printed(cls, value: float, half_unit: float = HALF_CENT) -> Interval:
        return cls(value - half_unit, value + half_unit)

    def __add__(self, other: Interval) -> Interval:
        return Interval(self.low + other.low, self.high + other.high)

    def __sub__(self, other: Interval) -> Interval:
        return Interval(self.low - other.high, self.high - other.low)

    def scale(self, k: float) -> Interval:
        a, b = self.low * k, self.high * k
        return Interval(min(a, b), max(a, b))

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high

    @property
    def mid(self) -> float:
        return (self.low + self.high) / 2


@dataclass
class CellSize:
    """Bytes per token per GPU of one pool, and how it was built."""

    bytes_per_token: int
    layers: int
    row_bytes: int  # bytes per token per layer (K+V, or the MLA latent row)
    tensors_per_layer: int  # 2 for K and V buffers, 1 for an MLA buffer
    formula: str
    k_fraction: float = 0.5  # share of the row in the K buffer (head_dim / (head_dim + v_head_dim))


def with_draft_share(cell_bytes: int, draft_layers: int, target_layers: int) -> int:
    """The cell a speculative run profiles from 0.5.14 (E3): the target's, inflated by the draft's layers as if each
    were a target layer, ``cell + int(cell × draft_layers / target_layers)`` (ModelRunnerKVCacheMixin; shared
    docs/sglang-memory.md §2.6). explain's budget check and plan both divide by it."""
    return cell_bytes + int(cell_bytes * draft_layers / target_layers)


def cell_size(arch: Architecture, kv_bytes: int, attn_tp: int, era: Era, layers: int | None = None) -> CellSize:
    """SGLang's per-GPU bytes per token (``cell_size``) for the target model: its layers' spec
    (model/kv_spec.py) times the layers this rank pools; a DSA model's indexer rows are in the cell."""
    n_layers = layers or (arch.full_attention_layers or arch.num_layers)
    spec = attention_spec(arch, kv_bytes, attn_tp, v_head_dim=era.mha_cell_uses_v_head_dim)
    row = spec.row_bytes
    if isinstance(spec, MLASpec):
        formula = f"({spec.kv_lora_rank} + {spec.rope_dim}) × {n_layers} layers × {kv_bytes} B"
        cell = row * n_layers
        if arch.index_head_dim:
            idx = IndexerSpec(arch.index_head_dim).row_bytes
            cell += idx * n_layers
            formula += f" + indexer {idx} B × {n_layers}"
        return CellSize(cell, n_layers, row, 1, formula + " (MLA latent, not split by TP)")
    split = f"{arch.num_kv_heads} KV heads / TP {attn_tp}" if attn_tp > 1 else f"{arch.num_kv_heads} KV heads"
    if (arch.num_kv_heads or 1) < attn_tp:
        split += " (fewer heads than ranks: one head replicated per rank)"
    formula = (f"{spec.kv_heads} heads × ({spec.head_dim} + {spec.v_head_dim}) × {n_layers} layers × {kv_bytes} B "
               f"[{split}]")
    return CellSize(row * n_layers, n_layers, row, 2, formula, spec.k_fraction)


INDEXER_LEFT_OUT = "indexer K cache not counted in the printed size"


def dsa_indexer_row_bytes(arch: Architecture) -> int:
    """The DSA indexer's K cache per token and layer (0 for a model without one)."""
    return IndexerSpec(arch.index_head_dim).row_bytes if arch.index_head_dim else 0


def dsa_cells(arch: Architecture, kv_bytes: int, layers: int) -> list[CellSize]:
    """DeepSeek DSA (V3.2, GLM-5) pool widths SGLang has used (doc §2.2 NSA/DSA).

    The profile budgets the 576-wide latent (+ indexer); fp8 non-trtllm backends store a 656-B row;
    some releases print the KV size without the indexer buffers. All are candidates; the printed
    pool size says which one this run used.
    """
    idx = dsa_indexer_row_bytes(arch)
    mla = MLASpec(arch.kv_lora_rank or 0, arch.qk_rope_head_dim or 0, kv_bytes)
    rows = [(mla.row_bytes, f"latent ({mla.kv_lora_rank} + {mla.rope_dim}) × {kv_bytes} B")]
    if kv_bytes == 1:
        scales = mla.fp8_row_bytes - mla.kv_lora_rank - mla.rope_dim * 2
        rows.append((mla.fp8_row_bytes, f"fp8 row {mla.kv_lora_rank} + scales {scales} + rope {mla.rope_dim} × 2 B"))
    out = []
    for row, what in rows:
        out.append(CellSize((row + idx) * layers, layers, row + idx, 1, f"{what} + indexer {idx} B, × {layers} layers (DSA)"))
        out.append(CellSize(row * layers, layers, row, 1, f"{what} × {layers} layers (DSA, {INDEXER_LEFT_OUT})"))
    return out


def pool_bytes_interval(printed_gib: float) -> Interval:
    return Interval.printed(printed_gib).scale(GIB)


def observed_cell_interval(tokens: int, page_size: int, printed_gib: float) -> Interval:
    """Bytes/token the pool line implies: its buffers hold (tokens + page_size) rows."""
    rows = tokens + max(1, page_size)
    return pool_bytes_interval(printed_gib).scale(1 / rows)


def predicted_pool_gib(tokens: int, page_size: int, cell: int) -> float:
    return (tokens + max(1, page_size)) * cell / GIB


def tokens_from_rest(rest_gib: Interval, cell: int, page_size: int = 1) -> tuple[int, int]:
    """floor(int(rest × 2^30) / cell), page-floored, for both ends of the interval."""

    def one(rest: float) -> int:
        n = max(0, int(rest * GIB)) // cell
        return n // page_size * page_size if page_size > 1 else n

    return one(rest_gib.low), one(rest_gib.high)


# SGLang measures the budget basis F (pre_model_load_memory) when torch distributed init ends
# (distributed/bootstrap.py: init_torch_distributed), then the model runner creates its forward stream,
# offloader, sampler and token oracle before load_model prints "Load weight begin. avail mem=…". What those
# take (0.06-0.08 GiB on 0.5.17, tests/fixtures/gpu-sglang) is in F but not in the printed figure, so the
# printed figure is a lower bound of F. A larger gap than this is not that: the check fails as before.
BASIS_GAP_MAX_GIB = 0.25
# Small allocations between "Load weight end" and the profile (≈0.01 GiB on 0.5.17): A at profile time can
# be this much below the printed free-after-weights.
AFTER_LOAD_SLACK_GIB = 0.02


def at_profile_interval(printed_gib: float) -> Interval:
    """A at profile time: the printed free-after-weights ± half a cent, less what may go after the weight line."""
    return Interval(printed_gib - HALF_CENT - AFTER_LOAD_SLACK_GIB, printed_gib + HALF_CENT)


def basis_from_pool(at_profile_gib: float, tokens: int, cell: int, page_size: int, mfs: float,
                    state_gib: float = 0.0) -> Interval:
    """F that makes the logged pool come out: (A − rest) / (1 − mfs), rest ∈ [tokens, tokens + page) × cell."""
    rest_low = tokens * cell / GIB + state_gib
    rest_high = (tokens + max(1, page_size)) * cell / GIB + state_gib
    a = at_profile_interval(at_profile_gib)
    return Interval((a.low - rest_high) / (1 - mfs), (a.high - rest_low) / (1 - mfs))


def rest_interval(pre_load_free: Interval, at_profile: Interval, mfs: float) -> Interval:
    """rest = A − F × (1 − mfs)."""
    return at_profile - pre_load_free.scale(1 - mfs)


def allocator_slack_gib(tokens: int, page_size: int, cell: CellSize) -> float:
    """Memory lost to 2 MiB segment rounding: one rounding per K/V tensor per layer."""
    per_tensor = (tokens + max(1, page_size)) * cell.row_bytes // cell.tensors_per_layer
    rounded = math.ceil(per_tensor / SEGMENT_BYTES) * SEGMENT_BYTES
    return (rounded - per_tensor) * cell.layers * cell.tensors_per_layer / GIB


def request_pool_gib(rows: int, context_len: int, draft_tokens: int = 0) -> float:
    """req_to_token: rows × (context_len + 4 [+ draft tokens]) int32, rounded up to 2 MiB."""
    raw = rows * (context_len + 4 + draft_tokens) * 4
    return math.ceil(raw / SEGMENT_BYTES) * SEGMENT_BYTES / GIB


def implied_mfs(pre_load_free_gib: float, at_profile_gib: float, tokens: int, cell: int, state_gib: float = 0.0) -> float:
    """The mem_fraction_static that makes the logged token count come out (midpoint estimate); ``state_gib``:
    what a hybrid model's Mamba state pool took from the same budget first."""
    rest = (tokens + 0.5) * cell / GIB + state_gib
    return 1 - (at_profile_gib - rest) / pre_load_free_gib


def tokens_per_mfs_step(pre_load_free_gib: float, cell: int, step: float = 0.01) -> int:
    return int(step * pre_load_free_gib * GIB // cell)
