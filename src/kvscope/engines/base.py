"""What every engine's line knowledge provides, and small number-parsing helpers they share."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Protocol

NUM = r"[-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)"


def to_float(text: str | None) -> float | None:
    """Parse a printed number; anything non-finite or unreadable is None (never garbage)."""
    if text is None:
        return None
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def to_int(text: str | None) -> int | None:
    value = to_float(text)
    if value is None or abs(value) > 1e18:
        return None
    return int(value)


@dataclass(slots=True)
class Parsed:
    """An event before the dispatcher stamps it with file, line and engine."""

    kind: str
    data: dict[str, Any]
    rank: str | None = None
    timestamp: str | None = None


@dataclass
class LineContext:
    """Per-input state an engine parser may keep (e.g. a multi-line table being read)."""

    state: dict[str, Any] = field(default_factory=dict)


class EngineLines(Protocol):
    """An engine's line knowledge."""

    engine: str
    anchors: tuple[bytes, ...]

    def parse(self, text: str, ctx: LineContext) -> list[Parsed]:
        """Events in one cleaned line; [] when the line says nothing kvscope uses."""
        ...

    def wants_join(self, text: str) -> bool:
        """True when the line starts a known message that looks cut by a hard wrap."""
        ...


def first_match(patterns: list[re.Pattern[str]], text: str) -> re.Match[str] | None:
    for p in patterns:
        m = p.search(text)
        if m:
            return m
    return None
