"""Every report marks a figure the log did not print by how it was known, the same way the ledger's "how"
column says it (Rank.figure): * derived, † assumed; the legend names only the marks the table uses."""

from __future__ import annotations

from kvscope.api import analyze
from kvscope.core.provenance import How, SourceRef
from kvscope.render import render_analysis
from tests.unit.render.test_render_logs import example_analysis

SGLANG_LINES = ("[2026-02-28 12:26:11 TP0] Load weight begin. avail mem=94.08 GB\n"
                "[2026-02-28 12:26:20 TP0] Load weight end. type=KimiK25, dtype=torch.bfloat16, avail mem=21.71 GB, "
                "mem usage=72.37 GB.\n"
                "[2026-02-28 12:26:21 TP0] KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB\n"
                "[2026-02-28 12:26:21 TP0] Memory pool end. avail mem=11.18 GB\n")


def test_the_example_marks_derived_and_assumed_figures_apart():
    analysis = example_analysis()
    ref = analysis.startups[0].ranks[0]
    assert ref.figure("avail_at_ready_gib").how is How.ASSUMED  # the example's stated 7.90 GiB
    assert ref.figure("pre_load_free_gib").how is How.DERIVED
    assert ref.figure("avail_after_pool_gib").how is How.READ
    text = render_analysis(analysis, "terminal")
    assert "7.90†" in text and "94.08*" in text and "11.18*" not in text and "11.18†" not in text
    assert "* derived by kvscope" in text and "† assumed" in text
    md = render_analysis(analysis, "markdown")
    assert "7.90†" in md and "94.08\\*" in md and "† assumed" in md
    html = render_analysis(analysis, "html")
    assert '7.90<span class="derived">†</span>' in html and "assumed: given with --assume" in html


def test_a_log_with_every_figure_printed_has_no_legend(tmp_path):
    path = tmp_path / "log.txt"
    path.write_text(SGLANG_LINES, encoding="utf-8")
    analysis = analyze([str(path)])
    ref = analysis.startups[0].ranks[0]
    fig = ref.figure("avail_after_pool_gib")
    assert fig.how is How.READ and isinstance(fig.source, SourceRef) and fig.source.line_no == 4
    assert ref.figure("cuda_graph_gib") is None
    for fmt in ("terminal", "markdown"):
        text = render_analysis(analysis, fmt)
        assert "derived by kvscope" not in text and "† assumed" not in text, fmt


def test_an_assumed_figure_carries_no_log_line(tmp_path):
    path = tmp_path / "log.txt"
    path.write_text(SGLANG_LINES, encoding="utf-8")
    ref = analyze([str(path)], {"avail_at_ready_gib": 5.0}).startups[0].ranks[0]
    fig = ref.figure("avail_at_ready_gib")
    assert fig.value == 5.0 and fig.how is How.ASSUMED and fig.source is None
