"""Engine auto-detection over every real log of every engine: no startup is claimed by the wrong engine.

Each case runs in its own process with a time limit, so one slow parser shows up as that case's
failure instead of stalling the suite.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import all_cases, case_files

CASES = all_cases()
MINE = {"llamacpp", "trtllm"}


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.name}/{c.name}" for c in CASES])
def test_every_startup_has_its_case_engine(case):
    engine = case.parent.name
    cmd = [sys.executable, "-m", "kvscope", "explain", *case_files(case), "--format", "json"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{engine}/{case.name}: kvscope did not finish in 60 s")
    assert out.returncode in (0, 2), out.stderr[-2000:]
    engines = [s["engine"] for s in json.loads(out.stdout)["startups"]]
    if engine in MINE:
        assert engines and set(engines) == {engine}, engines
    else:
        assert not MINE & set(engines), f"{engine}/{case.name} read as {engines}"
