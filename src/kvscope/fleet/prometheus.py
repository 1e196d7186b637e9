"""Prometheus' HTTP API as ``kvscope fleet`` asks it: series, instant and range queries, bounded.

kvscope builds no collector: the metrics of a fleet already live in the Prometheus that scrapes it.
The questions stay small on both sides: a range query never asks for more than ``MAX_STEPS`` steps (the
server refuses more than 11,000 points per series) nor more than ``max_points`` samples (replicas are
paged by their ``instance`` or ``pod`` label), so memory is one page of one window whatever the range.
"""

from __future__ import annotations

import json
import math
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any, Protocol

from kvscope.core.errors import InputError, Malformed, WatchError

MAX_STEPS = 10_000  # under Prometheus' 11,000 points per series per query, with room for the end step
DEFAULT_MAX_POINTS = 2_000_000  # samples per answer: ~50 MB of JSON
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def duration_s(text: str, what: str) -> float:
    """Prometheus' duration syntax (``30s``, ``5m``, ``1h30m``, ``7d``) or plain seconds → seconds."""
    raw = text.strip()
    try:
        value = float(raw)
    except ValueError:
        parts = _DURATION.findall(raw)
        if not parts or "".join(n + u for n, u in parts) != raw:
            raise InputError(f"{what} {text!r}: give a duration such as 30s, 5m, 6h, 7d or 2w") from None
        value = sum(float(n) * _UNIT_S[u] for n, u in parts)
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{what} {text!r}: must be more than zero")
    return value


def selector_matchers(selector: str | None) -> str:
    """The user's ``{job="vllm"}`` as the matcher text to put beside kvscope's own (no braces)."""
    if not selector:
        return ""
    text = selector.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    elif "{" in text:
        raise InputError(f"--selector {selector!r}: give label matchers only, such as '{{job=\"vllm\"}}' "
                         "(kvscope chooses the metric names)")
    if "__name__" in text:
        raise InputError("--selector: leave out __name__; kvscope queries each engine's metric names itself")
    return text.rstrip(",")


def _promql_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _re2_literal(value: str) -> str:
    """A label value as an RE2 pattern that matches only itself (punctuation escaped)."""
    return "".join("\\" + ch if not ch.isalnum() and ch != "_" and ord(ch) < 128 else ch for ch in value)


def names_matcher(names: tuple[str, ...]) -> str:
    if len(names) == 1:
        return f"__name__={_promql_string(names[0])}"
    return "__name__=~" + _promql_string("|".join(_re2_literal(n) for n in names))


def values_matcher(label: str, values: list[str]) -> str:
    if len(values) == 1:
        return f"{label}={_promql_string(values[0])}"
    return f"{label}=~" + _promql_string("|".join(_re2_literal(v) for v in values))


def vector(*matchers: str) -> str:
    return "{" + ",".join(m for m in matchers if m) + "}"


class Getter(Protocol):
    """What the API needs of the HTTP client (kvscope.watch.http.Client)."""

    shown: str

    def get(self, path: str) -> Any: ...


@dataclass(frozen=True)
class Window:
    """A stretch of the range asked in one query: ``steps`` evaluation steps from ``start``."""

    start: float
    steps: int
    offset: int  # index of its first step in the whole range


def windows(start: float, steps: int, step_s: float, max_steps: int = MAX_STEPS) -> list[Window]:
    out, offset = [], 0
    while offset < steps:
        n = min(max_steps, steps - offset)
        out.append(Window(start + offset * step_s, n, offset))
        offset += n
    return out


class API:
    """GETs against one Prometheus, counted (the report says how many questions it asked)."""

    def __init__(self, client: Getter) -> None:
        self.client = client
        self.requests = 0
        self.bytes = 0

    def _get(self, path: str, params: list[tuple[str, str]]) -> bytes:
        self.requests += 1
        body: bytes = self.client.get(path + "?" + urllib.parse.urlencode(params)).body
        self.bytes += len(body)
        return body

    def _json(self, path: str, params: list[tuple[str, str]]) -> Any:
        body = self._get(path, params)
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise Malformed(f"{self.client.shown}{path}: the answer is not JSON: is this a Prometheus?") from None
        return _data(doc, self.client.shown + path)

    def series(self, match: str, start: float, end: float) -> list[dict[str, str]]:
        data = self._json("/api/v1/series", [("match[]", match), ("start", _ts(start)), ("end", _ts(end))])
        if not isinstance(data, list):
            raise Malformed(f"{self.client.shown}/api/v1/series: no list of series in the answer")
        return [{str(k): str(v) for k, v in d.items()} for d in data if isinstance(d, dict)]

    def query_range(self, query: str, window: Window, step_s: float) -> bytes:
        end = window.start + (window.steps - 1) * step_s
        return self._get("/api/v1/query_range", [("query", query), ("start", _ts(window.start)), ("end", _ts(end)),
                                                 ("step", _step(step_s))])

    def check(self) -> str | None:
        """Prometheus' version (None where /api/v1/status/buildinfo is not served, as by some compatible stores)."""
        try:
            data = self._json("/api/v1/status/buildinfo", [])
        except WatchError:
            return None
        return str(data.get("version")) if isinstance(data, dict) and data.get("version") else None


def _data(doc: Any, where: str) -> Any:
    if not isinstance(doc, dict) or doc.get("status") not in ("success", "error"):
        raise Malformed(f"{where}: not a Prometheus API answer")
    if doc["status"] == "error":
        raise Malformed(f"{where}: Prometheus answered {doc.get('errorType', 'error')}: {doc.get('error', '')}"[:400])
    return doc.get("data")


def range_error(body: bytes, where: str) -> WatchError:
    """Why a range answer could not be read as a matrix (its error, or what it was)."""
    try:
        _data(json.loads(body), where)
    except WatchError as exc:
        return exc
    except (ValueError, UnicodeDecodeError, RecursionError):
        return Malformed(f"{where}: the answer is not JSON: is this a Prometheus?")
    return Malformed(f"{where}: the answer is not a range (matrix) answer")


def _ts(t: float) -> str:
    return f"{t:.3f}"


def _step(step_s: float) -> str:
    return f"{step_s:g}"
