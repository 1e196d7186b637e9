"""SGLang's sizing rule against the worked arithmetic in ../shared/docs/sglang-memory.md §10."""

from __future__ import annotations

from kvscope.capacity.catalog import load_architecture
from kvscope.engines.sglang import rules
from kvscope.engines.sglang.eras import ERAS, infer_version_range
from kvscope.engines.sglang.rules import GIB, Interval

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
