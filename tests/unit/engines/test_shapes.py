"""Each engine's line shapes as data (engines/shapes.py): every row matches its own sample and yields the kinds it
declares, no earlier row of the engine takes its sample, a sample said to come from the corpus is a line of a
real log, and the releases column reads as a range. An engine moved to rows is listed in ENGINES_WITH_ROWS."""

from __future__ import annotations

import importlib
import re
from functools import cache

import pytest

from kvscope.engines.shapes import CORPUS, Shape, first_match
from tests.conftest import FIXTURES

ENGINES_WITH_ROWS = ("sglang",)
_RELEASES = re.compile(r"^(?:all|\d+\.\d+(?:\.\d+)?–(?:\d+\.\d+(?:\.\d+)?)?)$")


def _shapes(engine: str) -> tuple[Shape, ...]:
    return importlib.import_module(f"kvscope.engines.{engine}.lines").SHAPES


@cache
def _corpus_text() -> str:
    """Every fixture log, one string (a sample is found as a substring of some line)."""
    parts = []
    for path in sorted(FIXTURES.rglob("*")):
        if path.is_file() and path.suffix in (".txt", ".log"):
            parts.append(path.read_text(errors="replace"))
    return "\n".join(parts)


ROWS = [(engine, i, shape) for engine in ENGINES_WITH_ROWS for i, shape in enumerate(_shapes(engine))]


@pytest.mark.parametrize(("engine", "index", "shape"), ROWS, ids=[f"{e}:{s.name}" for e, _, s in ROWS])
def test_a_row_matches_its_sample_and_yields_what_it_says(engine, index, shape):
    rows = _shapes(engine)
    assert shape.pattern.search(shape.sample), "the row's pattern does not match its own sample"
    taken_by = next(i for i, row in enumerate(rows) if row.pattern.search(shape.sample))
    assert taken_by == index, f"an earlier row ({rows[taken_by].name}) takes this sample"
    events = first_match(rows, shape.sample)
    assert events and sorted({p.kind for p in events}) == sorted(set(shape.yields))


@pytest.mark.parametrize(("engine", "index", "shape"), ROWS, ids=[f"{e}:{s.name}" for e, _, s in ROWS])
def test_a_sample_is_real(engine, index, shape):
    if shape.sample_from == CORPUS:
        assert shape.sample in _corpus_text(), "the sample is not a line of any fixture log"
    else:  # a wording no posted log shows yet: say where it is quoted from
        assert len(shape.sample_from) > 20


@pytest.mark.parametrize("engine", ENGINES_WITH_ROWS)
def test_rows_are_named_once_with_readable_releases(engine):
    rows = _shapes(engine)
    assert len({r.name for r in rows}) == len(rows)
    assert all(_RELEASES.match(r.releases) for r in rows), [r.releases for r in rows if not _RELEASES.match(r.releases)]
