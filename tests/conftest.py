"""Shared fixtures: the real logs under tests/fixtures/logs (verbatim copies of ../shared/logs)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]  # the checkout: src/, benchmarks/, docs/
FIXTURES = Path(__file__).parent / "fixtures"
LOGS = FIXTURES / "logs"


def plan_accuracy() -> ModuleType:
    """benchmarks/plan_accuracy.py as a module (it is a script, not part of the package): the tests hold its bars."""
    spec = importlib.util.spec_from_file_location("plan_accuracy", REPO / "benchmarks" / "plan_accuracy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def case_dir(engine: str, prefix: str) -> Path:
    matches = sorted((LOGS / engine).glob(f"{prefix}*"))
    assert matches, f"no fixture {engine}/{prefix}*"
    return matches[0]


def one_startup(engine: str, prefix: str):
    """The single startup of the shared fixture ``engine/prefix*``, checked to be that engine's."""
    from kvscope.api import analyze

    startups = analyze(case_files(case_dir(engine, prefix))).startups
    assert len(startups) == 1 and startups[0].engine == engine, [s.engine for s in startups]
    return startups[0]


def ground_truth(engine: str, prefix: str) -> dict:
    """The ``ground_truth`` of the shared fixture ``engine/prefix*``'s meta.json."""
    return json.loads((case_dir(engine, prefix) / "meta.json").read_text())["ground_truth"]


def case_files(case: Path) -> list[str]:
    meta = json.loads((case / "meta.json").read_text())
    return [str(case / f) for f in meta.get("files") or ["log.txt"]]


def all_cases() -> list[Path]:
    return sorted(p.parent for p in LOGS.glob("*/*/meta.json"))


@pytest.fixture
def logs_dir() -> Path:
    return LOGS
