"""SGLang's automatic defaults by release, as data (docs/research/sglang-memory.md §2.6, §3, §4).

When an operator does not pass ``--mem-fraction-static`` (or chunked prefill, graph batch sizes,
max running requests), SGLang picks them from the GPU size, the parallelism and the features in
use, and the recipe changed many times between releases. ``kvscope plan`` has no log to read the
resolved values from, so it replays the recipe of the release the operator names. Each era is a
row of data; the functions only pick the row and add up its terms, returning the terms too so the
plan can show *why* the fraction came out as it did.

Versions are (major, minor, patch) tuples; "0.5.14" means "first seen in the 0.5.14 wheel" (the
change may have landed in an unread release just before it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvscope.engines.sglang.eras import Version

MIB_PER_GIB = 1024
SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "MTP")


# --------------------------------------------------------------------------------------------
# GPU-size buckets: chunked_prefill_size and cuda_graph_max_bs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bucket:
    """Below ``below_gib`` of nvidia-smi memory (None: every larger GPU): chunk and graph max bs."""

    below_gib: float | None
    chunk: int
    max_bs_small_tp: int  # tp < 4
    max_bs_large_tp: int  # tp ≥ 4


@dataclass(frozen=True)
class BucketTable:
    first: Version
    last: Version
    buckets: tuple[Bucket, ...]
    unknown: tuple[int, int]  # (chunk, max_bs) when the GPU size is unknown
    note: str = ""


_054 = (Bucket(20, 2048, 8, 8), Bucket(35, 2048, 16, 80), Bucket(60, 4096, 32, 160), Bucket(90, 8192, 256, 512),
        Bucket(160, 8192, 256, 512), Bucket(None, 16384, 512, 512))
_056 = (Bucket(20, 2048, 8, 8), Bucket(35, 2048, 24, 80)) + _054[2:]
_0520 = (Bucket(20, 2048, 8, 8), Bucket(35, 4096, 48, 160)) + _054[2:]

BUCKET_TABLES: tuple[BucketTable, ...] = (
    BucketTable((0, 3, 0), (0, 3, 99), (Bucket(25, 2048, 4, 4), Bucket(None, 8192, 160, 160)), (8192, 160),
                "0.3.x: only the <25 GB case is documented; 8192/160 above it is the general default"),
    BucketTable((0, 4, 0), (0, 4, 5), (Bucket(25, 2048, 8, 8), Bucket(None, 8192, 160, 160)), (8192, 160)),
    BucketTable((0, 4, 6), (0, 4, 8), (Bucket(25, 2048, 8, 80), Bucket(None, 8192, 160, 160)), (8192, 160),
                "capture list extends to 256 above 90 GB and 512 above 160 GB"),
    BucketTable((0, 4, 9), (0, 5, 3), (Bucket(20, 2048, 8, 80), Bucket(35, 2048, 8, 80), Bucket(60, 8192, 160, 160),
                                       Bucket(90, 8192, 160, 160), Bucket(160, 8192, 256, 256),
                                       Bucket(None, 16384, 512, 512)), (4096, 160),
                "graph max bs is the capture-list end (160; 256 above 90 GB; 512 above 160 GB)"),
    BucketTable((0, 5, 4), (0, 5, 5), _054, (4096, 160)),
    BucketTable((0, 5, 6), (0, 5, 19), _056, (4096, 160)),
    BucketTable((0, 5, 20), (0, 9, 99), _0520, (4096, 160)),
)


def _table(version: Version) -> BucketTable:
    for t in BUCKET_TABLES:
        if t.first <= version <= t.last:
            return t
    return BUCKET_TABLES[-1] if version > BUCKET_TABLES[-1].last else BUCKET_TABLES[0]


def gpu_bucket_defaults(version: Version, gpu_mem_mib: int | None, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang picks for this GPU size and TP."""
    table = _table(version)
    if gpu_mem_mib is None:
        return table.unknown
    for b in table.buckets:
        if b.below_gib is None or gpu_mem_mib < b.below_gib * MIB_PER_GIB:
            return b.chunk, (b.max_bs_small_tp if tp < 4 else b.max_bs_large_tp)
    return table.unknown


# --------------------------------------------------------------------------------------------
# Piecewise / prefill CUDA graph token sizes (their count prices the graph reserve)
# --------------------------------------------------------------------------------------------

PIECEWISE_SEGMENTS = ((4, 32, 4), (48, 256, 16), (288, 512, 32), (576, 1024, 64), (1280, 4096, 256), (4608, None, 512))


def piecewise_token_sizes(max_tokens: int) -> list[int]:
    """The default piecewise/prefill graph token sizes up to ``max_tokens`` (segments of growing step)."""
    out: list[int] = []
    for start, stop, step in PIECEWISE_SEGMENTS:
        out += list(range(start, (stop if stop is not None else max_tokens) + 1, step))
    return [s for s in out if s <= max_tokens]


def piecewise_max_tokens(chunked_prefill_size: int, mla: bool) -> int:
    """Non-MLA: up to the chunk size; MLA backends cap piecewise graphs at 2048 tokens."""
    return 2048 if mla else max(chunked_prefill_size, 0)


# --------------------------------------------------------------------------------------------
# Automatic mem_fraction_static
# --------------------------------------------------------------------------------------------


@dataclass
class MfsChoice:
    """The fraction SGLang would pick, the reserve R behind it (MiB) and each term of R."""

    value: float
    rule: str
    reserved_mib: float | None = None
    terms: list[tuple[str, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def reserved_gib(self) -> float | None:
        return None if self.reserved_mib is None else self.reserved_mib / MIB_PER_GIB

    def as_dict(self) -> dict[str, object]:
        return {"value": self.value, "rule": self.rule, "reserved_mib": self.reserved_mib,
                "terms_mib": [{"term": t, "mib": v} for t, v in self.terms], "notes": self.notes}


@dataclass
class MemoryInputs:
    """What the automatic recipe reads: GPU size, parallelism, features and the bucket values."""

    gpu_mem_mib: int | None
    tp: int = 1
    pp: int = 1
    dp: int = 1
    dp_attention: bool = False
    speculative_algorithm: str | None = None
    chunked_prefill_size: int | None = None  # None: the bucket default
    cuda_graph_max_bs: int | None = None
    max_prefill_tokens: int = 16384
    piecewise: bool | None = None  # None: the release's default
    mla: bool = False
    deepep: bool = False
    post_capture: bool = False  # E4 SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1
    pd_decode_activation_tokens: int | None = None  # E4 PD decode: max(mrr × draft tokens, 2048)


def tp_table_mfs(tp: int, version: Version) -> float:
    """0.3.6–0.4.3 (and small GPUs in 0.4.6): by TP size only."""
    if tp >= 16:
        return 0.79
    if tp >= 8:
        return 0.82 if version < (0, 4, 0) else 0.81
    if tp >= 4:
        return 0.85
    if tp >= 2:
        return 0.87
    return 0.88


RESERVED_TABLE_0_4_9 = ((35, 2.8, 0.1), (90, 9.5, 0.5), (160, 12.0, 0.5))  # (below GiB, base GiB, per rank GiB)


def _reserved_table_mib(gpu_mem_mib: int, p: int) -> tuple[str, float]:
    for below, base, per_rank in RESERVED_TABLE_0_4_9:
        if gpu_mem_mib < below * MIB_PER_GIB:
            return f"({base} + {per_rank} × tp×pp) GiB for a <{below} GiB GPU", (base + per_rank * p) * MIB_PER_GIB
    return "32 GiB for a ≥160 GiB GPU", 32.0 * MIB_PER_GIB


def _spec_term(version: Version, algorithm: str | None) -> float:
    """The draft's share of the reserve: gone from 0.5.14 (draft weights are counted in the budget)."""
    if not algorithm or version >= (0, 5, 14):
        return 0.0
    algo = algorithm.upper()
    if algo == "NGRAM":
        return 0.0
    if algo == "STANDALONE" and version >= (0, 5, 2):
        return 6 * MIB_PER_GIB
    if version >= (0, 5, 10):
        return 4 * MIB_PER_GIB
    return 2 * MIB_PER_GIB


def _piecewise_default(version: Version) -> bool:
    """Piecewise (prefill) graphs became the default in 0.5.10."""
    return version >= (0, 5, 10)


def _graph_and_activation_terms(version: Version, m: MemoryInputs, chunk: int, max_bs: int) -> list[tuple[str, float]]:
    """R's common part (0.5.4+): constant, activations, decode graphs, parallel size, DP attention."""
    activation = m.pd_decode_activation_tokens if (version >= (0, 5, 18) and m.pd_decode_activation_tokens) else (
        chunk if chunk > 0 else m.max_prefill_tokens)
    terms = [("constant (attention metadata)", 512.0),
             (f"activations 1.5 × max({activation}, 2048)", 1.5 * max(activation, 2048)),
             (f"decode graphs 2 × cuda_graph_max_bs {max_bs}", 2.0 * max_bs),
             (f"parallel size 1024 × tp×pp {m.tp * m.pp} / 8", 1024 * m.tp * m.pp / 8)]
    if m.dp_attention:
        terms.append((f"DP attention 3 × {max_bs} × dp {m.dp}", 3.0 * max_bs * m.dp))
        if max_bs > 300:
            terms.append((f"DP attention large graphs 1.5 × {max_bs} × dp {m.dp}", 1.5 * max_bs * m.dp))
    return terms


def _piecewise_term(version: Version, m: MemoryInputs, chunk: int) -> tuple[str, float] | None:
    on = m.piecewise if m.piecewise is not None else _piecewise_default(version)
    if not on or version < (0, 5, 6):
        return None
    if version < (0, 5, 8):
        cap = piecewise_max_tokens(chunk, m.mla)
        return (f"piecewise graphs max tokens {cap} // 4", float(cap // 4))
    if version >= (0, 5, 10) and m.mla:
        return ("prefill graphs (MLA, flat)", 1.5 * MIB_PER_GIB)
    n = len(piecewise_token_sizes(piecewise_max_tokens(chunk, m.mla)))
    return (f"piecewise graphs 8 × {n} sizes", 8.0 * n)


def auto_mem_fraction_static(version: Version, m: MemoryInputs) -> MfsChoice:
    """The mem_fraction_static SGLang picks when the flag is not given (doc §3), with its terms."""
    if version < (0, 4, 6):
        return MfsChoice(tp_table_mfs(m.tp, version), f"by TP size (tp={m.tp})")
    if version < (0, 4, 9):
        if m.gpu_mem_mib is None or m.gpu_mem_mib <= 81920:
            return MfsChoice(tp_table_mfs(m.tp, version), f"by TP size (tp={m.tp}; GPU ≤ 80 GiB or unknown)")
        r = 13 * MIB_PER_GIB
        return MfsChoice((m.gpu_mem_mib - r) / m.gpu_mem_mib, "(gpu − 13 GiB) / gpu", r, [("flat reserve", r)])
    if m.gpu_mem_mib is None:
        return MfsChoice(0.95 if version >= (0, 5, 18) else 0.88, "GPU size unknown: SGLang's fallback")
    if version < (0, 5, 4):
        return _mfs_reserved_table(version, m)
    return _mfs_r_formula(version, m)


def _mfs_reserved_table(version: Version, m: MemoryInputs) -> MfsChoice:
    gpu = m.gpu_mem_mib or 0
    label, base = _reserved_table_mib(gpu, m.tp * m.pp)
    terms = [(label, base)]
    if m.speculative_algorithm:
        spec = 6 * MIB_PER_GIB if (m.speculative_algorithm.upper() == "STANDALONE" and version >= (0, 5, 2)) \
            else 2 * MIB_PER_GIB
        terms.append((f"speculative ({m.speculative_algorithm})", spec))
    if m.dp_attention:
        terms.append(("DP attention", 4 * MIB_PER_GIB))
    r = sum(v for _, v in terms)
    choice = MfsChoice(round((gpu - r) / gpu, 3), "round((gpu − reserved) / gpu, 3), reserved by GPU size", r, terms)
    if version >= (0, 5, 3):
        choice.notes.append("0.5.3 was not read: assumed to use the 0.5.2 reserve table (the R formula is first "
                            "seen in 0.5.4)")
    return choice


def _mfs_r_formula(version: Version, m: MemoryInputs) -> MfsChoice:
    gpu = m.gpu_mem_mib or 0
    chunk0, bs0 = gpu_bucket_defaults(version, gpu, m.tp)
    chunk = m.chunked_prefill_size if m.chunked_prefill_size is not None else chunk0
    max_bs = m.cuda_graph_max_bs if m.cuda_graph_max_bs is not None else bs0
    if version >= (0, 5, 18) and m.post_capture and not m.mla:
        terms = [("post-capture sizing constant", 1536.0), (f"parallel size 1024 × {m.tp * m.pp} / 8", 1024 * m.tp * m.pp / 8)]
        r = sum(v for _, v in terms)
        return MfsChoice(round((gpu - r) / gpu, 3), "post-capture KV sizing (E4)", r, terms)
    terms = _graph_and_activation_terms(version, m, chunk, max_bs)
    piece = _piecewise_term(version, m, chunk)
    late_piece = piece is not None and version < (0, 5, 8)  # 0.5.6–0.5.7 add it after the spec term
    if piece and not late_piece:
        terms.append(piece)
    r = sum(v for _, v in terms)
    if gpu > 60 * MIB_PER_GIB and r < 10 * MIB_PER_GIB:
        terms.append(("floor: at least 10 GiB on GPUs over 60 GiB", 10 * MIB_PER_GIB - r))
        r = 10.0 * MIB_PER_GIB
    spec = _spec_term(version, m.speculative_algorithm)
    if spec:
        terms.append((f"speculative ({m.speculative_algorithm}) draft model and graphs", spec))
    if version >= (0, 5, 18) and m.deepep:
        terms.append(("DeepEP all-to-all buffers", 2.0 * MIB_PER_GIB))
    if late_piece and piece is not None:  # late_piece already implies a piece
        terms.append(piece)
    r = sum(v for _, v in terms)
    return MfsChoice(round((gpu - r) / gpu, 3), "round((gpu − R) / gpu, 3), R in MiB", r, terms)


def vlm_factor(vit_layers: int, vit_hidden: int) -> float:
    """adjust_mem_fraction_for_vlm (0.4.10+, automatic path only): shrink for a big vision tower."""
    scale = vit_layers * vit_hidden ** 2 / (24 * 1024 ** 2)
    return 0.95 * min(1.05, max(0.8, 1 - 0.1 * (scale - 1)))


# --------------------------------------------------------------------------------------------
# Speculative decoding defaults (§2.6)
# --------------------------------------------------------------------------------------------

SPEC_MAX_RUNNING_REQUESTS = 48
SPEC_PARAMS_SMALL = (3, 1, 4)  # DeepSeek / GptOss / GLM families: (steps, topk, draft tokens)
SPEC_PARAMS_DEFAULT = (5, 4, 8)  # Llama and every other architecture
SPEC_SMALL_ARCH_PREFIXES = ("Deepseek", "GptOss", "Glm")


def spec_params(architecture: str | None, steps: int | None = None, topk: int | None = None,
                draft_tokens: int | None = None) -> tuple[int, int, int]:
    """(num_steps, eagle_topk, num_draft_tokens) after SGLang's auto choice; topk 1 forces steps + 1."""
    base = SPEC_PARAMS_SMALL if architecture and architecture.startswith(SPEC_SMALL_ARCH_PREFIXES) \
        else SPEC_PARAMS_DEFAULT
    s = steps if steps is not None else base[0]
    k = topk if topk is not None else base[1]
    d = draft_tokens if draft_tokens is not None else base[2]
    if k == 1:
        d = s + 1
    return s, k, d


def spec_default_max_running_requests(version: Version, algorithm: str | None, given: int | None) -> int | None:
    """From 0.4.6 any draft-based algorithm resets an unset max_running_requests to 48."""
    if given is not None or not algorithm or version < (0, 4, 6):
        return given
    return SPEC_MAX_RUNNING_REQUESTS


def eagle_token_headroom(pool_rows: int, steps: int, topk: int, draft_tokens: int, version: Version) -> int:
    """E0 (≤ 0.5.6): target and draft get extra tokens beyond the profile (0.4.3: the draft only)."""
    if version >= (0, 5, 7):
        return 0
    if version < (0, 4, 6):
        return pool_rows * steps + 100
    return pool_rows * steps * topk + pool_rows * draft_tokens + 100


# --------------------------------------------------------------------------------------------
# Request pool and max_running_requests (§4)
# --------------------------------------------------------------------------------------------


@dataclass
class RequestPool:
    rows: int  # req_to_token rows (max_num_reqs)
    max_running_requests: int  # effective, per DP rank
    rule: str


def request_pool(version: Version, profiled_tokens: int, tokens: int, context_len: int,
                 max_running_requests: int | None, dp: int = 1, dp_attention: bool = False) -> RequestPool:
    """Size of the request pool and the effective max_running_requests per DP rank, by era."""
    est = min(4096, max(2048, int(profiled_tokens / max(1, context_len) * 512)))
    div = dp if dp_attention else 1
    mrr = max_running_requests
    if version <= (0, 5, 9):
        rows = mrr if mrr is not None else est
        eff = min(mrr // div if mrr is not None else tokens // 2, rows)
        return RequestPool(rows, eff, "≤0.5.9: rows = max_running_requests or the context estimate")
    if version <= (0, 5, 13):
        rows = min(mrr // div, est) if mrr is not None else min(est, tokens // 2)
        return RequestPool(rows, rows, "0.5.10–0.5.13: rows = min(mrr // dp, estimate) or min(estimate, tokens // 2)")
    rows = min(mrr // div, tokens // 2) if mrr is not None else min(est, tokens // 2)
    return RequestPool(rows, rows, "≥0.5.14: rows = min(mrr // dp, tokens // 2) or min(estimate, tokens // 2)")


def request_pool_bytes(rows: int, context_len: int, draft_tokens: int = 0, version: Version = (0, 5, 9)) -> int:
    """req_to_token int32 table; the row also holds the draft tokens from 0.5.1, a padding row from 0.5.14."""
    extra = 4 + (draft_tokens if version >= (0, 5, 1) else 0)
    return (rows + (1 if version >= (0, 5, 14) else 0)) * (context_len + extra) * 4


# --------------------------------------------------------------------------------------------
# Other server-args side effects that change the pool
# --------------------------------------------------------------------------------------------

HYBRID_SWA_DISABLED_TYPES = ("gemma2", "gemma3", "gemma3n", "olmo2", "exaone4")
SWA_FULL_TOKENS_RATIO = 0.8


def dsa_defaults(version: Version, sm_major: int | None, kv_cache_dtype: str | None) -> tuple[int, str]:
    """DeepSeek DSA (V3.2 / GLM-5): page 64 on CUDA, fp8 KV by default on SM ≥ 10.

    First read in 0.5.4; DeepSeek-V3.2 support (with these defaults) arrived with 0.5.3, which was
    not read — a 0.5.3 main-branch log on B200 shows the fp8 pool.
    """
    dtype = kv_cache_dtype or "auto"
    if dtype == "auto" and version >= (0, 5, 3):
        dtype = "fp8_e4m3" if (sm_major or 0) >= 10 else "bfloat16"
    return 64, dtype


def dsa_indexer_in_profile(version: Version) -> bool:
    """The indexer's per-token bytes enter the profiled cell from 0.5.4 (absent before)."""
    return version >= (0, 5, 4)
