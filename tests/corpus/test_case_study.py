"""The founding case: Kimi-K2.5 INT4 on 8× RTX PRO 6000, SGLang TP8, mfs 0.88, EAGLE3."""

from __future__ import annotations

import json
import subprocess
import sys

import kvscope
from kvscope.api import analyze
from kvscope.examples import EXAMPLES, example_path


def _startup():
    ex, path = example_path("kimi-k2.5-tp8")
    analysis = analyze([path], ex.assumptions)
    assert len(analysis.startups) == 1
    return analysis.startups[0]


def test_pool_reconciles_to_the_byte():
    s = _startup()
    assert s.capacity.kv_tokens == 159277
    rec = s.reconciliation
    assert rec is not None and rec.bytes_per_token == 70272  # (512 + 64) × 61 × 2 B
    assert rec.consistent is True
    assert "(159,277 + 1) × 70,272 B = 10.4241 GiB" in rec.detail


def test_every_rank_and_the_draft_pool():
    s = _startup()
    assert len(s.ranks) == 8
    tp7 = next(r for r in s.ranks if r.rank == "TP7")
    assert tp7.pool("draft").tokens == 159277
    assert tp7.pool("draft").k_gib == 0.30 and tp7.pool("draft").v_gib == 0.30
    assert tp7.avail_after_pool_gib == 11.22


def test_reserve_explained_not_waste():
    s = _startup()
    f = next(f for f in s.findings if f.code == "reserve-is-not-waste")
    assert "11.18 GiB" in f.title
    assert "(1 − 0.88)" in f.detail
    ref = s.reference_rank
    # F recovered from the reserve: ≈ 94 GiB (the doc's 94.04 from 21.71 + 72.33, within print rounding)
    assert 93.9 <= ref.pre_load_free_gib <= 94.2
    assert "pre_load_free_gib" in ref.derived


def test_raising_mfs_is_priced():
    s = _startup()
    f = next(f for f in s.findings if f.code == "mfs-headroom")
    assert "+14,3" in f.detail  # +0.01 mfs = 0.01 × ≈94.05 GiB / 70,272 B ≈ 14,37x tokens
    # 7.9 GiB free at ready (stated by the operator), 4.7 GiB margin → +0.03 is safe
    assert f.suggestion.flag == "--mem-fraction-static"
    assert f.suggestion.to_value == 0.91
    assert abs(f.suggestion.kv_tokens_after - 202_384) <= 100


def test_mla_replicated_named():
    """DP attention would give each rank its own pool, but here the replicated bf16 attention and
    embedding and vision attention (+11.53 GiB per GPU) exceed the 10.42 GiB pool: kvscope says so and does not suggest it."""
    s = _startup()
    f = next(f for f in s.findings if f.code == "mla-replicated")
    assert "+11.53 GiB" in f.detail and "no KV room" in f.detail and "above 0.892" in f.detail
    assert f.suggestion is None


def test_examples_listed():
    assert "kimi-k2.5-tp8" in EXAMPLES


def test_cli_json_contract():
    out = subprocess.run([sys.executable, "-m", "kvscope", "explain", "--example", "kimi-k2.5-tp8", "--format", "json"],
                         capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout)
    assert doc["schema"] == "kvscope.explain/1"
    assert doc["kvscope_version"] == kvscope.__version__
    s = doc["startups"][0]
    assert s["engine"] == "sglang"
    assert s["capacity"]["kv_tokens"] == 159277
    assert s["reconciliation"]["bytes_per_token"] == 70272
    assert {p["name"] for r in s["ranks"] for p in r["kv_pools"]} == {"target", "draft"}
