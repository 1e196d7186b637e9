"""TensorRT-LLM's memory log lines: the C++ runtime (Triton tensorrtllm_backend, gptManagerBenchmark,
``run.py``) from v0.5 to 1.x and the Python LLM API / ``trtllm-serve`` PyTorch backend.

C++ lines carry ``[TensorRT-LLM][INFO]`` and no rank; Python lines carry ``[TRT-LLM] [I]`` and, under
MPI, ``[RANK n]``. Triton interleaves its glog lines (``I0410 16:58:08.48 1 model_lifecycle.cc:849]``)
and some pastes put a blank line between every line; neither matters to searched patterns. Memory
units are binary whatever the label (TRT-LLM's ``bytesToString`` divides by 1024: "KB", "MB", "GB").

The KV pool is emitted as ``kv`` (not ``target``): the PyTorch backend allocates twice (a small
estimation pass, then the real pool) and a multi-rank Triton log repeats it once per rank, so
``finish`` keeps the last allocation as ``target``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kvscope.core import events as ev
from kvscope.engines.base import NUM, LineContext, Parsed, to_float, to_int
from kvscope.engines.lazy import lazy_compile
from kvscope.engines.shapes import Shape, Shapes, first_match

ENGINE = "trtllm"
DEFAULT_RANK = "rank=0"
POOL_NAME = "kv"
G = rf"({NUM})"
_UNIT_GIB = {"B": 1 / (1 << 30), "KB": 1 / (1 << 20), "KiB": 1 / (1 << 20), "MB": 1 / 1024, "MiB": 1 / 1024,
             "GB": 1.0, "GiB": 1.0, "TB": 1024.0}
_UNIT = r"(B|KB|KiB|MB|MiB|GB|GiB|TB)"

_RANK = lazy_compile(r"\[RANK (\d+)\]")
_TS = lazy_compile(r"\[(\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d)\]")

# --- KV cache --------------------------------------------------------------------------------------------
_ALLOCATED = lazy_compile(rf"Allocated {G} ?(GiB|GB|MiB) for max tokens(?: in paged KV cache)? \((\d+)\)")
_ALLOCATE_BYTES = lazy_compile(r"Allocate (\d+) bytes for k/v cache")
_USING_TOKENS = lazy_compile(r"Using (\d+) (?:total )?tokens in paged KV cache(?:, and (\d+) blocks per sequence)?")
_MAX_TOKENS = lazy_compile(r"Max tokens in paged KV cache: (\d+)(?:\. Allocating (\d+) bytes)?")  # ~0.9 adds the bytes
_FAKE_CACHE = lazy_compile(r"Using fake cache manager with head_dim=0")  # AutoDeploy: no real KV pool
_MEM_USAGE = lazy_compile(rf"Memory usage when calculating max tokens in paged kv cache: total: {G} ?GiB, available: {G} ?GiB")
_PRIMARY = lazy_compile(r"Number of blocks in KV cache primary pool: (\d+)")
_SECONDARY = lazy_compile(r"Number of blocks in KV cache secondary pool: (\d+)")
_BLOCKS_LINE = lazy_compile(
    r"Max KV cache blocks per sequence: (\d+) \[window size=(\d+)\], tokens per block=(\d+), primary blocks=(\d+), "
    r"secondary blocks=(\d+)"
)
_PAGES_PER_SEQ = lazy_compile(r"Max KV cache (?:pages|blocks) per sequence: (\d+)")
_TOKENS_PER_BLOCK = lazy_compile(r"Number of tokens per block: (\d+)")
_PEAK = lazy_compile(
    rf"Peak memory during memory usage profiling \(torch \+ non-torch\): {G} ?GiB, available KV cache memory when "
    rf"calculating max tokens: {G} ?GiB(.*)"
)
_PEAK_FRACTION = lazy_compile(rf"fraction is set {G}")
_PEAK_KV_SIZE = lazy_compile(r"kv size(?: per token)? is (\d+)")
_PEAK_TOTAL = lazy_compile(rf"device total memory {G} ?GiB")
_PEAK_TMP = lazy_compile(rf"(?:tmp kv_mem|temporary kv cache memory during profiling) {G} ?GiB")
_ESTIMATED = lazy_compile(rf"Estimated max memory in KV cache\s*:\s*{G} ?GiB")
_BOTH_SET = lazy_compile(
    rf"Both (?:free_gpu_memory_fraction|freeGpuMemoryFraction)(?: \(aka kv_cache_free_gpu_mem_fraction\))? and "
    rf"(?:max_tokens|maxTokens)(?: \(aka max_tokens_in_paged_kv_cache\))? are set \(to {G} and (\d+)"
    rf"(?: with free memory {G} of total memory {G})?"  # 1.x PyTorch backend: the GiB it sized against
)
_MAX_TOKENS_SET = lazy_compile(r"max_tokens is set by kv_cache_config\.max_tokens: (\d+)")
_FRACTION_DEFAULT = lazy_compile(r"kv_cache_free_gpu_mem_fraction is not specified, will use default value of ([\d.]+)")
_FRACTION_PARAM = lazy_compile(rf"(?:kv_cache_free_gpu_mem_fraction|free_gpu_memory_fraction)\s*[=:]\s*{G}")
_MAX_TOKENS_DEFAULT = lazy_compile(r"max_tokens_in_paged_kv_cache is not specified")
_TRITON_PARAM = lazy_compile(r"\b\w+ is not specified, will (?:use|be set)|\bnot set, defaulting to\b")
_OVERRIDE = lazy_compile(r"Maximum kv-cache token overridden by configuration as '(\d+)'")
_WINDOW_REDUCED = lazy_compile(r"maxAttentionWindow and maxSequenceLen are too large.*?reduced to (\d+)")
_WINDOW_UPPER = lazy_compile(r"Attention window size (\d+) exceeds upper bound (\d+) for available blocks")
_ADJUSTED_SEQ = lazy_compile(r"Adjusted max_seq_len to (\d+)")
_REUSE = lazy_compile(r"KV cache block reuse is (enabled|disabled)")

# --- engine, buffers, weights --------------------------------------------------------------------------------
_ENGINE_SIZE = lazy_compile(rf"Loaded engine size: {G} ?MiB")
_ENGINE_PER_GPU = lazy_compile(rf"Total engine size per GPU is {G} ?MiB")
_EXEC_CTX = lazy_compile(rf"Allocated {G} ?{_UNIT} for execution context memory")
_TRT_MANAGED = lazy_compile(r"TensorRT-managed allocation in IExecutionContext creation: CPU \+?(-?\d+), GPU \+?(-?\d+), now: CPU (\d+), GPU (\d+) \(MiB\)")
_RUNTIME_BUF = lazy_compile(rf"Allocated {G} ?{_UNIT} GPU memory for runtime buffers")
_DECODER = lazy_compile(rf"Allocated {G} ?{_UNIT} GPU memory for decoder")
_WEIGHTS_PT = lazy_compile(rf"Use {G} ?(GB|GiB) for model weights")
_WEIGHTS_INSIDE = lazy_compile(rf"Memory used after loading model weights \(inside torch\) in memory usage profiling: {G} ?GiB")
_WEIGHTS_OUTSIDE = lazy_compile(rf"Memory used after loading model weights \(outside torch\) in memory usage profiling: {G} ?GiB")
_ACTIVATION = lazy_compile(rf"Memory dynamically allocated during inference \(inside torch\) in memory usage profiling: {G} ?GiB")
_OUTSIDE = lazy_compile(rf"Memory used outside torch \(e\.g\., NCCL and CUDA graphs\) in memory usage profiling: {G} ?GiB")

# --- model configuration ------------------------------------------------------------------------------------------
_TRTGPT = lazy_compile(r"TRTGptModel (maxNumSequences|maxBatchSize|maxBeamWidth|maxSequenceLen|maxDraftLen|"
                     r"mMaxAttentionWindowSize|maxNumTokens|maxInputLen): \(?(\d+)")
_PY_LIMITS = lazy_compile(r"\bmax_seq_len=(\d+), max_num_requests=(\d+), max_num_tokens=(\d+)(?:, max_batch_size=(\d+))?")
_TP_RANK = lazy_compile(r"(?:Detecting local TP group|TP group is intra-node|TP group is inter-node) for rank (\d+)")
_MPI = lazy_compile(r"MPI size: (\d+), (?:MPI local size: (\d+), )?rank: (\d+)")
_TP_ARG = lazy_compile(r"['\"]?tensor_parallel_size['\"]?\s*[=:]\s*(\d+)")
_PP_ARG = lazy_compile(r"['\"]?pipeline_parallel_size['\"]?\s*[=:]\s*(\d+)")
_VERSION = lazy_compile(r"TensorRT-LLM version: ?v?(\d+\.\d+[\w.]*)")
_ENGINE_VERSION = lazy_compile(r"Engine version (\d+\.\d+[\w.]*) found in the config file")
_BACKEND = lazy_compile(r"Using LLM with (PyTorch|TensorRT|AutoDeploy) backend")
_LOADED = lazy_compile(r"successfully loaded 'tensorrt_llm'|Engine loaded and ready to serve|Executor instance created")

# --- failures -------------------------------------------------------------------------------------------------------
_CUDA_OOM = lazy_compile(r"CUDA runtime error in (\S+?)\(.*?\): out of memory(?: \(([^)]*)\))?")
_REQUESTED = lazy_compile(r"Requested amount of GPU memory \((\d+) bytes\) could not be allocated")
_TRT_OOM = lazy_compile(r"Error Code 2: OutOfMemory|\[TensorRT-LLM\]\[ERROR\].*out of memory|OutOfMemory")
_INSUFFICIENT = lazy_compile(r"Executor creation failed due to insufficient GPU memory")
_COMPONENT = lazy_compile(r"The following component could not be created: (.+?)\s*$")
_TOTAL_GIB = lazy_compile(rf"Total GPU memory \(GiB\): {G}")
_FREE_BEFORE = lazy_compile(rf"Free GPU memory before component creation attempt \(GiB\): {G}")
_COMPONENTS_HEADER = lazy_compile(r"Previously created components and free GPU memory before/after creation")
_COMPONENT_ROW = lazy_compile(rf"^\s*([A-Za-z_][\w ()_,.\-]*?): {G} / {G}\s*$")
# Triton: "maxTokensInPagedKvCache (29184) must be large enough to process at least 1 sequence to completion
# (i.e. must be larger than beam_width (1) * tokensPerBlock (128) * maxBlocksPerSeq (272))"
_TOO_SMALL = lazy_compile(r"maxTokensInPagedKvCache \((\d+)\) must be large enough to process at least 1 sequence"
                          r"(?:.*?beam_width \((\d+)\) \* tokensPerBlock \((\d+)\) \* maxBlocksPerSeq \((\d+)\))?")
_LOAD_FAILED = lazy_compile(r"failed to load 'tensorrt_llm'|unexpected error when creating modelInstanceState")

ANCHORS: tuple[bytes, ...] = (
    b"TensorRT-LLM",
    b"TRT-LLM",
    b"TRTGptModel",
    b"paged KV cache",
    b"paged kv cache",
    b"KV cache primary pool",
    b"KV cache secondary pool",
    b"tokens per block",
    b"k/v cache",
    b"MemUsageChange",
    b"engine size",
    b"execution context memory",
    b"Requested amount of GPU memory",
    b"OutOfMemory",
    b"tensorrt_llm",
    b"kv_cache_free_gpu_mem_fraction",
    b"free_gpu_memory_fraction",
    b"insufficient GPU memory",
    b"could not be created",
    b"GPU memory (GiB)",
    b"Previously created components",
    b"odel: ",
    b"maxTokensInPagedKvCache",
    b"modelInstanceState",
    b"GPU memory for runtime buffers",
    b"GPU memory for decoder",
)


def _gib(value: str | None, unit: str = "GiB") -> float | None:
    number = to_float(value)
    return None if number is None else number * _UNIT_GIB[unit]


def _is_trtllm(text: str) -> bool:
    """Lines with no tag are claimed only when their wording is TensorRT-LLM's own."""
    return "TensorRT-LLM" in text or "TRT-LLM" in text or "[TRT]" in text


class TRTLLMLines:
    """Line knowledge for TensorRT-LLM (see module docstring)."""

    engine = ENGINE
    anchors = ANCHORS

    joins = False

    def wants_join(self, text: str) -> bool:
        return False

    def parse(self, text: str, ctx: LineContext) -> list[Parsed]:
        st = ctx.state.get("trtllm")
        if st is None:
            st = ctx.state["trtllm"] = {}
        out = _parse_message(text, st)
        if not out:
            return []
        m = _RANK.search(text)
        if m:
            st["last_rank"] = f"rank={m.group(1)}"
        # the executor's component report continues on lines without the [RANK n] tag
        rank = f"rank={m.group(1)}" if m else (st.get("last_rank") if st.get("components") else None) or DEFAULT_RANK
        ts = _TS.search(text)
        for p in out:
            if p.kind in (ev.RANK, ev.POOL):
                p.rank = rank
            p.timestamp = ts.group(1) if ts else None
        return out


def _parse_message(text: str, st: dict[str, Any]) -> list[Parsed]:
    if not st.get("components") and not _GATE.search(text):
        return []  # a cheap gate: most lines reaching here belong to another engine
    for handler in _HANDLERS:
        out = handler(text, st)
        if out:
            return out
    return []


def _allocated(m: re.Match[str], text: str) -> list[Parsed]:
    tokens = to_int(m.group(3))
    return [Parsed(ev.POOL, {"name": POOL_NAME, "gib": _gib(m.group(1), m.group(2)), "tokens": tokens}),
            Parsed(ev.CAPACITY, {"kv_tokens": tokens, "max_tokens_in_paged_kv_cache": tokens})]


def _using_tokens(m: re.Match[str], text: str) -> list[Parsed]:
    tokens = to_int(m.group(1))
    data = {"kv_tokens": tokens, "max_tokens_in_paged_kv_cache": tokens}
    if m.group(2):
        data["max_blocks_per_seq"] = to_int(m.group(2))
    return [Parsed(ev.CAPACITY, data)]


def _max_tokens(m: re.Match[str], text: str) -> list[Parsed]:
    tokens = to_int(m.group(1))
    out = [Parsed(ev.CAPACITY, {"kv_tokens": tokens, "max_tokens_in_paged_kv_cache": tokens})]
    if m.group(2):
        out += [Parsed(ev.POOL, {"name": POOL_NAME, "gib": int(m.group(2)) / (1 << 30), "tokens": tokens}),
                Parsed(ev.CAPACITY, {"kv_allocated_bytes": to_int(m.group(2))})]
    return out


def _cap_row(key: str) -> Callable[[re.Match[str], str], list[Parsed]]:
    return lambda m, text: [Parsed(ev.CAPACITY, {key: to_int(m.group(1))})]


_SOURCE = "TensorRT-LLM's source wording; no posted log in the corpus prints it yet"

# the KV cache: its allocation, its token count and its blocks, in every runtime's wording
KV_SHAPES = Shapes((
    Shape("kv-allocated", _ALLOCATED, _allocated, (ev.POOL, ev.CAPACITY), "undated",
          "Allocated 4.53 GiB for max tokens in paged KV cache (395776)."),
    Shape("kv-allocated-bytes", _ALLOCATE_BYTES,
          lambda m, text: [Parsed(ev.POOL, {"name": POOL_NAME, "gib": int(m.group(1)) / (1 << 30), "tokens": None,
                                            "what": "bytes"}),
                           Parsed(ev.CAPACITY, {"kv_allocated_bytes": to_int(m.group(1))})],
          (ev.POOL, ev.CAPACITY), "undated", "[TensorRT-LLM][INFO] Allocate 956301312 bytes for k/v cache."),
    Shape("kv-tokens", _USING_TOKENS, _using_tokens, (ev.CAPACITY,), "undated",
          "[TensorRT-LLM][INFO] Using 10718 tokens in paged KV cache."),
    Shape("kv-max-tokens", _MAX_TOKENS, _max_tokens, (ev.CAPACITY, ev.POOL), "undated",
          "[TensorRT-LLM][INFO] Max tokens in paged KV cache: 117760. Allocating 54022635520 bytes."),
    Shape("fake-cache-manager", _FAKE_CACHE,
          lambda m, text: [Parsed(ev.SETTINGS, {"fake_cache_manager": True})], (ev.SETTINGS,), "undated",
          "[12/20/2025-03:40:47] [TRT-LLM AUTO-DEPLOY] [RANK 0] [I] Using fake cache manager with head_dim=0 and num "
          "pages: 61848"),
    Shape("kv-sizing-memory", _MEM_USAGE,
          lambda m, text: [Parsed(ev.RANK, {"total_gib": _gib(m.group(1)), "kv_sizing_free_gib": _gib(m.group(2))})],
          (ev.RANK,), "undated", "[TensorRT-LLM][INFO] Memory usage when calculating max tokens in paged kv cache: "
          "total: 22.19 GiB, available: 0.11 GiB"),
    Shape("kv-blocks", _BLOCKS_LINE,
          lambda m, text: [Parsed(ev.CAPACITY, {"max_blocks_per_seq": to_int(m.group(1)), "window_size": to_int(m.group(2)),
                                                "tokens_per_block": to_int(m.group(3)),
                                                "num_gpu_blocks": to_int(m.group(4)),
                                                "num_cpu_blocks": to_int(m.group(5))})],
          (ev.CAPACITY,), "undated", "[TensorRT-LLM][INFO] Max KV cache blocks per sequence: 65 [window size=2051], "
          "tokens per block=32, primary blocks=116617, secondary blocks=0"),
    Shape("primary-blocks", _PRIMARY, _cap_row("num_gpu_blocks"), (ev.CAPACITY,), "undated",
          "[TensorRT-LLM][INFO] Number of blocks in KV cache primary pool: 18"),
    Shape("secondary-blocks", _SECONDARY, _cap_row("num_cpu_blocks"), (ev.CAPACITY,), "undated",
          "[TensorRT-LLM][INFO] Number of blocks in KV cache secondary pool: 0, onboard blocks to primary memory before "
          "reuse: true"),
    Shape("tokens-per-block", _TOKENS_PER_BLOCK, _cap_row("tokens_per_block"), (ev.CAPACITY,), "undated",
          "[TensorRT-LLM][INFO] Number of tokens per block: 32."),
    Shape("pages-per-sequence", _PAGES_PER_SEQ, _cap_row("max_blocks_per_seq"), (ev.CAPACITY,), "undated",
          "[TensorRT-LLM][INFO] Max KV cache pages per sequence: 16"),
))


def _kv(text: str, st: dict[str, Any]) -> list[Parsed]:
    return first_match(KV_SHAPES.rows, text) or []


def _peak(m: re.Match[str], text: str) -> list[Parsed]:
    rest = m.group(3)
    data: dict[str, Any] = {"peak_memory_gib": _gib(m.group(1))}
    total = _PEAK_TOTAL.search(rest)
    tmp = _PEAK_TMP.search(rest)
    if total:
        data["total_gib"] = _gib(total.group(1))
    if tmp:
        data["profiling_kv_gib"] = _gib(tmp.group(1))
    out = [Parsed(ev.RANK, data), Parsed(ev.CAPACITY, {"available_kv_gib": _gib(m.group(2))})]
    fraction, size = _PEAK_FRACTION.search(rest), _PEAK_KV_SIZE.search(rest)
    settings: dict[str, Any] = {}
    if fraction:
        settings["free_gpu_memory_fraction"] = round(to_float(fraction.group(1)) or 0, 6)
    if size:
        settings["kv_size_per_token"] = to_int(size.group(1))
    if settings:
        out.append(Parsed(ev.SETTINGS, settings))
    return out


def _rank_value(key: str) -> Callable[[re.Match[str], str], list[Parsed]]:
    return lambda m, text: [Parsed(ev.RANK, {key: _gib(m.group(1))})]


# The PyTorch backend's memory profile (LLM API / trtllm-serve)
PROFILE_SHAPES = Shapes((
    Shape("profile-peak", _PEAK, _peak, (ev.RANK, ev.CAPACITY, ev.SETTINGS), "undated",
          "[12/20/2025-04:21:51] [TRT-LLM] [I] Peak memory during memory usage profiling (torch + non-torch): 113.65 GiB, "
          "available KV cache memory when calculating max tokens: 5.95 GiB, fraction is set 0.8999999761581421, kv size is "
          "73728. device total memory 119.70 GiB, , tmp kv_mem 0.56 GiB"),
    Shape("estimated-kv", _ESTIMATED, lambda m, text: [Parsed(ev.CAPACITY, {"estimated_kv_gib": _gib(m.group(1))})],
          (ev.CAPACITY,), "undated", "[12/20/2025-04:21:51] [TRT-LLM] [I] Estimated max memory in KV cache : 5.95 GiB"),
    Shape("weights-inside-torch", _WEIGHTS_INSIDE, _rank_value("weights_gib"), (ev.RANK,), "undated",
          "[12/20/2025-04:21:50] [TRT-LLM] [I] Memory used after loading model weights (inside torch) in memory usage "
          "profiling: 63.52 GiB"),
    Shape("weights-outside-torch", _WEIGHTS_OUTSIDE, _rank_value("non_torch_at_load_gib"), (ev.RANK,), "undated",
          "[12/20/2025-04:21:50] [TRT-LLM] [I] Memory used after loading model weights (outside torch) in memory usage "
          "profiling: 49.78 GiB"),
    Shape("activation-peak", _ACTIVATION, _rank_value("activation_peak_gib"), (ev.RANK,), "undated",
          "[12/20/2025-04:21:51] [TRT-LLM] [I] Memory dynamically allocated during inference (inside torch) in memory "
          "usage profiling: 0.85 GiB"),
    Shape("outside-torch", _OUTSIDE, _rank_value("non_torch_gib"), (ev.RANK,), "undated",
          "[12/20/2025-04:21:51] [TRT-LLM] [I] Memory used outside torch (e.g., NCCL and CUDA graphs) in memory usage "
          "profiling: 49.28 GiB"),
    Shape("weights-used", _WEIGHTS_PT,
          lambda m, text: [Parsed(ev.RANK, {"weights_gib": _gib(m.group(1)), "weights_label": f"{m.group(1)} {m.group(2)}"})],
          (ev.RANK,), "undated", "[12/20/2025-04:20:21] [TRT-LLM] [I] Use 63.32 GB for model weights."),
))


def _profile(text: str, st: dict[str, Any]) -> list[Parsed]:
    return first_match(PROFILE_SHAPES.rows, text) or []


def _settings(text: str, st: dict[str, Any]) -> list[Parsed]:
    m = _BOTH_SET.search(text)
    if m:
        out = [Parsed(ev.SETTINGS, {"kv_cache_free_gpu_mem_fraction": round(to_float(m.group(1)) or 0, 6),
                                    "max_tokens_in_paged_kv_cache": to_int(m.group(2)), "max_tokens_set": True})]
        if m.group(3):
            out.append(Parsed(ev.RANK, {"kv_sizing_free_gib": _gib(m.group(3)), "total_gib": _gib(m.group(4))}))
        return out
    m = _MAX_TOKENS_SET.search(text)
    if m:
        return [Parsed(ev.SETTINGS, {"max_tokens_in_paged_kv_cache": to_int(m.group(1)), "max_tokens_set": True})]
    m = _FRACTION_DEFAULT.search(text)
    if m:
        return [Parsed(ev.SETTINGS, {"kv_cache_free_gpu_mem_fraction": to_float(m.group(1)),
                                     "kv_cache_free_gpu_mem_fraction_default": True, "triton_backend": True})]
    if _MAX_TOKENS_DEFAULT.search(text):
        return [Parsed(ev.SETTINGS, {"max_tokens_in_paged_kv_cache_default": True, "triton_backend": True})]
    if _TRITON_PARAM.search(text) and _is_trtllm(text):
        return [Parsed(ev.SETTINGS, {"triton_backend": True})]  # the Triton backend's config.pbtxt defaults
    m = _OVERRIDE.search(text)
    if m:
        return [Parsed(ev.SETTINGS, {"max_tokens_in_paged_kv_cache": to_int(m.group(1))})]
    m = _TRTGPT.search(text)
    if m:
        key = {"maxNumSequences": "max_num_sequences", "maxBatchSize": "max_batch_size", "maxBeamWidth": "max_beam_width",
               "maxSequenceLen": "max_seq_len", "maxDraftLen": "max_draft_len",
               "mMaxAttentionWindowSize": "max_attention_window", "maxNumTokens": "max_num_tokens",
               "maxInputLen": "max_input_len"}[m.group(1)]
        return [Parsed(ev.SETTINGS, {key: to_int(m.group(2))})]
    m = _PY_LIMITS.search(text)
    if m and _is_trtllm(text):
        data: dict[str, Any] = {"max_seq_len": to_int(m.group(1)), "max_num_requests": to_int(m.group(2)),
                "max_num_tokens": to_int(m.group(3))}
        if m.group(4):
            data["max_batch_size"] = to_int(m.group(4))
        return [Parsed(ev.SETTINGS, data)]
    m = _TP_RANK.search(text)
    if m:
        rank = to_int(m.group(1))
        if rank is None:  # a mangled rank number says nothing about the world size
            return []
        ranks = st.setdefault("ranks", set())
        ranks.add(rank)
        return [Parsed(ev.SETTINGS, {"world_size_seen": max(ranks) + 1})]
    m = _MPI.search(text)
    if m and _is_trtllm(text):
        return [Parsed(ev.SETTINGS, {"world_size": to_int(m.group(1))})]
    m = _REUSE.search(text)
    if m and _is_trtllm(text):
        return [Parsed(ev.SETTINGS, {"enable_block_reuse": m.group(1) == "enabled"})]
    if _is_trtllm(text) or "LLM Args" in text:
        data = {}
        for pattern, key in ((_TP_ARG, "tp_size"), (_PP_ARG, "pp_size")):
            m = pattern.search(text)
            if m:
                data[key] = to_int(m.group(1))
        m = _FRACTION_PARAM.search(text)
        if m and "not specified" not in text:
            data["kv_cache_free_gpu_mem_fraction"] = to_float(m.group(1))
        if data:
            return [Parsed(ev.SETTINGS, data)]
    return []


def _engine_size(m: re.Match[str], text: str) -> list[Parsed]:
    return [Parsed(ev.RANK, {"weights_gib": _gib(m.group(1), "MiB"), "engine_size_mib": to_float(m.group(1))})]


def _rank_gib(key: str) -> Callable[[re.Match[str], str], list[Parsed]]:
    return lambda m, text: [Parsed(ev.RANK, {key: _gib(m.group(1), m.group(2))})]


# the engine and the runtime's own buffers, sized at build (max_batch_size, max_num_tokens, …)
ENGINE_SHAPES = Shapes((
    Shape("engine-size", _ENGINE_SIZE, _engine_size, (ev.RANK,), "undated", "Loaded engine size: 875 MiB"),
    Shape("engine-size-per-gpu", _ENGINE_PER_GPU, _engine_size, (ev.RANK,), "undated",
          "[TensorRT-LLM][INFO] Total engine size per GPU is 6532 MiB", _SOURCE),
    Shape("execution-context", _EXEC_CTX, _rank_gib("execution_context_gib"), (ev.RANK,), "undated",
          "Allocated 773.51 MiB for execution context memory."),
    Shape("tensorrt-managed", _TRT_MANAGED,
          lambda m, text: [Parsed(ev.RANK, {"trt_managed_gpu_mib": to_int(m.group(4))})], (ev.RANK,), "undated",
          "TensorRT-managed allocation in IExecutionContext creation: CPU +0, GPU +0, now: CPU 0, GPU 869 (MiB)"),
    Shape("runtime-buffers", _RUNTIME_BUF, _rank_gib("runtime_buffers_gib"), (ev.RANK,), "undated",
          "Allocated 2.66 GB GPU memory for runtime buffers."),
    Shape("decoder-buffers", _DECODER, _rank_gib("decoder_gib"), (ev.RANK,), "undated",
          "Allocated 5.76 GB GPU memory for decoder."),
))


def _engine(text: str, st: dict[str, Any]) -> list[Parsed]:
    return first_match(ENGINE_SHAPES.rows, text) or []


IDENTITY_SHAPES = Shapes((
    Shape("version-banner", _VERSION, lambda m, text: [Parsed(ev.VERSION, {"engine_version": m.group(1)})],
          (ev.VERSION,), "all", "[TensorRT-LLM] TensorRT-LLM version: 0.16.0"),
    Shape("engine-version", _ENGINE_VERSION, lambda m, text: [Parsed(ev.VERSION, {"engine_version": m.group(1)})],
          (ev.VERSION,), "undated", "[TensorRT-LLM][INFO] Engine version 0.16.0 found in the config file, assuming "
          "engine(s) built by new builder API."),
    Shape("backend", _BACKEND, lambda m, text: [Parsed(ev.SETTINGS, {"backend": m.group(1).lower()})], (ev.SETTINGS,),
          "undated", "[03/13/2026-02:56:20] [TRT-LLM] [I] Using LLM with PyTorch backend"),
    Shape("executor-created", _LOADED, lambda m, text: [Parsed(ev.SETTINGS, {"loaded": True})], (ev.SETTINGS,),
          "undated", "[TensorRT-LLM][INFO] Executor instance created by worker"),
))


def _identity(text: str, st: dict[str, Any]) -> list[Parsed]:
    out = first_match(IDENTITY_SHAPES.rows, text) or []
    if out and st.get("content") and _VERSION.search(text):  # the banner after a KV allocation: another process
        out.insert(0, Parsed(ev.BOUNDARY, {"why": "version banner after a KV allocation"}))
        st["content"] = False
    return out


WARNING_SHAPES = Shapes((
    Shape("attention-window-reduced", _WINDOW_REDUCED,
          lambda m, text: [Parsed(ev.WARNING, {"code": "attention-window-reduced", "message": text.strip(),
                                               "to": to_int(m.group(1))})],
          (ev.WARNING,), "undated", "[TensorRT-LLM][WARNING] maxAttentionWindow and maxSequenceLen are too large for at "
          "least one sequence to fit in kvCache. they are reduced to 5185"),
    Shape("attention-window-capped", _WINDOW_UPPER,
          lambda m, text: [Parsed(ev.WARNING, {"code": "attention-window-reduced", "message": text.strip(),
                                               "from": to_int(m.group(1)), "to": to_int(m.group(2))})],
          (ev.WARNING,), "undated", "[12/20/2025-04:21:10] [TRT-LLM] [W] Attention window size 131072 exceeds upper "
          "bound 8224 for available blocks. Reducing to 8224."),
    Shape("max-seq-len-adjusted", _ADJUSTED_SEQ,
          lambda m, text: [Parsed(ev.SETTINGS, {"max_seq_len": to_int(m.group(1))})] if _is_trtllm(text) else None,
          (ev.SETTINGS,), "undated", "[12/20/2025-04:21:10] [TRT-LLM] [W] Adjusted max_seq_len to 8224"),
))


def _warnings(text: str, st: dict[str, Any]) -> list[Parsed]:
    return first_match(WARNING_SHAPES.rows, text) or []


def _oom(m: re.Match[str], text: str) -> list[Parsed]:
    return [Parsed(ev.FAILURE, {"kind": "not-enough-memory", "message": text.strip()[:500]})]


def _too_small(m: re.Match[str], text: str) -> list[Parsed]:
    data: dict[str, Any] = {"kind": "max-len-too-large", "message": text.strip()[:500], "kv_tokens": to_int(m.group(1))}
    if m.group(2):
        beam, per_block, blocks = to_int(m.group(2)), to_int(m.group(3)), to_int(m.group(4))
        if beam is not None and per_block is not None and blocks is not None:  # a mangled factor: need unknown
            data["needed_tokens"] = beam * per_block * blocks
    return [Parsed(ev.FAILURE, data)]


FAILURE_SHAPES = Shapes((
    Shape("requested-memory", _REQUESTED,
          lambda m, text: [Parsed(ev.FAILURE, {"kind": "not-enough-memory", "message": text.strip()[:500],
                                               "requested_bytes": to_int(m.group(1))})],
          (ev.FAILURE,), "undated", "[TensorRT-LLM][ERROR] tensorrt_llm::common::TllmException: Requested amount of GPU "
          "memory (1073741824 bytes) could not be allocated. There may not be enough free memory for allocation to "
          "succeed.", _SOURCE),
    Shape("cuda-runtime-oom", _CUDA_OOM,
          lambda m, text: [Parsed(ev.FAILURE, {"kind": "not-enough-memory", "message": text.strip()[:500],
                                               "where": (m.group(2) or m.group(1)).strip()})],
          (ev.FAILURE,), "undated", "[TensorRT-LLM][ERROR] CUDA runtime error in cudaMalloc(&ptr, n): out of memory "
          "(/src/tensorrt_llm/cpp/tensorrt_llm/runtime/tllmBuffers.h:123)", _SOURCE),
    # the PyTorch backend's report follows this line (see _component_report)
    Shape("insufficient-memory", _INSUFFICIENT, _oom, (ev.FAILURE,), "undated",
          "RuntimeError: Executor creation failed due to insufficient GPU memory."),
    Shape("tensorrt-oom", _TRT_OOM, lambda m, text: _oom(m, text) if _is_trtllm(text) else None, (ev.FAILURE,),
          "undated", "[TRT] [E] 2: [virtualMemoryBuffer.cpp::resizePhysical::140] Error Code 2: OutOfMemory (no further "
          "information)", _SOURCE),
    Shape("kv-cache-too-small", _TOO_SMALL, _too_small, (ev.FAILURE,), "undated",
          "E0306 16:40:07.708802 117 backend_model.cc:691] ERROR: Failed to create instance: unexpected error when "
          "creating modelInstanceState: maxTokensInPagedKvCache (29184) must be large enough to process at least 1 "
          "sequence to completion (i.e. must be larger than beam_width (1) * tokensPerBlock (128) * maxBlocksPerSeq "
          "(272))"),
    Shape("backend-load-failed", _LOAD_FAILED,
          lambda m, text: [Parsed(ev.FAILURE, {"kind": "exception", "message": text.strip()[:500], "weak": True})],
          (ev.FAILURE,), "undated", "E1103 02:59:01.152656 81041 backend_model.cc:553] ERROR: Failed to create "
          "instance: unexpected error when creating modelInstanceState: [TensorRT-LLM][ERROR] CUDA runtime error in "
          "::cudaMallocAsync(ptr, n, mCudaSt"),
))


def _failures(text: str, st: dict[str, Any]) -> list[Parsed]:
    found = first_match(FAILURE_SHAPES.rows, text)
    if found is None:
        return []
    if _INSUFFICIENT.search(text) and not (_REQUESTED.search(text) or _CUDA_OOM.search(text)):
        st["components"] = True  # the insufficient-memory row took it: the component report that follows is its
    return found


def _component_report(text: str, st: dict[str, Any]) -> list[Parsed]:
    """The PyTorch backend's "insufficient GPU memory" report: which component failed, and the free
    memory before/after each component created so far (the model row is the weights' before/after)."""
    if not st.get("components"):
        return []
    m = _COMPONENT.search(text)
    if m:
        return [Parsed(ev.WARNING, {"code": "component-not-created", "message": text.strip(),
                                    "component": m.group(1)})]
    m = _TOTAL_GIB.search(text)
    if m:
        return [Parsed(ev.RANK, {"total_gib": _gib(m.group(1))})]
    m = _FREE_BEFORE.search(text)
    if m:
        return [Parsed(ev.RANK, {"free_before_failed_component_gib": _gib(m.group(1))})]
    if _COMPONENTS_HEADER.search(text):
        return [Parsed(ev.SETTINGS, {"component_report": True})]
    m = _COMPONENT_ROW.search(text)
    if m:
        name = m.group(1).strip().lower()
        before, after = _gib(m.group(2)), _gib(m.group(3))
        if name == "model":
            return [Parsed(ev.RANK, {"pre_load_free_gib": before, "avail_after_weights_gib": after})]
        key = re.sub(r"\W+", "_", name).strip("_")
        return [Parsed(ev.RANK, {f"component_{key}_free_before_after_gib": [before, after]})]
    return []


def _mark_content(handler):
    """KV lines mean a process got as far as its pool: a later version banner is a new process."""

    def wrapped(text: str, st: dict[str, Any]) -> list[Parsed]:
        out = handler(text, st)
        if out:
            st["content"] = True
        return out

    return wrapped


_KEYWORDS = ("TensorRT-LLM", "not specified", "TRT-LLM", "[TRT]", "TRTGptModel", "KV cache", "kv cache", "k/v cache", "MemUsageChange",
             "engine size", "tokens per block", "insufficient GPU memory", "OutOfMemory", "out of memory",
             "could not be allocated", "tensorrt_llm", "max_seq_len=", "gpu_mem_fraction", "memory_fraction",
             "maxTokensInPagedKvCache", "modelInstanceState",
             # the runtime's own wording, claimed also where a post stripped the [TensorRT-LLM] tag
             "for execution context memory", "GPU memory for runtime buffers", "GPU memory for decoder")
_GATE = lazy_compile("|".join(re.escape(k) for k in _KEYWORDS))
_HANDLERS = (_mark_content(_kv), _profile, _engine, _settings, _warnings, _identity, _failures, _component_report)
