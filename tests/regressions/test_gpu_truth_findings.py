"""Findings on the H200 truth runs (tests/fixtures/gpu) that a real log showed wrong."""

from __future__ import annotations

from kvscope.api import analyze
from tests.conftest import FIXTURES


def test_a_suggested_utilization_is_a_setting_as_typed():
    """Run 013 (24 GiB held by another process): the fix was printed as 0.8099999999999999."""
    (case,) = (FIXTURES / "gpu").glob("013-*")
    s = analyze([str(case / "log.txt")]).startups[-1]
    sug = next(f.suggestion for f in s.findings if f.code == "multi-instance-contention" and f.suggestion)
    assert sug.to_value == 0.81 and repr(sug.to_value) == "0.81"
