"""SGLang reconciliation and reading on real posted logs (model from each case's meta.json)."""

from __future__ import annotations

import pytest

from kvscope.api import analyze
from tests.conftest import case_dir, case_files


def _one(prefix: str, model: str | None = None, **assume):
    startups = analyze(case_files(case_dir("sglang", prefix)), assume, model).startups
    assert startups
    return startups[0]


@pytest.mark.parametrize(
    ("prefix", "model", "bytes_per_token"),
    [
        ("031", "Qwen/Qwen3-30B-A3B", 24_576),  # 4 KV heads / TP4 = 1 head × 256 × 48 × 2
        ("033", "meta-llama/Llama-3.1-8B-Instruct", 131_072),  # 8 × 256 × 32 × 2
        ("042", "Qwen/Qwen3-30B-A3B", 98_304),  # DP attention: attn_tp 1 → all 4 heads per GPU
        ("026", "deepseek-ai/DeepSeek-V3.2-Exp", 48_068),  # fp8 656-B row + 132-B indexer, × 61
        ("027", "deepseek-ai/DeepSeek-V3.2-Exp", 40_016),  # same, printed without the indexer
    ],
)
def test_pool_reconciles(prefix, model, bytes_per_token):
    s = _one(prefix, model)
    assert s.reconciliation is not None
    assert s.reconciliation.bytes_per_token == bytes_per_token
    assert s.reconciliation.consistent is True, s.reconciliation.detail


def test_dp_attention_read_from_rank_labels():
    from kvscope.engines.sglang.finish import attn_tp_size, dp_attention_from_ranks

    s = _one("042")
    assert dp_attention_from_ranks(s) == 4
    assert attn_tp_size(s) == 1


def test_two_files_two_startups():
    startups = analyze(case_files(case_dir("sglang", "042"))).startups
    assert len(startups) == 2


def test_ready_line_capacity():
    s = _one("030")
    assert s.capacity.max_total_num_tokens == 2_261_377
    assert s.capacity.kv_tokens == 2_261_377
    assert s.capacity.max_running_requests == 4096
    assert s.capacity.context_len == 128_000
    assert s.reference_rank.avail_at_ready_gib == 37.06


def test_max_total_tokens_clamp_warning():
    s = _one("056")
    assert any(f.code == "max-total-tokens-clamped" for f in s.findings)


def test_no_kv_room_failure_classified():
    s = _one("063")
    assert s.failure is not None and s.failure.kind == "not-enough-memory"
    assert any(f.code == "not-enough-memory" and f.severity == "error" for f in s.findings)


def test_swa_pool_named():
    s = _one("039")  # the excerpt starts after TP0's SWA line; TP2 has both, SWA first
    tp2 = next(r for r in s.ranks if r.rank == "TP2")
    assert [p.name for p in tp2.kv_pools] == ["swa", "target"]
    assert tp2.pool("swa").k_gib == 41.76 and tp2.pool("target").k_gib == 4.82
    assert tp2.extras["swa_pool_gib"] == 77.63


def test_glued_progress_bar_line_is_read():
    # "…3.89it/s][2026-05-07 13:39:14 DP1 TP1 EP1] Load weight end. …" in a real log
    s = _one("042")
    dp1 = next(r for r in s.ranks if r.rank == "DP1 TP1 EP1")
    assert dp1.avail_after_weights_gib == 121.90


@pytest.mark.parametrize(("prefix", "stage"), [("017", "while capturing CUDA graphs"), ("022", "while loading weights")])
def test_exception_stage_named(prefix, stage):
    s = _one(prefix)
    assert s.failure is not None and s.failure.kind == "engine-init-failed" and s.failure.data["read_as"] == "exception"
    f = next(f for f in s.findings if f.code == "startup-exception")
    assert stage in f.title
