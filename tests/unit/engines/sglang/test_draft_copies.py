"""An MTP / EAGLE draft's own embedding (and lm_head) copies: SGLang shares the target's only after the pools are
sized (0.5.14 – at least 0.5.19), so the copies' memory was budgeted and then sits idle."""

from __future__ import annotations

from pathlib import Path

from kvscope.api import analyze
from tests.conftest import FIXTURES

MTP_EXCERPT = FIXTURES / "harvested" / "sglang" / "218-qwen35-mtp-abbreviated-lines-kv-va-upper-bound-273k" / "log.txt"
EAGLE_LLAMA2 = FIXTURES / "harvested" / "sglang" / "213-sglang-ci-docs-notebook-eagle-llama2-negative-weight-mem" / "log.txt"


def _finding(path: Path, text: str | None = None):
    if text is not None:
        path.write_text(text)
    s = analyze([str(path)]).startups[-1]
    return next((f for f in s.findings if f.code == "draft-copies-idle"), None)


def test_an_mtp_draft_excerpt_is_told_its_copies_sit_idle():
    """sgl-project/sglang#35996's own excerpt: Qwen3_5ForCausalLMMTP, 5.18 GB; the release is not in it, so hedged."""
    f = _finding(MTP_EXCERPT)
    assert f is not None and f.severity == "info"
    assert "embedding and lm_head" in f.title and "Qwen3_5ForCausalLMMTP" in f.detail and "0.5.14" in f.detail


def test_a_release_before_the_draft_joined_the_budget_is_not_told(tmp_path):
    """An EAGLE-1 draft (LlamaForCausalLMEagle, its own embedding): told when the release is unknown; on 0.5.9, which
    loads the draft after sizing the pools, its copies come out of the reserve and nothing was budgeted twice."""
    f = _finding(EAGLE_LLAMA2)
    assert f is not None and f.title.startswith("The draft's own embedding copies")
    assert _finding(tmp_path / "c.log", "sglang version 0.5.9\n" + EAGLE_LLAMA2.read_text()) is None


def test_a_known_release_in_the_window_is_a_warning_and_one_after_the_fix_is_silent(tmp_path):
    lines = MTP_EXCERPT.read_text()
    assert _finding(tmp_path / "a.log", "sglang version 0.5.17\n" + lines) is not None
    assert _finding(tmp_path / "a.log").severity == "warning"
    assert _finding(tmp_path / "b.log", "sglang version 0.5.21\n" + lines) is None


def test_with_the_model_the_copy_is_sized_and_nothing_breaks():
    """--model Qwen/Qwen3.5-27B (the catalog): one copy is 248,320 × 5,120 × 2 B = 2.37 GiB on one GPU."""
    s = analyze([str(MTP_EXCERPT)], model="Qwen/Qwen3.5-27B").startups[-1]
    f = next(f for f in s.findings if f.code == "draft-copies-idle")
    assert "2.37 GiB per GPU each: 248,320 × 5,120 × 2 B" in f.detail
