"""One frozen spec per kind of KV-holding layer, each owning its bytes per token (or per request).

Modelled on vLLM's ``kv_cache_interface`` (FullAttentionSpec, MLAAttentionSpec, SlidingWindowSpec,
MambaSpec): what a layer stores is a fact of the model and the rank it runs on, while how an engine
groups layers into pages, blocks and pools is the engine's (``engines/<engine>/rules.py`` builds its
one layout from these specs). Every engine asks these specs for bytes, so a layer kind's arithmetic
lives once: explain, whatif and plan of every engine agree by construction.

Units: bytes (ints); ``row_bytes`` is one token of one layer on one rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvscope.model.arch import Architecture, LinearState, linear_state_elements

FP8_SCALE_BLOCK = 128  # fp8 rows carry one fp32 (4-B) scale per 128 elements (DSA indexer, fp8 MLA rows)
FP8_SCALE_BYTES = 4


@dataclass(frozen=True)
class FullAttentionSpec:
    """K and V of one MHA/GQA/MQA layer: heads split over attention-TP (at least one, replicated beyond)."""

    kv_heads: int  # on this rank
    head_dim: int
    v_head_dim: int
    dtype_bytes: int
    tensors: int = 2  # separate K and V buffers

    @property
    def row_bytes(self) -> int:
        return self.kv_heads * (self.head_dim + self.v_head_dim) * self.dtype_bytes

    @property
    def k_fraction(self) -> float:
        """Share of the row in the K buffer (head_dim / (head_dim + v_head_dim))."""
        total = self.head_dim + self.v_head_dim
        return self.head_dim / total if total else 0.5


@dataclass(frozen=True)
class MLASpec:
    """One MLA layer's latent row (kv_lora_rank + rope dim), never split over TP (one KV head)."""

    kv_lora_rank: int
    rope_dim: int
    dtype_bytes: int
    tensors: int = 1

    @property
    def row_bytes(self) -> int:
        return (self.kv_lora_rank + self.rope_dim) * self.dtype_bytes

    @property
    def fp8_row_bytes(self) -> int:
        """The row an fp8 MLA cache really stores on backends that keep the rope part in 16 bits:
        latent bytes + one scale per 128 + rope × 2 B (SGLang's DSA pools: 512 + 16 + 128 = 656)."""
        return (self.kv_lora_rank + self.kv_lora_rank // FP8_SCALE_BLOCK * FP8_SCALE_BYTES
                + self.rope_dim * 2)


@dataclass(frozen=True)
class IndexerSpec:
    """The DSA (DeepSeek-V3.2 / GLM-5) indexer's K cache: fp8 elements plus a 4-B scale per 128."""

    index_head_dim: int

    @property
    def row_bytes(self) -> int:
        return self.index_head_dim + self.index_head_dim // FP8_SCALE_BLOCK * FP8_SCALE_BYTES


@dataclass(frozen=True)
class SlidingWindowSpec:
    """An attention layer that keeps only the last ``window`` tokens of a request."""

    attention: FullAttentionSpec | MLASpec
    window: int

    @property
    def row_bytes(self) -> int:
        return self.attention.row_bytes

    def tokens_held(self, max_model_len: int, max_batched_tokens: int) -> int:
        return window_tokens_held(self.window, max_model_len, max_batched_tokens)


def window_tokens_held(window: int, max_model_len: int, max_batched_tokens: int) -> int:
    """Tokens one request keeps in a sliding-window layer: the window plus the chunk being prefilled, at most the
    request (vLLM's SlidingWindowSpec.max_memory_usage_bytes)."""
    return min(window - 1 + max_batched_tokens, max_model_len)


@dataclass(frozen=True)
class CompressedSpec:
    """A compressed-attention layer (DeepSeek-V4's CSA): one stored row per ``ratio`` tokens, with an optional
    indexer row beside it. Stored in pages of ``rows_per_page`` rows padded to ``align`` bytes where the engine
    pads (0: unpadded), so a token costs the padded page's share."""

    ratio: int
    row_bytes: int
    indexer_row_bytes: int = 0
    rows_per_page: int = 0
    align: int = 0

    @property
    def stored_row_bytes(self) -> float:
        """One row once its page is padded (the row itself where nothing pads)."""
        if not (self.rows_per_page and self.align):
            return float(self.row_bytes)
        return padded_row_bytes(self.rows_per_page, self.row_bytes, self.align)

    @property
    def bytes_per_token(self) -> float:
        """What one token of context costs this layer (ratios are powers of two: exact in floating point)."""
        return self.stored_row_bytes / self.ratio + self.indexer_row_bytes / self.ratio


def padded_row_bytes(rows_per_page: int, row_bytes: int, align: int) -> float:
    """Bytes per row once a page of ``rows_per_page`` rows is padded up to a multiple of ``align``."""
    return -(-rows_per_page * row_bytes // align) * align / rows_per_page


@dataclass(frozen=True)
class MambaSpec:
    """One linear-attention / Mamba layer's recurrent state for one request on one rank (no per-token KV).

    The element counts are the model's (``LinearState`` split over TP, widened by draft tokens); the
    element sizes are the engine's choice of state dtypes, so they are given, not derived here."""

    kind: str
    conv_elements: int
    conv_bytes: int
    ssm_elements: int
    ssm_bytes: int

    @property
    def page_bytes(self) -> int:
        return self.conv_elements * self.conv_bytes + self.ssm_elements * self.ssm_bytes


def attention_spec(arch: Architecture, kv_bytes: int, attn_tp: int,
                   v_head_dim: bool = True) -> FullAttentionSpec | MLASpec:
    """The spec of this architecture's attention layers on one attention-TP rank.

    v_head_dim=False sizes V with the K head dim (SGLang releases whose MHA pool ignored v_head_dim).
    """
    if arch.attention == "mla":
        return MLASpec(arch.kv_lora_rank or 0, arch.qk_rope_head_dim or 0, kv_bytes)
    head = arch.head_dim or 0
    v = (arch.v_head_dim or head) if v_head_dim else head
    return FullAttentionSpec(max(1, (arch.num_kv_heads or 1) // max(1, attn_tp)), head, v, kv_bytes)


def indexer_spec(arch: Architecture) -> IndexerSpec | None:
    return IndexerSpec(arch.index_head_dim) if arch.index_head_dim else None


def mamba_spec(state: LinearState, tp_size: int, conv_bytes: int, ssm_bytes: int, num_spec: int = 0) -> MambaSpec:
    conv, ssm = linear_state_elements(state, tp_size, num_spec)
    return MambaSpec(state.kind, conv, conv_bytes, ssm, ssm_bytes)
