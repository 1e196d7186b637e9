"""Did kvscope answer the question the operator asked? Both question sets, through the answers tool.

A ratchet, not a snapshot: no crash and no WRONG answer ever (kvscope advised what the thread shows
to be wrong), and at least as many cases fully answered as the last time the floor was raised.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import FIXTURES

FLOORS = {"questions_shared": 21, "questions": 62}  # cases ANSWERED; raise when kvscope answers more


@pytest.mark.parametrize("cases", sorted(FLOORS))
def test_questions_are_answered(cases):
    out = subprocess.run([sys.executable, str(FIXTURES / "answers.py"), "--cases", str(FIXTURES / cases), "-v",
                          "--cmd", f"{sys.executable} -m kvscope"], capture_output=True, text=True, timeout=600)
    last = out.stdout.strip().splitlines()[-1]
    m = re.search(r"(\d+)/(\d+) cases answered, (\d+) partly, (\d+) missed, (\d+) wrong; .*; (\d+) crashes", last)
    assert m, out.stdout + out.stderr
    answered, wrong, crashes = int(m.group(1)), int(m.group(5)), int(m.group(6))
    assert crashes == 0, out.stdout
    assert wrong == 0, out.stdout
    assert answered >= FLOORS[cases], out.stdout
