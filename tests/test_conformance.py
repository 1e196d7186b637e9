"""Run the project's conformance tool over the real logs: no crash, every printed number comes back.

Two sets: the shared fixtures (tests/fixtures/logs; vLLM's two numbers that are not in their logs are
pinned in tests/test_vllm_conformance.py) and the held-out public logs (tests/fixtures/harvested),
where every engine must be whole.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import FIXTURES


def _last_line(cases: str, engine: str) -> tuple[str, str]:
    out = subprocess.run(
        [sys.executable, str(FIXTURES / "conformance.py"), "--cases", str(FIXTURES / cases), "--engine", engine,
         "--cmd", f"{sys.executable} -m kvscope", "-v"], capture_output=True, text=True, timeout=600)
    return out.stdout.strip().splitlines()[-1], out.stdout


@pytest.mark.parametrize(("cases", "engine"), [("logs", "sglang"), ("logs", "llamacpp"), ("logs", "trtllm"),
                                               ("harvested", "sglang"), ("harvested", "vllm"),
                                               ("harvested", "llamacpp"), ("harvested", "trtllm")])
def test_conformance(cases, engine):
    last, stdout = _last_line(cases, engine)
    assert "0 crashes" in last, stdout
    assert "(100.0%)" in last, stdout
