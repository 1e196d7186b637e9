"""Every fixture's JSON is what it was when golden.json.gz was written (see capture.py)."""

from __future__ import annotations

import difflib
import gzip
import json

import pytest

from tests.golden.capture import GOLDEN, run_one, runs

EXPECTED: dict[str, str] = json.loads(gzip.decompress(GOLDEN.read_bytes()))
RUNS = runs()


def test_the_golden_set_covers_every_run():
    assert sorted(RUNS) == sorted(EXPECTED), "fixtures were added or removed: rerun python -m tests.golden.capture"


@pytest.mark.parametrize("name", sorted(RUNS))
def test_output_is_unchanged(name):
    got = run_one(RUNS[name])
    want = EXPECTED.get(name)
    if got != want:
        diff = "\n".join(list(difflib.unified_diff((want or "").splitlines(), got.splitlines(), lineterm=""))[:60])
        pytest.fail(f"{name} changed (rerun capture only if the change is meant):\n{diff}")
