"""ollama's own log lines (server, scheduler, its Go engine) and the llama.cpp runner lines inside them.

ollama logs two kinds of line: its Go server's logfmt records (``time=… level=INFO source=sched.go:715
msg="…" key=value …``: the scheduler's offload decision, device discovery, the memory each device got) and
the runner it starts, which is llama.cpp (its C lines, read by ``kvscope.engines.llamacpp.lines``). Once a
file has shown an ollama record, its llama.cpp lines are read here too, by the llama.cpp reader, so a load is
one startup of the ``ollama`` engine however its lines interleave.

Each model load is a startup: the scheduler's decision (``new model will fit``, ``msg=offload``, ``loading
model``), the runner's start and its buffers. A second decision of the same kind, a runner context after a
served one, or a device's weights logged twice start the next load; the server's configuration and version
(printed once, at start) are given to every load of that server.

Records are wrapped by terminals and posters: a continuation line that starts with a space carries more
fields of the open offload record; a record cut mid-token is re-joined by the dispatcher (``wants_join``).
"""

from __future__ import annotations

import re
from typing import Any

from kvscope.core import events as ev
from kvscope.engines.base import NUM, LineContext, Parsed, cut_short, to_float, to_int
from kvscope.engines.lazy import lazy_compile
from kvscope.engines.llamacpp.lines import (
    LlamaCppLines,
    buffer_event,
    fresh_state,
    kv_buffer_event,
    reset_state,
)

ENGINE = "ollama"
G = rf"({NUM})"
_UNIT_GIB = {"B": 1 / (1 << 30), "KiB": 1 / (1 << 20), "MiB": 1 / 1024, "GiB": 1.0, "TiB": 1024.0}
_SIZE = lazy_compile(rf"(?<![\d.,]){G}\s*(B|KiB|MiB|GiB|TiB)\b")

# a logfmt record of ollama's Go server (slog): what marks a file as ollama's
_LOGFMT = lazy_compile(r"\blevel=(?:INFO|WARN|ERROR|DEBUG|TRACE)\s+source=\S+\.go:\d+\s+msg=")
_JOURNALD = lazy_compile(r"\bollama\[\d+\]:|\bollama (?:run|serve|ps)\b")  # journald's prefix, or the CLI typed
# docker compose's service prefix ("ollama  | ", "ollama-1  | "), and the Go runner's own panic and stack frames
_COMPOSE = lazy_compile(r"^\s*ollama(?:[-_]\d+)?\s+\|\s|github\.com/ollama/ollama/|panic: unable to load model")

# --- the memory each device got (2025+ engines): one record per device and kind ---------------------------
_BUF = lazy_compile(rf'msg="(kv cache|compute graph|model weights)"(?:\s+(?:device|buffer|backend)=(\S+))?'
                    rf'(?:\s+buffer_type=\S+)?\s+size="{G}\s*(B|KiB|MiB|GiB)"')
_TOTAL = lazy_compile(rf'msg="total memory"\s+size="{G}\s*(B|KiB|MiB|GiB)"')

# --- the scheduler's offload decision ---------------------------------------------------------------------
_FIELD = lazy_compile(rf'\b(layers\.requested|layers\.model|layers\.offload|memory\.required\.kv|memory\.weights\.total|'
                      rf'memory\.required\.full|memory\.required\.partial|memory\.graph\.full|memory\.graph\.partial|'
                      rf'memory\.weights\.repeating|memory\.weights\.nonrepeating|projector\.weights|projector\.graph|'
                      rf'memory\.gpu_overhead)="?{G}(?:\s*(B|KiB|MiB|GiB))?')
_LIST = lazy_compile(r'\b(memory\.available|memory\.required\.allocations)="\[([^\]]*)\]"')
_SPLIT = lazy_compile(r'layers\.split="?\[?([\d,]+)')
_LIBRARY = lazy_compile(r"\blibrary=(\w+)")
_CONTINUED = lazy_compile(r"^\s+(?:layers|memory|projector)\.\w")
_OFFLOAD = ("msg=offload", 'msg="offload to')

# --- devices ----------------------------------------------------------------------------------------------
_DEVICE = lazy_compile(rf'msg="inference compute".*?\bid=(\S+)(?:.*?\blibrary=(\w+))?(?:.*?\bname="([^"]*)")?'
                       rf'.*?\btotal="{G}\s*(B|KiB|MiB|GiB)"(?:.*?\bavailable="{G}\s*(B|KiB|MiB|GiB)")?')
_GPU_MEMORY = lazy_compile(r'msg="gpu memory"\s+id=(\S+)(?:\s+library=(\w+))?')
_UPDATED = lazy_compile(r'msg="updated VRAM based on existing loaded models"\s+gpu=(\S+)(?:\s+library=(\w+))?')
_OS_OVERHEAD = lazy_compile(r'msg="detected OS VRAM overhead"\s+id=(\S+)(?:\s+library=(\w+))?')
_QUOTED = lazy_compile(r'\b(total|available|free|minimum|overhead|free_swap|required|predicted|gpu_free|system_free)='
                       r'"([^"]*)"')
_SYSTEM = lazy_compile(r'msg="system memory"')

# --- the load ---------------------------------------------------------------------------------------------
_FITS = lazy_compile(r'msg="new model will fit in available VRAM[^"]*"')
_FITS_FIELDS = lazy_compile(r"\b(parallel|available)=(\d+)")
_LOADING = lazy_compile(r'msg="loading model"\s+"model layers"=(\d+)(?:\s+requested=(-?\d+))?')
_REQUEST = lazy_compile(r"msg=\"?load request\"?.*?\{Operation:(\w+)")
_REQUEST_FIELD = lazy_compile(r"\b(Parallel|BatchSize|FlashAttention|KvSize|KvCacheType|NumThreads|GPULayers|NumCtx):"
                              r"([\w.]*)")
_COMMAND = lazy_compile(r'msg="starting llama server"|msg="starting runner"')
_FLAG = lazy_compile(r"--(ctx-size|parallel|n-gpu-layers|batch-size|threads|kv-cache-type|tensor-split|flash-attn)"
                     r"(?:\s+([\w.,]+))?")
_RUNNER_BINARY = lazy_compile(r"ollama(?:\.exe)?\s+runner\b|ollama_llama_server")  # the runner's command, pasted from ps
_OFFLOADED = lazy_compile(r"offloaded \d+/\d+ layers to GPU")
_LISTENING = lazy_compile(r'source=runner\.go:\d+ msg="Server listening on')
_STARTED = lazy_compile(r'msg="llama runner started in ([\d.]+) seconds"')
_FLASH_ON = lazy_compile(r'msg="enabling flash attention"')
_LOADED = lazy_compile(r'msg="loaded runners"\s+count=(\d+)')

# --- the server ---------------------------------------------------------------------------------------------
_CONFIG = lazy_compile(r'msg="server config"\s+env="?map\[(.*)')
_ENV = lazy_compile(r"\b(OLLAMA_[A-Z_]+|CUDA_VISIBLE_DEVICES|HIP_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES):([^\s\]]*)")
_VERSION = lazy_compile(r'msg="Listening on [^"]*\(version ([\w.\-+]+)\)"')

# --- warnings and failures ------------------------------------------------------------------------------------
_PREDICTED = lazy_compile(r'msg="llama-server model predicted to exceed available memory[^"]*"')
_PREDICTED_CTX = lazy_compile(r"\bpredicted_num_ctx=(\d+)")
_EVICT = lazy_compile(r'msg="model requires more memory than is currently available, evicting a model')
_NOT_RECOVERED = lazy_compile(r"gpu VRAM usage didn't recover within timeout")
_TOO_SMALL = lazy_compile(r'gpu has too little memory to allocate any layers"')
_TERM = lazy_compile(r'\b(name|available|minimum_memory|layer_size|gpu_zer_overhead|partial_offload|full_offload)='
                     r'(?:"([^"]*)"|(\S+))')
# 2026 (llama-server runner): a GPU discovery leaves out because the build's CUDA library lacks its architecture
_SKIPPED = lazy_compile(r'msg="skipping (\w+) device[^"]*compute capability not in compiled architectures"'
                        r'(?:\s+device="([^"]*)")?(?:\s+cc=(\d+))?(?:\s+archs="\[([^\]]*)\]")?')
_LOAD_ERROR = lazy_compile(r'msg="error loading llama server"\s+error="?(.*)')
_TERMINATED = lazy_compile(r"llama runner process has terminated:?\s*(.*)")

ANCHORS: tuple[bytes, ...] = (
    b'msg="kv cache"', b'msg="compute graph"', b'msg="model weights"', b'msg="total memory"',
    b"msg=offload", b'msg="offload to', b"memory.available=", b"memory.required.", b"memory.weights.",
    b"memory.graph.", b"projector.weights=", b"projector.graph=", b"layers.offload=",
    b"inference compute", b'msg="gpu memory"', b"updated VRAM", b"OS VRAM overhead", b'msg="system memory"',
    b"new model will fit", b'msg="loading model"', b"load request", b"starting llama server", b"starting runner",
    b"--ctx-size",
    b"llama runner started", b"enabling flash attention", b"loaded runners", b"server config", b"Listening on",
    b"Server listening on",
    b"predicted to exceed", b"evicting a model", b"didn't recover", b"too little memory to allocate any layers",
    b"error loading llama server", b"runner process has terminated", b"not in compiled architectures",
)

# a record cut mid-token by a terminal: its head is known, its last field is missing
_JOINABLE = (
    ('msg="gpu memory"', lazy_compile(r'overhead="[^"]*"')),
    ('msg="loading model"', lazy_compile(r"requested=-?\d+\s*$")),
    ("load request", lazy_compile(r"\}\"?\s*$")),
    ('msg="server config"', lazy_compile(r"\]\"?\s*$")),
    ('msg="inference compute"', lazy_compile(r'available="[^"]*"')),
)


def _gib(value: str | None, unit: str | None) -> float | None:
    number = to_float(value)
    return None if number is None else number * _UNIT_GIB.get(unit or "B", 1 / (1 << 30))


def _size_gib(text: str) -> float | None:
    m = _SIZE.search(text)
    return _gib(m.group(1), m.group(2)) if m else None


def _fresh() -> dict[str, Any]:
    return {"file": None, "markers": set(), "weights_devices": set(), "server": {}, "version": None,
            "offload_open": False, "command_open": False, "labels": {}, "per_library": {}, "runner_context": False}


class OllamaLines:
    """Line knowledge for ollama (see module docstring)."""

    engine = ENGINE
    anchors = ANCHORS
    joins = True

    def __init__(self) -> None:
        self._llama = LlamaCppLines()

    def wants_join(self, text: str) -> bool:
        return cut_short(text, _JOINABLE)

    def parse(self, text: str, ctx: LineContext) -> list[Parsed]:
        st = ctx.state.get("ollama")
        if st is None or st["file"] != ctx.file:
            st = ctx.state["ollama"] = _fresh()
            st["file"] = ctx.file
        mine = st.get("seen", False)
        if not text[:1].isspace():
            st["offload_open"] = st["command_open"] = False
        out = _own(text, st, ctx)
        if out:
            st["seen"] = True
            return out
        if not mine and not (_LOGFMT.search(text) or ("ollama" in ctx.raw and (
                _JOURNALD.search(ctx.raw) or _COMPOSE.search(ctx.raw)))):
            return []  # not (yet) an ollama file: the llama.cpp reader takes its lines
        st["seen"] = True
        lead: list[Parsed] = []
        if _OFFLOADED.search(text):  # the runner's layer summary a second time: the next load's
            lead = _load_marker("offloaded", st, ctx)
        elif st["command_open"]:  # the runner's command wrapped over lines (a continuation is indented)
            return _flags(text, {})
        llama = ctx.state.get("llamacpp")
        before = bool(llama and llama.get("ctx_seen"))
        parsed = lead + self._llama.parse(text, ctx)
        llama = ctx.state.get("llamacpp") or {}
        if any(p.kind == ev.BOUNDARY for p in parsed):  # the runner itself began another load
            _clear_load(st)
            return parsed + _server_events(st)
        if parsed and not before and llama.get("ctx_seen"):
            st["runner_context"] = True
        return parsed


def _own(text: str, st: dict[str, Any], ctx: LineContext) -> list[Parsed]:
    if st["offload_open"] and _CONTINUED.match(text):
        return _offload(text, st, ctx, continued=True)
    if not _GATE.search(text):
        return []  # one C-speed scan rejects the lines no handler reads (every candidate line of other engines)
    for triggers, handler in _HANDLERS:
        if any(t in text for t in triggers):
            out = handler(text, st, ctx)
            if out:
                return out
    return []


# --- load boundaries ------------------------------------------------------------------------------------------


def _load_marker(kind: str, st: dict[str, Any], ctx: LineContext) -> list[Parsed]:
    """A scheduler or runner line that belongs to one load: the second of its kind in a load, or one after the
    runner's context was read, starts the next load (a BOUNDARY, then the server's settings again)."""
    if kind in st["markers"] or st["runner_context"]:
        return _new_load(st, ctx, kind)
    st["markers"].add(kind)
    return []


def _clear_load(st: dict[str, Any], kind: str | None = None) -> None:
    """What one load has seen, forgotten: the next starts with ``kind`` (the marker that began it) alone."""
    st["markers"] = {kind} if kind else set()
    st["weights_devices"] = set()
    st["runner_context"] = False


def _new_load(st: dict[str, Any], ctx: LineContext, kind: str | None = None) -> list[Parsed]:
    _clear_load(st, kind)
    llama = ctx.state.get("llamacpp")
    if llama is not None:
        reset_state(llama)
    out = [Parsed(ev.BOUNDARY, {"why": "ollama loads a model again"})]
    return out + _server_events(st)


def _server_events(st: dict[str, Any]) -> list[Parsed]:
    out: list[Parsed] = []
    if st["version"]:
        out.append(Parsed(ev.VERSION, {"engine_version": st["version"]}))
    if st["server"]:
        out.append(Parsed(ev.SETTINGS, dict(st["server"])))
    return out


# --- handlers: (text, state, ctx) → events; [] when the line is not theirs --------------------------------------


def _label(st: dict[str, Any], device_id: str, library: str | None) -> str:
    """The rank of a device ollama names by id: the n-th device of its library is that backend's n-th buffer
    device (CUDA0, ROCm1, Metal), so its discovery and its buffers land on one rank."""
    labels = st["labels"]
    if device_id in labels:
        return labels[device_id]
    lib = (library or "cuda").lower()
    backend = {"cuda": "CUDA", "rocm": "ROCm", "metal": "Metal", "vulkan": "Vulkan", "cpu": "CPU"}.get(lib, lib.upper())
    n = st["per_library"].get(backend, 0)
    st["per_library"][backend] = n + 1
    labels[device_id] = backend if backend in ("Metal", "CPU") else f"{backend}{n}"
    return labels[device_id]


def _buffers(text: str, st: dict[str, Any], ctx: LineContext) -> list[Parsed]:
    m = _BUF.search(text)
    if not m:
        return []
    what, device = m.group(1), (m.group(2) or "CPU")
    out: list[Parsed] = []
    if what == "model weights":
        if device in st["weights_devices"] or st["runner_context"]:
            out = _new_load(st, ctx)
        st["weights_devices"].add(device)
    llama = ctx.state.setdefault("llamacpp", fresh_state())
    gib = _gib(m.group(3), m.group(4)) or 0.0
    if what == "kv cache":
        return [*out, kv_buffer_event(llama, device, gib)]
    return [*out, buffer_event(llama, "compute" if what == "compute graph" else "model", device, gib * 1024)]


def _total(text: str, st: dict[str, Any], ctx: LineContext) -> list[Parsed]:
    m = _TOTAL.search(text)
    return [Parsed(ev.SETTINGS, {"ollama_total_memory_gib": _gib(m.group(1), m.group(2))})] if m else []


def _list_gib(items: str) -> list[float]:
    return [_gib(v, u) or 0.0 for v, u in _SIZE.findall(items)]


def _offload(text: str, st: dict[str, Any], ctx: LineContext, continued: bool = False) -> list[Parsed]:
    """The scheduler's estimate before it starts the runner (msg=offload, 2024's msg="offload to cuda"): layers
    requested / in the model / offloaded, and its memory terms. Its own estimate, not an allocation."""
    out: list[Parsed] = []
    if not continued:
        if not any(t in text for t in _OFFLOAD):
            return []
        out = _load_marker("offload", st, ctx)
        st["offload_open"] = True
        library = _LIBRARY.search(text)
        if library is None and 'msg="offload to' in text:
            library = re.search(r'msg="offload to (\w+)', text)
    else:
        library = None
    data: dict[str, Any] = {}
    for key, value, unit in _FIELD.findall(text):
        if key.startswith("layers"):
            name = {"layers.model": "n_layers_offloadable", "layers.offload": "n_gpu_layers_offloaded",
                    "layers.requested": "ollama_layers_requested"}[key]
            data[name] = to_int(value)
        else:
            data[f"ollama_{key.replace('.', '_')}_gib"] = _gib(value, unit or "B")
    for key, items in _LIST.findall(text):
        per_gpu = _list_gib(items)
        if key == "memory.available":
            data["ollama_memory_available_list_gib"] = per_gpu
            data["ollama_memory_available_gib"] = sum(per_gpu)
        else:
            data["ollama_memory_required_allocations_list_gib"] = per_gpu
    split = _SPLIT.search(text)
    if split:
        data["ollama_layers_split"] = [to_int(x) for x in split.group(1).split(",") if x]
    if library:
        data["ollama_library"] = library.group(1)
    return [*out, Parsed(ev.SETTINGS, data)] if data else out


def _inference_compute(text: str, st: dict[str, Any], ctx: LineContext) -> list[Parsed]:
    m = _DEVICE.search(text)
    if not m:
        return []
    device_id, library, name = m.group(1), m.group(2), m.group(3)
    total, free = _gib(m.group(4), m.group(5)), _gib(m.group(6), m.group(7)) if m.group(6) else None
    rank = _label(st, device_id, library)
    seen = sum(1 for label in st["labels"].values() if label != "CPU")
    settings: dict[str, Any] = {"ollama_gpus_found": seen}
    if library:
        settings["ollama_library"] = library
    if rank == "CPU":  # no GPU: ollama runs on the host, whose total is the system's RAM
        return [Parsed(ev.SETTINGS, {"ollama_library": library or "cpu", "ollama_system_total_gib": total})]
    data: dict[str, Any] = {"total_gib": total, "pre_load_free_gib": free}
    if name:
        data["gpu_name"] = name
    return [Parsed(ev.RANK, data, rank=rank), Parsed(ev.SETTINGS, settings)]


def _quoted(text: str) -> dict[str, float | None]:
    return {k: _size_gib(v) for k, v in _QUOTED.findall(text)}


def _device_memory(text: str, st: dict[str, Any], ctx: LineContext) -> list[Parsed]:
    """Per-device memory the scheduler works with: 'gpu memory' (2025-12+: available after ollama's minimum
    and overhead), 'updated VRAM based on existing loaded models' (what other loaded models leave), the OS's
    VRAM overhead (Windows)."""
    for pattern, kind in ((_GPU_MEMORY, "gpu"), (_UPDATED, "updated"), (_OS_OVERHEAD, "os")):
        m = pattern.search(text)
        if not m:
            continue
        rank = _label(st, m.group(1), m.group(2))
        q = _quoted(text)
        if kind == "os":
            return [Parsed(ev.RANK, {"os_vram_overhead_gib": q.get("overhead")}, rank=rank)]
        if kind == "updated":
            return [Parsed(ev.RANK, {"total_gib": q.get("total"), "pre_load_free_gib": q.get("available")}, rank=rank)]
        return [Parsed(ev.RANK, {"pre_load_free_gib": q.get("free"), "scheduler_available_gib": q.get("available"),
                                 "scheduler_minimum_gib": q.get("minimum"), "gpu_overhead_gib": q.get("overhead")},
                       rank=rank)]
    return []


def _system(text: str, st: dict[str, Any], ctx: LineContext) -> list[Parsed]:
    if not _SYSTEM.search(text):
        return []
    q = _quoted(text)
    data = {f"ollama_system_{k}_gib": q.get(k) for k in ("total", "free", "free_swap") if q.get(k) is not None}
    if not data:
        return []
    return [*_load_marker("system", st, ctx), Parsed(ev.SETTINGS, data)]  # the scheduler reads it for each load


def _fits(text: str, st: dict[str, Any], ctx: LineContext) -> list[Parsed]:
    if not _FITS.search(text):
        return []
    out = _load_marker("fit", st, ctx)
    fields = dict(_FITS_FIELDS.findall(text))
    data: dict[str, Any] = {"ollama_single_gpu": "single GPU" in text}
    if "parallel" in fields:
        data["ollama_parallel"] = to_int(fields["parallel"])
    if "available" in fields:
        data["ollama_fit_available_gib"] = int(fields["available"]) / (1 << 30)
    required = _quoted(text).get("required")
    if required is not None:
        data["ollama_fit_required_gib"] = required
    return [*out, Parsed(ev.SETTINGS, data)]


def _loading(text: str, st: dict[str, Any], ctx: LineContext) -> list[Parsed]:
    m = _LOADING.search(text)
    if not m:
        return []
    out = _load_marker("loading", st, ctx)
    data: dict[str, Any] = {"n_layers_offloadable": to_int(m.group(1))}
    if m.group(2) is not None:
        data["ollama_layers_requested"] = to_int(m.group(2))
    return [*out, Parsed(ev.SETTINGS, data)]


def _request(text: str, st: dict[str, Any], ctx: LineContext) -> list[Parsed]:
    """The server's load request to its runner (fit, then alloc, then commit: one load)."""
    m = _REQUEST.search(text)
    if not m:
        return []
    data: dict[str, Any] = {"ollama_operation": m.group(1), "ollama_runner": True}
    names = {"Parallel": "n_slots", "BatchSize": "n_batch", "KvSize": "ollama_kv_size", "NumThreads": "n_threads",
             "GPULayers": "n_gpu_layers", "NumCtx": "ollama_num_ctx"}
    for key, value in _REQUEST_FIELD.findall(text):
        if key == "FlashAttention":
            data["flash_attn"] = value.lower() in ("true", "enabled", "on")
        elif key == "KvCacheType":
            if value:
                data["type_k"] = data["type_v"] = value
        elif to_int(value) is not None:
            data[names[key]] = to_int(value)
    return [Parsed(ev.SETTINGS, data)]


def _command(text: str, st: dict[str, Any], ctx: LineContext) -> list[Parsed]:
    """The runner's command line: its --ctx-size is num_ctx × --parallel (OLLAMA_NUM_PARALLEL)."""
    if not (_COMMAND.search(text) or ("--ctx-size" in text and _RUNNER_BINARY.search(text))):
        return []
    out = _load_marker("server", st, ctx)
    st["command_open"] = True
    data: dict[str, Any] = _flags(text, {"ollama_runner": True})[0].data
    if "--ollama-engine" in text:
        data["ollama_new_engine"] = True
    return [*out, Parsed(ev.SETTINGS, data)]


def _flags(text: str, data: dict[str, Any]) -> list[Parsed]:
    names = {"ctx-size": "ctx_size", "parallel": "n_slots", "n-gpu-layers": "n_gpu_layers", "batch-size": "n_batch",
             "threads": "n_threads"}
    for flag, value in _FLAG.findall(text):
        if flag in names and to_int(value) is not None:
            data[names[flag]] = to_int(value)
        elif flag == "flash-attn":
            data["flash_attn"] = True
        elif flag == "kv-cache-type" and value:
            data["type_k"] = data["type_v"] = value
        elif flag == "tensor-split" and value:
            data["tensor_split"] = value
    if "n_slots" in data:
        data["slots_from_command"] = True
    return [Parsed(ev.SETTINGS, data)] if data else []


def _runner_events(text: str, st: dict[str, Any], ctx: LineContext) -> list[Parsed]:
    if _LISTENING.search(text):  # the runner process (runner.go) is up: this load has its runner
        st["runner_context"] = True
        return [Parsed(ev.SETTINGS, {"ollama_runner": True})]
    m = _STARTED.search(text)
    if m:
        return [Parsed(ev.SETTINGS, {"ollama_runner_started_s": to_float(m.group(1))})]
    if _FLASH_ON.search(text):
        return [Parsed(ev.SETTINGS, {"flash_attn": True})]
    m = _LOADED.search(text)
    if m:
        return [Parsed(ev.SETTINGS, {"ollama_loaded_runners": to_int(m.group(1))})]
    return []


_ENV_KEYS = {"OLLAMA_CONTEXT_LENGTH": int, "OLLAMA_NUM_PARALLEL": int, "OLLAMA_MAX_LOADED_MODELS": int,
             "OLLAMA_GPU_OVERHEAD": int, "OLLAMA_FLASH_ATTENTION": bool, "OLLAMA_KV_CACHE_TYPE": str,
             "OLLAMA_SCHED_SPREAD": bool, "OLLAMA_NEW_ENGINE": bool, "OLLAMA_MAX_QUEUE": int,
             "OLLAMA_KEEP_ALIVE": str, "OLLAMA_LLM_LIBRARY": str, "CUDA_VISIBLE_DEVICES": str,
             "HIP_VISIBLE_DEVICES": str, "ROCR_VISIBLE_DEVICES": str}


def _config(text: str, st: dict[str, Any], ctx: LineContext) -> list[Parsed]:
    """server config env=map[…]: the environment the server runs with, given to each of its loads."""
    m = _CONFIG.search(text)
    if not m:
        return []
    out = _new_load(st, ctx) if st["markers"] or st["runner_context"] else []  # a server restarted
    server: dict[str, Any] = {}
    for key, value in _ENV.findall(m.group(1)):
        kind = _ENV_KEYS.get(key)
        if kind is None or value == "":
            continue
        if kind is int:
            number = to_int(value)
            if number is None:
                continue
            server[key.lower()] = number
        elif kind is bool:
            server[key.lower()] = value.lower() in ("true", "1", "yes", "on")
        else:
            server[key.lower()] = value
    st["server"] = server
    return [*out, Parsed(ev.SETTINGS, {**server, "ollama_server_config": True})]


def _version(text: str, st: dict[str, Any], ctx: LineContext) -> list[Parsed]:
    m = _VERSION.search(text)
    if not m:
        return []
    st["version"] = m.group(1)
    return [Parsed(ev.VERSION, {"engine_version": m.group(1)})]


def _predicted(text: str, st: dict[str, Any], ctx: LineContext) -> list[Parsed]:
    """2026's llama-server scheduler: the memory it predicts for a model at its context, against what is free."""
    if not _PREDICTED.search(text):
        return []
    q = _quoted(text)
    n_ctx = _PREDICTED_CTX.search(text)
    data: dict[str, Any] = {"code": "ollama-predicted-exceed", "message": text.strip()[:600],
                            "predicted_gib": q.get("predicted"), "available_gib": q.get("available"),
                            "gpu_free_gib": q.get("gpu_free"), "system_free_gib": q.get("system_free"),
                            "predicted_num_ctx": to_int(n_ctx.group(1)) if n_ctx else None}
    out = _load_marker("predicted", st, ctx)
    settings = {"ollama_predicted_gib": data["predicted_gib"], "ollama_predicted_num_ctx": data["predicted_num_ctx"]}
    return [*out, Parsed(ev.WARNING, data), Parsed(ev.SETTINGS, {k: v for k, v in settings.items() if v is not None})]


def _warnings(text: str, st: dict[str, Any], ctx: LineContext) -> list[Parsed]:
    if _EVICT.search(text):
        return [Parsed(ev.WARNING, {"code": "ollama-evicting", "message": text.strip()[:600]})]
    if _NOT_RECOVERED.search(text):
        q = {k: _size_gib(v) for k, v in re.findall(r'\b(free_before|free_now|free)="?([\d.]+ \w+)', text)}
        return [Parsed(ev.WARNING, {"code": "ollama-vram-not-recovered", "message": text.strip()[:600],
                                    "free_before_gib": q.get("free_before"), "free_now_gib": q.get("free_now")})]
    return []


def _too_small(text: str, st: dict[str, Any], ctx: LineContext) -> list[Parsed]:
    """'gpu has too little memory to allocate any layers': one GPU ollama's scheduler skipped, with its terms."""
    if not _TOO_SMALL.search(text):
        return []
    data: dict[str, Any] = {"code": "ollama-gpu-too-small", "message": text.strip()[:600]}
    for key, quoted, bare in _TERM.findall(text):
        value = quoted or bare
        if key == "name":
            data["gpu"] = value
            continue
        if key == "minimum_memory" and value.isdigit():  # printed in bytes
            data["minimum_gib"] = int(value) / (1 << 30)
            continue
        size = _SIZE.fullmatch(value.strip())
        if size:
            data[f"{key.replace('gpu_zer_overhead', 'gpu_zero_overhead')}_gib"] = _gib(size.group(1), size.group(2))
    return [Parsed(ev.WARNING, data), Parsed(ev.SETTINGS, {"ollama_runner": True})]


def _skipped(text: str, st: dict[str, Any], ctx: LineContext) -> list[Parsed]:
    m = _SKIPPED.search(text)
    if not m:
        return []
    archs = [to_int(a) for a in (m.group(4) or "").split() if to_int(a) is not None]
    data: dict[str, Any] = {"code": "ollama-gpu-skipped-arch", "message": text.strip()[:600], "backend": m.group(1),
                            "gpu": m.group(2), "compute_capability": to_int(m.group(3)), "compiled_archs": archs}
    return [Parsed(ev.WARNING, data), Parsed(ev.SETTINGS, {"ollama_gpus_skipped": 1})]


def _load_error(text: str, st: dict[str, Any], ctx: LineContext) -> list[Parsed]:
    """The server gave up on a load: the runner's own reason, when it printed one, names the kind."""
    m = _LOAD_ERROR.search(text) or _TERMINATED.search(text)
    if not m:
        return []
    reason = m.group(1).strip().strip('"')
    low = reason.lower()
    if "out of memory" in low or "cudamalloc failed" in low or "failed to allocate" in low:
        kind = "compute-buffer-oom" if "compute" in low or "graph" in low else "not-enough-memory"
        data: dict[str, Any] = {"kind": kind, "message": text.strip()[:600], "unsized": True}
    elif "timed out waiting for llama runner" in low:  # the runner never answered: the load failed
        data = {"kind": "engine-init-failed", "message": text.strip()[:600], "cause": "ollama-runner-timeout"}
    else:
        data = {"kind": "engine-init-failed", "message": text.strip()[:600], "weak": True}
    st["runner_context"] = True  # this load is over: the next decision is the next load's
    return [Parsed(ev.FAILURE, data)]


_HANDLERS = (
    (('msg="kv cache"', 'msg="compute graph"', 'msg="model weights"'), _buffers),
    (('msg="total memory"',), _total),
    (_OFFLOAD, _offload),
    (("inference compute",), _inference_compute),
    (('msg="gpu memory"', "updated VRAM", "OS VRAM overhead"), _device_memory),
    (('msg="system memory"',), _system),
    (("new model will fit",), _fits),
    (('msg="loading model"',), _loading),
    (("load request",), _request),
    (("starting llama server", "starting runner", "--ctx-size"), _command),
    (("llama runner started", "enabling flash attention", "loaded runners", "Server listening on"), _runner_events),
    (("server config",), _config),
    (("Listening on",), _version),
    (("predicted to exceed",), _predicted),
    (("evicting a model", "didn't recover"), _warnings),
    (("too little memory to allocate any layers",), _too_small),
    (("error loading llama server", "runner process has terminated"), _load_error),
    (("not in compiled architectures",), _skipped),
)
_GATE = lazy_compile("|".join(re.escape(t) for triggers, _ in _HANDLERS for t in triggers))
