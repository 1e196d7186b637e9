"""SGLang's automatic defaults by era (sglang-memory.md §2.6, §3, §4), checked on the doc's worked
example and on the real L40S log whose fraction was chosen automatically."""

from __future__ import annotations

import re

import pytest

from kvscope.engines.sglang import defaults as d
from tests.conftest import case_dir

RTX_PRO_6000 = 97887  # nvidia-smi MiB
H200 = 143771
H100 = 81559
B200 = 183359
L40S = 46068


def auto(version, gpu, **kw) -> d.MfsChoice:
    return d.auto_mem_fraction_static(version, d.MemoryInputs(gpu, **kw))


def test_worked_example_rtx_pro_6000_eagle3_tp8():
    """Doc §3: R = 512 + 12,288 + 1,024 + 1,024 = 14,848, + 2,048 (EAGLE3) = 16,896 → 0.827."""
    c = auto((0, 5, 9), RTX_PRO_6000, tp=8, speculative_algorithm="EAGLE3")
    assert [v for _, v in c.terms] == [512, 12288, 1024, 1024, 2048]
    assert c.reserved_mib == 16896
    assert c.value == 0.827


def test_worked_example_buckets():
    assert d.gpu_bucket_defaults((0, 5, 9), RTX_PRO_6000, 8) == (8192, 512)
    assert d.gpu_bucket_defaults((0, 5, 9), RTX_PRO_6000, 2) == (8192, 256)


@pytest.mark.parametrize("version,tp,expected", [
    ((0, 3, 6), 8, 0.82), ((0, 4, 0), 8, 0.81), ((0, 4, 3), 16, 0.79), ((0, 4, 3), 4, 0.85),
    ((0, 4, 3), 2, 0.87), ((0, 4, 3), 1, 0.88),
])
def test_tp_table_up_to_0_4_3(version, tp, expected):
    assert auto(version, H200, tp=tp).value == expected


def test_0_4_6_flat_13_gib_above_80_gib_else_tp_table():
    assert auto((0, 4, 6), H200, tp=8).value == pytest.approx((H200 - 13 * 1024) / H200)
    assert auto((0, 4, 6), H100, tp=8).value == 0.81  # 81,559 MiB ≤ 81,920: the TP table


def test_0_4_9_to_0_5_2_reserved_table():
    # H200 (<160 GiB): (12 + tp×pp/2) GiB → 16 GiB at TP8
    assert auto((0, 5, 2), H200, tp=8).value == round((H200 - 16 * 1024) / H200, 3)
    # B200 (≥160 GiB): 32 GiB; + 4 GiB DP attention; + 2 GiB EAGLE
    c = auto((0, 5, 2), B200, tp=8, dp=8, dp_attention=True, speculative_algorithm="EAGLE")
    assert c.reserved_mib == (32 + 4 + 2) * 1024
    assert c.value == round((B200 - 38 * 1024) / B200, 3)
    # STANDALONE reserves 6 GiB from 0.5.2
    assert auto((0, 5, 2), L40S, tp=1, speculative_algorithm="STANDALONE").reserved_mib == (9.5 + 0.5 + 6) * 1024


def test_r_formula_floor_comes_before_the_spec_term():
    # H200 TP1 0.5.4: 512 + 12288 + 512 + 128 = 13,440 (> 10 GiB, no floor); EAGLE adds 2,048
    c = auto((0, 5, 4), H200, tp=1, speculative_algorithm="EAGLE")
    assert c.reserved_mib == 13440 + 2048
    # A tiny chunk on a big GPU hits the 10 GiB floor, and the spec term is added on top of it.
    c = auto((0, 5, 4), H200, tp=1, chunked_prefill_size=1024, cuda_graph_max_bs=8, speculative_algorithm="EAGLE")
    assert c.reserved_mib == 10 * 1024 + 2048
    # No floor at or below 60 GiB.
    assert auto((0, 5, 4), L40S, tp=1).reserved_mib == 512 + 1.5 * 4096 + 2 * 32 + 128


def test_dp_attention_terms():
    c = auto((0, 5, 4), B200, tp=8, dp=8, dp_attention=True)
    labels = dict(c.terms)
    assert any("DP attention 3" in k for k in labels) and any("large graphs" in k for k in labels)
    assert c.reserved_mib == 512 + 1.5 * 16384 + 2 * 512 + 1024 + 3 * 512 * 8 + 1.5 * 512 * 8


def test_piecewise_terms_by_release():
    base = auto((0, 5, 9), H200, tp=1).reserved_mib
    # 0.5.8–0.5.9: opt-in, 8 MiB per captured size (58 sizes up to an 8192 chunk)
    assert len(d.piecewise_token_sizes(8192)) == 58
    on = auto((0, 5, 9), H200, tp=1, piecewise=True)
    assert on.reserved_mib == base + 8 * 58
    # 0.5.6: max tokens // 4, added after the spec term
    c = auto((0, 5, 6), H200, tp=1, piecewise=True, speculative_algorithm="EAGLE")
    assert c.terms[-1][1] == 8192 // 4 and "piecewise" in c.terms[-1][0]
    # 0.5.10–0.5.13: on by default; MLA pays a flat 1.5 GiB; EAGLE reserve is 4 GiB
    c = auto((0, 5, 10), H200, tp=8, mla=True, speculative_algorithm="EAGLE3")
    assert ("prefill graphs (MLA, flat)", 1536.0) in c.terms and c.terms[-1][1] == 4096
    off = auto((0, 5, 10), H200, tp=8, mla=True, piecewise=False, speculative_algorithm="EAGLE3")
    assert c.reserved_mib - off.reserved_mib == 1536


def test_draft_reserve_dropped_from_0_5_14():
    with_spec = auto((0, 5, 14), H200, tp=8, speculative_algorithm="EAGLE3")
    without = auto((0, 5, 14), H200, tp=8)
    assert with_spec.reserved_mib == without.reserved_mib


def test_e4_unknown_gpu_post_capture_and_deepep():
    assert auto((0, 5, 20), None, tp=8).value == 0.95
    assert auto((0, 5, 10), None, tp=8).value == 0.88
    post = auto((0, 5, 20), H200, tp=8, post_capture=True)
    assert post.reserved_mib == 1536 + 1024
    deepep = auto((0, 5, 20), H200, tp=8, deepep=True)
    assert deepep.reserved_mib == auto((0, 5, 20), H200, tp=8).reserved_mib + 2048


def test_bucket_tables_by_release():
    assert d.gpu_bucket_defaults((0, 5, 4), 24564, 1) == (2048, 16)  # RTX 4090
    assert d.gpu_bucket_defaults((0, 5, 6), 24564, 1) == (2048, 24)
    assert d.gpu_bucket_defaults((0, 5, 20), 24564, 1) == (4096, 48)
    assert d.gpu_bucket_defaults((0, 5, 20), 24564, 4) == (4096, 160)
    assert d.gpu_bucket_defaults((0, 5, 9), None, 1) == (4096, 160)
    assert d.gpu_bucket_defaults((0, 4, 3), 24564, 1) == (2048, 8)


def test_real_log_l40s_auto_fraction_matches_what_the_pool_implies():
    """Case 033 (L40S, Llama-8B, TP1, Nov 2025, no --mem-fraction-static): the logged pool pins the fraction."""
    text = (case_dir("sglang", "033") / "log.txt").read_text()
    free = float(re.search(r"Load weight begin\. avail mem=([\d.]+)", text).group(1))
    after = float(re.search(r"Load weight end\..*avail mem=([\d.]+)", text).group(1))
    tokens = int(re.search(r"#tokens: (\d+)", text).group(1))
    cell = 8 * 2 * 128 * 32 * 2  # Llama-3-8B bf16: 8 KV heads × (128 + 128) × 32 layers × 2 B
    implied_low = 1 - (after + 0.005 - tokens * cell / 2**30) / (free - 0.005)
    implied_high = 1 - (after - 0.005 - (tokens + 1) * cell / 2**30) / (free + 0.005)
    chosen = auto((0, 5, 4), L40S, tp=1)
    assert chosen.value == 0.851
    assert implied_low - 0.001 <= chosen.value <= implied_high + 0.001


def test_real_log_b200_bucket_chunk():
    """Case 030 prints chunked_prefill_size=16384 on a B200: the ≥160 GiB bucket."""
    text = (case_dir("sglang", "030") / "log.txt").read_text()
    assert "chunked_prefill_size=16384" in text
    assert d.gpu_bucket_defaults((0, 5, 6), B200, 1)[0] == 16384


def test_spec_params_and_request_cap():
    assert d.spec_params("DeepseekV3ForCausalLM") == (3, 1, 4)
    assert d.spec_params("LlamaForCausalLM") == (5, 4, 8)
    assert d.spec_params("Qwen3ForCausalLM", steps=2, topk=1) == (2, 1, 3)  # topk 1 forces steps + 1
    assert d.spec_default_max_running_requests((0, 5, 9), "EAGLE3", None) == 48
    assert d.spec_default_max_running_requests((0, 5, 9), "EAGLE3", 64) == 64
    assert d.spec_default_max_running_requests((0, 4, 3), "EAGLE", None) is None


def test_eagle_headroom_e0_only():
    # Doc §2.6: 48 × 3 × 1 + 48 × 4 + 100 = 436
    assert d.eagle_token_headroom(48, 3, 1, 4, (0, 5, 6)) == 436
    assert d.eagle_token_headroom(48, 3, 1, 4, (0, 5, 7)) == 0
    assert d.eagle_token_headroom(48, 3, 1, 4, (0, 4, 3)) == 48 * 3 + 100


def test_request_pool_by_era():
    # ≤0.5.9: mrr given → rows = mrr (not divided by dp); effective = min(mrr // dp, rows)
    p = d.request_pool((0, 5, 9), 159277, 159277, 262144, 48)
    assert (p.rows, p.max_running_requests) == (48, 48)
    # no mrr: the context estimate clamped to [2048, 4096]; effective = tokens // 2 capped by rows
    p = d.request_pool((0, 5, 9), 183133, 183133, 131072, None)
    assert p.rows == 2048 and p.max_running_requests == 2048
    p = d.request_pool((0, 5, 10), 1_000_000, 1_000_000, 4096, None)
    assert p.rows == 4096
    p = d.request_pool((0, 5, 14), 60, 60, 4096, 48)
    assert p.rows == 30  # min(mrr, tokens // 2)
    # DP attention divides a given mrr per rank
    p = d.request_pool((0, 5, 10), 10**6, 10**6, 4096, 256, dp=8, dp_attention=True)
    assert p.rows == 32
    # Doc §10: 48 × (262,144 + 4 + 4) × 4 B
    assert d.request_pool_bytes(48, 262144, 4, (0, 5, 9)) == 48 * 262152 * 4


def test_dsa_defaults():
    assert d.dsa_defaults((0, 5, 4), 10, None) == (64, "fp8_e4m3")
    assert d.dsa_defaults((0, 5, 4), 9, None) == (64, "bfloat16")
    assert d.dsa_defaults((0, 5, 4), 10, "bfloat16") == (64, "bfloat16")
    assert d.dsa_indexer_in_profile((0, 5, 4)) and not d.dsa_indexer_in_profile((0, 5, 3))


def test_vlm_factor_is_clamped():
    assert d.vlm_factor(12, 768) == pytest.approx(0.95 * 1.05)
    assert d.vlm_factor(27, 1152) == pytest.approx(0.95 * (1 - 0.1 * (27 * 1152**2 / (24 * 1024**2) - 1)))
    assert d.vlm_factor(64, 4096) == pytest.approx(0.95 * 0.8)
