"""SGLang's KV sizing for DeepSeek-V4 (compressed sparse attention), by release, as data + formulas.

V4 keeps no full-resolution latent. Per layer SGLang stores a sliding-window pool (every layer, a
fraction ``swa_full_tokens_ratio`` = 0.1 of the full token count), the ratio-4 layers' compressed
rows (one per 4 tokens) with their indexer rows, the ratio-128 layers' rows (one per 128), and fp32
compress states for the windows still being compressed. The "full" pool is an index space: its
size is the logged ``max_total_num_tokens`` (``DSV4PoolConfigurator``, model_executor/
pool_configurator.py; pools in mem_cache/deepseek_v4_memory_pool.py). The budget is the usual
``post-load free − pre-load free × (1 − mem_fraction_static)``; tokens = (budget − fixed bytes) /
bytes per full token, floored to the forced 256-token page.

Three eras (docs/research/deepseek-v4-kv.md, read from the 0.5.12–0.5.23 wheels): until 0.5.14 every
state is priced per token (0.5.12 also counts the MTP entry of ``compress_ratios`` as a layer);
0.5.15–0.5.19 (and 0.5.20, read more briefly) price the ratio-128 states as a fixed cost of
(max_running_requests + 1) ring rows; from 0.5.21 the page padding of each pool is counted, SWA
states are priced per page, and on SM 10.x (B200/B300) 0.5.23 picks the narrower V4.1 row layout.
Three logged ``bytes_per_full_token`` values (15,955.85; 13,735.04; 9,259.90) are reproduced to the
printed decimals; they cover the first two eras, and no log checks the third yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvscope.model.kv_spec import CompressedSpec, padded_row_bytes
from kvscope.model.weights import compress_ratios, stage_layers

Version = tuple[int, int, int]

FIRST_RELEASE: Version = (0, 5, 12)
PAGE = 256  # forced page size
SWA_RATIO = 0.1  # swa_full_tokens_ratio V4 sets when the operator left the default
DEFAULT_MAX_RUNNING_REQUESTS = 256  # forced when not given: sizes the fixed c128 state
KV_ROW, KV_ALIGN = 584, 576  # 448 fp8 nope + 64 × 2 B rope + 7 scale + 1 pad; pages padded to 576 B
V41_ROW, V41_ALIGN = 528, 512  # the V4.1 layout 0.5.23 picks on SM 10.x
C4_STATE = 2 * 2 * 512 * 4  # fp32, per ratio-4 layer and state row (kv + gate, double width)
C4_INDEXER_STATE = 2 * 2 * 128 * 4
C128_STATE = 2 * 512 * 4


@dataclass(frozen=True)
class Layers:
    """Layers a rank counts: all, ratio-4 (compressed + indexer), ratio-128."""

    all: int
    ratio4: int
    ratio128: int


@dataclass(frozen=True)
class Sizing:
    bytes_per_full_token: float
    fixed_bytes: int
    era: str
    formula: str


def layers(cfg: dict[str, Any], version: Version, pp: int = 1) -> Layers:
    """From ``compress_ratios`` (one entry per layer, plus a trailing 0 for the MTP layer); with
    pipeline stages, the busiest stage's slice (each stage sizes the pools of its own layers)."""
    ratios = compress_ratios(cfg)
    num_layers = int(cfg.get("num_hidden_layers") or len(ratios))
    if pp > 1:
        stage = max((stage_layers(num_layers, pp, st) for st in range(pp)), key=len)
        main = [ratios[i] for i in stage if i < len(ratios)]
        return Layers(len(main), main.count(4), main.count(128))
    main = ratios[:num_layers]
    counted = len(ratios) if version < (0, 5, 13) else len(main)  # 0.5.12 counts the MTP entry too
    return Layers(counted, main.count(4), main.count(128))


def state_rows(requests: int, spec: bool) -> int:
    """Rows of ratio-128 compress state kept for ``requests`` slots (≥0.5.15): (R + 1) rings plus one
    more ring and a spare row, rounded up to 128."""
    ring128 = 256 if spec else 128
    return -(-((requests + 1) * ring128 + ring128 + 1) // 128) * 128


def fixed_for(fixed_bytes: float, requests: int, new_requests: int, spec: bool) -> float:
    """The fixed ratio-128 states at ``new_requests`` slots, scaled from what ``requests`` slots took
    (the same layers and row bytes: only the row count moves)."""
    return fixed_bytes * state_rows(new_requests, spec) / state_rows(requests, spec)


def sizing(cfg: dict[str, Any], version: Version, spec: bool, max_running_requests: int | None,
           sm_major: int | None = None, swa_ratio: float = SWA_RATIO, pp: int = 1) -> Sizing:
    """Bytes per full token and fixed bytes of one rank's V4 pools in this release.

    ValueError: no layer to size (an empty ``compress_ratios``), a ratio outside (0, 1], no slots.
    """
    n = layers(cfg, version, pp)
    if n.all < 1:
        raise ValueError("the config's compress_ratios lists no layer")
    if not (0 < swa_ratio <= 1):
        raise ValueError(f"swa_full_tokens_ratio must be in (0, 1], got {swa_ratio}")
    if max_running_requests is not None and max_running_requests < 1:
        raise ValueError(f"max_running_requests must be at least 1, got {max_running_requests}")
    ring4, ring128 = (16, 256) if spec else (8, 128)
    ib = int(cfg.get("index_head_dim") or 128)
    ib += ib // 128 * 4  # fp8 indexer row + one fp32 scale per 128
    r = swa_ratio
    requests = max_running_requests or DEFAULT_MAX_RUNNING_REQUESTS
    fixed = state_rows(requests, spec) * C128_STATE * n.ratio128
    if version < (0, 5, 21):  # rows priced unpadded
        c4, c128 = CompressedSpec(4, KV_ROW, ib), CompressedSpec(128, KV_ROW)
        bpft = (r * KV_ROW * n.all + n.ratio4 * c4.bytes_per_token + n.ratio128 * c128.bytes_per_token
                + r * ring4 / 128 * (C4_STATE + C4_INDEXER_STATE) * n.ratio4)
        if version < (0, 5, 15):
            bpft += r * ring128 / 128 * C128_STATE * n.ratio128
            era, fixed = "0.5.12–0.5.14 (every state per token)", 0
        else:
            era = "0.5.15–0.5.20 (ratio-128 states fixed by max_running_requests)"
    else:  # a page of 256 tokens holds 64 ratio-4 rows and 2 ratio-128 rows, each page padded
        row, align = (V41_ROW, V41_ALIGN) if sm_major == 10 and version >= (0, 5, 23) else (KV_ROW, KV_ALIGN)
        c4 = CompressedSpec(4, row, ib, rows_per_page=PAGE // 4, align=align)
        c128 = CompressedSpec(128, row, rows_per_page=PAGE // 128, align=align)
        per_swa_token = padded_row_bytes(PAGE, row, align) * n.all + ring4 / PAGE * (C4_STATE + C4_INDEXER_STATE) * n.ratio4
        bpft = r * per_swa_token + n.ratio4 * c4.bytes_per_token + n.ratio128 * c128.bytes_per_token
        era = "≥0.5.21 (page padding counted" + (", V4.1 row layout on SM 10.x)" if row == V41_ROW else ")")
    if spec:
        bpft *= (n.all + 1) / n.all
    formula = (f"DeepSeek-V4 pools per full token: {r:g} × sliding window over {n.all} layers + {n.ratio4} ratio-4 "
               f"layers (compressed + indexer) + {n.ratio128} ratio-128 layers + compress states = "
               f"{bpft:,.2f} B" + (f"; fixed ratio-128 states {fixed / 2**30:.2f} GiB for {requests} requests"
                                   if fixed else ""))
    return Sizing(bpft, fixed, era, formula)


def full_tokens(available_bytes: int, s: Sizing, max_total_tokens: int | None = None) -> int:
    """The logged max_total_num_tokens: (budget − fixed) / bytes per full token, floored to a page."""
    tokens = max(0, int((available_bytes - s.fixed_bytes) / s.bytes_per_full_token)) if available_bytes > 0 else 0
    if max_total_tokens is not None:
        tokens = min(tokens, max_total_tokens)
    return tokens // PAGE * PAGE
