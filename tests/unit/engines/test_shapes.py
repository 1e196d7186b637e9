"""Each engine's line shapes as data (engines/shapes.py): every row matches its own sample and yields the kinds it
declares, no earlier row of the engine takes its sample, a sample said to come from the corpus is a line of a
real log, and the releases column reads as a range. Every ``*SHAPES`` table of an engine's lines module is read
(SGLang's whole parse order is one table; vLLM's errors are one)."""

from __future__ import annotations

import importlib
import re
from functools import cache

import pytest

from kvscope.engines.shapes import CORPUS, Shapes, first_match
from tests.conftest import FIXTURES

ENGINES = ("sglang", "vllm", "llamacpp", "trtllm")
_RELEASES = re.compile(r"^(?:all|undated|\d+\.\d+(?:\.\d+)?–(?:\d+\.\d+(?:\.\d+)?)?)$")


def _tables(engine: str) -> dict[str, Shapes]:
    module = importlib.import_module(f"kvscope.engines.{engine}.lines")
    return {name: table for name, table in vars(module).items() if isinstance(table, Shapes)}


@cache
def _corpus_text() -> str:
    """Every fixture log, one string (a sample is found as a substring of some line)."""
    parts = []
    for path in sorted(FIXTURES.rglob("*")):
        if path.is_file() and path.suffix in (".txt", ".log"):
            parts.append(path.read_text(errors="replace"))
    return "\n".join(parts)


TABLES = [(engine, name) for engine in ENGINES for name in _tables(engine)]
ROWS = [(engine, name, i, shape) for engine, name in TABLES for i, shape in enumerate(_tables(engine)[name].rows)]
IDS = [f"{e}.{t}:{s.name}" for e, t, _, s in ROWS]


def test_the_engines_that_have_tables():
    assert {engine for engine, _ in TABLES} >= {"sglang", "vllm"}


@pytest.mark.parametrize(("engine", "table", "index", "shape"), ROWS, ids=IDS)
def test_a_row_matches_its_sample_and_yields_what_it_says(engine, table, index, shape):
    shapes = _tables(engine)[table]
    m = shape.pattern.search(shape.sample)
    assert m, "the row's pattern does not match its own sample"
    if shapes.every:  # every matching row adds its events: the row's own reading of its sample is what counts
        events = shape.build(m, shape.sample)
    else:  # the first match wins: no earlier row may take this row's lines
        taken_by = next(i for i, row in enumerate(shapes.rows) if row.pattern.search(shape.sample))
        assert taken_by == index, f"an earlier row ({shapes.rows[taken_by].name}) takes this sample"
        events = first_match(shapes.rows, shape.sample)
    assert events and sorted({p.kind for p in events}) == sorted(set(shape.yields))


@pytest.mark.parametrize(("engine", "table", "index", "shape"), ROWS, ids=IDS)
def test_a_sample_is_real(engine, table, index, shape):
    if shape.sample_from == CORPUS:
        assert shape.sample in _corpus_text(), "the sample is not a line of any fixture log"
    else:  # a wording no posted log shows yet: say where it is quoted from
        assert len(shape.sample_from) > 20


@pytest.mark.parametrize(("engine", "table"), TABLES)
def test_rows_are_named_once_with_readable_releases(engine, table):
    rows = _tables(engine)[table].rows
    assert len({r.name for r in rows}) == len(rows)
    assert all(_RELEASES.match(r.releases) for r in rows), [r.releases for r in rows if not _RELEASES.match(r.releases)]


def test_a_line_with_two_facts_gives_one_capacity_event():
    """vLLM 0.28+ prints tokens and concurrency on one line: both rows of the every-match table read it, and their
    fields merge into one CAPACITY event (a real line from a harvested log)."""
    from kvscope.engines.shapes import every_match
    from kvscope.engines.vllm.lines import CAPACITY_SHAPES

    line = "GPU KV cache size: 1,196,643 tokens, Maximum concurrency for 1,048,576 tokens per request: 1.14x"
    assert line in _corpus_text()
    events = every_match(CAPACITY_SHAPES.rows, line, "capacity")
    assert [p.kind for p in events] == ["capacity"]
    assert events[0].data == {"kv_tokens": 1_196_643, "max_model_len": 1_048_576, "max_concurrency": 1.14}


def test_a_message_wrapped_by_hand_is_joined_with_its_lost_space(tmp_path):
    """A poster who wrapped vLLM's one-line error at word boundaries dropped the spaces there (a real post,
    questions/123): the pieces are joined with a space where the tight join still looks cut, or where a piece
    ended a clause; a terminal's mid-word cut is still joined as is (harvested/vllm/203 keeps reading)."""
    from kvscope.api import analyze

    log = tmp_path / "log.txt"
    log.write_text("To serve at least one request with the model's max seq len (262144), 9.29 GiB KV cache is needed,\n"
                   "which is larger than the available KV cache memory (9.28 GiB). Based on the available memory, the\n"
                   "estimated maximum model length is 260800.\n")
    (s,) = analyze([str(log)]).startups
    assert s.failure.kind == "max-len-too-large"
    assert s.failure.data["estimated_max_model_len"] == 260800 and s.failure.data["available_kv_gib"] == 9.28
    assert "is needed, which is larger" in s.failure.message
