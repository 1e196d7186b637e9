"""vLLM's memory log lines, every wording from 0.2 to 0.33 (docs/research/vllm-memory.md §3).

Patterns are searched, not anchored: Ray glues ``(RayWorkerWrapper pid=…, ip=…)`` in front and
``[repeated 30x across cluster]`` behind, Monarch adds ``[0] ``, posters drop the header or elide it
(``INFO ... [file:line]``), and one line may carry two facts (v0.28's merged capacity line). The rank
comes from vLLM's process prefix; a line without one is rank 0 of the driver/engine process.

Every vLLM memory figure is bytes / 2^30 whatever the label says ("GB" before v0.8.5), so "GB" and
"GiB" are read alike. Ports print their own wordings of the same facts (Gaudi's "Free device memory", Ascend's
"NPU graph memory", the TPU runner's ``hbm=[(used, total), …]``); they are read here too.

A startup that dies before it is ready often shows no error of vLLM's own (the cause is cut away): the engine's or
a worker's ERROR-level traceback, "hit an exception", or the shell's "Killed" are weak failures then.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kvscope.core import events as ev
from kvscope.engines.base import NUM, LineContext, Parsed, cut_short, to_float, to_int
from kvscope.engines.common import oom_failure
from kvscope.engines.lazy import lazy_compile
from kvscope.engines.shapes import Shape, Shapes, every_match, first_match
from kvscope.engines.vllm import args as vargs
from kvscope.engines.vllm.rules import classify_shortfall

ENGINE = "vllm"
DRIVER_RANK = "TP0"
PREFIX_WINDOW = 200  # a process prefix sits at the start of a line; never scan further for one
MAX_MESSAGE = 16384  # longer lines (a giant config dump) are read up to here: patterns stay fast
G = rf"({NUM})"  # one captured number
GB = r"\s*Gi?B"  # vLLM prints bytes / 2^30 as "GB" (old) or "GiB"

# Name parts and their separators use disjoint characters, so the match is linear (no backtracking).
# bounded: a process name is a few short words ("VllmWorker TP0", "EngineCore_DP0"); unbounded, a run of letters
# is rescanned from every position in it
_PREFIX = lazy_compile(r"\(?([A-Za-z][A-Za-z0-9\-]{0,40}(?:[ _][A-Za-z0-9=\-]{1,40}){0,6}) pid=(\d+|\.\.\.)(?:, ip=([^)\s]+))?\) ?")
# A prefix glued behind a progress bar (tqdm writes no newline): far from the line start, so trusted only
# where vLLM's own header follows it.
_GLUED = lazy_compile(r"\(([A-Za-z][A-Za-z0-9\-]{0,40}(?:[ _][A-Za-z0-9=\-]{1,40}){0,6}) pid=(\d+|\.\.\.)(?:, ip=([^)\s]+))?\) ?"
                      r"(?=(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) )")
GLUED_WINDOW = 600  # a terminal-wide progress bar plus the prefix
_MONARCH = lazy_compile(r"^\[(\d{1,4})\] ")  # a rank; a longer number in brackets is a pid (torch_npu's prefix)
_HEADER = lazy_compile(
    r"\b(DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d|\.\.\.)(?:\.\d+)? \[?[\w./\-]+\.py:\d+\] ?"
)
_HEADER_ELIDED = lazy_compile(r"\b(DEBUG|INFO|WARNING|ERROR|CRITICAL) \.\.\. \[[\w./\-]+(?:\.py)?:[\w.]+\] ?")
_REPEATED = lazy_compile(r"\[repeated (\d+)x across cluster\]\s*$")  # the spaces before it: rstrip (a leading \s* rescans)
_DIMS = lazy_compile(r"^(DP|PP|PCP|TP|DCP|EP)(\d+)$")

# --- weights -----------------------------------------------------------------------------------
_WEIGHTS_OLD = lazy_compile(rf"Loading model weights took {G}{GB}")
_WEIGHTS = lazy_compile(rf"Model loading took {G}{GB}(?: memory)?(?: and {G} ?s(?:econds)?)?")
# Gaudi (HPU) V0 worker: ``Loading model weights took in total W GiB of device memory (U GiB/T GiB used) and …``,
# the fork's ``Pre-loading model weights on hpu:0 took W GiB of device memory (U GiB/T GiB used) and …``.
_WEIGHTS_HPU = lazy_compile(rf"(?:Pre-)?[Ll]oading model weights(?: on \w+:\d+)? took(?: in total)? {G}{GB} of device "
                            rf"memory \({G}{GB}/{G}{GB} used\)")

# --- memory profile (V0 and early V1) ---------------------------------------------------------------
_PROFILE_KV = lazy_compile(rf"\b(\w+)=\s*{G}\s*(?:GiB|GB|Gib)?")
_PROFILE_TOTAL = lazy_compile(
    rf"the current vLLM instance can use total_gpu_memory \({G}{GB}\) x gpu_memory_utilization \({G}\) = {G}{GB}"
)
_PROFILE_LIST = {
    "weights_gib": lazy_compile(rf"model weights take\s+{G}{GB}"),
    "non_torch_gib": lazy_compile(rf"non_torch_memory(?: takes)?\s+{G}{GB}"),
    "activation_peak_gib": lazy_compile(rf"PyTorch activation peak memory(?: takes)?\s+{G}{GB}"),
    "available_kv_gib": lazy_compile(rf"(?:the rest of the memory reserved for KV Cache is|available_kv_cache_memory)\s+{G}{GB}"),
}
_TABLE_ROW = {  # the Dec-2024 "Memory profiling results:" table, one "name    value" row per line
    "total_gib": lazy_compile(rf"^total_gpu_memory\s+{G}{GB}"),
    "gpu_memory_utilization": lazy_compile(rf"^gpu_memory_utilization\s+{G}\s*$"),
    "usable_gib": lazy_compile(rf"^the current vLLM instance can use\s+{G}{GB}"),
}

# The V0 profiling list as vLLM words it, on its own line (the continuation of "Memory profiling takes …"):
# it starts with one of its items; a line that only mentions them mid-prose does not count.
_PROFILE_SENTENCE = lazy_compile(r"\s*(?:model weights take|non_torch_memory takes|PyTorch activation peak memory takes|"
                                 r"the rest of the memory reserved for KV Cache is|memory profiling takes|"
                                 r"the current vLLM instance can use)\s", re.IGNORECASE)

# --- V1 worker lines ------------------------------------------------------------------------------
_AVAILABLE_KV = lazy_compile(rf"Available KV cache memory: {G}{GB}")
# vllm-ascend's NPU worker (worker_v1.py): the KV memory and the device total in bytes; the KV figure is clamped
# at 0, so 0 means the budget came out empty
_AVAILABLE_NPU = lazy_compile(r"Available memory: (\d+), total memory: (\d+)")
_RESERVED_KV = lazy_compile(rf"Initial free memory {G}{GB}, reserved {G}{GB} memory for KV Cache")
# Gaudi (HPU): the usable part is a share of the memory free after profiling, a share of it is kept for HPU graphs.
_FREE_HPU = lazy_compile(rf"Free device memory: {G}{GB}, {G}{GB} usable \(gpu_memory_utilization={G}\), {G}{GB} reserved "
                         rf"for (\w+) ?[Gg]raphs?\b.{{0,300}}?\s{G}{GB} reserved for KV cache")
_FREE_ON_DEVICE = lazy_compile(rf"Free memory on device(?: [\w:]+)? \({G}/{G}{GB}\) on startup\. Desired GPU memory "
                             rf"utilization is \({G}, {G}{GB}\)")
_USAGE_PARTS = {
    "weights_gib": lazy_compile(rf"{G}{GB} for weight"),
    "consumed_gib": lazy_compile(rf"{G}{GB} for consumed memory"),
    "activation_peak_gib": lazy_compile(rf"{G}{GB} for peak activation"),
    "non_torch_gib": lazy_compile(rf"{G}{GB} for non-torch memory"),
    "cuda_graph_gib": lazy_compile(rf"{G}{GB} for (?:CUDA ?[Gg]raph|\w+ graph) memory"),  # Ascend: "NPU graph memory"
}
# V1 DEBUG companions of "Available KV cache memory" (VLLM_LOGGING_LEVEL=DEBUG, gpu_worker.py): the requested
# budget, and the MemoryProfilingResult repr (W, A, N up to v0.24; v0.28+ prints the consumed total C instead of N).
_REQUESTED = lazy_compile(rf"Initial free memory: {G}{GB}; Requested memory: {G} \(util\), {G}{GB}")
_PROFILE_REPR = lazy_compile(rf"Memory profiling takes {G} seconds\. Total non KV cache memory: {G}{GB}; torch peak "
                             rf"memory increase: {G}{GB}; (non-torch forward increase memory|total consumed \(from "
                             rf"mem_get_info\)): {G}{GB}; weights memory: {G}{GB}")
_KV_FIT = lazy_compile(r"--kv-cache-memory=(\d+)`? (?:\([^)]*\) )?to fit into requested memory")
_KV_FULL = lazy_compile(r"--kv-cache-memory=(\d+)`? (?:\([^)]*\) )?to fully utilize")
_KV_IN_USE = lazy_compile(rf"Current kv cache memory in use is {G} ?(bytes|GiB|GB)")
_CG_ADVISORY = lazy_compile(rf"--gpu-memory-utilization={G} is equivalent to --gpu-memory-utilization={G} without CUDA "
                          rf"graph memory profiling(?:.*?increase --gpu-memory-utilization to {G})?")
# The advisory when the estimate is NOT subtracted (v0.18 "In v0.19, … will be enabled by default", v0.20+ "… is
# disabled"): only the utilization that would keep the KV cache with the estimate on, min(u + G/T, 1).
_CG_ADVISORY_OFF = lazy_compile(rf"CUDA graph memory profiling (?:will be enabled by default|is disabled)\b.*?"
                              rf"increas(?:e|ing) --gpu-memory-utilization from {G} to {G}")
_CG_ESTIMATE = lazy_compile(rf"Estimated CUDA graph memory: {G}{GB}")
_CG_POOL = lazy_compile(rf"CUDA graph pool memory: {G}{GB} \(actual\), {G}{GB} \(estimated\)")
_GRAPH_DONE = lazy_compile(rf"Graph capturing finished in {G} secs?(?:, took {G}{GB})?")
_GRAPH_BEGIN = lazy_compile(r"Capturing (?:cudagraphs|the model for CUDA graphs|CUDA graphs?\b)")
_CPU_AUTO = lazy_compile(rf"Auto set \({G}/{G}\){GB} for KV cache on node (\d+), with {G}{GB} requested memory for the "
                       rf"worker\. {G}{GB} memory was consumed by non-kv usages")
# TPU (JAX runner): per-device (used, total) HBM after model init and after KV-cache init; device 0 is read.
_HBM = lazy_compile(rf"\bInit (model|kv-cache)\b.{{0,1000}}?\bhbm=\[\({G}, {G}\)")
_CPU_EXPLICIT = lazy_compile(rf"Explicitly set \({G}/{G}\){GB} for KV cache on node (\d+)")

# --- engine-level capacity ---------------------------------------------------------------------------
_KV_SIZE = lazy_compile(r"\b([A-Za-z]+(?: \+ host)?) KV cache size: ([\d,]+) tokens")
_CONCURRENCY = lazy_compile(rf"Maximum concurrency for ([\d,]+) tokens per request: {G}x")
# ``# %s blocks`` with %s = current_platform.device_name, spelled "cuda", "CUDA", "GPU", "rocm" … by release.
_BLOCKS = lazy_compile(r"(?:#\s*)?\b(GPU|cuda|xpu|hpu|npu|tpu|neuron|rocm|musa) blocks: (\d+)(?:, # CPU blocks: (\d+))?",
                       re.IGNORECASE)
_BLOCKS_INFO = lazy_compile(r"cache_config_info with initialization after num_gpu_blocks is: (\d+)")
_OVERRIDE = lazy_compile(r"Overriding num_gpu_blocks=(\d+) with num_gpu_blocks_override=(\d+)")
_PADDING = lazy_compile(rf"Add (\d+) padding layers, may waste at most {G}%")
_DCP = lazy_compile(r"Multiplying the GPU KV cache size by the (?:dcp_world_size|cp_world_size) (\d+)")
# Lines only a hybrid (attention + Mamba / linear-attention) model prints: capture sizes capped to the Mamba
# cache, mamba page padding, the attention block size raised to the mamba page.
_HYBRID_SIGNAL = lazy_compile(r"\b[Mm]amba (?:cache blocks|page size)\b")
_HYBRID_OFF = lazy_compile(r"Hybrid KV cache manager is disabled|Turning off hybrid kv cache manager")
_AUTO_FIT = lazy_compile(rf"Auto-fit max_model_len: reduced from (\d+) to (\d+)(?: to fit in available GPU memory \({G}{GB})?")

# --- settings ------------------------------------------------------------------------------------------
_NON_DEFAULT = lazy_compile(r"non-default args: (\{.*)")
_ENGINE_BANNER = lazy_compile(r"Initializing (?:a V1|a V0|an) LLM engine(?: \(v([\w.+\-]+)\))? with config: (.*)")
_API_VERSION = lazy_compile(r"vLLM API server version v?(\d+\.\d+[\w.+\-]*)")
_LOGO_VERSION = lazy_compile(r"[\u2580-\u259f][^%]{0,80}?\bversion v?(\d+\.\d+[\w.+\-]*)")
_LOGO_MODEL = lazy_compile(r"[\u2580-\u259f][^%]{0,80}?\bmodel\s+(\S+)\s*$")
# A pasted command: an optional inline-code backtick, an optional shell prompt ("(venv) user@host:~/dir$ ",
# "[user@host dir]# ", "$ "), an optional interpreter word ("bash ", "sh -c '", "env "), environment assignments
# (VLLM_USE_V1=1), then ``vllm serve MODEL``.
# one run of blanks and backticks at the start: two \s* around the backticks split a long run of spaces O(n²) ways
_COMMAND = lazy_compile(r"^[\s`]*(?:\([^()\s]*\) +)?(?:\[[^\]]*\][$#] +|[^\s$#`]*[$#] +)?"
                        r"(?:(?:bash|sh|zsh|env|exec|nohup|sudo)(?: -c)? +['\"]?)?(?:[A-Za-z_][A-Za-z0-9_]*=\S+ +)*"
                        r"vllm serve \S+")
_MAX_MODEL_LEN = lazy_compile(r"Using max model len (\d+)")
_BATCHED = lazy_compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")
_BLOCK_SIZE = lazy_compile(r"(?:Forcing|Setting) (?:kv cache|attention) block size to (\d+)")
_START_LOAD = lazy_compile(r"Starting to load model (\S+?)\.{0,3}$")

# --- failures -----------------------------------------------------------------------------------------
_NO_CACHE_MEMORY = lazy_compile(r"No available memory for the cache blocks")
# A hybrid model's Mamba state pool is smaller than the decode batch CUDA graphs are captured for
_MAMBA_SHORT = lazy_compile(r"max_num_seqs \((\d+)\) exceeds available Mamba cache blocks \((\d+)\)")
_V0_MAX_LEN = lazy_compile(r"The model's max seq len \((\d+)\) is larger than the maximum number of tokens that can be "
                         r"stored in KV cache \((\d+)\)")
_V1_MAX_LEN = lazy_compile(
    rf"To serve at least one request with the models?'s max seq len \((\d+)\),?\s*\(?\s*{G}{GB} KV cache is needed, which is "
    rf"larger than the available KV cache memory \({G}{GB}\)"
)
_ESTIMATED = lazy_compile(r"estimated maximum model length is (\d+)")
_DEVICE_INDEX = lazy_compile(r"memory on (?:device|node) \w+:(\d+)")
_FREE_SHORT = lazy_compile(rf"(?:Free|Available) memory on (?:device|node)(?: [\w:]+)? \({G}/{G}{GB}\) on startup is less "
                         rf"than desired (GPU|CPU) memory utilization \({G}, {G}{GB}\)")
_PROFILE_ERROR = lazy_compile(rf"Error in memory profiling\. Initial free memory {G}{GB}, current free memory {G}{GB}")
_AUTO_FIT_FAIL = lazy_compile(r"Cannot auto-fit max_model_len: not enough GPU memory")
_SWAP_TOO_LARGE = lazy_compile(rf"Too large swap space\. {G}{GB} out of the {G}{GB} total CPU memory")
_SWAP_WARN = lazy_compile(rf"Possibly too large swap space\. {G}{GB} out of the {G}{GB} total CPU memory")
# The engine or a worker reporting its own death (weak: the cause is further down, often cut away). "hit an exception"
# (v0.8+: EngineCore's and a V1 worker's catch-all), V0's multiproc worker and worker_base wordings. These can
# also be printed while serving, so they count only before the startup is ready.
_INIT_FAILED = lazy_compile(r"EngineCore failed to start|Engine core initialization failed|WorkerProc failed to start|"
                          r"WorkerProc initialization failed|(?:EngineCore|WorkerProc) hit an exception|"
                          r"Exception in worker \S+ while processing method|Error executing method")
# An ERROR-level record from the engine or a worker before ready: a traceback line (vLLM prefixes every line of a
# logged exception), or any ERROR line from the worker plumbing, which logs at ERROR only when a call raised.
_TRACE_LINE = lazy_compile(r"^(?:Traceback \(most recent call last\)|\s+File \"[^\"]+\", line \d+)")
_ERROR_HEADER = lazy_compile(r"\bERROR (?:\d\d-\d\d \d\d:\d\d:\d\d|\.\.\.)(?:\.\d+)? \[?(?:[\w.\-]+/)*([\w.\-]+\.py):\d+\]")
_WORKER_PLUMBING = frozenset({"worker_base.py", "multiproc_executor.py", "multiproc_worker_utils.py"})
# The shell's report of a SIGKILL: alone on its line, or bash's "script: line N:  PID Killed  command".
_KILLED = lazy_compile(r"^(?:\S.*: line \d+: +\d+ +)?Killed(?: +\S.*)?$")
_INIT_DONE = lazy_compile(rf"init engine \(profile, create kv cache, warmup model\) took {G}")
# Signs that the server is up and serving (V0 never prints "init engine … took"): the HTTP server's own lines and
# the V0/V1 stats lines. A crash or "Killed" after one of these is a death while serving, not a failed startup.
_SERVING = lazy_compile(r"Application startup complete|Uvicorn running on|Started server process|"
                        r"Starting vLLM API server|Avg prompt throughput:")

ANCHORS: tuple[bytes, ...] = (
    b"weights took", b"Model loading took", b"emory profiling", b"vLLM instance", b"weights take",
    b"non_torch_memory", b"activation peak", b"available_kv_cache", b"total_gpu_memory", b"KV cache", b"KV Cache",
    b" blocks: ", b"Maximum concurrency", b"Graph capturing", b"Capturing", b"CUDA graph", b"Free memory on",
    b"Available memory on", b"total memory: ", b"non-default args", b"LLM engine", b"version", b"vllm serve", b"max model len",
    b"max_num_batched_tokens", b"block size", b"No available memory", b"max seq len", b"maximum model length",
    b"failed to start", b"initialization failed", b"num_gpu_blocks", b"padding layers", b"Auto-fit",
    b"swap space", b"init engine", b"for KV cache", b"Starting to load model", b"gpu_memory_utilization",
    b"Requested memory", b"amba", b"exceeds available", b"hit an exception", b"Exception in worker", b"Error executing method",
    b"Traceback (most recent", b'File "', b"Killed", b"worker_base.py:", b"multiproc_executor.py:",
    b"multiproc_worker_utils.py:", b"hbm=[", b"loading model weights", b"Application startup complete", b"Uvicorn running on",
    b"Started server process", b"Starting vLLM API server", b"Avg prompt throughput", b"Model Runner",
    b"compile range",
)

# Event kinds that mean "this startup has begun doing memory work" (a later banner is then a restart).
_CONTENT = {ev.RANK, ev.CAPACITY, ev.FAILURE, ev.POOL}


def _rank_from_name(name: str, pid: str) -> str | None:
    """vLLM process names → rank labels: ``Worker_PP1_TP3`` → 'PP1 TP3', EngineCore → 'TP0'.

    The API server holds no GPU memory (None). Names without a TP/PP index (V0's VllmWorkerProcess,
    Ray's RayWorkerWrapper) are told apart by pid, which is all the log says about them.
    """
    tokens = re.split(r"[ _]", name)
    base, parts = tokens[0], tokens[1:]
    if base == "APIServer":
        return None
    for p in parts:
        if p.startswith("rank="):
            return p
    m = re.fullmatch(r"VllmWorker-(\d+)", base)
    if m:
        return f"rank={m.group(1)}"
    if base.startswith("EngineCore"):
        idx = next((int(p.lstrip("DP")) for p in parts if p.lstrip("DP").isdigit()), 0)
        return DRIVER_RANK if idx == 0 else f"DP{idx} TP0"
    dims = [p for p in parts if _DIMS.match(p) and p != "DP0"]
    if dims:
        return " ".join(dims)
    if base in ("Worker", "VllmWorker") or parts == ["DP0"]:
        return DRIVER_RANK
    return f"pid={pid}" if pid.isdigit() else None


def split_prefix(text: str) -> tuple[str | None, str | None, str, int | None]:
    """(rank label, timestamp, message, cluster repeat count) of one cleaned line."""
    rank, _, ts, text, repeated, _ = _split(text)
    return rank, ts, text, repeated


def _process_prefix(text: str) -> tuple[re.Match[str] | None, int, int]:
    """The innermost of the process prefixes at the line start (Ray nests the worker's
    ``(RayWorkerWrapper pid=…, ip=…)`` inside the engine's ``(EngineCore_0 pid=…)``), with the span they cover."""
    m = _PREFIX.search(text[:PREFIX_WINDOW])
    if m is None or m.start() > 40:
        m = _GLUED.search(text[:GLUED_WINDOW]) if "pid=" in text[40:GLUED_WINDOW] else None
    if m is None:
        return None, 0, 0
    start, inner = m.start(), m
    while True:
        nested = _PREFIX.match(text, inner.end())
        if nested is None or nested.end() == inner.end():
            break
        inner = nested
    return inner, start, inner.end()


# processes one run has exactly one of: the same name with another pid is another run
_ONE_PER_RUN = lazy_compile(r"^(?:EngineCore(?:_DP\d+|_\d+)?|APIServer|\w*Worker[ _](?:TP|PP|DP)\d+.*)$")


def _new_process(proc: tuple[str, str] | None, ctx: LineContext) -> list[Parsed]:
    """A BOUNDARY when a process a run has only one of (the engine core, a worker of one rank) shows a new pid
    after the old one had sized its KV cache: a second instance or a restart pasted below the first."""
    if proc is None or not proc[1].isdigit() or not _ONE_PER_RUN.match(proc[0]):
        return []
    pids = ctx.state.setdefault("vllm_pids", {})
    old = pids.get(proc[0])
    pids[proc[0]] = proc[1]
    if old is None or old == proc[1] or not ctx.state.get("vllm_kv_sized"):
        return []
    return [Parsed(ev.BOUNDARY, {"why": f"{proc[0]} has a new pid ({old} → {proc[1]})"})]


def _split(text: str) -> tuple[str | None, str | None, str | None, str, int | None, tuple[str, str] | None]:
    """split_prefix plus the worker's Ray node address (ip), when the prefix names one, and the prefix's
    (process name, pid)."""
    rank: str | None = DRIVER_RANK
    ip = None
    proc = None
    repeated = None
    m = _REPEATED.search(text)
    if m:
        repeated = int(m.group(1))
        text = text[: m.start()].rstrip()
    m = _MONARCH.match(text)
    if m:
        rank, text = f"rank={m.group(1)}", text[m.end() :]
    m, start, end = _process_prefix(text)
    if m is not None:
        rank, ip, proc = _rank_from_name(m.group(1), m.group(2)), m.group(3), (m.group(1), m.group(2))
        text = text[:start] + text[end:]

    ts = None
    m = _HEADER.search(text) or _HEADER_ELIDED.search(text)
    if m:
        if m.lastindex and m.lastindex >= 2 and m.group(2) and m.group(2) != "...":
            ts = m.group(2)
        text = text[m.end() :]
    return rank, ip, ts, text, repeated, proc


def _node_rank(rank: str | None, ip: str | None, ctx: LineContext) -> str | None:
    """A Ray worker is its pid on its node: the first node seen with a pid keeps the plain ``pid=N`` label,
    the same pid on another node is ``pid=N ip=A`` (Ray prints no ip for the driver's own node: ``local``)."""
    if rank is None or not rank.startswith("pid="):
        return rank
    nodes = ctx.state.setdefault("vllm_pid_nodes", {})
    node = ip or ""
    if nodes.setdefault(rank, node) == node:
        return rank
    return f"{rank} ip={ip}" if ip else f"{rank} local"


def _f(m: re.Match[str], i: int) -> float | None:
    return to_float(m.group(i))


def _profile_line(msg: str) -> list[Parsed]:
    """V0 v0.6.4 ``Memory profiling results: total_gpu_memory=…GiB …`` (with or without commas)."""
    values = {k: to_float(v) for k, v in _PROFILE_KV.findall(msg)}
    rank: dict[str, Any] = {
        "total_gib": values.get("total_gpu_memory"),
        "non_torch_gib": values.get("non_torch_memory"),
        "initial_memory_usage_gib": values.get("initial_memory_usage"),
        "peak_torch_gib": values.get("peak_torch_memory") or values.get("torch_peak_memory"),
        "memory_usage_post_profile_gib": values.get("memory_usage_post_profile"),
        "available_kv_gib": values.get("kv_cache_size") or values.get("kv_cache_memory"),
        "profile_seconds": values.get("duration"),
    }
    out = [Parsed(ev.RANK, {k: v for k, v in rank.items() if v is not None})]
    if values.get("gpu_memory_utilization") is not None:
        out.append(Parsed(ev.SETTINGS, {"gpu_memory_utilization": values["gpu_memory_utilization"]}))
    if rank["available_kv_gib"] is not None:
        out.append(Parsed(ev.CAPACITY, {"available_kv_gib": rank["available_kv_gib"]}))
    return out


def _memory(msg: str, prefixed: bool = True) -> list[Parsed]:  # noqa: C901 - one flat table of line shapes
    """Per-worker memory facts (RANK events, plus the capacity they imply). ``prefixed``: the line had vLLM's
    header or a worker prefix (the V0 profiling list is believed without one only as vLLM's own sentence)."""
    out: list[Parsed] = []
    m = _WEIGHTS_HPU.search(msg)
    if m:
        out.append(Parsed(ev.RANK, {"weights_gib": _f(m, 1), "total_gib": _f(m, 3), "device_used_after_weights_gib": _f(m, 2)}))
    m = None if m else _WEIGHTS.search(msg) or _WEIGHTS_OLD.search(msg)
    if m:
        data = {"weights_gib": _f(m, 1)}
        if m.re is _WEIGHTS and m.group(2):
            data["load_seconds"] = _f(m, 2)
        out.append(Parsed(ev.RANK, data))
    if "Memory profiling results:" in msg and "=" in msg:
        out += _profile_line(msg)
    m = _PROFILE_TOTAL.search(msg)
    if m:
        out.append(Parsed(ev.RANK, {"total_gib": _f(m, 1), "usable_gib": _f(m, 3)}))
        out.append(Parsed(ev.SETTINGS, {"gpu_memory_utilization": _f(m, 2)}))
    listed = {k: _f(pm, 1) for k, pm in ((k, p.search(msg)) for k, p in _PROFILE_LIST.items()) if pm}
    if listed and not prefixed and not _PROFILE_SENTENCE.match(msg):
        listed = {}  # prose paraphrasing the figures ("…, non_torch_memory takes 0.25GiB; …") is no measurement
    if listed and "Memory profiling results:" not in msg:
        out.append(Parsed(ev.RANK, listed))
        if listed.get("available_kv_gib") is not None:
            out.append(Parsed(ev.CAPACITY, {"available_kv_gib": listed["available_kv_gib"]}))
    for key, pattern in _TABLE_ROW.items():
        m = pattern.search(msg.strip())
        if m and key == "gpu_memory_utilization":
            out.append(Parsed(ev.SETTINGS, {key: _f(m, 1)}))
        elif m:
            out.append(Parsed(ev.RANK, {key: _f(m, 1)}))
    m = _AVAILABLE_KV.search(msg)
    if m:
        out += [Parsed(ev.RANK, {"available_kv_gib": _f(m, 1)}), Parsed(ev.CAPACITY, {"available_kv_gib": _f(m, 1)})]
    m = _AVAILABLE_NPU.search(msg) if "total memory: " in msg else None
    if m:
        kv, total = int(m.group(1)) / (1 << 30), int(m.group(2)) / (1 << 30)
        out += [Parsed(ev.RANK, {"available_kv_gib": kv, "total_gib": total}),
                Parsed(ev.CAPACITY, {"available_kv_gib": kv})]
    m = _RESERVED_KV.search(msg)
    if m:
        out += [Parsed(ev.RANK, {"init_free_gib": _f(m, 1), "available_kv_gib": _f(m, 2), "kv_cache_memory_fixed": True}),
                Parsed(ev.CAPACITY, {"available_kv_gib": _f(m, 2)})]
    out += _free_on_device(msg)
    m = _FREE_HPU.search(msg)
    if m:
        out += [Parsed(ev.RANK, {"free_after_profile_gib": _f(m, 1), "usable_gib": _f(m, 2), "available_kv_gib": _f(m, 6),
                                 "graph_reserved_gib": _f(m, 4), "graph_kind": m.group(5)}),
                Parsed(ev.SETTINGS, {"gpu_memory_utilization": _f(m, 3)}),
                Parsed(ev.CAPACITY, {"available_kv_gib": _f(m, 6)})]
    out += _debug_profile(msg)
    out += _graphs(msg)
    out += _cpu_backend(msg)
    m = _HBM.search(msg) if "hbm=[" in msg else None
    if m:
        used = "hbm_used_after_model_gib" if m.group(1) == "model" else "hbm_used_after_kv_gib"
        out.append(Parsed(ev.RANK, {"total_gib": _f(m, 3), used: _f(m, 2), "device": "tpu"}))
    return out


def _free_on_device(msg: str) -> list[Parsed]:
    """The one-line ledger of v0.10.2+ (``Free memory on device (F/T GiB) on startup. … Actual usage is …``)."""
    m = _FREE_ON_DEVICE.search(msg)
    if not m:
        return []
    data: dict[str, Any] = {"init_free_gib": _f(m, 1), "total_gib": _f(m, 2), "usable_gib": _f(m, 4)}
    for key, pattern in _USAGE_PARTS.items():
        pm = pattern.search(msg)
        if pm:
            data[key] = _f(pm, 1)
    fit, full, in_use = _KV_FIT.search(msg), _KV_FULL.search(msg), _KV_IN_USE.search(msg)
    if fit:
        data["kv_cache_memory_fit_bytes"] = to_int(fit.group(1))  # bounded: a mangled one reads as unknown
    if full:
        data["kv_cache_memory_full_bytes"] = to_int(full.group(1))
    out = [Parsed(ev.SETTINGS, {"gpu_memory_utilization": _f(m, 3)})]
    if in_use:
        value = to_float(in_use.group(1))
        gib = value / (1 << 30) if value is not None and in_use.group(2) == "bytes" else value
        data["available_kv_gib"] = gib
        out.append(Parsed(ev.CAPACITY, {"available_kv_gib": gib}))
    out.insert(0, Parsed(ev.RANK, data))
    return out


def _profile_repr(m: re.Match[str], msg: str) -> list[Parsed]:
    data: dict[str, Any] = {"profile_seconds": _f(m, 1), "non_kv_gib": _f(m, 2), "weights_gib": _f(m, 6)}
    if m.group(4).startswith("non-torch"):
        data.update(activation_peak_gib=_f(m, 3), non_torch_gib=_f(m, 5))
    else:  # v0.28+: K = R − (C + H) − G; H is not the "peak activation" the ledger line prints (that one holds G)
        data.update(consumed_gib=_f(m, 5), transient_peak_gib=_f(m, 3))
    return [Parsed(ev.RANK, data)]


# V1's DEBUG profiling lines: the requested budget R = T·u, then W, A and N (or C, v0.28+) of the profile
DEBUG_PROFILE_SHAPES = Shapes((
    Shape("requested-memory", _REQUESTED,
          lambda m, msg: [Parsed(ev.RANK, {"init_free_gib": _f(m, 1), "usable_gib": _f(m, 3)}),
                          Parsed(ev.SETTINGS, {"gpu_memory_utilization": _f(m, 2)})],
          (ev.RANK, ev.SETTINGS), "0.9.1–", "Initial free memory: 77.39 GiB; Requested memory: 0.825000 (util), 65.32 GiB"),
    Shape("profile-result", _PROFILE_REPR, _profile_repr, (ev.RANK,), "0.9.1–",
          "Memory profiling takes 13.16 seconds. Total non KV cache memory: 33.68GiB; torch peak memory increase: "
          "0.34GiB; non-torch forward increase memory: 32.4GiB; weights memory: 0.93GiB."),
))


def _debug_profile(msg: str) -> list[Parsed]:
    return first_match(DEBUG_PROFILE_SHAPES.rows, msg) or []


def _cg_advisory(m: re.Match[str], msg: str) -> list[Parsed]:
    data = {"util_equivalent_without_graph_profiling": _f(m, 2)}  # printed only with the estimate applied
    if m.group(3):
        data["util_suggested_with_graph_profiling"] = _f(m, 3)
    return [Parsed(ev.SETTINGS, {"gpu_memory_utilization": _f(m, 1)}), Parsed(ev.RANK, data)]


GRAPH_SHAPES = Shapes((
    Shape("graphs-captured", _GRAPH_DONE,
          lambda m, msg: [Parsed(ev.RANK, {"cuda_graph_gib": _f(m, 2), "graph_capture_seconds": _f(m, 1),
                                           "graph_capture_done": True})],
          (ev.RANK,), "all", "Graph capturing finished in 2 secs, took 0.13 GiB"),
    Shape("graph-pool", _CG_POOL,
          lambda m, msg: [Parsed(ev.RANK, {"cuda_graph_gib": _f(m, 1), "cuda_graph_estimate_gib": _f(m, 2)})],
          (ev.RANK,), "0.18–", "CUDA graph pool memory: 0.22 GiB (actual), 0.42 GiB (estimated), difference: 0.2 GiB (91.2%)."),
    Shape("graph-estimate", _CG_ESTIMATE,
          lambda m, msg: [Parsed(ev.RANK, {"cuda_graph_estimate_gib": _f(m, 1)})],
          (ev.RANK,), "0.18–", "Estimated CUDA graph memory: 0.26 GiB total"),
    Shape("graph-profiling-on", _CG_ADVISORY, _cg_advisory, (ev.SETTINGS, ev.RANK), "0.20–",
          "CUDA graph memory profiling is enabled (default since v0.21.0). The current --gpu-memory-utilization=0.9200 "
          "is equivalent to --gpu-memory-utilization=0.9129 without CUDA graph memory profiling. To maintain the same "
          "effective"),
    Shape("graph-profiling-off", _CG_ADVISORY_OFF,
          lambda m, msg: [Parsed(ev.SETTINGS, {"gpu_memory_utilization": _f(m, 1)}),
                          Parsed(ev.RANK, {"util_suggested_with_graph_profiling": _f(m, 2), "cuda_graph_profiling": False})],
          (ev.SETTINGS, ev.RANK), "0.18–0.19",
          "In v0.19, CUDA graph memory profiling will be enabled by default (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1), "
          "which more accurately accounts for CUDA graph memory during KV cache allocation. To try it now, set "
          "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 and increase --gpu-memory-utilization from 0.7000 to 0.7021 to "
          "maintain the same effective KV cache size."),
    Shape("graph-capture-begins", _GRAPH_BEGIN, lambda m, msg: [Parsed(ev.RANK, {"graph_capture_started": True})],
          (ev.RANK,), "all", "Capturing CUDA graphs: 100%|██████████| 67/67 [00:14<00:00,  4.71it/s]"),
))


def _graphs(msg: str) -> list[Parsed]:
    return first_match(GRAPH_SHAPES.rows, msg) or []


# The CPU backend sizes its KV cache in host RAM per NUMA node ('Auto set (3.6/8.84) GiB …')
CPU_SHAPES = Shapes((
    Shape("cpu-kv-auto", _CPU_AUTO,
          lambda m, msg: [Parsed(ev.RANK, {"available_kv_gib": _f(m, 1), "total_gib": _f(m, 2),
                                           "numa_node": to_int(m.group(3)), "usable_gib": _f(m, 4),
                                           "non_kv_gib": _f(m, 5), "device": "cpu"}),
                          Parsed(ev.CAPACITY, {"available_kv_gib": _f(m, 1)})],
          (ev.RANK, ev.CAPACITY), "undated", "Auto set (3.6/8.84) GiB for KV cache on node 0, with 4.42 GiB requested "
          "memory for the worker. 0.82 GiB memory was consumed by non-kv usages."),
    Shape("cpu-kv-explicit", _CPU_EXPLICIT,
          lambda m, msg: [Parsed(ev.RANK, {"available_kv_gib": _f(m, 1), "total_gib": _f(m, 2),
                                           "numa_node": to_int(m.group(3)), "kv_cache_memory_fixed": True,
                                           "device": "cpu"}),
                          Parsed(ev.CAPACITY, {"available_kv_gib": _f(m, 1)})],
          (ev.RANK, ev.CAPACITY), "undated", "Explicitly set (0.0/8.84) GiB for KV cache on node 0."),
))


def _cpu_backend(msg: str) -> list[Parsed]:
    return first_match(CPU_SHAPES.rows, msg) or []


def _kv_size(m: re.Match[str], msg: str) -> list[Parsed]:
    if m.group(1) in ("Available",):
        return []
    data: dict[str, Any] = {"kv_tokens": to_int(m.group(2))}
    if m.group(1) != "GPU":
        data["kv_device"] = m.group(1)
    return [Parsed(ev.CAPACITY, data)]


# a post that quotes one line per release: "- vLLM 0.2.4: `# GPU blocks: 1464, # CPU blocks: 1310`"
_PROSE_RELEASE = lazy_compile(r"\bvLLM\s+v?(\d+\.\d+\.\d+(?:\.post\d+)?)\b[^:#]{0,40}:\s*`?#")


def _blocks(m: re.Match[str], msg: str) -> list[Parsed]:
    data: dict[str, Any] = {"num_gpu_blocks": to_int(m.group(2))}
    if m.group(3) is not None:
        data["num_cpu_blocks"] = to_int(m.group(3))
    if m.group(1).lower() not in ("gpu", "cuda"):
        data["blocks_device"] = m.group(1).lower()
    labelled = _PROSE_RELEASE.search(msg[:m.start()] + msg[m.start():m.start() + 1])
    return ([Parsed(ev.VERSION, {"engine_version": labelled.group(1)})] if labelled else []) + [Parsed(ev.CAPACITY, data)]


def _cap(**fields: Callable[[re.Match[str]], Any]) -> Callable[[re.Match[str], str], list[Parsed]]:
    """A row that reads capacity fields, each from the match."""
    return lambda m, msg: [Parsed(ev.CAPACITY, {name: read(m) for name, read in fields.items()})]


_SOURCE = "vLLM's source wording; no posted log in the corpus prints it yet"

# Engine-level capacity (tokens, concurrency, blocks: startup facts, no rank). Every matching row adds its fields
# to one CAPACITY event: one line may carry two of them (v0.28's "GPU KV cache size: N tokens, Maximum concurrency…")
CAPACITY_SHAPES = Shapes((
    Shape("kv-cache-size", _KV_SIZE, _kv_size, (ev.CAPACITY,), "0.6.5–", "GPU KV cache size: 7,584 tokens"),
    Shape("max-concurrency", _CONCURRENCY,
          _cap(max_model_len=lambda m: to_int(m.group(1)), max_concurrency=lambda m: _f(m, 2)), (ev.CAPACITY,), "0.6.3–",
          "Maximum concurrency for 128 tokens per request: 59.25x"),
    Shape("block-counts", _BLOCKS, _blocks, (ev.CAPACITY,), "0.2–0.10", "# GPU blocks: 1381"),
    Shape("block-count-info", _BLOCKS_INFO, _cap(num_gpu_blocks=lambda m: to_int(m.group(1))), (ev.CAPACITY,),
          "undated", "vllm cache_config_info with initialization after num_gpu_blocks is: 14696"),
    Shape("blocks-override", _OVERRIDE,
          _cap(num_gpu_blocks=lambda m: to_int(m.group(2)), num_gpu_blocks_profiled=lambda m: to_int(m.group(1))),
          (ev.CAPACITY,), "all", "Overriding num_gpu_blocks=0 with num_gpu_blocks_override=512"),
    Shape("padding-layers", _PADDING,
          _cap(padding_layers=lambda m: to_int(m.group(1)), padding_waste_percent=lambda m: _f(m, 2)), (ev.CAPACITY,),
          "undated", "Add 3 padding layers, may waste at most 6.25% KV cache memory"),
    Shape("context-parallel", _DCP, _cap(context_parallel_multiplier=lambda m: to_int(m.group(1))), (ev.CAPACITY,),
          "undated", "Multiplying the GPU KV cache size by the dcp_world_size 8.", _SOURCE),
    Shape("engine-ready", _INIT_DONE, _cap(init_engine_seconds=lambda m: _f(m, 1), ready=lambda m: True),
          (ev.CAPACITY,), "all", "init engine (profile, create kv cache, warmup model) took 0.01 s"),
    Shape("hybrid-manager-off", _HYBRID_OFF,
          lambda m, msg: [Parsed(ev.WARNING, {"code": "hybrid-kv-manager-disabled", "message": msg.strip()[:300]})],
          (ev.WARNING,), "undated", "Hybrid KV cache manager is disabled for this hybrid model, This means we do not "
          "enable any optimizations for saving KV cache memory (e.g., dropping the KV cache outside the sliding "
          "window). The compute of layers like sliding window is still saved."),
    Shape("max-len-auto-fit", _AUTO_FIT,
          lambda m, msg: [Parsed(ev.SETTINGS, {"max_model_len": to_int(m.group(2)),
                                               "max_model_len_requested": to_int(m.group(1))})],
          (ev.SETTINGS,), "undated", "Auto-fit max_model_len: reduced from 131072 to 36016 to fit in available GPU memory "
          "(4.12 GiB)", _SOURCE),
), every=True)


def _capacity(msg: str) -> list[Parsed]:
    return every_match(CAPACITY_SHAPES.rows, msg, ev.CAPACITY)


def _settings(msg: str) -> list[Parsed]:
    """Configuration lines; the ones that open a new engine also emit BOUNDARY (gated in ``parse``)."""
    if msg.rstrip().endswith("Using V2 Model Runner"):  # gpu_worker.py, v0.26+: which runner profiles the memory
        return [Parsed(ev.SETTINGS, {"model_runner": "V2"})]
    # torch.compile's cache state (compilation/backends.py): a start that compiles does so inside the memory profile,
    # which can peak higher than a start that loads the compiled graphs (Nemotron-H on v0.26: 4.66 vs 2.92 GiB)
    if "for compile range" in msg:
        if "Directly load the compiled graph" in msg:
            return [Parsed(ev.SETTINGS, {"compile_cache": "warm"})]
        if "Compiling a graph for compile range" in msg:
            return [Parsed(ev.SETTINGS, {"compile_cache": "cold"})]
    m = _NON_DEFAULT.search(msg)
    if m:
        return _with_model([Parsed(ev.BOUNDARY, {"why": "non-default args"})], vargs.parse_non_default_args(m.group(1)))
    m = _ENGINE_BANNER.search(msg)
    if m:
        out = [Parsed(ev.BOUNDARY, {"why": "engine banner"})]
        if m.group(1):
            out.append(Parsed(ev.VERSION, {"engine_version": m.group(1)}))
        return _with_model(out, vargs.parse_engine_banner(m.group(2)))
    m = _API_VERSION.search(msg) or (_LOGO_VERSION.search(msg) if "version" in msg and "%" not in msg else None)
    if m:
        return [Parsed(ev.BOUNDARY, {"why": "version banner"}), Parsed(ev.VERSION, {"engine_version": m.group(1)})]
    if _COMMAND.search(msg):
        settings = vargs.parse_command(msg)
        if settings:
            return _with_model([Parsed(ev.BOUNDARY, {"why": "command line"})], settings)
    m = _LOGO_MODEL.search(msg) if "model " in msg and "%" not in msg else None
    if m:
        return [Parsed(ev.MODEL, {"model": m.group(1)})]
    m = _MAX_MODEL_LEN.search(msg)
    if m:
        return [Parsed(ev.SETTINGS, {"max_model_len": to_int(m.group(1))})]
    m = _BATCHED.search(msg)
    if m:
        return [Parsed(ev.SETTINGS, {"max_num_batched_tokens": to_int(m.group(1))})]
    m = _BLOCK_SIZE.search(msg)
    if m:
        return [Parsed(ev.SETTINGS, {"block_size": to_int(m.group(1))})]
    m = _START_LOAD.search(msg)
    if m:
        return [Parsed(ev.MODEL, {"model": m.group(1)})]
    return []


def _with_model(out: list[Parsed], settings: dict[str, Any]) -> list[Parsed]:
    model = settings.get("model")
    if isinstance(model, str) and model:
        out.append(Parsed(ev.MODEL, {"model": model}))
    if settings:
        out.append(Parsed(ev.SETTINGS, settings))
    return out


def _v1_max_len(m: re.Match[str], msg: str) -> list[Parsed]:
    data = {"max_model_len": to_int(m.group(1)), "kv_needed_gib": _f(m, 2), "available_kv_gib": _f(m, 3)}
    est = _ESTIMATED.search(msg)
    if est:
        data["estimated_max_model_len"] = to_int(est.group(1))
    return [Parsed(ev.FAILURE, {"kind": "max-len-too-large", "message": _text(msg), **data}),
            Parsed(ev.CAPACITY, {k: v for k, v in data.items() if k != "kv_needed_gib"})]


def _v0_max_len(m: re.Match[str], msg: str) -> list[Parsed]:
    data = {"max_model_len": to_int(m.group(1)), "kv_tokens": to_int(m.group(2))}
    return [Parsed(ev.FAILURE, {"kind": "max-len-too-large", "message": _text(msg), **data}), Parsed(ev.CAPACITY, data)]


def _free_short(m: re.Match[str], msg: str) -> list[Parsed]:
    free, total, util, requested = _f(m, 1), _f(m, 2), _f(m, 4), _f(m, 5)
    # a device number past 0 ("cuda:3") is a worker of a multi-GPU run
    index = _DEVICE_INDEX.search(msg[:m.end()])
    kind = classify_shortfall(free, total, device=m.group(3).lower(), multi_gpu=bool(index and index.group(1) != "0"))
    return [Parsed(ev.FAILURE, {"kind": kind, "message": _text(msg), "free_gib": free, "total_gib": total,
                                "gpu_memory_utilization": util, "requested_gib": requested, "device": m.group(3)}),
            Parsed(ev.RANK, {"total_gib": total, "init_free_gib": free, "usable_gib": requested}),
            Parsed(ev.SETTINGS, {"gpu_memory_utilization": util})]


def _mamba_short(m: re.Match[str], msg: str) -> list[Parsed]:
    seqs, blocks = to_int(m.group(1)), to_int(m.group(2))
    return [Parsed(ev.FAILURE, {"kind": "not-enough-memory", "message": _text(msg), "max_num_seqs": seqs,
                                "mamba_blocks": blocks}),
            Parsed(ev.SETTINGS, {"max_num_seqs": seqs})]


def _text(msg: str) -> str:
    return msg.strip()[:600]


def _failed(kind: str, **extra: Any) -> Callable[[re.Match[str], str], list[Parsed]]:
    return lambda m, msg: [Parsed(ev.FAILURE, {"kind": kind, "message": _text(msg), **extra})]


# vLLM's errors (and two warnings about them), as rows (engines/shapes.py): tried in order, the first match wins
FAILURE_SHAPES = Shapes((
    Shape("v1-max-len", _V1_MAX_LEN, _v1_max_len, (ev.FAILURE, ev.CAPACITY), "0.7–",
          "To serve at least one request with the models's max seq len (32768), (4.50 GiB KV cache is needed, which is "
          "larger than the available KV cache memory (3.58 GiB). Based on the available memory, the estimated maximum "
          "model length is 26032"),
    # the tail of a V1 max-len error the poster broke onto its own line
    Shape("estimated-max-len", _ESTIMATED,
          lambda m, msg: [Parsed(ev.CAPACITY, {"estimated_max_model_len": to_int(m.group(1))})], (ev.CAPACITY,), "0.7–",
          "Based on the available memory, the estimated maximum model length is 810208."),
    Shape("v0-max-len", _V0_MAX_LEN, _v0_max_len, (ev.FAILURE, ev.CAPACITY), "0.2–0.10",
          "The model's max seq len (8192) is larger than the maximum number of tokens that can be stored in KV cache "
          "(4512). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."),
    Shape("no-cache-memory", _NO_CACHE_MEMORY, _failed("not-enough-memory"), (ev.FAILURE,), "0.2–",
          "ValueError: No available memory for the cache blocks. Try i"),
    Shape("mamba-blocks-short", _MAMBA_SHORT, _mamba_short, (ev.FAILURE, ev.SETTINGS), "undated",
          "ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (856). Each decode sequence requires "
          "one Mamba cache block, so CUDA graph capture cannot proceed. Please lower max_num_seqs to at most 856 or "
          "increase gpu_memory_utilization."),
    Shape("free-memory-short", _FREE_SHORT, _free_short, (ev.FAILURE, ev.RANK, ev.SETTINGS), "0.9–",
          "ValueError: Free memory on device (59.32/79.15 GiB) on startup is less than desired GPU memory utilization "
          "(0.9, 71.24 GiB). Decrease GPU memory utilization or reduce GP"),
    Shape("profiling-error", _PROFILE_ERROR,
          lambda m, msg: [Parsed(ev.FAILURE, {"kind": "multi-instance-contention", "message": _text(msg),
                                              "init_free_gib": _f(m, 1), "current_free_gib": _f(m, 2)})],
          (ev.FAILURE,), "0.6–0.10", "AssertionError: Error in memory profiling. Initial free memory 70.52 GiB, current "
          "free memory 75.18 GiB. This happens when the GPU memory was not properly cleaned up before initializing the "
          "vLLM instance.", _SOURCE),
    Shape("auto-fit-failed", _AUTO_FIT_FAIL, _failed("not-enough-memory"), (ev.FAILURE,), "undated",
          "ValueError: Cannot auto-fit max_model_len: not enough GPU memory", _SOURCE),
    Shape("swap-too-large", _SWAP_TOO_LARGE,
          lambda m, msg: [Parsed(ev.FAILURE, {"kind": "host-memory", "message": _text(msg), "swap_gib": _f(m, 1),
                                              "host_gib": _f(m, 2)})],
          (ev.FAILURE,), "0.2–0.10", "ValueError: Too large swap space. 128.00 GiB out of the 125.68 GiB total CPU memory "
          "is allocated for the swap space.", _SOURCE),
    Shape("swap-large", _SWAP_WARN,
          lambda m, msg: [Parsed(ev.WARNING, {"code": "swap-space-large", "message": _text(msg), "swap_gib": _f(m, 1),
                                              "host_gib": _f(m, 2)})],
          (ev.WARNING,), "0.2–0.10", "Possibly too large swap space. 64.00 GiB out of the 125.68 GiB total CPU memory is "
          "allocated for the swap space.", _SOURCE),
    Shape("engine-init-failed", _INIT_FAILED, _failed("exception", weak=True, engine_init=True), (ev.FAILURE,), "0.8–",
          "EngineCore failed to start."),
))

# the tables whose dated rows date a startup (eras.infer reads their releases column)
TABLES = (DEBUG_PROFILE_SHAPES, GRAPH_SHAPES, CPU_SHAPES, CAPACITY_SHAPES, FAILURE_SHAPES)


def _failures(msg: str) -> list[Parsed]:
    found = first_match(FAILURE_SHAPES.rows, msg)
    return found if found is not None else []


def _own_oom(msg: str, prefixed: bool) -> list[Parsed]:
    """A torch OOM under vLLM's own prefix or header (a worker's traceback): vLLM's failure, and the device total
    it names is that rank's total. A bare one is left to engines/common.py, whose startup it joins."""
    if not prefixed or "emory" not in msg:
        return []
    data = oom_failure(msg)
    if data is None:
        return []
    out = [Parsed(ev.FAILURE, data)]
    if data.get("device_total_gib") is not None:
        out.append(Parsed(ev.RANK, {"total_gib": data["device_total_gib"], "total_from_oom": True}))
    return out


def _died(text: str, msg: str, rank: str | None, ctx: LineContext) -> list[Parsed]:
    """Weak failures with no message of their own: an ERROR-level traceback or worker error from the engine or a
    worker (the first one of the startup), or the shell's "Killed" once memory was being sized. The API server
    (rank None) is no engine. Once the server is ready, ``parse`` turns these into an error-while-serving warning."""
    st = ctx.state
    # Only the shell's bare report: a line under vLLM's own header ("INFO … Killed 3 stale requests") is not one.
    if ("Killed" in msg and st.get("vllm_content") and len(msg.strip()) == len(text.strip())
            and _KILLED.match(msg.strip())):
        return [Parsed(ev.FAILURE, {"kind": "killed", "weak": True, "message": "process killed (host/device OOM killer): "
                                    + msg.strip()[:200]})]
    if rank is None or st.get("vllm_traceback") or "ERROR" not in text[:GLUED_WINDOW]:
        return []
    m = _ERROR_HEADER.search(text[:GLUED_WINDOW])
    if m is None or not (_TRACE_LINE.match(msg) or m.group(1) in _WORKER_PLUMBING):
        return []
    st["vllm_traceback"] = True
    return [Parsed(ev.FAILURE, {"kind": "exception", "weak": True, "engine_init": True, "error_source": m.group(1),
                                "message": msg.strip()[:600]})]


def _while_serving(out: list[Parsed], ctx: LineContext) -> list[Parsed]:
    """After the server was ready a weak failure (a traceback, a worker error, "Killed") is no failed startup: the
    first one becomes an error-while-serving warning, later ones are dropped."""
    kept: list[Parsed] = []
    for p in out:
        if p.kind == ev.FAILURE and p.data.get("weak"):
            if not ctx.state.get("vllm_serving_error"):
                ctx.state["vllm_serving_error"] = True
                kept.append(Parsed(ev.WARNING, {"code": "error-while-serving", "message": p.data.get("message", "")}))
            continue
        kept.append(p)
    return kept


class VLLMLines:
    """Line knowledge for vLLM (see module docstring)."""

    engine = ENGINE
    anchors = ANCHORS
    joins = True  # EngineLines: wants_join below can say yes

    def wants_join(self, text: str) -> bool:
        return cut_short(text, _JOINABLE)

    def parse(self, text: str, ctx: LineContext) -> list[Parsed]:
        rank, ip, ts, msg, repeated, proc = _split(text[:MAX_MESSAGE])
        if _SERVING.search(msg):
            ctx.state["vllm_ready"] = True
            return []
        restart = _new_process(proc, ctx)
        out = _failures(msg) or _memory(msg, len(msg) < len(text.strip())) or _capacity(msg) or _settings(msg)
        if not out:
            out = _own_oom(msg, len(msg) < len(text.strip())) or _died(text, msg, rank, ctx)
        if not out and "capture_model" in msg and ctx.state.get("vllm_traceback") and not ctx.state.get("vllm_ready"):
            # a traceback through the model runner's graph capture: the startup died capturing CUDA graphs
            out = [Parsed(ev.RANK, {"graph_capture_started": True, "died_in_capture": True})]
        if ctx.state.get("vllm_ready"):
            out = _while_serving(out, ctx)
        m = _HYBRID_SIGNAL.search(msg) if "amba" in msg else None
        if m and not any(p.kind == ev.BOUNDARY for p in out):  # never from a config dump
            out.append(Parsed(ev.CAPACITY, {"hybrid_signal": m.group(0)}))
        if restart and not any(p.kind == ev.BOUNDARY for p in out):
            out = [*restart, *out]
        if not out:
            return []
        rank = _node_rank(rank, ip, ctx)
        for p in out:
            p.rank = rank if p.kind in (ev.RANK, ev.POOL, ev.PHASE) else None
            p.timestamp = ts
            if repeated and p.kind == ev.RANK:
                p.data = {**p.data, "repeated_across_cluster": repeated}
        return _gate_boundary(out, ts, ctx)


def _gate_boundary(out: list[Parsed], ts: str | None, ctx: LineContext) -> list[Parsed]:
    """Keep a BOUNDARY only where a new engine really starts.

    A startup prints several opening lines (version banner, non-default args, engine config); only
    the first opens it, so a later one counts only after memory work was seen. A posted excerpt can
    be out of order (the args pasted under the KV lines): a line stamped earlier than one already
    read is not a restart.
    """
    st = ctx.state
    last = st.get("vllm_last_ts")
    if any(p.kind == ev.BOUNDARY for p in out):
        earlier = ts is not None and last is not None and ts < last
        if st.get("vllm_content") and not earlier:
            st["vllm_content"] = st["vllm_ready"] = st["vllm_traceback"] = st["vllm_serving_error"] = False
            st["vllm_kv_sized"] = False
        else:
            out = [p for p in out if p.kind != ev.BOUNDARY]
    if any(p.kind in _CONTENT for p in out):
        st["vllm_content"] = True
    out = _profiling_override(out, st)
    if any(p.kind == ev.CAPACITY and p.data.get("ready") for p in out):
        st["vllm_ready"] = True
    if ts is not None and (last is None or ts > last):
        st["vllm_last_ts"] = ts
    return out


def _profiling_override(out: list[Parsed], st: dict[str, Any]) -> list[Parsed]:
    """"Overriding num_gpu_blocks=0 with num_gpu_blocks_override=N" before the KV cache was sized (V1 prints it
    while profiling) is no block count of this startup: kept only as an extra. After the sizing it is the count."""
    for p in out:
        if p.kind != ev.CAPACITY:
            continue
        if "num_gpu_blocks_profiled" in p.data and not st.get("vllm_kv_sized"):
            data = {k: v for k, v in p.data.items() if k not in ("num_gpu_blocks", "num_gpu_blocks_profiled")}
            data["num_gpu_blocks_override_profiling"] = p.data.get("num_gpu_blocks")
            p.data = data
        elif any(p.data.get(k) is not None for k in ("available_kv_gib", "kv_tokens", "num_gpu_blocks")):
            st["vllm_kv_sized"] = True
    return out


_JOINABLE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("To serve at least one request", _V1_MAX_LEN),
    ("The model's max seq len", _V0_MAX_LEN),
    ("Memory profiling results: ", lazy_compile(r"gpu_memory_utilization=\s*[\d.]+")),
    ("Free memory on device", lazy_compile(r"Current kv cache memory in use is|fully utilize|CUDAGraph memory|"
                                          r"\w graph memory|less than desired \w+ memory utilization \(")),
    ("Based on the available memory, the", _ESTIMATED),
    ("model weights take", lazy_compile(r"reserved for KV Cache is\s+[\d.]+")),
    ("is equivalent to --gpu-memory-utilization", lazy_compile(r"without CUDA graph")),
    ("CUDA graph memory profiling will be enabled", _CG_ADVISORY_OFF),
    ("CUDA graph memory profiling is disabled", _CG_ADVISORY_OFF),
    ("Maximum concurrency for", _CONCURRENCY),
    ("GPU KV cache size:", lazy_compile(r"KV cache size: [\d,]+ tokens")),
    ("Available KV cache", _AVAILABLE_KV),
    # "finished in 11" / " secs, took 1.00 GiB": complete with the GiB part, or when the line ends after "secs"
    # (V0 ≤ v0.6.3 prints no GiB part).
    ("Graph capturing finished in", lazy_compile(rf"Graph capturing finished in {G} secs?(?:, took {G}{GB}|\.?\s*$)")),
    ("num_gpu_blocks is:", _BLOCKS_INFO),
    # The args dict is whole when the text ends with its closing brace (or the poster's own elision).
    ("non-default args: {", lazy_compile(r"non-default args: \{.*(?:\}|\.\.\.|\u2026)[\s`'\"]*$")),
)
