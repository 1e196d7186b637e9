"""Per-engine knowledge: line patterns (cleaned text → events) and sizing rules.

``parse_lines`` is the one place lines become events. Each engine contributes the anchor words
the reader scans for and a ``parse`` method; the engine that matched the previous line is tried
first, so a journal holding several engines' startups keeps each line with its engine.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from kvscope import events as ev
from kvscope.engines.base import EngineLines, LineContext
from kvscope.engines.common import CommonLines
from kvscope.engines.sglang.lines import SGLangLines
from kvscope.reading import Line, clean_line


def _optional(module: str, cls: str) -> EngineLines | None:
    try:
        mod = __import__(module, fromlist=[cls])
    except ImportError:
        return None
    return getattr(mod, cls)()


def _registry() -> list[EngineLines]:
    # Serving-time lines (Decode batch, vLLM stats) are the bulk of a journal: try them first.
    runtime = _optional("kvscope.runtime.lines", "RuntimeLines")
    engines: list[EngineLines] = [runtime] if runtime else []
    engines.append(SGLangLines())
    for module, cls in (
        ("kvscope.engines.vllm.lines", "VLLMLines"),
        ("kvscope.engines.llamacpp.lines", "LlamaCppLines"),
        ("kvscope.engines.trtllm.lines", "TRTLLMLines"),
        ("kvscope.watch.lines", "WatchLines"),  # kvscope watch --record files
    ):
        engine = _optional(module, cls)
        if engine is not None:
            engines.append(engine)
    engines.append(CommonLines())
    return engines


ENGINES: list[EngineLines] = _registry()
ANCHORS: tuple[bytes, ...] = tuple(dict.fromkeys(a for e in ENGINES for a in e.anchors))
_NEW_RECORD = re.compile(r"^\s*(?:\[\d{4}-|\(\w|INFO|WARNING|ERROR|DEBUG|\d{4}-\d\d-\d\d|[A-Z][a-z]{2} +\d|\w+\s+\|)")
MAX_JOIN = 3


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
    return any(e.wants_join(text) for e in ENGINES)


def parse_lines(lines: Iterable[Line]) -> Iterator[ev.Event]:
    """Events from candidate lines, re-joining lines a terminal hard-wrapped."""
    ctx = LineContext()
    order = list(ENGINES)
    pending: list[str] = []
    pending_line: Line | None = None

    def emit(text: str, line: Line) -> Iterator[ev.Event]:
        engine, parsed = _parse_one(text, order, ctx)
        if engine is None:
            return
        if order[0] is not engine and engine.engine != "common":
            order.remove(engine)
            order.insert(0, engine)
        for p in parsed:
            yield ev.Event(engine.engine, p.kind, p.data, p.rank, line.file, line.line_no, text, p.timestamp)

    for line in lines:
        for text in clean_line(line.text):
            if pending and pending_line is not None:
                if not _NEW_RECORD.match(text) and len(pending) < MAX_JOIN:
                    pending.append(text)
                    joined = "".join(pending)
                    if not _wants_join(joined):
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
