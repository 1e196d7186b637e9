"""SGLang's sizing rule against the worked arithmetic in docs/research/sglang-memory.md §10."""

from __future__ import annotations

from kvscope.engines.sglang import rules
from kvscope.engines.sglang.eras import ERAS, infer_version_range
from kvscope.engines.sglang.rules import GIB, Interval
from kvscope.model.catalog import load_architecture

E1 = ERAS[1]


def test_mla_cell_kimi():
    arch, where = load_architecture("moonshotai/Kimi-K2.5")
    assert arch is not None and "catalog" in where
    cell = rules.cell_size(arch, 2, attn_tp=8, era=E1)
    assert cell.bytes_per_token == 70_272
    assert rules.cell_size(arch, 1, attn_tp=8, era=E1).bytes_per_token == 35_136


def test_pool_line_10_42():
    assert round(rules.predicted_pool_gib(159_277, 1, 70_272), 4) == 10.4241
    assert (159_277 + 1) * 70_272 == 11_192_783_616


def test_budget_from_printed_figures():
    rest = rules.rest_interval(Interval.printed(94.04), Interval.printed(21.71), 0.88)
    assert abs(rest.mid - 10.4252) < 1e-4
    low, high = rules.tokens_from_rest(rest, 70_272)
    assert low <= 159_277 <= high  # the ±95-token window of the doc
    assert int(rest.mid * GIB) // 70_272 == 159_294


def test_gqa_heads_replicated_when_tp_exceeds_heads():
    arch, _ = load_architecture("Qwen/Qwen3-30B-A3B")  # 4 KV heads
    assert rules.cell_size(arch, 2, attn_tp=8, era=E1).bytes_per_token == 1 * 256 * 48 * 2
    assert rules.cell_size(arch, 2, attn_tp=2, era=E1).bytes_per_token == 2 * 256 * 48 * 2


def test_allocator_slack_about_one_mib_per_layer():
    arch, _ = load_architecture("moonshotai/Kimi-K2.5")
    cell = rules.cell_size(arch, 2, attn_tp=8, era=E1)
    slack = rules.allocator_slack_gib(159_277, 1, cell)
    assert abs(slack - 0.0603) < 0.001  # 61 × 1,061,120 B


def test_request_table_48_rows():
    assert abs(rules.request_pool_gib(48, 262_144, 4) - 48 / 1024) < 0.003


def test_version_clues_case_study():
    vr = infer_version_range({"using_kv_dtype_line": True, "draft_same_tokens": True}, "2026-02-28 12:26:11")
    assert [e.name for e in vr.eras] == ["E1"]


# ------------------------------------------------------------------------------------------------
# DeepSeek-V4 (engines.sglang.dsv4): bytes per full token by release, against logged values
# ------------------------------------------------------------------------------------------------


def _v4(model: str) -> dict:
    from kvscope.model.weights import load_model_config

    return load_model_config(model).cfg


def test_dsv4_bytes_per_full_token_match_logged_lines():
    """Three public 'DSV4 memory calculation: bytes_per_full_token=…' lines, to the printed decimals:
    V4-Flash on 0.5.12 (every state per token, the MTP entry counted as a layer) 15,955.85; V4-Pro on
    0.5.15–0.5.19 at swa ratio 0.15 13,735.04 with 1.01 GiB of ratio-128 states for 64 requests, and
    its logged full_token=9,217,792 from 118.93 GB; V4-Flash with speculative decoding 9,259.90."""
    from kvscope.engines.sglang import dsv4

    flash, pro = _v4("deepseek-ai/DeepSeek-V4-Flash"), _v4("deepseek-ai/DeepSeek-V4-Pro")
    assert round(dsv4.sizing(flash, (0, 5, 12), False, None).bytes_per_full_token, 2) == 15955.85
    b = dsv4.sizing(pro, (0, 5, 16), False, 64, swa_ratio=0.15)
    assert round(b.bytes_per_full_token, 2) == 13735.04 and round(b.fixed_bytes / 2**30, 2) == 1.01
    tokens = dsv4.full_tokens(int(118.93 * 2**30), b)
    assert abs(tokens - 9_217_792) <= 2 * dsv4.PAGE  # the printed GB hides the last page
    assert round(dsv4.sizing(flash, (0, 5, 16), True, None).bytes_per_full_token, 2) == 9259.90


def test_dsv4_later_eras_count_page_padding_and_the_b200_layout():
    from kvscope.engines.sglang import dsv4

    pro = _v4("deepseek-ai/DeepSeek-V4-Pro")
    assert round(dsv4.sizing(pro, (0, 5, 13), False, None).bytes_per_full_token, 2) == 23691.44
    assert round(dsv4.sizing(pro, (0, 5, 21), False, None).bytes_per_full_token, 2) == 10115.25
    assert round(dsv4.sizing(pro, (0, 5, 23), False, None, sm_major=10).bytes_per_full_token, 2) == 9316.80
    assert round(dsv4.sizing(pro, (0, 5, 23), True, None).fixed_bytes / 2**30, 2) == 7.83  # MTP: rings of 256


def test_dsv4_plan_on_8xh200():
    """With the 8×H200 TP8 basis and mem_fraction_static 0.95, the pools get what V4's rules leave;
    at 0.88 (the InferenceX #2128 launch that failed) nothing is left."""
    from kvscope.analysis.plan import PlanRequest, plan

    def tokens(mfs: float, version: str = "0.5.19") -> dict:
        return plan(PlanRequest(model="deepseek-ai/DeepSeek-V4-Pro", gpu="H200", engine="sglang",
                                engine_version=version, tp=8, settings={"mem_fraction_static": mfs}))

    p = tokens(0.95)
    assert p["settings"]["page_size"]["value"] == 256 and p["kv"]["kv_tokens"] % 256 == 0
    assert 120_000 < p["kv"]["kv_tokens"] < 200_000
    assert any(r["item"].startswith("KV pools:") and "ratio-128 states" in r["item"] for r in p["ledger"])
    assert tokens(0.88)["kv"]["kv_tokens"] == 0
    from kvscope.core.errors import InputError

    try:
        tokens(0.95, "0.5.9")
    except InputError as e:
        assert "predates DeepSeek-V4" in str(e)
    else:
        raise AssertionError("0.5.9 has no DeepSeek-V4 support")


def test_release_numbers_read_as_every_engine_reads_them():
    """SGLang's own parser read '0.5.6rc1' as 0.5.0 and 'v0.5.2' as 5.2.0; the shared one reads the release."""
    from kvscope.engines.sglang.eras import era_for, parse_version

    assert parse_version("0.5.6rc1") == (0, 5, 6)
    assert parse_version("v0.5.2") == (0, 5, 2)
    assert parse_version("0.4.6.post5") == (0, 4, 6)
    assert era_for(parse_version("0.5.6rc1")) == era_for((0, 5, 6))
