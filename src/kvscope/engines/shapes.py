"""Line shapes as data: one row per wording of one log line, with what it yields, the releases that print it
and a real sample of it.

An engine's parser tries its rows in order and returns the events of the first that matches, so teaching
kvscope a release's new wording is one row (and its sample) in that engine's folder. The rows are also what
the tests read: every row matches its own sample and yields the kinds it declares, the sample is a line of
the corpus (or, for a wording no posted log shows yet, quotes the engine source named in ``sample_from``),
and no sample is taken by an earlier row of the same engine.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from kvscope.core.versions import Version
from kvscope.engines.base import Parsed

CORPUS = "corpus"  # the sample is a line of a real log under tests/fixtures


@dataclass(frozen=True)
class Shape:
    """One wording: its name, its pattern (searched, not anchored: prefixes and pastes vary), how a match becomes
    events, the event kinds it yields (``core/events.py``), the releases that print it ("0.4.6–", "0.2.9–0.4.0",
    "all", or "undated" where no source dates it yet), and a real sample message (the line after its prefix)."""

    name: str
    pattern: re.Pattern[str]
    build: Callable[[re.Match[str], str], list[Parsed] | None]  # None: the row declines, the next is tried
    yields: tuple[str, ...]
    releases: str
    sample: str
    sample_from: str = CORPUS  # else where the wording is quoted from (a source file of the engine)

    @property
    def release_range(self) -> tuple[Version, Version | None] | None:
        """The releases column as (first, last) versions (last None: up to the newest); None for "all" and
        "undated", which date nothing. A two-part bound covers its whole minor series ("0.10" → 0.10.0–0.10.99)."""
        return release_range(self.releases)


_RELEASE_BOUND = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")


def release_range(releases: str) -> tuple[Version, Version | None] | None:
    first, sep, last = releases.partition("–")
    low = _RELEASE_BOUND.match(first)
    if not sep or not low:
        return None
    high = _RELEASE_BOUND.match(last) if last else None
    start: Version = (int(low.group(1)), int(low.group(2)), int(low.group(3) or 0))
    end: Version | None = (int(high.group(1)), int(high.group(2)), int(high.group(3) or 99)) if high else None
    return start, end


def dated_rows_seen(tables: Iterable[Shapes], texts: Iterable[str]) -> list[Shape]:
    """The rows with a dated releases column that took one of ``texts`` (a startup's evidence lines), once each,
    in table order: the era clues the shape tables themselves give. A line counts for the row that would read it
    (the first matching row that does not decline it; every matching row of an ``every`` table)."""
    lines = list(texts)
    seen: dict[str, Shape] = {}
    for table in tables:
        for text in lines:
            for shape in table.rows:
                m = shape.pattern.search(text)
                if not m or shape.build(m, text) is None:
                    continue
                if shape.release_range is not None:
                    seen.setdefault(shape.name, shape)
                if not table.every:
                    break
    order = [s.name for table in tables for s in table.rows]
    return sorted(seen.values(), key=lambda s: order.index(s.name))


@dataclass(frozen=True)
class Shapes:
    """One table of an engine's rows and how it is read: the first matching row's events (a line has one
    shape), or, with ``every``, the events of every matching row (a line can carry several facts)."""

    rows: tuple[Shape, ...]
    every: bool = False


def first_match(shapes: Sequence[Shape], msg: str) -> list[Parsed] | None:
    """The events of the first row whose pattern is in ``msg`` and that does not decline it (a build that returns
    None: the pattern alone is not enough, e.g. a CUDA error that must also name ggml); None when no row takes it."""
    for shape in shapes:
        m = shape.pattern.search(msg)
        if m:
            found = shape.build(m, msg)
            if found is not None:
                return found
    return None


def every_match(shapes: Sequence[Shape], msg: str, merged: str) -> list[Parsed]:
    """The events of every row whose pattern is in ``msg``, in row order, for a table whose rows each read one
    fact of lines that can carry several (vLLM's merged capacity line: tokens and concurrency): the events of
    kind ``merged`` become one, its fields in row order (a later row's value wins), where the first one was."""
    out: list[Parsed] = []
    one: Parsed | None = None
    for shape in shapes:
        m = shape.pattern.search(msg)
        if not m:
            continue
        for p in shape.build(m, msg) or ():
            if p.kind != merged:
                out.append(p)
            elif one is None:
                one = Parsed(merged, dict(p.data))
                out.append(one)
            else:
                one.data.update(p.data)
    return out
