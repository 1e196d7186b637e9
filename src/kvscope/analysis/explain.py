"""After assembly: apply the user's assumptions, run the engine's rules, then the findings.

Engines plug in through the registry (their Engine's ``finish`` capability), so adding an engine adds a
package, not a branch here.
"""

from __future__ import annotations

import re
from typing import Any

from kvscope import engines
from kvscope.analysis.answer import answer
from kvscope.analysis.compare import infer_contention
from kvscope.core.facts import RankFacts
from kvscope.core.startup import RANK_FIELDS, Startup
from kvscope.findings import run_findings
from kvscope.model.catalog import find_gpu
from kvscope.runtime.accumulate import finish as runtime_finish

# --assume keys that are engine settings (merged under the logged ones) vs facts about the box.
FACT_KEYS = {"gpu", "model", "host_ram_gb", "gpu_total_gib"}


def apply_assumptions(s: Startup, assumptions: dict[str, Any]) -> None:
    s.assumptions = {k: v for k, v in assumptions.items()}
    gpu = find_gpu(str(assumptions["gpu"])) if assumptions.get("gpu") else None
    if gpu and gpu.get("nvidia_smi_total_mib"):
        s.assumptions.setdefault("gpu_total_gib", gpu["nvidia_smi_total_mib"] / 1024)
        s.assumptions.setdefault("gpu_name", gpu["name"])


def _assume_rank_figures(s: Startup) -> None:
    """--assume avail_at_ready_gib=7.9 etc.: figures seen elsewhere (nvidia-smi) for the reference rank."""
    ref = s.reference_rank
    if ref is None:
        return
    for key, value in s.assumptions.items():
        if key in RANK_FIELDS and isinstance(value, (int, float)) and getattr(ref, key) is None:
            ref.set_derived(key, float(value))
            RankFacts(ref).note_assumed(key)


def _rank_key(label: str) -> list[tuple[str, int]]:
    """'DP1 TP10 EP1' sorts after 'DP1 TP2 EP1': compare the numbers, not the text."""
    key = []
    for part in re.split(r"[\s=]+", label):
        m = re.match(r"([A-Za-z_]*)(\d{1,18})$", part)  # a longer number sorts as text (int() refuses 4,301 digits)
        key.append((m.group(1), int(m.group(2))) if m else (part, -1))
    return key


def finish_startup(s: Startup, assumptions: dict[str, Any], previous: Startup | None = None, index: int = 1) -> None:
    """Finish one startup (startup ``index`` of its input, 1-based, after ``previous`` when there is one)."""
    s.ranks.sort(key=lambda r: _rank_key(r.rank))
    apply_assumptions(s, assumptions)
    _assume_rank_figures(s)
    finish = engines.get(s.engine).finish
    if finish is not None:
        finish(s)
    if previous is not None:
        infer_contention(previous, s, index)
    if s.capacity.kv_tokens is None:
        ref = s.reference_rank
        target = ref.pool("target") if ref else None
        s.capacity.kv_tokens = target.tokens if target else None
    _finish_runtime(s)
    run_findings(s)
    answer(s)


def _finish_runtime(s: Startup) -> None:
    """Serving-time KV pressure (kvscope.runtime), after capacity is known, before findings sort."""
    runtime_finish(s)
