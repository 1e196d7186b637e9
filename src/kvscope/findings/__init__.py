"""Findings: plain-words conclusions with numbers and, where one helps, the flag to change.

Each engine contributes a module ``kvscope.findings.<engine>`` with ``findings(startup)``; the
engine-neutral checks (inconsistent numbers, rank imbalance) live in ``common``.
"""

from __future__ import annotations

import importlib

from kvscope.findings import common
from kvscope.ledger.model import Startup


def run_findings(s: Startup) -> None:
    s.findings.extend(common.findings(s))
    try:
        module = importlib.import_module(f"kvscope.findings.{s.engine}")
    except ModuleNotFoundError:
        return
    s.findings.extend(module.findings(s))
    order = {"error": 0, "warning": 1, "info": 2}
    s.findings.sort(key=lambda f: order.get(f.severity, 3))
