"""The Python API: the same objects the CLI renders.

    >>> import kvscope
    >>> startups = kvscope.read_logs(["server.log"])
    >>> startups[0].capacity.kv_tokens

Data flows one way: input → lines → events → startups (ledger) → reconciliation → findings.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kvscope.core.startup import Startup
from kvscope.core.text import excerpt
from kvscope.engines import ANCHORS, BULK_LANE, parse_lines
from kvscope.ledger.assemble import assemble
from kvscope.reading import ReadStats, iter_candidate_lines


@dataclass
class Analysis:
    """Everything one ``explain`` run produced."""

    startups: list[Startup]
    stats: ReadStats
    assumptions: dict[str, Any] = field(default_factory=dict)


@contextlib.contextmanager
def no_cycle_collection() -> Iterator[None]:
    """The read makes many small lists and no reference cycles; the cycle collector's passes over
    them were 3 % of the reading thread's time on a serving journal. Switched back as it was."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def analyze(paths: Iterable[str], assumptions: dict[str, Any] | None = None, model: str | None = None) -> Analysis:
    """Read logs and explain every startup in them."""
    from kvscope.analysis.compare import compare_startups
    from kvscope.analysis.explain import finish_startup

    stats = ReadStats()
    assumptions = dict(assumptions or {})
    if model:
        assumptions.setdefault("model", model)
    from kvscope.analysis.assumptions import implied_engine

    lines = iter_candidate_lines(list(paths), ANCHORS, stats, BULK_LANE)
    unclaimed: list[Startup] = []
    with no_cycle_collection():
        startups = list(assemble(parse_lines(lines), implied_engine(assumptions), unclaimed))
    if not startups and unclaimed:  # a pasted out of memory alone: say how to read it
        stats.warnings.append(f"it holds a failure ({excerpt(unclaimed[0].failure.message if unclaimed[0].failure else '', 80)}) but no engine's own "
                              "line: pass --assume engine=vllm (or sglang, llamacpp, trtllm, ollama) to read it as "
                              "that engine's failed startup")
    for i, s in enumerate(startups):
        finish_startup(s, assumptions, startups[i - 1] if i else None, i + 1)
    compare_startups(startups)
    return Analysis(startups, stats, assumptions)


def read_logs(paths: Iterable[str], assumptions: dict[str, Any] | None = None, model: str | None = None) -> list[Startup]:
    """Startups found in the given log files (``-`` for stdin, ``.gz`` accepted)."""
    return analyze(paths, assumptions, model).startups
