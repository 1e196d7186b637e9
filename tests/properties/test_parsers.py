"""Property-based tests: the line cleaner, every engine's line parser and the whole pipeline, fed
arbitrary bytes, arbitrary unicode and real log lines with their numbers, fields and prefixes mangled.

Invariants: no exception escapes ``parse_lines`` or ``analyze``; an engine's ``parse`` raises at most
the errors the dispatcher is documented to swallow; parsed numbers are finite; the JSON output is
always the contract (tests/properties/test_contract.py).
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvscope.engines import ENGINES, parse_lines
from kvscope.engines.base import LineContext, Parsed
from kvscope.reading import Line, clean_line
from tests.conftest import LOGS
from tests.properties.test_contract import assert_valid, explain_json
from tests.properties.test_mutation import WEIRD_NUMBERS

EXAMPLES = int(os.environ.get("KVSCOPE_PROPERTY_EXAMPLES", "100"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
SWALLOWED = (ValueError, IndexError, KeyError, OverflowError, RecursionError)  # see engines._parse_one

REAL_LINES = sorted({
    line for p in LOGS.glob("*/*/*") if p.name != "meta.json" and p.is_file()
    for line in p.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()
})
NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
WEIRD = [w.decode("utf-8", "replace") for w in WEIRD_NUMBERS]


def _finite(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, (list, tuple, set)):
        return all(_finite(v) for v in value)
    return True


@st.composite
def mangled_line(draw) -> str:
    """A real log line with numbers swapped for extreme ones, fields dropped, its prefix garbled or
    its text cut, one or more times."""
    line = draw(st.sampled_from(REAL_LINES))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["number", "all-numbers", "drop", "prefix", "cut", "noise", "repeat"]))
        if op in ("number", "all-numbers"):
            spans = [m.span() for m in NUMBER.finditer(line)]
            if spans:
                chosen = spans if op == "all-numbers" else [draw(st.sampled_from(spans))]
                for a, b in reversed(chosen):
                    line = line[:a] + draw(st.one_of(st.sampled_from(WEIRD), st.integers().map(str),
                                                     st.floats().map(repr))) + line[b:]
        elif op == "drop":
            sep = draw(st.sampled_from([", ", " ", "="]))
            parts = line.split(sep)
            if len(parts) > 1:
                del parts[draw(st.integers(0, len(parts) - 1))]
                line = sep.join(parts)
        elif op == "prefix":
            k = draw(st.integers(0, min(60, len(line))))
            line = draw(st.text(max_size=k)) + line[k:]
        elif op == "cut":
            line = line[: draw(st.integers(0, len(line)))]
        elif op == "noise":
            k = draw(st.integers(0, len(line)))
            line = line[:k] + draw(st.sampled_from(["\x1b[31m", "\r", "\x00", "\ufffd", "[0m", "\u2019", "\t"])) + line[k:]
        else:
            line = line * draw(st.integers(2, 3))
    return line


ANY_TEXT = st.one_of(st.text(max_size=300), mangled_line(), st.binary(max_size=300).map(
    lambda b: b.decode("utf-8", "replace")))


@SETTINGS
@given(text=st.text(max_size=400))
def test_clean_line_returns_clean_logical_lines(text):
    out = clean_line(text)
    assert isinstance(out, list)
    for part in out:
        assert isinstance(part, str) and part.strip() and "\r" not in part and part == part.rstrip()


@SETTINGS
@given(line=mangled_line())
def test_clean_line_on_mangled_real_lines(line):
    for part in clean_line(line):
        assert "\r" not in part


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: type(e).__name__)
@SETTINGS
@given(texts=st.lists(ANY_TEXT, min_size=1, max_size=6))
def test_engine_parser_never_raises_and_reads_finite_numbers(engine, texts):
    ctx = LineContext()  # shared across lines, as parse_lines does: state must survive garbage too
    for text in texts:
        assert isinstance(engine.wants_join(text), bool)
        try:
            parsed = engine.parse(text, ctx)
        except SWALLOWED:
            continue
        assert isinstance(parsed, list)
        for p in parsed:
            assert isinstance(p, Parsed) and isinstance(p.data, dict)
            assert _finite(p.data), (text, p)


@SETTINGS
@given(texts=st.lists(st.tuples(ANY_TEXT, st.booleans()), max_size=30))
def test_parse_lines_never_raises(texts):
    lines = [Line("log.txt", i + 1, t, context=c) for i, (t, c) in enumerate(texts)]
    for event in parse_lines(lines):
        assert _finite(event.data)


@SETTINGS
@given(lines=st.lists(st.one_of(mangled_line(), st.sampled_from(REAL_LINES)), min_size=1, max_size=40),
       crlf=st.booleans())
def test_mangled_log_gives_contract_json(tmp_path_factory, lines, crlf):
    path = Path(tmp_path_factory.mktemp("p")) / "log.txt"
    sep = "\r\n" if crlf else "\n"
    path.write_bytes(sep.join(lines).encode("utf-8", "surrogatepass"))
    text, code = explain_json([str(path)])
    assert code in (0, 2)
    assert_valid(text)


@SETTINGS
@given(data=st.binary(max_size=2000))
def test_arbitrary_bytes_give_contract_json(tmp_path_factory, data):
    path = Path(tmp_path_factory.mktemp("b")) / "log.bin"
    path.write_bytes(data)
    text, code = explain_json([str(path)])
    assert code in (0, 2)
    assert_valid(text)


@SETTINGS
@given(text=st.text(max_size=2000))
def test_arbitrary_unicode_gives_contract_json(tmp_path_factory, text):
    path = Path(tmp_path_factory.mktemp("u")) / "log.txt"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    out, code = explain_json([str(path)])
    assert code in (0, 2)
    assert_valid(out)
