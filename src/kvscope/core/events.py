"""Events: the only thing engine parsers produce and the ledger assembler consumes.

Reading turns bytes into cleaned lines; each engine's line patterns turn a line into zero or more
events; the assembler (``kvscope.ledger.assemble``) folds events into startups. Keeping this
vocabulary small and engine-neutral is what lets one ledger serve SGLang, vLLM, llama.cpp and
TensorRT-LLM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Event kinds. The payload in ``Event.data`` depends on the kind:
BOUNDARY = "boundary"  # a new process/startup begins (server_args line, engine banner)
SETTINGS = "settings"  # {engine option name: parsed value}
MODEL = "model"  # {"model": path or id}
VERSION = "version"  # {"engine_version": "0.5.9"}
RANK = "rank"  # {rank ledger field: value}; unknown fields go to the rank's extras
POOL = "pool"  # {"name": str|None, "tokens", "gib", "k_gib", "v_gib", "dtype"}
CAPACITY = "capacity"  # {capacity field: value}
FAILURE = "failure"  # {"kind": str, "message": str}
WARNING = "warning"  # {"code": str, "message": str, **numbers}
PHASE = "phase"  # {"phase": "pool_end" | "weights_begin" | "ready" | ...} engine lifecycle marks
RUNTIME = "runtime"  # a serving-time sample (issue: runtime pressure)
FRAME = "frame"  # {"path", "function"} a traceback frame, or {"raised": "Type: message"} its exception line


@dataclass(slots=True)
class Event:
    """One fact read from one log line."""

    engine: str
    kind: str
    data: dict[str, Any]
    rank: str | None = None
    file: str = ""
    line_no: int = 0
    text: str = ""
    timestamp: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
