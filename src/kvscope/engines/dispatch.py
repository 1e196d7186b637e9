"""Lines → events: the one place lines become events.

``parse_lines`` asks every registered engine's line reader. Each engine contributes the anchor words
the reader scans for and a ``parse`` method; the engine that matched the previous line is tried
first, so a journal holding several engines' startups keeps each line with its engine.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from kvscope.core import events as ev
from kvscope.engines import REGISTRY
from kvscope.engines.base import EngineLines, LineContext
from kvscope.engines.common import CommonLines
from kvscope.engines.recording import WatchLines
from kvscope.engines.serving import BULK, BULK_LANE, RuntimeLines, VllmRows  # noqa: F401 - BULK, BULK_LANE re-exported
from kvscope.engines.serving import bulk_label as _bulk_label
from kvscope.engines.serving import bulk_times as _bulk_times
from kvscope.engines.serving import bulk_valid as _bulk_valid
from kvscope.reading import Line, clean_line
from kvscope.reading.source import Bulk

_RUNTIME = RuntimeLines()  # the serving-line reader; the bulk lane hands its rows to it directly


def _line_readers() -> list[EngineLines]:
    """Every registered engine's line reader, serving-time lines first (they are the bulk of a journal),
    then the engines in registry order, the recordings of kvscope watch, and the lines any engine prints."""
    readers: list[EngineLines] = [_RUNTIME]
    readers += [e.lines for e in REGISTRY.values() if e.lines is not None]
    readers += [WatchLines(), CommonLines()]
    return readers


ENGINES: list[EngineLines] = _line_readers()
ANCHORS: tuple[bytes, ...] = tuple(dict.fromkeys(a for e in ENGINES for a in e.anchors))
# Engines whose wants_join can say yes (the others never re-join a wrapped line).
_JOINERS = [e for e in ENGINES if getattr(e, "joins", True)]
_NEW_RECORD = re.compile(r"^\s*(?:\[\d{4}-|\(\w|INFO|WARNING|ERROR|DEBUG|\d{4}-\d\d-\d\d|[A-Z][a-z]{2} +\d|\w+\s+\|)")
MAX_JOIN = 3
_CLAUSE_END = frozenset(",;:")  # a hand-wrapped message breaks after these; a terminal's cut keeps the space


def _joint(pending: list[str], text: str) -> str:
    """What goes between a pending record and its next piece. A terminal cuts mid-word: nothing. A poster who
    wrapped a message by hand cut at a space and dropped it: one space, where the piece before ended a clause
    ("…is needed,"), or where the tight join still looks cut and the spaced one does not."""
    prev = pending[-1]
    if text[:1].isspace() or prev[-1:].isspace():
        return ""
    if prev[-1:] in _CLAUSE_END:
        return " "
    tight = "".join(pending) + text
    return " " if _wants_join(tight) and not _wants_join("".join(pending) + " " + text) else ""


def _parse_one(text: str, order: list[EngineLines], ctx: LineContext) -> tuple[EngineLines | None, list]:
    for engine in order:
        try:
            parsed = engine.parse(text, ctx)
        except (ValueError, IndexError, KeyError, OverflowError, RecursionError):
            parsed = []  # a mangled line never stops the read; it just says nothing
        if parsed:
            return engine, parsed
    return None, []


def _wants_join(text: str) -> bool:
    for engine in _JOINERS:  # noqa: SIM110 - a plain loop is faster than any(genexpr); runs per line
        if engine.wants_join(text):
            return True
    return False


def _to_front(order: list[EngineLines], engine: EngineLines) -> None:
    """The engine that matched a line is tried first on the next one."""
    if order[0] is not engine:
        order.remove(engine)
        order.insert(0, engine)


def _bulk_event(item: Bulk, order: list[EngineLines], ctx: LineContext) -> Iterator[ev.Event]:
    """One RUNTIME event for a run of bulk-lane rows: what the per-line path would make of each
    line, folded by ``kvscope.runtime.accumulate``. The event carries the first convertible row's
    rank and stamp (a row whose numbers do not convert is no event on the per-line path either),
    and the runtime parser moves to the front of ``order`` as it would after such a line."""
    rows = item.rows
    if rows.__class__ is VllmRows:
        yield from _vllm_bulk_event(item, order, ctx)
        return
    listed = rows.__class__ is list  # the regex lane's tuples; else the C lane's Batch
    first = next((i for i, row in enumerate(rows) if _bulk_valid(row)), None) if listed else rows.first_valid()
    if first is None:
        return
    rows = rows[first:] if first else rows
    runtime = _RUNTIME
    _to_front(order, runtime)
    runtime.engine = "sglang"
    stamp, ranks = (_bulk_times(rows[0][0])[1], rows[0][1]) if listed else rows.head(0)
    yield ev.Event("sglang", ev.RUNTIME, {"src": "bulk", "rows": rows}, _bulk_label(ranks), item.file,
                   item.line_no, "", stamp, {"last_line": item.last_line})


def _vllm_bulk_event(item: Bulk, order: list[EngineLines], ctx: LineContext) -> Iterator[ev.Event]:
    """The vLLM lane's rows (every one a sample): their (sample, label, stamp) triples, read on
    the runtime parser's clock, as one event."""
    runtime = _RUNTIME
    _to_front(order, runtime)
    samples = runtime.stats_rows(item.rows, ctx)
    _, label, stamp = samples[0]
    yield ev.Event("vllm", ev.RUNTIME, {"src": "bulk", "samples": samples}, label, item.file, item.line_no, "",
                   stamp, {"last_line": item.last_line})


def parse_lines(lines: Iterable[Line | Bulk]) -> Iterator[ev.Event]:
    """Events from candidate lines, re-joining lines a terminal hard-wrapped; a ``Bulk`` run of
    serving lines becomes one RUNTIME event (the same samples, folded in one call)."""
    ctx = LineContext()
    order = list(ENGINES)
    pending: list[str] = []
    pending_line: Line | None = None

    def emit(text: str, line: Line) -> Iterator[ev.Event]:
        ctx.file = line.file
        ctx.raw = line.text
        engine, parsed = _parse_one(text, order, ctx)
        if engine is None:
            return
        if engine.engine != "common":
            _to_front(order, engine)
        for p in parsed:
            yield ev.Event(engine.engine, p.kind, p.data, p.rank, line.file, line.line_no, text, p.timestamp)

    for line in lines:
        if isinstance(line, Bulk):
            if pending and pending_line is not None:  # a bulk line starts a new record
                yield from emit("".join(pending), pending_line)
                pending, pending_line = [], None
            yield from _bulk_event(line, order, ctx)
            continue
        if line.context and not pending:  # a context line only ever completes a pending record
            continue
        for text in clean_line(line.text):
            if pending and pending_line is not None:
                if not _NEW_RECORD.match(text) and len(pending) < MAX_JOIN:
                    piece = _joint(pending, text) + text
                    joined = "".join(pending) + piece
                    if _wants_join(joined):
                        pending.append(piece)
                    else:
                        yield from emit(joined, pending_line)
                        pending, pending_line = [], None
                    continue
                yield from emit("".join(pending), pending_line)
                pending, pending_line = [], None
            if line.context:
                continue
            if _wants_join(text):
                pending, pending_line = [text], line
                continue
            yield from emit(text, line)
    if pending and pending_line is not None:
        yield from emit("".join(pending), pending_line)
