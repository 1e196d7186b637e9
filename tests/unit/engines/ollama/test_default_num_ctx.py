"""ollama's default num_ctx by release (engines/ollama/defaults.py): the release when the log prints it, else the
newest release out at the log's date; and the answer to a log that prints no context (question 356's offload
record) steps num_ctx down from that default, saying it was assumed."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvscope.api import analyze
from kvscope.engines.ollama.defaults import default_num_ctx, vram_tiered
from tests.conftest import FIXTURES


@pytest.mark.parametrize(("version", "date", "vram", "want"), [
    ("0.6.6", None, None, 2048),
    ("0.6.7", None, None, 4096),
    ("0.15.4", None, None, 4096),
    ("0.15.5", None, 16.0, 4096),
    ("0.15.5", None, 24.0, 32768),
    ("0.17.0", None, 96.0, 262144),
    (None, "2025-04-29", None, 2048),
    (None, "2025-05-23", None, 4096),
    (None, "2026-02-05", 2 * 12.0, 32768),
])
def test_the_release_or_the_date_picks_the_default(version, date, vram, want):
    got = default_num_ctx(version, date, vram)
    assert got is not None and got[0] == want, got


def test_the_tiered_era_without_the_gpus_totals_assumes_nothing():
    assert default_num_ctx("0.15.5", None, None) is None
    assert default_num_ctx(None, None, None) is None  # neither the release nor a date


@given(st.floats(min_value=0, max_value=4096, allow_nan=False))
def test_more_vram_never_lowers_the_tiered_default(gib):
    assert vram_tiered(gib) <= vram_tiered(gib + 1.0)


def test_a_log_without_its_context_steps_num_ctx_down_from_the_default_and_says_so():
    case = next((FIXTURES / "questions").glob("356-*"))
    s = analyze([str(case / "log.txt")]).startups[-1]
    finding = next(f for f in s.findings if f.code == "ollama-gpu-unused")
    sug = finding.suggestion
    assert sug is not None and sug.flag == "num_ctx" and sug.from_value == 4096 and sug.to_value < 4096
    assert "not in the log" in finding.detail and "2025-05-23" in finding.detail
    # the check the thread's resolution asks for, read from the case's own answer.json
    wanted = next(c["suggests"] for c in json.loads((case / "answer.json").read_text())["checks"] if "suggests" in c)
    assert (sug.flag, "down") == (wanted["flag"], wanted["direction"])
