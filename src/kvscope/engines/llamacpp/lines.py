"""llama.cpp's memory log lines (llama-server, llama-cli, the bench tools, ik_llama.cpp, LLamaSharp).

One model of every era, from the 2023 ``kv self size = … MB`` lines to the 2026 compact
``1.06.520.077 E …`` format: the function prefix changed five times (``llama_new_context_with_model``
→ ``llama_init_from_model`` → ``llama_context`` / ``llama_kv_cache_unified`` → ``llama_kv_cache`` →
``sched_reserve``) but the buffer lines kept their shape, so patterns are searched on the message, not
anchored on the prefix. Wrappers (LLamaSharp's ``[llama Info]: ``, journald without a date, the
compact elapsed-time prefix) are stripped first.

A "rank" here is a device: every buffer line names its buffer (``CUDA0``, ``ROCm0``, ``Metal``,
``CUDA_Split``, ``CUDA_Host``…); host buffers (``*_Host``, ``CPU``, ``CPU_Mapped``…) are the ``CPU``
rank. A KV cache is logged once per device buffer and once as a summary (``KV self size`` /
``llama_kv_cache: size = …``); both are emitted as pools named ``kv#N`` / ``rs#N`` (cache N of the
process) and ``finish`` folds the summary into the device pools, so nothing is counted twice.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kvscope.core import events as ev
from kvscope.engines.base import NUM, LineContext, Parsed, to_float, to_int
from kvscope.engines.lazy import lazy_compile
from kvscope.engines.shapes import Shape, Shapes, first_match

ENGINE = "llamacpp"
SUMMARY_RANK = "(kv summary)"  # pseudo rank holding summary lines until finish folds them
HOST_RANK = "CPU"
BUF_PREFIX = "_buf|"  # rank extras key prefix for one buffer line; finish folds them into per-kind sums
G = rf"({NUM})"
MIB = r"\s*MiB"

_WRAPPER = lazy_compile(
    r"^\s*(?:\[llama \w+\]:\s*|\d+\.\d+\.\d+\.\d+ [EWIDT] |\d\d:\d\d:\d\d \S+ [\w.@/\-]+\[\d+\]:\s*)"
)

# --- per-device buffers ---------------------------------------------------------------------------
# Names start where a word does ((?<!\S), (?<!\w)): the leftmost match is the same, but a long run of letters
# or digits is scanned once instead of from every position in it (quadratic on one hostile 20 KB line)
_KV_BUFFER = lazy_compile(rf"(?<!\S)(\S+) KV buffer size\s*=\s*{G}\s*(MiB|MB)")
_RS_BUFFER = lazy_compile(rf"(?<!\S)(\S+) RS buffer size\s*=\s*{G}{MIB}")
_COMPUTE = lazy_compile(rf"(?<!\S)(\S+)\s+compute buffer size\s*=\s*{G}{MIB}")
_OUTPUT = lazy_compile(rf"(?<!\S)(\S+)\s+output buffer size\s*=\s*{G}{MIB}")
_INPUT = lazy_compile(rf"(?<!\S)(\S+)\s+input buffer size\s*=\s*{G}{MIB}")
_MODEL_BUF = lazy_compile(rf"(?:llm_)?load_tensors:\s+(\S+)\s+(?:model )?buffer size\s*=\s*{G}{MIB}")
_SPLIT_HEADER = lazy_compile(r"(KV cache|model buffer) size per device")
_SPLIT_DEVICE = lazy_compile(rf"^\s*Device (\d+):\s+{G}(?:{MIB})?\s*$")

# --- KV summaries -----------------------------------------------------------------------------------
_KV_SELF = lazy_compile(
    rf"[Kk][Vv] self size\s*=\s*{G}\s*(MiB|MB)"
    rf"(?:,\s*(K|c\^KV|K-only) \(([\w.]+)\):\s*{G}{MIB}(?:[,;]\s*(V|kv\^T) \(([\w.]+)\):\s*{G}{MIB})?)?"
)
_KV_SIZE = lazy_compile(
    rf"size\s*=\s*{G}{MIB}\s*\(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+)(?:/\s*(\d+))? seqs\),\s*"
    rf"([KR]) \(([\w.]+)\):\s*{G}{MIB},\s*([VS]) \(([\w.]+)\):\s*{G}{MIB}"
)
_ISWA = lazy_compile(r"creating\s+(non-SWA|SWA) KV cache, size = (\d+) cells")
_INDEXER = lazy_compile(rf"KV self indexer size\s*=\s*{G}{MIB}")

# --- 2023 lines (before ggml-backend buffers) ---------------------------------------------------------
_OLD_VRAM_KV = lazy_compile(rf"VRAM kv self\s*=\s*{G}\s*(?:MB|MiB)")
_OLD_VRAM_WEIGHTS = lazy_compile(rf"VRAM used\s*[:=]\s*{G}\s*(?:MB|MiB)")
_OLD_SYS_WEIGHTS = lazy_compile(rf"(?:mem required|system memory used)\s*=\s*{G}\s*(?:MB|MiB)")
_OLD_COMPUTE = lazy_compile(rf"compute buffer total size\s*=\s*{G}\s*(?:MB|MiB)")
_OLD_SCRATCH = lazy_compile(rf"VRAM scratch buffer:\s*{G}\s*(?:MB|MiB)")
_OLD_TOTAL_VRAM = lazy_compile(rf"total VRAM used:\s*{G}\s*(?:MB|MiB)")

# --- context parameters -------------------------------------------------------------------------------
_CTX_PREFIX = (r"(?:llama_new_context_with_model|llama_init_from_model|llama_context|llama_new_context|"
               r"llama_model_load_internal)")  # the last: 2023's pre-GGUF loader printed n_ctx with the hparams
_PARAM = lazy_compile(
    _CTX_PREFIX + r":\s+(n_ctx|n_ctx_seq|n_ctx_per_seq|n_seq_max|n_batch|n_ubatch|flash_attn|kv_unified|"
    r"causal_attn|mla_attn|type_k|type_v|n_rs_seq)\s*=\s*(\S+)"
)
_CTX_TRAIN = lazy_compile(r"n_ctx_(?:per_)?seq \((\d+)\) ([<>]) n_ctx_train \((\d+)\)")
_META = lazy_compile(
    r"(?:print_info|llm_load_print_meta|llama_model_load_internal):\s+(n_ctx_train|n_layer|n_embd|n_head|n_head_kv|n_embd_head_k|"
    r"n_embd_head_v|n_embd_k_gqa|n_embd_v_gqa|n_swa|n_lora_kv|n_expert|model type|model params|file type|"
    r"model ftype|general\.name|arch)\s*=\s*(.+?)\s*$"
)
# 2024–25 cache constructor: "kv_size = 32768, offload = 1, type_k = 'q8_0', type_v = 'q8_0', n_layer = 64"
_KV_INIT = lazy_compile(r"\bkv_size = (\d+), offload = \d+, type_k = '([\w.]+)', type_v = '([\w.]+)'(?:, n_layer = (\d+))?")
# common_init_from_params: "setting (dry_)penalty_last_n to ctx_size = 4096" — llama_n_ctx of the context
_CTX_SIZE = lazy_compile(r"penalty_last_n to ctx_size = (\d+)")
_LAYER_GQA = lazy_compile(r"layer\s+(\d+):\s*n_embd_k_gqa\s*=\s*(\d+),\s*n_embd_v_gqa\s*=\s*(\d+)")
_BENCH = lazy_compile(r"\bn_kv_max\s*=\s*(\d+)|^(?:generate|main): n_ctx\s*=\s*(\d+)")
_KV_PAIRS = lazy_compile(r"(?<!\w)(\w+)\s*=\s*([\w.]+)")
_SLOTS = lazy_compile(r"\bn_slots\s*[=:]\s*\"?(\d+)")
_CTX_SLOT = lazy_compile(r"\bn_ctx_slot\s*[=:]\s*\"?(\d+)")
_SLOT_MAX = lazy_compile(r"Slot \d+ - max context: (\d+)|new slot,? n_ctx(?:_slot)? = (\d+)")
_SLOT_CAP = lazy_compile(r"slot context \((\d+)\) exceeds the training context of the model \((\d+)\)")
_KV_UNIFIED_SRV = lazy_compile(r"kv_unified\s*=\s*'?(true|false)")
_PIPELINE = lazy_compile(r"pipeline parallelism enabled \(n_copies=(\d+)\)")
_OFFLOADED = lazy_compile(r"offloaded (\d+)/(\d+) layers to GPU")
_OUTPUT_ON_CPU = lazy_compile(r"offloading output layer to CPU")
# llama-server's "Available devices:" table (--list-devices, and the runner ollama starts in 2026)
_DEVICE_ROW = lazy_compile(r"^\s*((?:CUDA|ROCm|Vulkan|SYCL|MUSA|Metal)\d*): (.+?) \((\d+) MiB, (\d+) MiB free\)\s*$")
_USING_DEVICE = lazy_compile(r"using device (\S+) \((.*?)\)(?: \([^)]*\))? - (\d+) MiB free")
_FOUND = lazy_compile(r"found (\d+) (CUDA|ROCm|SYCL|MUSA|Vulkan) devices")
_GPU_LINE = lazy_compile(r"^\s*Device (\d+): ([^,]+), (?:compute capability|gfx)")
_BREAKDOWN = lazy_compile(
    r"memory_breakdown_print: \|\s+- (\S+) \((.*?)\)\s*\|\s*(\d+) = +(\d+) \+ \(\s*(\d+) = +(\d+) \+ +(\d+) \+ +(\d+)\)"
)
_FIT_CTX = lazy_compile(r"context size reduced from (\d+) to (\d+)")
_FIT_PROJECTED = lazy_compile(r"projected to use (\d+) MiB of device memory vs\. (\d+) MiB of free device memory")

# a runner's command line, however it was pasted (llama-server's, or the one ollama starts): --ctx-size is the
# whole cache, --parallel its slots
_FLAG = lazy_compile(r"--(ctx-size|parallel|n-gpu-layers|batch-size) (\d+)")
_TRUNCATED = lazy_compile(r"input truncated\b")
_TRUNC_FIELD = lazy_compile(r"\b(n_ctx|n_erase|n_keep|n_left|n_shift)\s*=\s*(\d+)")

# --- process boundaries and identity --------------------------------------------------------------------
_BUILD = lazy_compile(r"^(?:main: )?build(?: =|:)\s*(\d+) \((\w+)\)")
_BUILD_INFO = lazy_compile(r"build info\b.*?\bbuild\"?[=:]\s*\"?(\d+).*?\bcommit\"?[=:]\s*\"?(\w+)")
_LOADER = lazy_compile(r"llama_model_loader: loaded meta data with \d+ key-value pairs and \d+ tensors from (.+?)(?: \(version .*\))?\s*$")
_LOADING_MODEL = lazy_compile(r"load_model: loading model '([^']+)'")
_SERVER_LOADING = lazy_compile(r"llama_server: loading model\s*$")  # llama-server (re)starting its load
_DRAFT = lazy_compile(r"loading draft model|load_draft|draft model '")
_GENERAL_NAME = lazy_compile(r"general\.name\s+str\s+=\s+(.+?)\s*$")

# --- failures --------------------------------------------------------------------------------------------
_ALLOC_FAIL = lazy_compile(rf"(?<!\w)(\w+?)_buffer_type_alloc_buffer: allocating {G}{MIB} on device (\d+): (\w+) failed: (.+)")
_GALLOCR = lazy_compile(r"ggml_gallocr_\w+: failed to allocate (\S+) buffer of size (\d+)")
_TENSOR_ALLOC = lazy_compile(r"alloc_tensor_range: failed to allocate (\S+) buffer of size (\d+)")
_UNABLE_ALLOC = lazy_compile(r"unable to allocate (\S+) buffer")
_COMPUTE_FAIL = lazy_compile(r"failed to allocate compute (?:pp |tg )?buffers")
_KV_FAIL = lazy_compile(r"failed to allocate (?:buffer|memory) for kv cache|llama_kv_cache_init\(\) failed")
_RETRY = lazy_compile(r"compute buffer allocation failed, retrying without pipeline parallelism")
_FATAL = lazy_compile(
    r"failed to create context|failed to initialize the context|unable to load model|error loading model|"
    r"failed to load model"
)
_METAL_ALLOC = lazy_compile(rf"error: failed to allocate buffer, size = {G}{MIB}")
# a host (or other backend) buffer the allocator refused, before the line that names what it was for
_BUF_TYPE_FAIL = lazy_compile(r"(?<!\w)(\w+?)_buffer_type_alloc_buffer: failed to allocate buffer of size (\d+)")
# a quantized V cache without flash attention: a setting refused, not memory
_V_NEEDS_FA = lazy_compile(r"V cache quantization requires flash.?attn")
# Metal reports each allocation against the device's working set: "( 3772.66 / 49152.00)"
_METAL_WORKING_SET = lazy_compile(rf"allocated buffer, size =\s*{G}{MIB},\s*\(\s*{G}\s*/\s*{G}\s*\)")
# the Metal device's working set at init, before any buffer (macOS lets a process use this much of unified memory)
_METAL_RECOMMENDED = lazy_compile(rf"recommendedMaxWorkingSetSize\s*=\s*{G}\s*MB")
_VULKAN_ALLOC = lazy_compile(r"Device memory allocation of size (\d+) failed")
# Vulkan caps one allocation (maxMemoryAllocationSize / maxBufferSize, often 2–4 GiB) below the device's memory
_VULKAN_LIMIT = lazy_compile(r"exceeds device memory allocation limit")
# ggml-cuda's abort on a failed cudaMalloc outside the buffer allocator ("CUDA error: out of memory" then
# "current device: 0, in function alloc at …ggml-cuda.cu" and GGML_ASSERT): ollama's runner prints it as an error
_GGML_CUDA_OOM = lazy_compile(r"CUDA error: out of memory")
_IK_SHORT = lazy_compile(rf"Free memory (\d+) MiB on device (\d+) is less the required compute buffer size {G}{MIB}")

ANCHORS: tuple[bytes, ...] = (
    b"buffer size",
    b"self size",
    b"VRAM",
    b"mem required",
    b"system memory used",
    b"cells,",
    b"KV cache",
    b"n_ctx",
    b"ctx_size",
    b"kv_size",
    b"n_seq_max",
    b"n_kv_max",
    b"n_slots",
    b"max context",
    b"new slot",
    b"slot context",
    b"n_batch",
    b"n_ubatch",
    b"flash_attn",
    b"kv_unified",
    b"mla_attn",
    b"type_k",
    b"n_layer",
    b"n_embd",
    b"n_head",
    b"n_swa",
    b"n_lora_kv",
    b"n_expert",
    b"model type",
    b"model params",
    b"file type",
    b"model ftype",
    b"general.name",
    b"pipeline parallelism",
    b"offloaded",
    b"output layer to CPU",
    b"using device",
    b"MiB free)",
    b"devices:",
    b"Device ",
    b"memory_breakdown",
    b"llama_params_fit",
    b"build",
    b"loaded meta data",
    b"loading model",
    b"draft model",
    b"failed",
    b"requires flash",
    b"allocated buffer, size",
    b"recommendedMaxWorkingSetSize",
    b"unable to",
    b"error loading model",
    b"Free memory",
    b"CUDA error: out of memory",
    b"--ctx-size",
    b"input truncated",
)

_HOST_NAMES = ("CPU", "CPU_Mapped", "CPU_REPACK", "CPU_AARCH64", "Host", "AMX")


def device_label(buffer_name: str) -> str:
    """The rank a buffer belongs to: the GPU it lives on, or ``CPU`` for host memory of any kind."""
    name = buffer_name.strip()
    if name.endswith("_Host") or name in _HOST_NAMES or name.startswith("CPU"):
        return HOST_RANK
    if name.endswith("_Mapped"):
        return name[: -len("_Mapped")]
    return name


def _mib(text: str | None, unit: str = "MiB") -> float | None:
    """MiB (or 2023's "MB", which llama.cpp always computed as bytes/2^20) → GiB, unrounded."""
    value = to_float(text)
    return None if value is None else value / 1024.0


def _value(text: str) -> Any:
    """A context parameter as printed: int when integral, bool for true/false, else the string."""
    low = text.lower()
    if low in ("true", "enabled"):
        return True
    if low in ("false", "disabled"):
        return False
    number = to_float(text)
    if number is not None and re.fullmatch(NUM, text):
        return int(number) if number == int(number) and "." not in text else number
    return text


class LlamaCppLines:
    """Line knowledge for llama.cpp and its forks (see module docstring)."""

    engine = ENGINE
    anchors = ANCHORS

    joins = False

    def wants_join(self, text: str) -> bool:
        return False

    def parse(self, text: str, ctx: LineContext) -> list[Parsed]:
        st = ctx.state.get("llamacpp")
        if st is None:
            st = ctx.state["llamacpp"] = _fresh_state()
        split = st.pop("split_header", None)
        if split is None and not _GATE.search(text):
            return []  # one C-speed scan rejects the other engines' lines
        msg = _WRAPPER.sub("", text, count=1)
        out = self._parse_message(msg, st)
        if not out and split:
            out = _split_device(msg, split, st)
        return out

    def _parse_message(self, msg: str, st: dict[str, Any]) -> list[Parsed]:
        for triggers, handler in _HANDLERS:
            if any(t in msg for t in triggers):  # substring gates: the patterns below are slow on long foreign lines
                out = handler(msg, st)
                if out:
                    return out
        return []


def _fresh_state() -> dict[str, Any]:
    return {"cache": 0, "kind": None, "ctx_seen": False, "draft": False, "backend": None, "gpus": {},
            "cache_devices": set()}


def _reset(st: dict[str, Any]) -> None:
    st.clear()
    st.update(_fresh_state())


# What a reader that embeds llama.cpp's runner (ollama) uses of this one: its per-input state, and the events of a
# buffer it logs in its own words, so both readers' lines fold into one ledger.
fresh_state = _fresh_state
reset_state = _reset


def kv_buffer_event(st: dict[str, Any], buffer: str, gib: float) -> Parsed:
    """One device's share of the KV cache, named by ``buffer`` (CUDA0, CPU…)."""
    st["ctx_seen"] = True
    rank = device_label(buffer)
    return Parsed(ev.POOL, {"name": _buffer_cache(st, rank), "gib": gib, "what": _kind(st)}, rank=rank)


def buffer_event(st: dict[str, Any], kind: str, buffer: str, mib: float) -> Parsed:
    """One non-KV buffer (``model``, ``compute``) on its device."""
    return _buffer(st, kind, buffer, repr(mib))


# --- handlers: each returns [] when the line is not its kind ------------------------------------------------


def _boundary(msg: str, st: dict[str, Any]) -> list[Parsed]:
    m = _BUILD.search(msg) or _BUILD_INFO.search(msg)
    if m:
        _reset(st)
        return [Parsed(ev.BOUNDARY, {"why": "build line"}),
                Parsed(ev.VERSION, {"engine_version": f"{m.group(1)} ({m.group(2)})"})]
    m = _LOADER.search(msg)
    if m:
        out: list[Parsed] = []
        if st["draft"]:
            _next_cache(st)
            st["kind"] = "draft"
        elif st["ctx_seen"]:
            _reset(st)
            out.append(Parsed(ev.BOUNDARY, {"why": "model loader after a context"}))
        return out + [Parsed(ev.MODEL, {"model": m.group(1).strip()})]
    if _SERVER_LOADING.search(msg) and st["ctx_seen"]:
        _reset(st)  # ollama restarts its llama-server subprocess: a new load after a served one
        return [Parsed(ev.BOUNDARY, {"why": "llama-server loading a model after a context"})]
    if _DRAFT.search(msg):
        st["draft"] = True
        return [Parsed(ev.SETTINGS, {"draft_model": True})]
    m = _LOADING_MODEL.search(msg)
    if m:
        return [Parsed(ev.MODEL, {"model": m.group(1)})]
    m = _GENERAL_NAME.search(msg)
    if m and "llama_model_loader" in msg:
        return [Parsed(ev.SETTINGS, {"general_name": m.group(1)})]
    return []


def _cache_name(st: dict[str, Any], prefix: str = "kv") -> str:
    return f"{prefix}#{st['cache']}"


def _next_cache(st: dict[str, Any]) -> None:
    """A cache ends at its summary line; when that was not logged, a new kind or a second buffer on the
    same device starts the next one."""
    if st.get("cache_devices"):
        st["cache"] += 1
    st["cache_devices"] = set()


def _buffer_cache(st: dict[str, Any], rank: str, prefix: str = "kv") -> str:
    devices = st.setdefault("cache_devices", set())
    if (prefix, rank) in devices:
        _next_cache(st)
        devices = st["cache_devices"]
    devices.add((prefix, rank))
    return _cache_name(st, prefix)


def _kind(st: dict[str, Any], default: str = "target") -> str:
    return "draft" if st["draft"] and st["kind"] in (None, "draft") else (st["kind"] or default)


_BACKEND_OF_BUFFER = lazy_compile(r"^(CUDA|ROCm|SYCL|Vulkan|MUSA|Metal)")


def _note_backend(st: dict[str, Any], buffer: str) -> None:
    """A buffer's name tells the backend when no "found N … devices" line did (an excerpt, or ollama)."""
    if st["backend"] is None:
        m = _BACKEND_OF_BUFFER.match(buffer.strip())
        if m:
            st["backend"] = "CUDA" if m.group(1) == "MUSA" else m.group(1)


def _rpc_label(st: dict[str, Any], kind: str, rank: str) -> str:
    """2024 builds name every RPC server's buffer just ``RPC``: the n-th one of a kind is device ``RPC#n``
    (in the order the servers were given), not a second cache on one device."""
    if rank != "RPC":
        return rank
    seen = st.setdefault("rpc_seen", {})
    seen[kind] = seen.get(kind, 0) + 1
    return rank if seen[kind] == 1 else f"{rank}#{seen[kind]}"


def _buffer(st: dict[str, Any], kind: str, buffer: str, mib: str | None) -> Parsed:
    """One non-KV buffer on its device. Keys are unique per line (``_buf|kind|buffer|n``) because a
    device may print the same buffer name twice (one line per model context); finish sums them."""
    st["seq"] = st.get("seq", 0) + 1
    _note_backend(st, buffer)
    return Parsed(ev.RANK, {f"{BUF_PREFIX}{kind}|{buffer}|{st['seq']}": to_float(mib)},
                  rank=_rpc_label(st, kind, device_label(buffer)))


def _buffers(msg: str, st: dict[str, Any]) -> list[Parsed]:
    m = _KV_BUFFER.search(msg)
    if m:
        st["ctx_seen"] = True
        _note_backend(st, m.group(1))
        rank = _rpc_label(st, "kv", device_label(m.group(1)))
        return [Parsed(ev.POOL, {"name": _buffer_cache(st, rank), "gib": _mib(m.group(2)), "what": _kind(st)}, rank=rank)]
    m = _RS_BUFFER.search(msg)
    if m:
        st["ctx_seen"] = True
        rank = device_label(m.group(1))
        return [Parsed(ev.POOL, {"name": _buffer_cache(st, rank, "rs"), "gib": _mib(m.group(2)), "what": "recurrent"},
                       rank=rank)]
    for pattern, kind in ((_COMPUTE, "compute"), (_OUTPUT, "output"), (_INPUT, "input")):
        m = pattern.search(msg)
        if m:
            st["ctx_seen"] = True
            return [_buffer(st, kind, m.group(1), m.group(2))]
    m = _MODEL_BUF.search(msg)
    if m:
        return [_buffer(st, "model", m.group(1), m.group(2))]
    return []


def _summaries(msg: str, st: dict[str, Any]) -> list[Parsed]:
    m = _ISWA.search(msg)
    if m:
        _next_cache(st)
        st["kind"] = "swa" if m.group(1) == "SWA" else "target"
        return [Parsed(ev.SETTINGS, {f"kv_cells_{'swa' if m.group(1) == 'SWA' else 'base'}": to_int(m.group(2))})]
    m = _KV_SIZE.search(msg)
    if m:
        return _size_line(m, st)
    m = _KV_SELF.search(msg)
    if m:
        return _self_line(m, st)
    m = _INDEXER.search(msg)
    if m:
        return [Parsed(ev.RANK, {"indexer_kv_gib": _mib(m.group(1))}, rank=SUMMARY_RANK)]
    return []


def _size_line(m: re.Match[str], st: dict[str, Any]) -> list[Parsed]:
    """``size = X MiB (cells, layers, seqs), K (t): …, V (t): …`` — or R/S for recurrent state."""
    st["ctx_seen"] = True
    recurrent = m.group(6) == "R"
    name = _cache_name(st, "rs" if recurrent else "kv")
    cells, layers, seqs = to_int(m.group(2)), to_int(m.group(3)), to_int(m.group(4))
    streams = to_int(m.group(5)) if m.group(5) else 1
    first, second = _mib(m.group(8)), _mib(m.group(11))
    data: dict[str, Any] = {"name": name, "gib": _mib(m.group(1)), "layers": layers, "cells": cells,
                            "what": "recurrent" if recurrent else _kind(st)}
    extra: dict[str, Any] = {f"{name}_seqs": seqs, f"{name}_streams": streams}
    if recurrent:
        data.update(tokens=None, dtype=m.group(7))
        extra.update({f"{name}_r_gib": first, f"{name}_s_gib": second, f"{name}_s_dtype": m.group(10)})
    else:
        # streams is None for a count past MAX_PLAUSIBLE (a mangled line): the token count is then unknown
        data.update(tokens=(cells or 0) * streams or None if streams is not None else None, k_gib=first, v_gib=second,
                    dtype=_dtype(m.group(7), m.group(10)))
        extra.update({f"{name}_k_type": m.group(7), f"{name}_v_type": m.group(10)})
    _close_cache(st)
    return [Parsed(ev.POOL, data, rank=SUMMARY_RANK), Parsed(ev.RANK, extra, rank=SUMMARY_RANK)]


def _self_line(m: re.Match[str], st: dict[str, Any]) -> list[Parsed]:
    """``KV self size = X MiB, K (t): …, V (t): …`` and its MLA / 2023 variants."""
    st["ctx_seen"] = True
    name = _cache_name(st)
    k_label, k_type, v_label, v_type = m.group(3), m.group(4), m.group(6), m.group(7)
    data: dict[str, Any] = {"name": name, "gib": _mib(m.group(1)), "what": _kind(st)}
    extra: dict[str, Any] = {}
    if k_label == "K":
        data.update(k_gib=_mib(m.group(5)), v_gib=_mib(m.group(8)), dtype=_dtype(k_type, v_type))
        extra.update({f"{name}_k_type": k_type, f"{name}_v_type": v_type})
    elif k_label:  # MLA latent cache (c^KV) or a K-only cache: one tensor holds it all
        data["dtype"] = k_type
        extra.update({f"{name}_layout": "mla" if "c^KV" in k_label else "k-only", f"{name}_k_type": k_type,
                      f"{name}_latent_gib": _mib(m.group(5))})
        if v_label:
            extra[f"{name}_transposed_gib"] = _mib(m.group(8))
    _close_cache(st)
    out = [Parsed(ev.POOL, data, rank=SUMMARY_RANK)]
    if extra:
        out.append(Parsed(ev.RANK, extra, rank=SUMMARY_RANK))
    return out


def _close_cache(st: dict[str, Any]) -> None:
    st["cache"] += 1
    st["cache_devices"] = set()
    st["kind"] = "draft" if st["kind"] == "draft" else None


def _dtype(k: str | None, v: str | None) -> str | None:
    if k and v and k != v:
        return f"K {k} / V {v}"
    return k or v


def _old_era(msg: str, st: dict[str, Any]) -> list[Parsed]:
    """2023 lines: no buffer names, so GPU figures go to a ``GPU`` rank and host ones to ``CPU``."""
    m = _OLD_VRAM_KV.search(msg)
    if m:
        st["ctx_seen"] = True
        return [Parsed(ev.POOL, {"name": _cache_name(st), "gib": _mib(m.group(1)), "what": _kind(st)}, rank="GPU")]
    m = _OLD_VRAM_WEIGHTS.search(msg)
    if m and "total VRAM" not in msg:
        return [_buffer(st, "model", "GPU", m.group(1))]
    m = _OLD_SYS_WEIGHTS.search(msg)
    if m:
        return [_buffer(st, "model", "CPU", m.group(1))]
    m = _OLD_SCRATCH.search(msg)
    if m:
        return [_buffer(st, "compute", "GPU", m.group(1))]
    m = _OLD_COMPUTE.search(msg)
    if m:
        return [_buffer(st, "compute", "CPU", m.group(1))]
    m = _OLD_TOTAL_VRAM.search(msg)
    if m:
        return [Parsed(ev.RANK, {"total_vram_used_gib": _mib(m.group(1))}, rank="GPU")]
    return []


def _params(msg: str, st: dict[str, Any]) -> list[Parsed]:
    m = _PARAM.search(msg)
    if m:
        key = "n_ctx_seq" if m.group(1) == "n_ctx_per_seq" else m.group(1)
        if key == "n_ctx":
            st["ctx_seen"] = True
        return [Parsed(ev.SETTINGS, {key: _value(m.group(2))})]
    m = _CTX_TRAIN.search(msg)
    if m:
        return [Parsed(ev.SETTINGS, {"n_ctx_seq": to_int(m.group(1)), "n_ctx_train": to_int(m.group(3))})]
    m = _KV_INIT.search(msg)
    if m:
        if st["draft"]:  # the draft model's own context: not the target's -c
            return [Parsed(ev.SETTINGS, {"draft_kv_size": to_int(m.group(1))})]
        st["ctx_seen"] = True
        return [Parsed(ev.SETTINGS, {"kv_size": to_int(m.group(1)), "type_k": m.group(2), "type_v": m.group(3),
                                     "kv_n_layer": to_int(m.group(4))})]
    m = _CTX_SIZE.search(msg)
    if m and not st["draft"]:
        return [Parsed(ev.SETTINGS, {"ctx_size": to_int(m.group(1))})]
    m = _META.search(msg)
    if m:
        key = m.group(1).replace(" ", "_").replace("general.name", "general_name").replace("model_ftype", "file_type")
        return [Parsed(ev.SETTINGS, {key: _value(m.group(2))})]
    m = _LAYER_GQA.search(msg)
    if m:
        layers = st.setdefault("layer_gqa", {})
        layers[int(m.group(1))] = (int(m.group(2)), int(m.group(3)))
        top = max(layers)
        return [Parsed(ev.SETTINGS, {"kv_layer_max_index": top, "kv_layer_n_embd_k_gqa": int(m.group(2)),
                                     "kv_layer_n_embd_v_gqa": int(m.group(3)), "kv_layer_lines": len(layers)})]
    m = _BENCH.search(msg)
    if m:
        pairs = {k: _value(v) for k, v in _KV_PAIRS.findall(msg)}
        data = {"n_ctx": pairs.pop("n_kv_max", None) or pairs.pop("n_ctx", None)}
        data.update({k: pairs[k] for k in ("n_batch", "n_ubatch", "flash_attn", "n_gpu_layers") if k in pairs})
        return [Parsed(ev.SETTINGS, data)]
    return []


def _server(msg: str, st: dict[str, Any]) -> list[Parsed]:
    data: dict[str, Any] = {}
    m = _SLOTS.search(msg)
    if m and ("init" in msg or "slots" in msg):
        data["n_slots"] = to_int(m.group(1))
    m = _CTX_SLOT.search(msg)
    if m and ("init" in msg or "n_slots" in msg):
        data["n_ctx_slot"] = to_int(m.group(1))
    m = _SLOT_MAX.search(msg)
    if m:
        data["n_ctx_slot"] = to_int(m.group(1) or m.group(2))
    m = _SLOT_CAP.search(msg)
    if m:
        return [Parsed(ev.WARNING, {"code": "slot-context-capped", "message": msg.strip(), "from": to_int(m.group(1)),
                                    "to": to_int(m.group(2))}), Parsed(ev.SETTINGS, {"n_ctx_train": to_int(m.group(2))})]
    if data:
        m = _KV_UNIFIED_SRV.search(msg)
        if m:
            data["kv_unified"] = m.group(1) == "true"
        return [Parsed(ev.SETTINGS, data)]
    m = _PIPELINE.search(msg)
    if m:
        return [Parsed(ev.SETTINGS, {"pipeline_parallel_copies": to_int(m.group(1))})]
    m = _OFFLOADED.search(msg)
    if m:
        return [Parsed(ev.SETTINGS, {"n_gpu_layers_offloaded": to_int(m.group(1)),
                                     "n_layers_offloadable": to_int(m.group(2))})]
    if _OUTPUT_ON_CPU.search(msg):
        return [Parsed(ev.SETTINGS, {"output_layer_on_cpu": True})]
    m = _SPLIT_HEADER.search(msg)
    if m:
        st["split_header"] = "kv" if m.group(1) == "KV cache" else "weights"
        return [Parsed(ev.SETTINGS, {"split_mode_graph": True} if m.group(1) == "KV cache" else {"split_estimate": True})]
    return []


def _devices(msg: str, st: dict[str, Any]) -> list[Parsed]:
    m = _DEVICE_ROW.search(msg)
    if m:
        return [Parsed(ev.RANK, {"total_gib": _mib(m.group(3)), "pre_load_free_gib": _mib(m.group(4)),
                                 "gpu_name": m.group(2)}, rank=m.group(1))]
    m = _USING_DEVICE.search(msg)
    if m:
        rank = device_label(m.group(1))
        # a draft model loads after the target: its free figure already has the target's weights and cache out
        key = "draft_pre_load_free_gib" if st["draft"] else "pre_load_free_gib"
        return [Parsed(ev.RANK, {key: _mib(m.group(3)), "gpu_name": m.group(2)}, rank=rank)]
    m = _FOUND.search(msg)
    if m:
        st["backend"] = "CUDA" if m.group(2) == "MUSA" else m.group(2)
        return [Parsed(ev.SETTINGS, {"gpu_backend": m.group(2), "gpu_count": to_int(m.group(1))})]
    m = _GPU_LINE.search(msg)
    if m and st["backend"]:
        st["gpus"][f"{st['backend']}{m.group(1)}"] = m.group(2).strip()
        return [Parsed(ev.SETTINGS, {"gpu_names": dict(st["gpus"])})]
    m = _BREAKDOWN.search(msg)
    if m:
        total, free, own, model, context, compute = (to_int(m.group(i)) for i in range(3, 9))
        return [Parsed(ev.RANK, {"total_gib": _mib(m.group(3)), "breakdown_mib": {
            "total": total, "free": free, "self": own, "model": model, "context": context, "compute": compute},
            "gpu_name": m.group(2)}, rank=device_label(m.group(1)))]
    m = _FIT_CTX.search(msg)
    if m:
        return [Parsed(ev.WARNING, {"code": "fit-reduced-context", "message": msg.strip(),
                                    "from": to_int(m.group(1)), "to": to_int(m.group(2))})]
    m = _FIT_PROJECTED.search(msg)
    if m:
        return [Parsed(ev.SETTINGS, {"fit_projected_mib": to_int(m.group(1)), "fit_free_mib": to_int(m.group(2))})]
    return []


def _command(msg: str, st: dict[str, Any]) -> list[Parsed]:
    """A runner's command line: the context, slots, layers and batch it was launched with."""
    names = {"ctx-size": "ctx_size", "parallel": "n_slots", "n-gpu-layers": "n_gpu_layers", "batch-size": "n_batch"}
    data: dict[str, Any] = {names[k]: to_int(v) for k, v in _FLAG.findall(msg)}
    if "n_slots" in data:
        data["slots_from_command"] = True  # --parallel N given explicitly: private slots unless kv_unified
    return [Parsed(ev.SETTINGS, data)] if data else []


def _truncated(msg: str, st: dict[str, Any]) -> list[Parsed]:
    """The server cut a prompt longer than a slot's context: 'input truncated | n_ctx=2048 n_erase=39171 n_keep=4
    n_left=2044 n_shift=1022'. It kept n_keep tokens and the last part and erased n_erase in blocks of n_left / 2,
    so the prompt had n_keep + n_erase + (n_left / 2 … n_left) tokens."""
    m = _TRUNCATED.search(msg)
    if not m:
        return []
    fields = {k: to_int(v) for k, v in _TRUNC_FIELD.findall(msg)}
    n_ctx, erase, keep, left = (fields.get(k) for k in ("n_ctx", "n_erase", "n_keep", "n_left"))
    data: dict[str, Any] = {"code": "input-truncated", "message": msg.strip(), "n_ctx": n_ctx}
    if erase is not None and keep is not None and left is not None:
        data["prompt_tokens_low"] = keep + erase + left // 2
        data["prompt_tokens_high"] = keep + erase + left
    return [Parsed(ev.WARNING, data)]


def _split_device(msg: str, split: str, st: dict[str, Any]) -> list[Parsed]:
    """ik_llama.cpp's per-device list after ``KV cache size per device:`` (split mode graph)."""
    m = _SPLIT_DEVICE.search(msg)
    if not m:
        return []
    st["split_header"] = split  # the list continues on the next line
    rank = f"{st['backend'] or 'CUDA'}{m.group(1)}"
    key = "kv_split_gib" if split == "kv" else "weights_estimate_gib"
    return [Parsed(ev.RANK, {key: _mib(m.group(2))}, rank=rank)]


def _failures(msg: str, st: dict[str, Any]) -> list[Parsed]:
    out = failure_events(msg, st.get("backend") or "CUDA")
    if st.get("backend") is None:  # HIP/MUSA builds log ggml_backend_cuda_…: the device label is a guess
        for p in out:
            if p.data.get("device", "").startswith("CUDA"):
                p.data["device_guessed"] = True
    return out


class _Device:
    """A device number whose backend label ("CUDA", "Vulkan", …) is the build's, known to the caller only."""

    __slots__ = ("index", "rocm")

    def __init__(self, index: str, rocm: bool = False) -> None:
        self.index, self.rocm = index, rocm


def _alloc_fail(m: re.Match[str], msg: str) -> list[Parsed]:
    kind = "not-enough-memory" if "out of memory" in m.group(5).lower() else "alloc-failed"
    return [Parsed(ev.FAILURE, {"kind": kind, "message": msg.strip(), "alloc_mib": to_float(m.group(2)),
                                "device": _Device(m.group(3), rocm="hip" in m.group(1).lower())})]


def _buf_type_fail(m: re.Match[str], msg: str) -> list[Parsed]:
    device = "CPU" if m.group(1).endswith("cpu") else m.group(1).replace("ggml_backend_", "")
    return [Parsed(ev.FAILURE, {"kind": "alloc-failed", "message": msg.strip(), "alloc_bytes": to_int(m.group(2)),
                                "device": device})]


def _ggml_cuda_oom(m: re.Match[str], msg: str) -> list[Parsed] | None:
    if not ("ggml" in msg or "running the model" in msg or "llama" in msg):
        return None  # a CUDA error of another program's
    # ggml's CUDA error: an allocation while computing (its memory pool), after the buffers the log sizes
    return [Parsed(ev.FAILURE, {"kind": "compute-buffer-oom", "message": msg.strip()[:500], "unsized": True})]


def _said(kind: str, code: str | None = None, **extra: Any) -> Callable[[re.Match[str], str], list[Parsed]]:
    """A row whose event is the line itself: a FAILURE of ``kind``, or a WARNING ``code``."""
    if code is not None:
        return lambda m, msg: [Parsed(ev.WARNING, {"code": code, "message": msg.strip()})]
    return lambda m, msg: [Parsed(ev.FAILURE, {"kind": kind, "message": msg.strip(), **extra})]


_SOURCE = "llama.cpp's source wording; no posted log in the corpus prints it yet"

# Memory failures, most specific first (``finish`` re-reads them to name the phase that failed)
FAILURE_SHAPES = Shapes((
    Shape("vulkan-allocation-limit", _VULKAN_LIMIT, _said("", code="per-allocation-limit"), (ev.WARNING,), "undated",
          "ggml_vulkan: Requested buffer size exceeds device memory allocation limit: ErrorOutOfDeviceMemory"),
    Shape("buffer-alloc-failed", _ALLOC_FAIL, _alloc_fail, (ev.FAILURE,), "undated",
          "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144.00 MiB on device 4: cudaMalloc failed: out of "
          "memory"),
    Shape("graph-alloc-failed", _GALLOCR,
          lambda m, msg: [Parsed(ev.FAILURE, {"kind": "compute-buffer-oom", "message": msg.strip(),
                                              "alloc_bytes": to_int(m.group(2)), "device": m.group(1)})],
          (ev.FAILURE,), "undated", "ggml_gallocr_reserve_n: failed to allocate ROCm0 buffer of size 866125824"),
    Shape("tensor-alloc-failed", _TENSOR_ALLOC,
          lambda m, msg: [Parsed(ev.FAILURE, {"kind": "weights-oom", "message": msg.strip(),
                                              "alloc_bytes": to_int(m.group(2)), "device": m.group(1)})],
          (ev.FAILURE,), "undated", "alloc_tensor_range: failed to allocate ROCm0 buffer of size 2147483648"),
    Shape("buffer-unallocatable", _UNABLE_ALLOC,
          lambda m, msg: [Parsed(ev.FAILURE, {"kind": "weights-oom", "message": msg.strip(), "device": m.group(1)})],
          (ev.FAILURE,), "undated", "llama_model_load: error loading model: unable to allocate CUDA0 buffer", _SOURCE),
    Shape("compute-buffers-failed", _COMPUTE_FAIL, _said("compute-buffer-oom"), (ev.FAILURE,), "undated",
          "graph_reserve: failed to allocate compute buffers"),
    Shape("buffer-type-alloc-failed", _BUF_TYPE_FAIL, _buf_type_fail, (ev.FAILURE,), "undated",
          "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 805306368032"),
    Shape("v-cache-needs-flash-attn", _V_NEEDS_FA, _said("engine-init-failed", cause="quantized-v-needs-flash-attn"),
          (ev.FAILURE,), "undated", "llama_new_context_with_model: V cache quantization requires flash_attn"),
    Shape("metal-recommended-working-set", _METAL_RECOMMENDED,
          lambda m, msg: [Parsed(ev.SETTINGS, {"metal_working_set_mib": to_float(m.group(1))})], (ev.SETTINGS,),
          "undated", "ggml_metal_device_init: recommendedMaxWorkingSetSize  = 11453.25 MB"),
    Shape("metal-working-set", _METAL_WORKING_SET,
          lambda m, msg: [Parsed(ev.SETTINGS, {"metal_working_set_mib": to_float(m.group(3))})], (ev.SETTINGS,),
          "undated", "ggml_backend_metal_log_allocated_size: allocated buffer, size =  3772.59 MiB, ( 3772.66 / 49152.00)"),
    Shape("kv-cache-failed", _KV_FAIL, _said("kv-cache-oom"), (ev.FAILURE,), "undated",
          "llama_kv_cache_init: failed to allocate buffer for kv cache"),
    Shape("compute-retry", _RETRY, _said("", code="compute-retry-without-pipeline"), (ev.WARNING,), "undated",
          "1.06.520.107 W sched_reserve: compute buffer allocation failed, retrying without pipeline parallelism"),
    Shape("metal-buffer-failed", _METAL_ALLOC,
          lambda m, msg: [Parsed(ev.FAILURE, {"kind": "not-enough-memory", "message": msg.strip(),
                                              "alloc_mib": to_float(m.group(1)), "device": "Metal"})],
          (ev.FAILURE,), "undated", "ggml_metal_add_buffer: error: failed to allocate buffer, size = 16384.00 MiB",
          _SOURCE),
    Shape("vulkan-buffer-failed", _VULKAN_ALLOC,
          lambda m, msg: [Parsed(ev.FAILURE, {"kind": "not-enough-memory", "message": msg.strip(),
                                              "alloc_bytes": to_int(m.group(1))})],
          (ev.FAILURE,), "undated", "ggml_vulkan: Device memory allocation of size 4757131264 failed."),
    Shape("compute-exceeds-free", _IK_SHORT,
          lambda m, msg: [Parsed(ev.WARNING, {"code": "compute-buffer-exceeds-free", "message": msg.strip(),
                                              "free_mib": to_int(m.group(1)), "device": _Device(m.group(2)),
                                              "compute_mib": to_float(m.group(3))})],
          (ev.WARNING,), "undated", "Free memory 10240 MiB on device 0 is less the required compute buffer size "
          "12288.00 MiB", _SOURCE),
    Shape("ggml-cuda-oom", _GGML_CUDA_OOM, _ggml_cuda_oom, (ev.FAILURE,), "undated",
          "Error: an unknown error was encountered while running the model CUDA error: out of memory"),
    Shape("fatal", _FATAL, _said("exception", weak=True), (ev.FAILURE,), "undated",
          "main: error: unable to load model"),
))


def failure_events(msg: str, backend: str = "CUDA") -> list[Parsed]:
    """Memory failures, most specific first; ``finish`` re-reads them to name the phase that failed. A device
    number gets the build's backend label here (ROCm for a HIP build's own wording)."""
    out = first_match(FAILURE_SHAPES.rows, msg) or []
    for p in out:
        device = p.data.get("device")
        if isinstance(device, _Device):
            p.data = {k: (f"{'ROCm' if device.rocm else backend}{device.index}" if k == "device" else v)
                      for k, v in p.data.items()}
    return out


_HANDLERS = (
    (("buffer size",), _buffers),
    (("--ctx-size",), _command),
    (("input truncated",), _truncated),
    (("cells", "self size", "KV self indexer"), _summaries),
    (("n_ctx", "n_seq_max", "n_batch", "n_ubatch", "flash_attn", "kv_unified", "causal_attn", "mla_attn", "type_k",
      "type_v", "n_rs_seq", "print_info", "llm_load_print_meta", "llama_model_load_internal", "n_embd_k_gqa",
      "n_kv_max", "kv_size", "ctx_size"), _params),
    (("n_slots", "n_ctx_slot", "max context", "new slot", "slot context", "pipeline parallelism", "offloaded",
      "output layer to CPU", "size per device"), _server),
    (("using device", " devices", "Device ", "memory_breakdown", "llama_params_fit", "MiB free)"), _devices),
    (("VRAM", "mem required", "system memory used", "compute buffer total"), _old_era),
    (("build", "loaded meta data", "draft", "loading model", "general.name"), _boundary),
    (("alloc", "failed", "unable to", "error loading model", "Free memory", "CUDA error", "requires flash",
      "recommendedMaxWorkingSetSize"),
     _failures),
)
_GATE = lazy_compile("|".join(re.escape(t) for triggers, _ in _HANDLERS for t in triggers))
