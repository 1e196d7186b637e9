"""ollama's own plan, read as ollama decides (llm/memory.go), on real posted logs: a GPU its placement rule leaves
empty, a plan with no margin, a compute buffer larger than the plan counted, a GPU skipped for a multi-slot try."""

from __future__ import annotations

import pytest

from kvscope.api import analyze
from tests.conftest import FIXTURES


def _one(case: str, **assume):
    log = next((FIXTURES / "questions").glob(f"{case}-*")) / "log.txt"
    (s,) = analyze([str(log)], assume).startups
    return s


def _finding(s, code: str):
    return next(f for f in s.findings if f.code == code)


def test_a_gpu_below_the_placement_minimum_gets_no_layer():
    """GTX 1650, 3.2 GiB free, gemma3 4b with its vision projector (wrapped logfmt record): 0/35 layers. ollama
    0.7.0's rule wants graph 1.0 + minimum 457 MiB + two of the largest layers + the projector ≈ 4.26 GiB (the
    figure the thread's maintainer worked out); 0.7.1's rule would have placed layers, so it is not quoted."""
    s = _one("357")
    f = _finding(s, "ollama-gpu-unused")
    assert "≈ 4.26 GiB" in f.detail and "0.7.0's rule" in f.detail and "0.7.1+" not in f.detail
    assert s.answer.situation == f.title and not any(x.flag == "-ngl" for x in [s.answer.suggestion] if x)


def test_the_second_gpu_that_got_none_of_a_split():
    s = _one("356")
    f = _finding(s, "ollama-gpu-unused")
    assert f.detail.startswith("GPU 1 has 4.6 GiB available") and "37/49" in f.title


@pytest.mark.parametrize(("case", "flag", "frm", "to"), [
    ("358", "num_gpu", 32, 29),  # the 2,508 MiB compute buffer against 170.7 MiB planned and 1.1 GiB left: ≈ 3 layers
    ("359", "num_gpu", 31, 27),  # 9.4 of 9.5 GiB planned: 0.4 GiB more margin at ≈ 0.13 GiB a layer
])
def test_fewer_layers_by_what_the_plan_lacks(case, flag, frm, to):
    sug = _one(case).answer.suggestion
    assert (sug.flag, sug.from_value, sug.to_value) == (flag, frm, to)
    assert sug.alternatives[0].flag == "OLLAMA_GPU_OVERHEAD" and sug.alternatives[0].to_value > 0


def test_a_multi_slot_attempt_that_no_gpu_can_take():
    """'gpu has too little memory to allocate any layers' with its terms: the 24.6 GiB graph of 4 slots × 96,001
    tokens against 23.3 GiB free; one slot is the advice, never more."""
    s = _one("355", n_slots=4, n_ctx_slot=96001)
    assert s.failure is None
    sug = s.answer.suggestion
    assert (sug.flag, sug.from_value, sug.to_value) == ("OLLAMA_NUM_PARALLEL", 4, 1)
    assert "24.6 GiB" in s.answer.cause and "23.3 GiB" in s.answer.cause
