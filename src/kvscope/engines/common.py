"""Lines any engine's log can hold: the PyTorch / CUDA out-of-memory errors and Python tracebacks.

They are engine-neutral (torch prints them), so they get their own tiny parser; the startup they
land in decides what they mean (during CUDA-graph capture, at weight load, at runtime). An engine
whose own prefix is on the line may claim it (``oom_failure`` reads the same numbers).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kvscope.core import events as ev
from kvscope.core.kinds import FailureKind
from kvscope.core.startup import Failure, Finding, Startup, Suggestion, finite_number
from kvscope.core.text import excerpt
from kvscope.engines.base import NUM, LineContext, Parsed, to_float

# \s+ between words: a terminal that hard-wrapped the message leaves runs of spaces inside it
_TORCH_OOM = re.compile(
    rf"(?:OutOfMemoryError|(?:CUDA|HIP)\s+out\s+of\s+memory|out\s+of\s+memory)"
    rf"(?:.*?Tried\s+to\s+allocate\s+({NUM})\s*(MiB|GiB|GB|MB))?"
    rf"(?:.*?GPU\s+(\d+)\s+has\s+a\s+total\s+capac(?:i)?ty\s+of\s+({NUM})\s*GiB\s+of\s+which\s+({NUM})\s*(MiB|GiB)\s+is\s+free)?"
)
# torch before 2.1: "(GPU 0; 10.73 GiB total capacity; 9.85 GiB already allocated; 46.44 MiB free; 9.86 GiB reserved in
# total by PyTorch)"; torch 2.1 spelled the newer message "total capacty" (sic), read above
_TORCH_OOM_OLD = re.compile(
    rf"\(GPU\s+(\d+);\s*({NUM})\s*(GiB|MiB)\s+total\s+capacity;\s*({NUM})\s*(GiB|MiB)\s+already\s+allocated;"
    rf"\s*({NUM})\s*(GiB|MiB)\s+free"
)
# what PyTorch itself had allocated when it ran out: during a weight load, the weights read so far
_TORCH_ALLOCATED = re.compile(rf"Of the allocated memory ({NUM})\s*(MiB|GiB) is allocated by PyTorch")
# what a logger puts before the error: bracketed pids, times and levels, a "torch_npu.memory:" logger name
_LOG_PREFIX = re.compile(r"^(?:\[[^\]\n]{0,40}\]\s*|[\w.]{1,40}:\s*(?=\[))+")
_UNIT = {"MiB": 1 / 1024, "MB": 1 / 1024, "GiB": 1.0, "GB": 1.0}
# torch ≥ 2.1 adds what the failing process itself holds ("Including non-PyTorch memory, this process has …")
_PROCESS_HOLDS = re.compile(rf"this process has ({NUM})\s*(MiB|GiB) memory in use")

# ggml-cuda (and its forks) when cudaMallocHost fails: a warning, the buffer falls back to pageable host memory
_PINNED = re.compile(rf"failed to allocate ({NUM}) ?(MiB|MB|GiB|GB) of pinned memory")
OOM_TEXT = re.compile(r"out of memory|OutOfMemory")

ANCHORS: tuple[bytes, ...] = (b"out of memory", b"OutOfMemory", b'File "', b"Error", b"Exception")

# What torch raises when two operands of one operation disagree in dtype (matmul / linear / conv checks): the
# model code or a checkpoint's dtype, never memory, so no memory setting mends it
DTYPE_MISMATCH = re.compile(
    r"expected (?:mat1 and mat2|both vectors|all tensors) to (?:have|be) (?:the )?same dtype"
    r"|expected scalar type \w+ but found \w+|Input type \([^)]*\) and weight type \([^)]*\) should be the same")

# A Python traceback's frame, and the exception line that ends it ("subprocess.CalledProcessError: Command …"):
# the startup's failure line often says only "hit an exception"; these say where and what
_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+, in (\S+)')
_RAISED = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure))(?::\s*(.*))?$")


def _gib(value: str | None, unit: str | None) -> float | None:
    v = to_float(value)
    return None if v is None or unit is None else v * _UNIT[unit]


def oom_failure(text: str) -> dict[str, Any] | None:
    """The FAILURE payload of a torch / CUDA / HIP out-of-memory line (sizes in GiB), else None."""
    m = _TORCH_OOM.search(text)
    if not m:
        return None
    total, free, allocated = to_float(m.group(4)), _gib(m.group(5), m.group(6)), None
    if (old := _TORCH_OOM_OLD.search(text)) is not None and total is None:
        total, allocated, free = _gib(old.group(2), old.group(3)), _gib(old.group(4), old.group(5)), \
            _gib(old.group(6), old.group(7))
    if (torch_held := _TORCH_ALLOCATED.search(text)) is not None:
        allocated = _gib(torch_held.group(1), torch_held.group(2))
    return {
        "kind": "cuda-oom",
        "message": _LOG_PREFIX.sub("", text.strip(), count=1)[:500],
        "tried_gib": _gib(m.group(1), m.group(2)),
        "device_total_gib": total,
        "device_free_gib": free,
        **({"process_gib": _gib(held.group(1), held.group(2))} if (held := _PROCESS_HOLDS.search(text)) else {}),
        **({"torch_allocated_gib": allocated} if allocated is not None else {}),
    }


class CommonLines:
    engine = "common"
    anchors = ANCHORS
    joins = True  # EngineLines: wants_join below can say yes

    def wants_join(self, text: str) -> bool:
        return "Tried to allocate" in text and "is free" not in text and ("total capacity" in text or "total capacty" in text)

    def parse(self, text: str, ctx: LineContext) -> list[Parsed]:
        m = _PINNED.search(text)
        if m:  # said with "out of memory", but the host buffer is only slower, the startup goes on
            return [Parsed(ev.WARNING, {"code": "pinned-host-memory", "message": text.strip()[:500],
                                        "gib": _gib(m.group(1), m.group(2))})]
        data = oom_failure(text)
        if data:
            return [Parsed(ev.FAILURE, data)]
        m = _FRAME.match(text)
        if m:
            return [Parsed(ev.FRAME, {"path": m.group(1), "function": m.group(2)})]
        m = _RAISED.match(text.strip()) if not text[:1].isspace() else None
        if m and m.group(1) not in ("Traceback",):
            raised = f"{m.group(1)}: {m.group(2)}" if m.group(2) else m.group(1)
            return [Parsed(ev.FRAME, {"raised": raised[:400]})]
        return []


@dataclass(frozen=True)
class ServingLoop:
    """What an engine's traceback looks like when it comes from serving rather than from the startup: the
    functions only the serving loop runs, the step each named function is, and the startup's own functions
    (a profile run or a capture that also goes through them rules serving out)."""

    frames: tuple[str, ...]
    steps: tuple[tuple[str, str], ...]
    startup_frames: tuple[str, ...] = ()
    # the engine sends itself a warmup request through the serving loop before it reports ready (SGLang): a crash
    # there, in a log that shows the startup and no serving, failed the startup
    warmup_request: bool = False


def _functions(data: dict[str, Any]) -> list[str]:
    """The function names of the traceback frames kept in a failure's (or a warning's) data, outermost first."""
    return [str(x).rsplit(":", 1)[-1] for x in data.get("frames") or []]


def _step(loop: ServingLoop, functions: list[str]) -> str:
    """The serving step the innermost named function is."""
    return next((what for fn in reversed(functions) for name, what in loop.steps if fn == name), "a batch")


def _startup_seen(s: Startup) -> bool:
    return s.capacity.kv_tokens is not None or any(r.weights_gib is not None or r.kv_pools for r in s.ranks)


def serving_crash(s: Startup, loop: ServingLoop) -> None:
    """A failure whose traceback runs through the serving loop happened after the server was up: it is said as
    an error while serving (a warning with the step it hit), and, when what it raised is an out of memory, as
    the contract's ``oom-runtime`` failure. A traceback cut before its error claims no out of memory."""
    f = s.failure
    if f is None or f.kind not in ("exception", "cuda-oom"):
        return
    frames = _functions(f.data)
    earlier = next((w for w in s.warnings if w.get("code") == "error-while-serving"), None)
    serving = s.runtime is not None or earlier is not None  # serving lines were read, or a crash while serving
    if f.kind == "cuda-oom" and serving and not any(fn in loop.startup_frames for fn in frames):
        # an out of memory after the server was serving: whatever its traceback shows, a runtime one
        step = _step(loop, frames or _functions(earlier or {}))
        if earlier is not None:
            earlier.update(step=earlier.get("step") or step, raised=f.message)
        else:
            s.warnings.append({"code": "error-while-serving", "message": f.message, "step": step, "raised": f.message,
                               "line": f.source.line_no if f.source else None})
        f.data.update(read_as=f.kind, step=step)
        f.kind = FailureKind.OOM_RUNTIME.value
        return
    if not any(fn in loop.frames for fn in frames) or any(fn in loop.startup_frames for fn in frames):
        return
    if loop.warmup_request and not serving and _startup_seen(s):
        f.data["stage"] = "warmup"  # the engine's own first request: the server never served one
        return
    step = _step(loop, frames)
    raised = [str(x) for x in f.data.get("raised") or []]
    oom = next((r for r in raised if OOM_TEXT.search(r)), None)
    if oom is None and f.kind == "cuda-oom":
        oom = f.message
    s.warnings.append({"code": "error-while-serving", "message": f.message, "step": step,
                       "raised": oom or (raised[0] if raised else None),
                       "line": f.source.line_no if f.source else None})
    if oom is None:
        s.failure = None
        return
    f.data.setdefault("read_as", f.kind)
    f.kind = FailureKind.OOM_RUNTIME.value
    f.message = oom
    f.data["step"] = step


def held_by_earlier(f: Failure, pool: str, this: str) -> tuple[str, str]:
    """(title, opening sentence) for a startup that ran short of memory while an earlier one of the same input still
    held the device (analysis/compare.infer_contention put ``held_by_startup`` and what it held on the failure).
    ``pool`` and ``this`` are the engine's words for its KV pool and for this startup."""
    held = f.data.get("held_gib")
    holding = f" and holding {held:.2f} GiB ({f.data.get('held_how')})" if held is not None else ""
    n = f.data["held_by_startup"]
    return (f"Startup failed: startup {n} was still holding the device",
            f"Startup {n} of this input, on a device of the same size, had sized its {pool} and shows no failure or "
            f"shutdown, so it was still running{holding} when {this} ran short of memory ({excerpt(f.message, 160)}).")


LOAD_FILLS_GPU = 0.85  # memory in use at an out of memory before any weights line, as a share of the device


def weights_fill_gpu(s: Startup, tp_flag: str, tp: int | None) -> Finding | None:
    """An out of memory before any weights line, with the GPU (nearly) full of what the process had read: the
    weights alone are larger than this GPU as placed, whatever the engine's memory fraction (it sizes the KV cache
    after the load, not the load). The model is not known here (an engine that knows it sizes the split), so the
    split is the least that can help and the format the usual one, each said as such. ``tp``: the split the run
    used, None when the log does not say (a worker's error alone)."""
    f = s.failure
    if f is None:
        return None
    total = finite_number(f.data.get("device_total_gib"))
    if total is None:
        total = next((r.total_gib for r in s.ranks if r.total_gib), None)
    free = finite_number(f.data.get("device_free_gib"))
    held = finite_number(f.data.get("torch_allocated_gib")) or finite_number(f.data.get("process_gib")) or (
        total - free if total and free is not None else None)  # a message cut before what the process held
    if held is None or not total or held < LOAD_FILLS_GPU * total:
        return None
    placed = f"at {tp_flag} {tp}" if tp else "as this run split them"
    more = f"{tp_flag} {2 * tp} at least" if tp else f"a larger {tp_flag} than this run used"
    detail = (f"It ran out of memory with {held:.2f} of the GPU's {total:.2f} GiB in use and no line of a finished "
              f"weight load before it: {placed} the weights alone are larger than this GPU, so no memory fraction or "
              f"context setting can help. Split them over more GPUs ({more}) or serve a quantized checkpoint (FP8 halves "
              "16-bit weights, a 4-bit AWQ / GPTQ checkpoint quarters them), or a smaller model. Pass --model … (a "
              "config.json or model id) to size either exactly.")
    quant = Suggestion("--quantization", None, "awq", note="a 4-bit checkpoint of the model: about ¼ of its 16-bit weights")
    split = (Suggestion(tp_flag, tp, 2 * tp, note="at least: the weights alone fill one GPU", alternatives=[quant]) if tp
             else Suggestion(tp_flag, None, None, note="more GPUs than this run used", alternatives=[quant]))
    return Finding("weights-oom", "error", "Startup failed: the weights do not fit the GPU", detail, split)
