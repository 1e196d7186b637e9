"""vLLM's one KV layout per worker: explain, whatif and plan all size the cache through ``kv_layout``.

A layout is the layer specs (model/kv_spec.py) grouped the way vLLM's KV cache manager groups them:
one page per block id in every KV layer of the worker (plain models); full-attention and
sliding-window groups sharing tensors under the hybrid manager; one enlarged page for attention and
Mamba state alike on hybrid linear-attention models (rules.mamba_layout). ``capacity`` turns a KV
memory K into blocks, tokens and concurrency by the release's rule; ``request_bytes`` is what one
request of M tokens needs (vLLM's admission check and estimate_max_model_len).

Nothing here reads a log or a settings dict: the callers (finish.layout_of for a startup, plan for a
scenario) say which layers this worker holds and which options are on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvscope.engines.vllm import rules
from kvscope.model.arch import Architecture
from kvscope.model.kv_spec import attention_spec, window_tokens_held


@dataclass(frozen=True)
class KvLayout:
    """The per-worker KV layout of one startup or scenario."""

    page: rules.PageSize  # one token of one target attention layer
    layers: int  # KV layers of this worker in target-layer units (pipeline stage + same-shape draft layers)
    full_layers: int
    sliding_layers: int
    hybrid_manager: bool
    linear: bool  # hybrid linear-attention / Mamba model
    window: int = 0
    mamba: rules.MambaLayout | None = None
    context: int = 0  # max_model_len the Mamba layout's per-token figure is spread over
    extra_block_row_bytes: int = 0  # a draft of another shape: its row × its layers, paid in every block
    state_formula: str = ""  # how one Mamba state's bytes were built

    @property
    def row_bytes(self) -> int:
        return self.page.bytes_per_token_per_layer

    @property
    def formula(self) -> str:
        return f"{self.page.formula}; {self.state_formula}" if self.state_formula else self.page.formula

    @property
    def hybrid(self) -> bool:
        """Sliding-window layers that really hold only a window (the hybrid manager is on)."""
        return bool(self.sliding_layers and self.hybrid_manager)

    @property
    def bytes_per_token(self) -> int:
        """KV bytes a long request adds per token: window layers cost a fixed amount per request; a Mamba
        hybrid's full-length request (attention blocks + its state pages) spread over max_model_len."""
        if self.mamba is not None and self.context:
            return round(self.mamba.request_bytes(self.context) / self.context)
        return self.row_bytes * (self.full_layers if self.hybrid else self.layers) + self.extra_block_row_bytes

    def block_bytes(self, block_size: int) -> int:
        """Bytes one block id costs on this worker."""
        if self.mamba is not None:
            return self.mamba.block_bytes
        return rules.bytes_per_block(self.row_bytes, self.layers, block_size) + block_size * self.extra_block_row_bytes

    def capacity(self, kv_gib: float, block_size: int, max_model_len: int, max_batched_tokens: int,
                 rule: str) -> rules.Capacity:
        """Blocks, tokens and concurrency a KV memory of kv_gib gives (grouped layouts need max_model_len)."""
        m = max_model_len
        if self.mamba is not None and m:
            return rules.mamba_capacity(kv_gib, self.mamba, m, rule)
        if self.hybrid and m:
            return rules.hybrid_capacity(kv_gib, self.row_bytes, self.full_layers, self.sliding_layers, self.window,
                                         block_size, m, max_batched_tokens, rule)
        return rules.capacity(rules.blocks_for(kv_gib, self.block_bytes(block_size)), block_size, m, rule)

    def request_bytes(self, block_size: int, max_model_len: int, max_batched_tokens: int) -> int | None:
        """KV one request of max_model_len tokens needs (None: a linear-attention state not sized here)."""
        if self.mamba is not None:
            return self.mamba.request_bytes(max_model_len)
        if self.linear:
            return None
        bs = block_size
        if self.hybrid:
            window_blocks = rules.cdiv(window_tokens_held(self.window, max_model_len, max_batched_tokens), bs) + 1
            need = self.full_layers * rules.cdiv(max_model_len, bs) + self.sliding_layers * window_blocks
            return need * bs * self.row_bytes
        return rules.cdiv(max_model_len, bs) * self.block_bytes(bs)


@dataclass(frozen=True)
class StateDtypes:
    """The dtypes a Mamba state is kept in (vLLM's --dtype, --mamba-cache-dtype, --mamba-ssm-cache-dtype)."""

    model: str | None = None
    conv: str | None = None
    ssm: str | None = None


def kv_layout(arch: Architecture, kv_bytes: int, tp: int, pp: int = 1, *, block_size: int = rules.DEFAULT_BLOCK_SIZE,
              hybrid_manager: bool = True, prefix_caching: bool = False, dtypes: StateDtypes = StateDtypes(),
              draft_layers: int = 0, draft_row_bytes: int | None = None, num_spec: int = 0,
              context: int = 0) -> KvLayout | None:
    """The layout vLLM builds for this architecture on one worker; None when a layer holds no bytes.

    Draft layers of the target's shape (EAGLE on its own target, MTP) are more target layers; a draft of
    another shape adds its own row to every block of a plain layout, and counts in target-layer units
    (rounded up) where one page size is shared (hybrid groups). A sliding-window model's split over
    pipeline stages is not known, so with PP > 1 every layer is counted as full attention.
    """
    page = rules.page_of(attention_spec(arch, kv_bytes, tp))
    row = page.bytes_per_token_per_layer
    if row <= 0:
        return None
    same_shape = draft_row_bytes is None or draft_row_bytes == row
    linear = arch.full_attention_layers is not None and not arch.sliding_layers
    grouped = bool(arch.sliding_layers and hybrid_manager and pp == 1) or (linear and hybrid_manager)
    extra, extra_bytes = draft_layers, 0
    if not same_shape and grouped:
        extra = math.ceil(draft_layers * (draft_row_bytes or 0) / row)
    elif not same_shape:
        extra, extra_bytes = 0, draft_layers * (draft_row_bytes or 0)
    stage_layers = arch.full_attention_layers if linear and arch.full_attention_layers else arch.num_layers
    layers = max(rules.pp_layers(stage_layers, pp)) + extra
    full = (arch.full_attention_layers or 0) + extra if arch.sliding_layers else layers
    sliding = arch.sliding_layers if pp == 1 else 0
    mamba, state_formula = None, ""
    state = arch.linear_state
    if linear and hybrid_manager and state is not None and arch.linear_layers and arch.full_attention_layers and pp == 1:
        page_state = rules.mamba_page(arch, tp, dtypes.model, num_spec, dtypes.conv, dtypes.ssm)
        if page_state is not None:
            mode = rules.mamba_cache_mode(prefix_caching, arch.model_type)
            mamba = rules.mamba_layout(row, page_state, arch.full_attention_layers + extra, arch.linear_layers, mode,
                                       num_spec, block_size, state.chunk_size)
            state_formula = page_state.formula
            full = layers = arch.full_attention_layers + extra
    return KvLayout(page, layers, full, sliding, hybrid_manager, linear, int(arch.sliding_window or 0), mamba,
                    context if mamba is not None else 0, extra_bytes, state_formula)
