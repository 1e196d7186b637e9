"""The torch out-of-memory message in each of its spellings, as posted in the question corpus: the device total and
what the process held are what tell a weight load that cannot fit from any other out of memory."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvscope.api import analyze
from kvscope.engines.common import oom_failure
from tests.conftest import FIXTURES

QUESTIONS = FIXTURES / "questions"


@pytest.mark.parametrize("case,total,allocated", [
    # torch < 2.1: "(GPU 0; 10.73 GiB total capacity; 9.85 GiB already allocated; 46.44 MiB free; …)"
    ("129-", 10.73, 9.85),
    # torch 2.1's "total capacty" (sic)
    ("128-", 79.33, 78.33),
    # torch ≥ 2.2, the message cut before what the process held
    ("130-", 11.53, None),
])
def test_each_spelling_gives_the_device_total(case, total, allocated):
    text = next(QUESTIONS.glob(f"{case}*/log.txt")).read_text()
    data = oom_failure(text)
    assert data is not None and data["device_total_gib"] == pytest.approx(total)
    assert data.get("torch_allocated_gib") == (pytest.approx(allocated) if allocated is not None else None)


@given(total=st.floats(1, 500), free_mib=st.floats(0, 900), old=st.booleans())
def test_any_total_reads_back(total, free_mib, old):
    if old:
        text = (f"torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; {total:.2f} GiB "
                f"total capacity; {total / 2:.2f} GiB already allocated; {free_mib:.2f} MiB free; 1 GiB reserved)")
    else:
        text = (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity "
                f"of {total:.2f} GiB of which {free_mib:.2f} MiB is free.")
    data = oom_failure(text)
    assert data is not None
    assert data["device_total_gib"] == pytest.approx(round(total, 2))
    assert data["device_free_gib"] == pytest.approx(round(free_mib, 2) / 1024)


def test_a_pasted_oom_alone_says_how_to_name_the_engine():
    log = str(next(QUESTIONS.glob("130-*/log.txt")))
    bare = analyze([log])
    assert bare.startups == [] and any("--assume engine=vllm" in w for w in bare.stats.warnings)
    named = analyze([log], {"engine": "vllm"}).startups
    assert len(named) == 1 and named[0].engine == "vllm" and named[0].failure.kind == "weights-oom"
    assert named[0].answer.suggestion.flag == "--tensor-parallel-size"
