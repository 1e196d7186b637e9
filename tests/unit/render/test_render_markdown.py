"""--format markdown: GitHub-ready tables and findings; log text can never become markup."""

from __future__ import annotations

import re

from markdown_it import MarkdownIt

from kvscope.render import render_analysis
from kvscope.render.markdown import code_block, md_code, md_escape
from tests.unit.render.test_render_logs import example_analysis, hostile_analysis


def _parse(text: str):
    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    return md, md.parse(text)


def test_example_has_tables_findings_and_collapsed_log():
    text = render_analysis(example_analysis(), "markdown")
    md, tokens = _parse(text)
    tables = [t for t in tokens if t.type == "table_open"]
    assert len(tables) >= 3  # ranks, ledger, what-if (+ settings)
    html = md.render(text)
    for rank in ("TP0", "TP1–TP6 ×6", "TP7"):  # identical ranks are one row; the two that differ are named
        assert f"<code>{rank}</code>" in html
    assert "- TP7: KV pools also draft 614 MiB (159,277 tok); free after pool 11.22 (others 11.18)" in text
    assert "159,277" in text and "70,272" in text
    assert "--mem-fraction-static 0.91" in text  # the headroom finding's flag, as a code span
    assert "| **0.88** | 159,277 |" in text and "current" in text  # what-if table marks the current value
    assert "<details><summary>Log lines (19)" in text
    fences = [t for t in tokens if t.type == "fence"]
    assert len(fences) == 1 and "Memory pool end. avail mem=11.18 GB" in fences[0].content


def test_what_if_rows_match_the_headroom_finding():
    analysis = example_analysis()
    finding = next(f for f in analysis.startups[0].findings if f.code == "mfs-headroom")
    per_step = re.search(r"\+([\d,]+) tokens", finding.detail).group(1)
    text = render_analysis(analysis, "markdown")
    assert f"**{per_step}** tokens" in text
    assert f"| 0.89 | 173,652 | +{per_step} |" in text


def test_fence_outruns_backticks_in_the_log(tmp_path):
    text = render_analysis(hostile_analysis(tmp_path), "markdown", redact=False)
    md, tokens = _parse(text)
    fences = [t for t in tokens if t.type == "fence"]
    assert len(fences) == 1  # nothing in the log closed the block early
    assert fences[0].markup == "`" * 5  # the exception line holds a run of 4
    assert "</details>" in fences[0].content and "{{ config }}" in fences[0].content
    html = md.render(text)
    assert html.count("</details>") == text.count("\n</details>")  # only kvscope's own closers are HTML


def test_log_text_renders_as_text(tmp_path):
    text = render_analysis(hostile_analysis(tmp_path), "markdown", redact=False)
    md, _ = _parse(text)
    html = md.render(text)
    assert not re.search(r"<(script|img|svg|style)\b", html)  # no live tag from the log
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html  # shown, not run


def test_md_code_and_escape():
    assert md_code("a`b") == "``a`b``"
    assert md_code("`x`") == "`` `x` ``"
    assert md_code("a|b") == "`a\\|b`"
    assert md_escape("<b>*x*</b> [l](javascript:alert(1)) | y") == (
        "&lt;b&gt;\\*x\\*&lt;/b&gt; \\[l\\](javascript:alert(1)) \\| y")
    block = code_block(["````", "x ``` y"])
    assert block.startswith("`````text\n") and block.endswith("\n`````")
