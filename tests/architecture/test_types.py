"""The typed layers stay typed: mypy over core, model and engines (the files pyproject.toml's [tool.mypy] names)
reports nothing, and ruff's lint holds everywhere. A new Optional read without a check, or a value of the wrong
type passed on, fails here."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def test_mypy_is_clean_on_core_model_and_engines(tmp_path):
    run = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")], cwd=REPO,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Success: no issues found" in run.stdout


def test_ruff_is_clean_on_the_source_and_the_tests(tmp_path):
    """The lint pyproject.toml's [tool.ruff] sets, over everything shipped and tested (a CI without it let
    an unused import or an unclosed file through)."""
    run = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "src", "tests", "benchmarks"], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
