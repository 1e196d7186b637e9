"""Parse SGLang's ``server_args=ServerArgs(k=v, …)`` (≤0.5.18) and ``server_args={'k': v, …}`` (≥0.5.20).

Values are Python reprs. We read them with ``ast.literal_eval`` one value at a time, so one odd
value (an object repr, a cut-off line) costs that value, not the whole line.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from kvscope.core import events as ev
from kvscope.engines.base import Parsed

_KEY_EQ = re.compile(r"(?:^|,\s*)(\w+)=")
_KEY_COLON = re.compile(r"(?:^|,\s*)'(\w+)':\s*")


_CONSTANTS: dict[str, Any] = {"None": None, "True": True, "False": False}
_INT = re.compile(r"-?(?:0|[1-9]\d*)")  # as Python reads it: no leading zeros
_FLOAT = re.compile(r"-?\d+\.\d+")
_PLAIN_STR = re.compile(r"'[^'\\]*'")


def _value(text: str) -> Any:
    text = text.strip().rstrip(",").strip()
    # Most of the ~500 values are these shapes: read them directly, literal_eval (a compile each) the rest.
    if text in _CONSTANTS:
        return _CONSTANTS[text]
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    if _PLAIN_STR.fullmatch(text):
        return text[1:-1]
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return text


def _split(body: str, key_pattern: re.Pattern[str]) -> dict[str, Any]:
    """Split on top-level key markers; brackets and quotes inside values are respected by literal_eval retry."""
    marks = list(key_pattern.finditer(body))
    out: dict[str, Any] = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(body)
        out[m.group(1)] = _value(body[m.end() : end])
    return out


def parse_server_args(msg: str) -> list[Parsed]:
    """Events for one server_args line: a startup boundary, the settings, the model path."""
    start = msg.find("server_args=")
    body = msg[start + len("server_args=") :].strip()
    if body.startswith("ServerArgs("):
        body = body[len("ServerArgs(") :]
        body = body[:-1] if body.endswith(")") else body
        settings = _split(body, _KEY_EQ)
    elif body.startswith("{"):
        body = body[1:-1] if body.endswith("}") else body[1:]
        settings = _split(body, _KEY_COLON)
    else:
        return []
    out = [Parsed(ev.BOUNDARY, {"reason": "server_args"}), Parsed(ev.SETTINGS, settings)]
    model = settings.get("model_path") or settings.get("served_model_name")
    if isinstance(model, str):
        out.append(Parsed(ev.MODEL, {"model": model}))
    return out
