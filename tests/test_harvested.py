"""Held-out public logs (tests/fixtures/harvested): no crash, every printed number comes back."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import FIXTURES


@pytest.mark.parametrize("engine", ["sglang", "vllm", "llamacpp", "trtllm"])
def test_harvested_conformance(engine):
    cmd = f"{sys.executable} -m kvscope"
    out = subprocess.run(
        [sys.executable, str(FIXTURES / "conformance.py"), "--cases", str(FIXTURES / "harvested"), "--engine", engine,
         "--cmd", cmd, "-v"], capture_output=True, text=True, timeout=600)
    last = out.stdout.strip().splitlines()[-1]
    assert "0 crashes" in last, out.stdout
    assert "(100.0%)" in last, out.stdout
