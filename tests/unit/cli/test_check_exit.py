"""``explain --check`` lets a script notice a failed startup without parsing JSON: exit 3 on every fixture whose
meta.json says its startup failed, 0 on one that started (the report is printed either way)."""

from __future__ import annotations

import pytest

from kvscope.cli import main
from tests.conftest import FIXTURES, case_files
from tests.corpus.test_failure_kinds import _expected_kinds

FAILED = [case for case, kind in _expected_kinds() if kind is not None]
STARTED = [case for case, kind in _expected_kinds() if kind is None]


def _code(args: list[str], capsys) -> int:
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    assert out.out.strip()  # the report is printed as usual
    return code


@pytest.mark.parametrize("case", FAILED)
def test_a_failed_startup_exits_3(case, capsys):
    assert _code(["explain", *case_files(FIXTURES / case), "--check", "--format", "json"], capsys) == 3


@pytest.mark.parametrize("case", STARTED[:5])
def test_a_started_one_exits_0(case, capsys):
    assert _code(["explain", *case_files(FIXTURES / case), "--check", "--format", "json"], capsys) == 0


def test_the_corpus_has_both():
    assert len(FAILED) >= 5 and STARTED
