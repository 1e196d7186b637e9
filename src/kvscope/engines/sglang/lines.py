"""SGLang's memory log lines, every wording from 0.3 to 0.5.23 (docs/research/sglang-memory.md §7).

Each pattern is searched, not anchored: real logs glue lines after progress bars
(``… 3.89it/s][2026-05-07 13:39:14 DP1 TP1 EP1] Load weight end. …``) and copy-pastes drop the
prefix. The rank comes from SGLang's own prefix ``[time DP? PP? ATTN_CP? MOE_DP? TP? EP?]`` (0.3.x
printed the time without the date, ``[23:17:01 TP0]``; 0.2.x wrote ``[gpu_id=N]`` instead); a line
without one belongs to the single rank of a TP=1 server.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kvscope.core import events as ev
from kvscope.engines.base import NUM, LineContext, Parsed, cut_short, to_float, to_int
from kvscope.engines.common import oom_failure
from kvscope.engines.lazy import lazy_compile
from kvscope.engines.sglang.server_args import parse_server_args
from kvscope.engines.shapes import Shape, Shapes, first_match

ENGINE = "sglang"
SINGLE_RANK = "TP0"

_PREFIX = lazy_compile(
    r"\[((?:\d{4}-\d\d-\d\d[ T])?\d\d:\d\d:\d\d(?:[.,]\d+)?)((?: (?:DP|PP|ATTN_CP|MOE_DP|CP|TP|EP)\d+)*)"
    r"(?: rank=(\d+))?\] ?"
)
_BARE_RANK = lazy_compile(r"\[(rank|gpu_id)=(\d+)\] ?")  # gpu_id: 0.2.x, one process per TP rank
G = rf"({NUM})"  # one captured number

_INIT_BEGIN = lazy_compile(r"Init torch distributed begin\.")
_INIT_END = lazy_compile(rf"Init torch distributed ends\.(?: elapsed={G} s,)? mem usage={G} ?GB")
_BASELINE = lazy_compile(rf"Memory baseline taken\. mem usage={G} ?GB")
_LOAD_BEGIN = lazy_compile(rf"Load weight begin\. avail mem={G} ?GB")
# "Load weight end. [elapsed=…, ]type=…, [dtype=…|quant=…, ]avail mem=… GB[, mem usage=… GB]." — fields read by
# name, each optional (a pasted excerpt may shorten the line to "Load weight end ... type=X, mem usage=28.39 GB")
_LOAD_END = lazy_compile(r"Load weight end(?:\.|\s*(?:\.\.\.|…)|\s)(.*)")
_LOAD_END_WHOLE = lazy_compile(rf"Load weight end\b.*?(?i:avail mem|mem usage)={G} ?GB")
# the draft model of speculative decoding, by its class: DeepseekV3ForCausalLMNextN, Qwen3_5ForCausalLMMTP, MiMoMTP,
# LlamaForCausalLMEagle3, Eagle3DeepseekV2ForCausalLM, DFlashDraftModel (Eagle2_5_VL… is a target VLM)
_DRAFT_CLASS = lazy_compile(r"^(?:Eagle3|DFlash)|(?:NextN|MTP|Eagle\d*|DraftModel)$")
_KV_DTYPE = lazy_compile(r"Using KV cache dtype: ([\w.]+)")
_SWA_SPLIT = lazy_compile(
    r"Use [Ss]liding window memory pool(?: \(all SWA\))?\.(?: full_layer_tokens=(\d+),)? swa_layer_tokens=(\d+)"
)
_MAMBA = lazy_compile(rf"Mamba Cache is allocated\. max_mamba_cache_size: (\d+), conv_state size: {G} ?GB, ssm_state size: {G} ?GB")
_KV_POOL = lazy_compile(
    # the pool's name before "KV Cache" is a few words: bounded, so a long run of letters is not rescanned from
    # every position (quadratic time on one 20 KB line)
    rf"(?:(\w[\w ]{{0,60}}?) )?KV [Cc]ache (?:is allocated|allocated|VA upper bound)\.(?: dtype: ([\w.]+),)?"
    rf"(?: #tokens: (\d+),)? (?:K size: {G} ?GB, V size: {G} ?GB|KV size: {G} ?GB)"
)
_SWA_POOL = lazy_compile(rf"SWAKVPool mem usage: {G} ?GB, swa size: (\d+), full size: (\d+)")
# DeepSeek-V4 (≥0.5.12): the pools are sized by bytes per full token after fixed states (dsv4.py)
_DSV4_CALC = lazy_compile(r"DSV4 memory calculation:.*?bytes_per_full_token=.*?full_token=\d")
DSV4_POOL = "DeepSeek-V4 pools"
_DSV4_SIZES = lazy_compile(r"DSV4 pool sizes: (full=\d+.*)")
# a shortened pool line ("KV Cache VA upper bound ... #tokens: 273K"): a count with K/M is rounded, not a token count
_KV_POOL_SHORT = lazy_compile(
    r"KV [Cc]ache (?:is allocated|allocated|VA upper bound)\b.*?#tokens: (\d+(?:\.\d+)?)(?: ?([KkMm])\b(?! size))?"
)
_SCALE = {"k": 1_000, "m": 1_000_000}
_KV_AVAILABLE = lazy_compile(rf"The available memory for KV cache is {G} ?GB")
_POOL_END = lazy_compile(rf"Memory pool end\. avail mem={G} ?GB")
# "Capture [target|draft] [decode|extend|prefill] <device> graph …": the device word in any case (cuda, CUDA, NPU, …)
_DEVICE = r"(?i:cuda|cpu|npu|xpu|musa|hpu)"
_GRAPH_BEGIN = lazy_compile(rf"Capture ((?:\w+ )*?){_DEVICE} graph begin\.(?:.*?avail mem={G} ?GB)?")
_GRAPH_END = lazy_compile(rf"Capture ((?:\w+ )*?){_DEVICE} graph end\.(.*)")
# SGLang wraps whatever capture raised: "Exception: Capture cuda graph failed: <error>" + "Possible solutions:"
# tqdm's bar on the first rank while graphs are captured, largest batch first:
# "Capturing batches (bs=256 avail_mem=20.14 GB):   2%|▊     | 1/35" or, in older releases, "(avail_mem=5.25 GB)"
_GRAPH_BAR = lazy_compile(rf"Capturing batches \((?:bs=(\d+) )?avail_mem={G} ?GB\):\s*\d+%\|[^|]*\|\s*(\d+)/(\d+)")
_GRAPH_FAILED = lazy_compile(rf"Capture (?:\w+ )*?{_DEVICE} graph failed:?\s*(.*)")
_USAGE = lazy_compile(rf"(?i:mem usage)={G} ?GB")
_AVAIL = lazy_compile(rf"(?i:avail mem)={G} ?GB")  # ≤0.1.x wrote "Avail mem=" and "Type="
_READY = lazy_compile(r"max_total_num_tokens=(\d+)")
_READY_FIELDS = lazy_compile(rf"(?<!\w)(\w+)=({NUM})")  # a name starts a word: one scan per word, not per letter
_READY_GPU = lazy_compile(rf"available_gpu_mem={G} ?GB")
_HOST_OLD = lazy_compile(rf"Allocating {G} ?GB host memory for (.+?)\.?$")
_HOST_E4 = lazy_compile(rf"Allocating kv hierarchical KV host pool: (\d+) tokens, {G} ?GB host memory")
_MM_RESERVE = lazy_compile(rf"Reserving {G} ?GB of the KV budget for post-sizing multimodal")
# a request refused at serving time: SGLang caps one request at max_req_input_len = min(context_len − 1,
# pool size − 1) − 5, so the figure it prints names the KV pool whenever the pool is the smaller of the two
_INPUT_TOO_LONG = lazy_compile(r"Input length \((\d+) tokens\) exceeds the maximum allowed length \((\d+) tokens\)")
_MAX_TOTAL_CLAMP = lazy_compile(r"max_total_tokens=(-?\d+) is larger than the profiled value (-?\d+)")
_NOT_ENOUGH = lazy_compile(r"Not enough memory\. Please try to increase --mem-fraction-static")
_CURRENT_MFS = lazy_compile(rf"mem_fraction_static={G}")
_NO_KV_ROOM = lazy_compile(rf"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={G}")
_RAISE_ABOVE = lazy_compile(rf"Raise --mem-fraction-static above {G}")
_POOL_TOO_SMALL = lazy_compile(r"Memory pool size is too small")
_MAMBA_NO_ROOM = lazy_compile(r"Not enough GPU memory for hybrid \(mamba/linear-attention\) state cache")
_UNBALANCED = lazy_compile(
    rf"memory capacity is unbalanced.*?(?:min_per_gpu_memory|pre_model_load_memory)={G}.*?local_gpu_memory={G}"
)
_HOST_SHORT = lazy_compile(rf"Not enough host memory available\. Requesting {G} ?GB but only have {G} ?GB")
# ≥0.5: "Dynamically adjusted --mem-fraction-static from: X to: Y"; 0.4.x: "Automatically reduce
# --mem-fraction-static to 0.760 because this is a multimodal model."
_VLM_ADJUST = lazy_compile(
    rf"(?:Dynamically adjusted --mem-fraction-static from: {G} to|Automatically reduce --mem-fraction-static to):? {G}"
)
_MRR_RESET = lazy_compile(r"Max running requests is reset to (\d+)")
# the launcher's handler when its scheduler process dies: the cause is the error printed before it
_CHILD_FAILED = lazy_compile(r"Received sigquit from a child process\. It usually means the child failed")
_EXCEPTION = lazy_compile(
    r"Scheduler hit an exception|TpModelWorker\w* hit an exception|Exception in ModelRunner"
    r"|Exception in run_tp_server|Exception in ModelTpServer"  # 0.3.x / 0.2.x worker loops
    r"|Initialization failed\. router_init_state"  # ≤0.1.x
)
# A device error names its own cause (flashinfer's "CUDA Error: … (209)", torch's "CUDA error: …", ROCm's "HIP error: …");
# an out-of-memory is left to the engine-neutral parser (engines/common.py), which reads its sizes.
_DEVICE_ERROR = lazy_compile(r"\b(?:CUDA|HIP) [Ee]rror: ([^(/]+)")
_OOM_WORDS = lazy_compile(r"out\s+of\s+memory|OutOfMemory")
# A Python traceback a rank printed: startup stopped there (the cause is in the traceback's last lines)
_TRACEBACK = lazy_compile(r"\s*Traceback \(most recent call last\)")
_VERSION = lazy_compile(r"sglang(?:==| version[: ]+v?)(\d+\.\d+\.\d+[\w.]*)")
_KV_FIELDS = lazy_compile(r"(?<!\w)(\w+)=([^,]+)")

ANCHORS: tuple[bytes, ...] = (
    b"mem",
    b"Mem",
    b"KV ",
    b"server_args",
    b"max_total",
    b"Not enough",
    b"Capture ",
    b"Allocating",
    b"liding window",
    b"xception",
    b"sglang",
    b"Max running",
    b"maximum allowed length",
    b"Init torch distributed begin",
    b"Received sigquit",
    b"DSV4",
    b"Mamba",
    b"Initialization failed",
    b"CUDA Error",
    b"CUDA error",
    b"HIP error",
    b"Traceback",
)


def split_prefix(text: str) -> tuple[str | None, str | None, str]:
    """(rank label, timestamp, message). Rank None: no SGLang prefix on the line."""
    m = _PREFIX.search(text)
    if m:
        parts = m.group(2).strip()
        label = parts or (f"rank={m.group(3)}" if m.group(3) else SINGLE_RANK)
        return label, m.group(1), text[m.end() :]
    m = _BARE_RANK.search(text)
    if m:
        label = f"TP{m.group(2)}" if m.group(1) == "gpu_id" else f"rank={m.group(2)}"
        return label, None, text[m.end() :]
    return None, None, text


def _gib(m: re.Match[str], i: int) -> float | None:
    return to_float(m.group(i))


def _load_end(rest: str) -> dict | None:
    """The fields of a 'Load weight end' line, by name; None when it carries none (prose, a cut line)."""
    avail, usage = _AVAIL.search(rest), _USAGE.search(rest)
    data: dict = {"avail_after_weights_gib": to_float(avail.group(1)) if avail else None,
                  "weights_gib": to_float(usage.group(1)) if usage else None}
    for key, value in _KV_FIELDS.findall(rest):
        key, value = key.lower(), value.strip()
        if key == "type":
            data["model_class"] = value.split()[0].rstrip(".") if value.split() else None
        elif key == "dtype":
            data["weights_dtype"] = value
        elif key == "quant":
            data["weights_quant"] = value
        elif key == "elapsed":
            data["load_seconds"] = to_float(value.rstrip(" s"))
    return data if any(v is not None for v in data.values()) else None


def _weights_end(rest: str) -> list[Parsed]:
    """A load end: the target's (a phase the assembler orders), or, named by its class, the draft model's."""
    data = _load_end(rest)
    if data is None:
        return []
    cls = data.get("model_class")
    if cls and _DRAFT_CLASS.search(cls):  # the draft's, wherever it comes (an excerpt may hold no target load)
        return [Parsed(ev.PHASE, {"phase": "draft_weights_end", "draft_weights_gib": data["weights_gib"],
                                  "avail_after_draft_weights_gib": data["avail_after_weights_gib"],
                                  "draft_model_class": cls, "draft_load_seconds": data.get("load_seconds")})]
    return [Parsed(ev.PHASE, {"phase": "weights_end", **data})]


def _short_pool(m: re.Match[str]) -> list[Parsed]:
    """A pool line shortened by hand: an exact #tokens is the pool's count; '273K' is only its size class."""
    value, suffix = m.group(1), m.group(2)
    if suffix is None:
        tokens = to_int(value) if value.isdigit() else None
        return [Parsed(ev.POOL, {"label": None, "tokens": tokens})] if tokens is not None else []
    approx = to_float(value)
    if approx is None:
        return []
    return [Parsed(ev.CAPACITY, {"kv_tokens_approx": int(approx * _SCALE[suffix.lower()]),
                                 "kv_tokens_as_printed": f"{value}{suffix}"})]


def _graph_end(kind: str, rest: str) -> dict:
    usage, avail = _USAGE.search(rest), _AVAIL.search(rest)
    return {
        "graph": kind.strip() or "decode",
        "graph_gib": to_float(usage.group(1)) if usage else None,
        "avail_gib": to_float(avail.group(1)) if avail else None,
    }


def _pool(m: re.Match[str]) -> dict:
    return {
        "label": (m.group(1) or "").strip() or None,
        "dtype": m.group(2),
        "tokens": to_int(m.group(3)),
        "k_gib": _gib(m, 4),
        "v_gib": _gib(m, 5),
        "gib": _gib(m, 6),
    }


def _dsv4_calc(msg: str) -> list[Parsed]:
    """One DeepSeek-V4 sizing line → the pool it implies (tokens × bytes + fixed states) and its terms,
    for the rank that printed it (fields read by name: their order and presence vary by release)."""
    fields = dict(_READY_FIELDS.findall(msg))  # name=number, any order
    bpft, tokens = to_float(fields.get("bytes_per_full_token")), to_int(fields.get("full_token"))
    c128, swa = to_float(fields.get("c128_state_fixed")), to_float(fields.get("swa_fixed"))
    if bpft is not None and bpft <= 0:
        bpft = None
    fixed = (c128 or 0.0) + (swa or 0.0)
    gib = None if bpft is None or tokens is None else tokens * bpft / (1 << 30) + fixed
    return [Parsed(ev.POOL, {"label": DSV4_POOL, "tokens": tokens, "gib": gib}),
            Parsed(ev.RANK, {"dsv4_bytes_per_full_token": bpft, "dsv4_available_gib": to_float(fields.get("available_bytes")),
                             "dsv4_c128_state_fixed_gib": c128, "dsv4_swa_fixed_gib": swa, "dsv4_full_tokens": tokens})]


def _ready(msg: str) -> dict:
    data: dict[str, float | None] = {k: to_int(v) for k, v in _READY_FIELDS.findall(msg) if k != "available_gpu_mem"}
    gpu = _READY_GPU.search(msg)
    if gpu:
        data["available_gpu_mem_gib"] = to_float(gpu.group(1))
    return data


def _device_error(msg: str) -> list[Parsed]:
    """A CUDA/HIP error (not an out-of-memory) stops the startup and names its own cause."""
    m = _DEVICE_ERROR.search(msg)
    if m is None or _OOM_WORDS.search(msg):
        return []
    return [Parsed(ev.FAILURE, {"kind": "exception", "message": msg.strip()[:500], "device_error": m.group(1).strip()})]


def _ranked_failure(msg: str, rank: str, ctx: LineContext) -> list[Parsed]:
    """Failures whose wording is generic, claimed when an SGLang rank prefix is on the line: an out-of-memory
    (the numbers engines/common.py reads; the startup it belongs to is this engine's) and a rank's traceback
    before the server was ready (weak: a later line may name the cause)."""
    oom = oom_failure(msg)
    if oom is not None:
        return [Parsed(ev.FAILURE, oom)]
    if not _TRACEBACK.match(msg) or ctx.state.get("sglang_ready"):
        return []
    data = {"kind": "exception", "message": msg.strip(), "weak": True, "traceback": True}
    if rank in ctx.state.get("sglang_capturing", ()):
        data["stage"] = "graph-capture"  # capture began on this rank and neither ended nor reached ready
    return [Parsed(ev.FAILURE, data)]


def _labelled(text: str) -> bool:
    m = _PREFIX.search(text)
    return bool(m and (m.group(2).strip() or m.group(3))) or _BARE_RANK.search(text) is not None


def _another_capture(out: list[Parsed], rank: str | None, ctx: LineContext) -> bool:
    """Whether this line's graph capture belongs to another run than the one before it.

    One startup captures the target model's graphs once per rank (then, for speculative decoding, the
    draft's, announced by its own "Capture draft … begin" line). So a rank ending the target capture a
    second time, or a capture progress bar after a target capture ended with no draft capture begun,
    is a new run: operators paste several attempts one after another, with no banner between them.
    """
    ended: set[str] = ctx.state.get("sglang_target_graphs_ended", set())
    for p in out:
        if p.kind != ev.PHASE:
            continue
        phase, graph = p.data.get("phase"), str(p.data.get("graph") or "")
        if phase == "graph_end" and graph == "decode" and (rank or SINGLE_RANK) in ended:
            return True
        if phase == "graph_progress" and ended and not ctx.state.get("sglang_draft_capture"):
            return True
    return False


def _track(out: list[Parsed], rank: str | None, ctx: LineContext) -> None:
    """What a later generic line needs to know: is a rank capturing CUDA graphs, is the server ready,
    which ranks ended the target capture (see ``_another_capture``)."""
    for p in out:
        phase = p.data.get("phase") if p.kind == ev.PHASE else None
        graph = str(p.data.get("graph") or "") if phase else ""
        if phase in ("graph_begin", "graph_end") and "draft" in graph:
            ctx.state["sglang_draft_capture"] = True
        if phase == "graph_end" and graph == "decode":
            ctx.state.setdefault("sglang_target_graphs_ended", set()).add(rank or SINGLE_RANK)
        if p.kind == ev.BOUNDARY or phase == "weights_begin":
            ctx.state["sglang_ready"] = False
            ctx.state["sglang_capturing"] = set()
            ctx.state["sglang_target_graphs_ended"] = set()
            ctx.state["sglang_draft_capture"] = False
        elif phase == "ready":
            ctx.state["sglang_ready"] = True
            ctx.state["sglang_capturing"] = set()
        elif phase == "graph_begin" or (p.kind == ev.RANK and p.data.get("graph_capture_began")):
            ctx.state.setdefault("sglang_capturing", set()).add(rank or SINGLE_RANK)
        elif phase == "graph_end":
            ctx.state.setdefault("sglang_capturing", set()).discard(rank or SINGLE_RANK)


class SGLangLines:
    """Line knowledge for SGLang (see module docstring)."""

    engine = ENGINE
    anchors = ANCHORS
    joins = True  # EngineLines: wants_join below can say yes

    def wants_join(self, text: str) -> bool:
        return cut_short(text, _JOINABLE)

    def parse(self, text: str, ctx: LineContext) -> list[Parsed]:
        rank, ts, msg = split_prefix(text)
        out = self._parse_message(msg)
        if out and out[0].kind == ev.PHASE and out[0].data.get("phase") == "runner_init":
            # a model runner starting after the target's graphs were captured: the speculative draft's worker
            out = [Parsed(ev.RANK, {"second_runner_began": True})] if ctx.state.get("sglang_target_graphs_ended") else []
        if out and _another_capture(out, rank, ctx):
            out.insert(0, Parsed(ev.BOUNDARY, {"why": "a second graph capture: another run"}))
        if out and rank is not None:
            ctx.state["sglang_prefixed"] = ctx.file  # SGLang's own wording under its prefix: this file is SGLang's
        elif not out:
            # generic wording (a device error, an OOM, a traceback) is SGLang's only under a rank label, or in a
            # file SGLang's own lines already claimed: a bare "[12:00:00]" stamp proves nothing
            claimed = _labelled(text) or ("sglang_prefixed" in ctx.state and ctx.state["sglang_prefixed"] == ctx.file)
            if claimed:
                out = _device_error(msg)
                if not out and rank is not None:
                    out = _ranked_failure(msg, rank, ctx)
        _track(out, rank, ctx)
        for p in out:
            p.rank = rank  # None: no prefix; the assembler attaches it to the startup's reference rank
            p.timestamp = ts
        return out

    def _parse_message(self, msg: str) -> list[Parsed]:
        if "server_args=" in msg:  # the launch arguments: a config dump, read field by field, not a line shape
            return parse_server_args(msg)
        found = first_match(SHAPES.rows, msg)
        return found if found is not None else []


_JOINABLE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("KV Cache is allocated", _KV_POOL),
    ("Load weight end", _LOAD_END_WHOLE),
    ("Memory pool end", _POOL_END),
    ("max_total_num_tokens=", _READY_GPU),
    ("graph end.", _AVAIL),
    ("server_args=", lazy_compile(r"server_args=(?:ServerArgs\(.*\)|\{.*\})\s*$")),
)


# --- the line shapes, as rows (engines/shapes.py): tried in this order, the first match gives the events ----------


def _pool_row(m: re.Match[str], msg: str) -> list[Parsed]:
    return [Parsed(ev.POOL, _pool(m))]


def _graph_begin(m: re.Match[str], msg: str) -> list[Parsed]:
    if m.group(2) is None:  # ≤0.4: "Capture cuda graph begin. This can take up to several minutes."
        return [Parsed(ev.RANK, {"graph_capture_began": True})]
    return [Parsed(ev.PHASE, {"phase": "graph_begin", "graph": m.group(1).strip() or "decode", "avail_gib": _gib(m, 2)})]


def _dsv4_sizes(m: re.Match[str], msg: str) -> list[Parsed]:
    sizes = {f"dsv4_{'sizes_full' if k == 'full' else k}_tokens": to_int(v) for k, v in _READY_FIELDS.findall(m.group(1))}
    return [Parsed(ev.RANK, sizes)]


def _mamba(m: re.Match[str], msg: str) -> list[Parsed]:
    conv, ssm = _gib(m, 2), _gib(m, 3)
    return [Parsed(ev.POOL, {"label": "mamba", "tokens": None, "k_gib": None, "v_gib": None,
                             "gib": (conv or 0) + (ssm or 0), "dtype": None, "mamba_slots": to_int(m.group(1))})]


def _host_e4(m: re.Match[str], msg: str) -> list[Parsed]:
    host_gb = _gib(m, 2)
    return [Parsed(ev.POOL, {"label": "host", "tokens": to_int(m.group(1)), "gib": host_gb and host_gb * 1e9 / (1 << 30),
                             "host_gb": host_gb})]


def _host_old(m: re.Match[str], msg: str) -> list[Parsed]:
    host_gb = _gib(m, 1)
    return [Parsed(ev.POOL, {"label": "host", "tokens": None, "gib": host_gb and host_gb * 1e9 / (1 << 30),
                             "host_gb": host_gb, "what": m.group(2)})]


def _input_too_long(m: re.Match[str], msg: str) -> list[Parsed]:
    return [Parsed(ev.CAPACITY, {"max_req_input_len": to_int(m.group(2))}),
            Parsed(ev.WARNING, {"code": "input-too-long", "message": msg.strip(),
                                "input_tokens": to_int(m.group(1)), "max_input_tokens": to_int(m.group(2))})]


def _max_total_clamp(m: re.Match[str], msg: str) -> list[Parsed]:
    profiled = to_int(m.group(2))
    out = [Parsed(ev.WARNING, {"code": "max-total-tokens-above-profile", "message": msg.strip(),
                               "requested": to_int(m.group(1)), "profiled": profiled})]
    if profiled is not None and profiled <= 0:  # weights + reserve exceed the budget: SGLang raises next
        out.append(Parsed(ev.FAILURE, {"kind": "not-enough-memory", "message": msg.strip(), "profiled_tokens": profiled}))
    return out


def _not_enough(m: re.Match[str], msg: str) -> list[Parsed]:
    cur = _CURRENT_MFS.search(msg)
    return [Parsed(ev.FAILURE, {"kind": "not-enough-memory", "message": msg.strip(),
                                "mem_fraction_static": to_float(cur.group(1)) if cur else None})]


def _no_kv_room(m: re.Match[str], msg: str) -> list[Parsed]:
    above = _RAISE_ABOVE.search(msg)
    return [Parsed(ev.FAILURE, {"kind": "not-enough-memory", "message": msg.strip(),
                                "mem_fraction_static": to_float(m.group(1)),
                                "raise_above": to_float(above.group(1)) if above else None})]


def _graph_failed(m: re.Match[str], msg: str) -> list[Parsed]:
    """SGLang's own wrapper around whatever capture raised; an OOM keeps the sizes torch printed."""
    oom = oom_failure(msg) if _OOM_WORDS.search(msg) else None
    if oom is not None:
        return [Parsed(ev.FAILURE, {**oom, "stage": "graph-capture"})]
    return [Parsed(ev.FAILURE, {"kind": "exception", "message": msg.strip(), "stage": "graph-capture",
                                "cause": m.group(1).strip() or None})]


def _failure(kind: str, **extra: Any) -> Callable[[re.Match[str], str], list[Parsed]]:
    return lambda m, msg: [Parsed(ev.FAILURE, {"kind": kind, "message": msg.strip(), **extra})]


_SOURCE = "SGLang's source wording; no posted log in the corpus prints it yet"

SHAPES = Shapes((
    Shape("load-begin", _LOAD_BEGIN,
          lambda m, msg: [Parsed(ev.PHASE, {"phase": "weights_begin", "pre_load_free_gib": _gib(m, 1)})],
          (ev.PHASE,), "all", "Load weight begin. avail mem=23.07 GB"),
    Shape("load-end", _LOAD_END, lambda m, msg: _weights_end(m.group(1)), (ev.PHASE,), "all",
          "Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=104.22 GB"),
    Shape("kv-pool", _KV_POOL, _pool_row, (ev.POOL,), "0.4.3–", "KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB"),
    Shape("kv-pool-cut", _KV_POOL_SHORT, lambda m, msg: _short_pool(m), (ev.POOL,), "0.4.3–",
          "KV Cache is allocated. #tokens: 300288, K size"),
    Shape("pool-end", _POOL_END,
          lambda m, msg: [Parsed(ev.PHASE, {"phase": "pool_end", "avail_after_pool_gib": _gib(m, 1)})],
          (ev.PHASE,), "0.2–", "Memory pool end. avail mem=11.18 GB"),
    Shape("graph-end", _GRAPH_END,
          lambda m, msg: [Parsed(ev.PHASE, {"phase": "graph_end", **_graph_end(m.group(1), m.group(2))})],
          (ev.PHASE,), "all", "Capture cuda graph end. Time elapsed: 5.92 s. mem usage=1.44 GB. avail mem=37.06 GB."),
    Shape("graph-progress", _GRAPH_BAR,
          lambda m, msg: [Parsed(ev.PHASE, {"phase": "graph_progress", "bs": to_int(m.group(1)) if m.group(1) else None,
                                            "avail_gib": _gib(m, 2), "done": to_int(m.group(3)),
                                            "total": to_int(m.group(4))})],
          (ev.PHASE,), "undated", "Capturing batches (bs=16 avail_mem=13.56 GB):   0%|          | 0/6 [00:00<?, ?it/s]"),
    Shape("graph-begin", _GRAPH_BEGIN, _graph_begin, (ev.PHASE,), "all",
          "Capture cuda graph begin. This can take up to several minutes. avail mem=13.95 GB"),
    Shape("scheduler-ready", _READY, lambda m, msg: [Parsed(ev.PHASE, {"phase": "ready", **_ready(msg)})], (ev.PHASE,),
          "0.3.6–", "max_total_num_tokens=2261377, chunked_prefill_size=16384, max_prefill_tokens=16384, "
          "max_running_requests=4096, context_len=128000, available_gpu_mem=37.06 GB"),
    Shape("init-end", _INIT_END, lambda m, msg: [Parsed(ev.RANK, {"init_mem_usage_gib": _gib(m, m.lastindex or 1)})],
          (ev.RANK,), "0.4.3–", "Init torch distributed ends. mem usage=0.00 GB"),
    Shape("memory-baseline", _BASELINE, lambda m, msg: [Parsed(ev.RANK, {"init_mem_usage_gib": _gib(m, 1)})],
          (ev.RANK,), "0.5.23–", "Memory baseline taken. mem usage=0.52 GB", _SOURCE),
    Shape("init-begin", _INIT_BEGIN, lambda m, msg: [Parsed(ev.PHASE, {"phase": "runner_init"})], (ev.PHASE,), "all",
          "Init torch distributed begin."),
    Shape("kv-dtype", _KV_DTYPE, lambda m, msg: [Parsed(ev.SETTINGS, {"kv_cache_dtype_resolved": m.group(1)})],
          (ev.SETTINGS,), "0.5.4–0.5.12", "Using KV cache dtype: torch.bfloat16"),
    Shape("dsv4-calculation", _DSV4_CALC, lambda m, msg: _dsv4_calc(msg), (ev.POOL, ev.RANK), "undated",
          "DSV4 memory calculation: bytes_per_full_token=7705.45, available_bytes=11.89 GB, c128_state_fixed=0.11 GB, "
          "full_token=1641472"),
    Shape("dsv4-pool-sizes", _DSV4_SIZES, _dsv4_sizes, (ev.RANK,), "undated",
          "DSV4 pool sizes: full=1641472, swa=164096, c4=410368, c128=12824, c4_state=10256, c128_state=0"),
    Shape("swa-pool", _SWA_POOL,
          lambda m, msg: [Parsed(ev.PHASE, {"phase": "swa_pool", "gib": _gib(m, 1), "swa_tokens": to_int(m.group(2)),
                                            "full_tokens": to_int(m.group(3))})],
          (ev.PHASE,), "undated", "SWAKVPool mem usage: 77.63 GB, swa size: 1496958, full size: 1496958"),
    Shape("swa-split", _SWA_SPLIT,
          lambda m, msg: [Parsed(ev.CAPACITY, {"full_layer_tokens": to_int(m.group(1)),
                                               "swa_layer_tokens": to_int(m.group(2))})],
          (ev.CAPACITY,), "0.5.2–", "Use sliding window memory pool. full_layer_tokens=318715, swa_layer_tokens=254972"),
    Shape("mamba-pool", _MAMBA, _mamba, (ev.POOL,), "undated",
          "Mamba Cache is allocated. max_mamba_cache_size: 38, conv_state size: 0.03GB, ssm_state size: 2.74GB "),
    Shape("kv-available", _KV_AVAILABLE, lambda m, msg: [Parsed(ev.CAPACITY, {"available_kv_gib": _gib(m, 1)})],
          (ev.CAPACITY,), "undated", "The available memory for KV cache is 17.67 GB."),
    Shape("host-pool", _HOST_E4, _host_e4, (ev.POOL,), "0.5.18–",
          "Allocating kv hierarchical KV host pool: 1048576 tokens, 40.00 GB host memory.", _SOURCE),
    Shape("host-memory", _HOST_OLD, _host_old, (ev.POOL,), "all",
          "Allocating 15.58 GB host memory for hierarchical KV cache."),
    Shape("multimodal-reserve", _MM_RESERVE,
          lambda m, msg: [Parsed(ev.RANK, {"multimodal_reserve_gib": _gib(m, 1)})], (ev.RANK,), "undated",
          "Reserving 0.10 GB of the KV budget for post-sizing multimodal allocations (feature-transport pools + "
          "embedding cache)."),
    Shape("input-too-long", _INPUT_TOO_LONG, _input_too_long, (ev.CAPACITY, ev.WARNING), "undated",
          "Input length (160062 tokens) exceeds the maximum allowed length (59862 tokens). Use a shorter input or "
          "enable --allow-auto-truncate."),
    Shape("max-total-clamped", _MAX_TOTAL_CLAMP, _max_total_clamp, (ev.WARNING,), "all",
          "max_total_tokens=100000 is larger than the profiled value 23063. Use the profiled value instead."),
    Shape("rank-imbalance", _UNBALANCED,
          lambda m, msg: [Parsed(ev.WARNING, {"code": "rank-imbalance", "message": msg.strip(),
                                              "min_gib": _gib(m, 1), "local_gib": _gib(m, 2)})],
          (ev.WARNING,), "all", "The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
          "min_per_gpu_memory=70.12, local_gpu_memory=79.10, local_gpu_memory * 0.9=71.19", _SOURCE),
    Shape("fraction-adjusted", _VLM_ADJUST,
          lambda m, msg: [Parsed(ev.SETTINGS, {"mem_fraction_static": _gib(m, 2), "mem_fraction_static_auto": _gib(m, 1)})],
          (ev.SETTINGS,), "0.4.10–", "Automatically reduce --mem-fraction-static to 0.760 because this is a multimodal model."),
    Shape("max-running-reset", _MRR_RESET,
          lambda m, msg: [Parsed(ev.SETTINGS, {"max_running_requests": to_int(m.group(1))})], (ev.SETTINGS,), "undated",
          "Max running requests is reset to 48 for speculative decoding.", _SOURCE),
    Shape("version", _VERSION, lambda m, msg: [Parsed(ev.VERSION, {"engine_version": m.group(1)})], (ev.VERSION,), "all",
          "sglang version: 0.5.9", _SOURCE),
    # the memory failures SGLang raises at startup
    Shape("not-enough-memory", _NOT_ENOUGH, _not_enough, (ev.FAILURE,), "all",
          "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
          "self.server_args.mem_fraction_static=0.2"),
    Shape("no-kv-room", _NO_KV_ROOM, _no_kv_room, (ev.FAILURE,), "0.5.14–",
          "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.88."),
    Shape("pool-too-small", _POOL_TOO_SMALL, _failure("not-enough-memory"), (ev.FAILURE,), "all",
          "AssertionError: Memory pool size is too small", _SOURCE),
    Shape("mamba-no-room", _MAMBA_NO_ROOM, _failure("not-enough-memory"), (ev.FAILURE,), "undated",
          "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache", _SOURCE),
    Shape("host-memory-short", _HOST_SHORT,
          lambda m, msg: [Parsed(ev.FAILURE, {"kind": "host-memory", "message": msg.strip(),
                                              "requested_gb": to_float(m.group(1)), "free_gb": to_float(m.group(2))})],
          (ev.FAILURE,), "undated", "ValueError: Not enough host memory available. Requesting 40.00 GB but only have "
          "44.87 GB free. Please reduce the size of the hierarchical cache."),
    Shape("graph-capture-failed", _GRAPH_FAILED, _graph_failed, (ev.FAILURE,), "all",
          "Exception: Capture cuda graph failed: "),
    Shape("scheduler-exception", _EXCEPTION, _failure("exception", weak=True), (ev.FAILURE,), "all",
          "Scheduler hit an exception: Traceback (most recent call last):"),
    Shape("child-failed", _CHILD_FAILED, _failure("exception", weak=True, echo=True), (ev.FAILURE,), "all",
          "Received sigquit from a child process. It usually means the child failed."),
))
