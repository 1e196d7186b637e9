"""Prometheus text exposition → series, tolerant of what real servers and proxies send.

Why not ``prometheus_client``'s parser: it is a dependency kvscope does not otherwise need, and it
raises on the first bad line, while watch must keep every readable sample of a page that has one
mangled line (a proxy's truncation, a label with a stray quote). Bad lines are counted, not fatal;
a page with no readable sample at all is :class:`~kvscope.core.errors.Malformed`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from kvscope.core.errors import Malformed

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,?)')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_SPECIAL = {"nan": math.nan, "+inf": math.inf, "inf": math.inf, "-inf": -math.inf}


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    labels: dict[str, str]
    value: float


@dataclass
class Metrics:
    """All series of one scrape, by metric name."""

    series: dict[str, list[Series]] = field(default_factory=dict)
    malformed_lines: int = 0

    def get(self, name: str) -> list[Series]:
        return self.series.get(name, [])

    def first(self, *names: str) -> list[Series]:
        """The series of the first name that is present (metric renames across releases)."""
        for name in names:
            if name in self.series:
                return self.series[name]
        return []

    def has_prefix(self, prefix: str) -> bool:
        return any(name.startswith(prefix) for name in self.series)

    def names(self) -> Iterable[str]:
        return self.series.keys()


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return re.sub(r"\\[\\\"n]", lambda m: _ESCAPES[m.group(0)], value)


def _number(text: str) -> float | None:
    special = _SPECIAL.get(text.lower())
    if special is not None:
        return special
    try:
        return float(text)
    except ValueError:
        return None


def parse_line(line: str) -> Series | None:
    """One sample line → Series; None when the line is not a readable sample."""
    m = _NAME.match(line)
    if not m:
        return None
    name, pos = m.group(0), m.end()
    labels: dict[str, str] = {}
    if pos < len(line) and line[pos] == "{":
        pos += 1
        while True:
            if pos < len(line) and line[pos] == "}":
                pos += 1
                break
            lm = _LABEL.match(line, pos)
            if not lm:
                return None
            labels[lm.group(1)] = _unescape(lm.group(2))
            pos = lm.end()
            if not lm.group(3) and (pos >= len(line) or line[pos] != "}"):
                return None
    rest = line[pos:].split()
    if not rest or len(rest) > 2:  # value [timestamp]
        return None
    value = _number(rest[0])
    if value is None:
        return None
    return Series(name, labels, value)


def parse(text: str) -> Metrics:
    """Parse a whole page; raise Malformed when nothing in it is a Prometheus sample."""
    out = Metrics()
    content = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        content += 1
        s = parse_line(line)
        if s is None:
            out.malformed_lines += 1
            continue
        out.series.setdefault(s.name, []).append(s)
    if content and not out.series:
        head = text.lstrip()[:60].replace("\n", " ")
        raise Malformed(f"the /metrics answer is not Prometheus text (starts with {head!r})")
    return out
