"""Two startups of one input compared: the settings that differ and the capacity they moved."""

from __future__ import annotations

from pathlib import Path

from kvscope.analysis.compare import compare_startups
from kvscope.api import analyze
from tests.conftest import FIXTURES, case_files

CASE = next((FIXTURES / "harvested" / "vllm").glob("401-*"))  # vLLM 0.20, util 0.95, 200,769 KV tokens


def _startup(tmp_path, name: str, text: str):
    log = tmp_path / name
    log.write_text(text)
    return analyze([str(log)]).startups[-1]


def test_a_run_after_a_flag_change_says_what_changed_and_what_it_moved(tmp_path):
    """The same real log as a second run at utilization 0.90 with a smaller pool (the operator's before/after)."""
    text = Path(case_files(CASE)[0]).read_text()
    before = _startup(tmp_path, "a.log", text)
    after = _startup(tmp_path, "b.log", text.replace("'gpu_memory_utilization': 0.95", "'gpu_memory_utilization': 0.9")
                     .replace("10.16 GiB", "7.61 GiB").replace("200,769 tokens", "150,384 tokens"))
    assert before.capacity.kv_tokens == 200_769 and after.capacity.kv_tokens == 150_384
    compare_startups([before, after])
    f = next(f for f in after.findings if f.code == "compared-with-previous")
    assert "gpu_memory_utilization 0.95 → 0.9" in f.detail
    assert "200,769 → 150,384 tokens (-50,385, -25.1%)" in f.title
    assert not any(f.code == "compared-with-previous" for f in before.findings)


def test_the_same_settings_and_pool_say_nothing(tmp_path):
    text = Path(case_files(CASE)[0]).read_text()
    a, b = _startup(tmp_path, "a.log", text), _startup(tmp_path, "b.log", text)
    compare_startups([a, b])
    assert not any(f.code == "compared-with-previous" for f in b.findings)
