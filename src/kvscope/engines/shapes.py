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
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvscope.engines.base import Parsed

CORPUS = "corpus"  # the sample is a line of a real log under tests/fixtures


@dataclass(frozen=True)
class Shape:
    """One wording: its name, its pattern (searched, not anchored: prefixes and pastes vary), how a match becomes
    events, the event kinds it yields (``core/events.py``), the releases that print it (an SGLang-style range,
    "0.4.6–" or "0.2.9–0.4.0"), and a real sample message (the line after its prefix)."""

    name: str
    pattern: re.Pattern[str]
    build: Callable[[re.Match[str], str], list[Parsed]]
    yields: tuple[str, ...]
    releases: str
    sample: str
    sample_from: str = CORPUS  # else where the wording is quoted from (a source file of the engine)


def first_match(shapes: Sequence[Shape], msg: str) -> list[Parsed] | None:
    """The events of the first row whose pattern is in ``msg``; None when no row is."""
    for shape in shapes:
        m = shape.pattern.search(msg)
        if m:
            return shape.build(m, msg)
    return None
