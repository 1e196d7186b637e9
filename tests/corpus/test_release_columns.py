"""The releases column of every dated shape row is read: the era inference narrows by the rows that read a
startup's lines, and no real log whose version its thread states contradicts a row it used (that is how
three columns were found too narrow: SGLang's 'Init torch distributed ends' in a 0.4.3 log, 'Memory pool
end' in a 0.2 log, vLLM's 'Maximum concurrency' in 0.6.3 and 0.6.4 logs)."""

from __future__ import annotations

import json

import pytest

from kvscope.api import analyze
from kvscope.core.versions import parse_version
from kvscope.engines.sglang import eras as sglang_eras
from kvscope.engines.sglang.lines import SHAPES as SGLANG_SHAPES
from kvscope.engines.shapes import dated_rows_seen, release_range
from kvscope.engines.vllm import eras as vllm_eras
from kvscope.engines.vllm.lines import TABLES as VLLM_TABLES
from tests.conftest import FIXTURES, case_files

TABLES = {"sglang": (SGLANG_SHAPES,), "vllm": VLLM_TABLES}
DATED = [(engine, row) for engine, tables in TABLES.items() for t in tables for row in t.rows if row.release_range]


def test_release_bounds_read_as_versions():
    assert release_range("0.4.3–") == ((0, 4, 3), None)
    assert release_range("0.2–0.10") == ((0, 2, 0), (0, 10, 99))
    assert release_range("0.5.4–0.5.12") == ((0, 5, 4), (0, 5, 12))
    assert release_range("all") is None and release_range("undated") is None


@pytest.mark.parametrize(("engine", "row"), DATED, ids=[f"{e}:{r.name}" for e, r in DATED])
def test_a_dated_row_dates_its_own_sample(engine, row):
    rows = dated_rows_seen(TABLES[engine], [row.sample])
    assert row in rows
    low, high = row.release_range
    if engine == "sglang":
        vr = sglang_eras.infer_version_range({}, None, [row])
        first, last = vr.low, vr.high
    else:
        inferred = vllm_eras.infer([row.sample], None, [row])
        first, last = inferred.first, inferred.last
    assert first >= low and (high is None or last <= high), (first, last)


def _known_versions():
    for meta in sorted(FIXTURES.rglob("meta.json")):
        stated = json.loads(meta.read_text())
        version = parse_version(str(stated.get("engine_version") or stated.get("version") or ""))
        if stated.get("engine") in TABLES or version:
            yield meta.parent, version


def test_no_log_of_a_known_version_contradicts_a_row_it_used():
    checked, wrong = 0, []
    for case, stated in _known_versions():
        for s in analyze(case_files(case)).startups:
            version = parse_version(s.engine_version) or stated
            if version is None or s.engine not in TABLES:
                continue
            for row in dated_rows_seen(TABLES[s.engine], [e.text for e in s.evidence]):
                checked += 1
                low, high = row.release_range
                if version < low or (high is not None and version > high):
                    wrong.append(f"{case.name}: {s.engine} {version} used {row.name} ({row.releases})")
    assert checked > 40  # the corpus does date rows: the check has something to check
    assert not wrong, wrong
