"""Findings: plain-words conclusions with numbers and, where one helps, the flag to change.

Each engine's findings are its Engine's ``findings`` capability (``engines/<engine>/findings.py``);
the engine-neutral checks (inconsistent numbers, rank imbalance) live in ``common``.
"""

from __future__ import annotations

from kvscope import engines
from kvscope.core.startup import Startup
from kvscope.findings import common


def run_findings(s: Startup) -> None:
    s.findings.extend(common.findings(s))
    engine = engines.get(s.engine)
    if engine.findings is not None:
        s.findings.extend(engine.findings(s))
    order = {"error": 0, "warning": 1, "info": 2}
    s.findings.sort(key=lambda f: order.get(f.severity, 3))
