"""Lines any engine's log can hold: the PyTorch / CUDA out-of-memory errors and Python tracebacks.

They are engine-neutral (torch prints them), so they get their own tiny parser; the startup they
land in decides what they mean (during CUDA-graph capture, at weight load, at runtime). An engine
whose own prefix is on the line may claim it (``oom_failure`` reads the same numbers).
"""

from __future__ import annotations

import re
from typing import Any

from kvscope.core import events as ev
from kvscope.engines.base import NUM, LineContext, Parsed, to_float

# \s+ between words: a terminal that hard-wrapped the message leaves runs of spaces inside it
_TORCH_OOM = re.compile(
    rf"(?:OutOfMemoryError|(?:CUDA|HIP)\s+out\s+of\s+memory|out\s+of\s+memory)"
    rf"(?:.*?Tried\s+to\s+allocate\s+({NUM})\s*(MiB|GiB|GB|MB))?"
    rf"(?:.*?GPU\s+(\d+)\s+has\s+a\s+total\s+capacity\s+of\s+({NUM})\s*GiB\s+of\s+which\s+({NUM})\s*(MiB|GiB)\s+is\s+free)?"
)
_UNIT = {"MiB": 1 / 1024, "MB": 1 / 1024, "GiB": 1.0, "GB": 1.0}

ANCHORS: tuple[bytes, ...] = (b"out of memory", b"OutOfMemory", b'File "', b"Error", b"Exception")

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
    return {
        "kind": "cuda-oom",
        "message": text.strip()[:500],
        "tried_gib": _gib(m.group(1), m.group(2)),
        "device_total_gib": to_float(m.group(4)),
        "device_free_gib": _gib(m.group(5), m.group(6)),
    }


class CommonLines:
    engine = "common"
    anchors = ANCHORS

    def wants_join(self, text: str) -> bool:
        return "Tried to allocate" in text and "is free" not in text and "total capacity" in text

    def parse(self, text: str, ctx: LineContext) -> list[Parsed]:
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
