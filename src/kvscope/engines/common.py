"""Lines any engine's log can hold: the PyTorch / CUDA out-of-memory errors.

They are engine-neutral (torch prints them), so they get their own tiny parser; the startup they
land in decides what they mean (during CUDA-graph capture, at weight load, at runtime).
"""

from __future__ import annotations

import re

from kvscope import events as ev
from kvscope.engines.base import NUM, LineContext, Parsed, to_float

_TORCH_OOM = re.compile(
    rf"(?:OutOfMemoryError|CUDA out of memory|HIP out of memory|out of memory)(?:.*?Tried to allocate ({NUM}) ?(MiB|GiB|GB|MB))?"
    rf"(?:.*?GPU (\d+) has a total capacity of ({NUM}) ?GiB of which ({NUM}) ?(MiB|GiB) is free)?"
)
_UNIT = {"MiB": 1 / 1024, "MB": 1 / 1024, "GiB": 1.0, "GB": 1.0}

ANCHORS: tuple[bytes, ...] = (b"out of memory", b"OutOfMemory")


def _gib(value: str | None, unit: str | None) -> float | None:
    v = to_float(value)
    return None if v is None or unit is None else v * _UNIT[unit]


class CommonLines:
    engine = "common"
    anchors = ANCHORS

    def wants_join(self, text: str) -> bool:
        return "Tried to allocate" in text and "is free" not in text and "total capacity" in text

    def parse(self, text: str, ctx: LineContext) -> list[Parsed]:
        m = _TORCH_OOM.search(text)
        if not m:
            return []
        data = {
            "kind": "cuda-oom",
            "message": text.strip()[:500],
            "tried_gib": _gib(m.group(1), m.group(2)),
            "device_total_gib": to_float(m.group(4)),
            "device_free_gib": _gib(m.group(5), m.group(6)),
        }
        return [Parsed(ev.FAILURE, data)]
