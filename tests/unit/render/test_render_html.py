"""--format html without a browser: self-contained, small, escaped, and the figures are right.

What a browser does with the page (no network, no console error, charts drawn, injection inert)
is checked in test_browser_html.py.
"""

from __future__ import annotations

import base64
import hashlib
import html as html_lib
import json
import re
import subprocess
import sys

import pytest

from kvscope.api import analyze
from kvscope.core.startup import GIB, Reconciliation
from kvscope.render import render_analysis
from kvscope.render.html import CHARTJS_FILE, CHARTJS_VERSION, _asset, memory_segments, whatif_curve
from tests.conftest import LOGS, case_dir
from tests.unit.render.test_render_logs import example_analysis, hostile_analysis

SCRIPT = re.compile(r"<script\b([^>]*)>(.*?)</script>", re.DOTALL | re.IGNORECASE)


def _data(html: str) -> dict:
    block = re.search(r'<script type="application/json" id="kvscope-data">(.*?)</script>', html, re.DOTALL)
    return json.loads(block.group(1))


def test_example_is_one_small_offline_file(tmp_path):
    out = tmp_path / "report.html"
    run = subprocess.run([sys.executable, "-m", "kvscope", "explain", "--example", "kimi-k2.5-tp8", "--format", "html",
                          "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    html = out.read_text(encoding="utf-8")
    assert len(html.encode()) < 1_000_000
    assert html.startswith("<!DOCTYPE html>")
    # nothing to fetch: no src/href/url() pointing anywhere, no @import, no link tags
    assert not re.search(r"""\b(src|href)\s*=\s*["']?(https?:|//)""", html, re.IGNORECASE)
    assert "<link" not in html and "@import" not in html and "url(" not in html.split("<script>")[0]
    assert f"Chart.js v{CHARTJS_VERSION}" in html and "MIT License" in html


def test_csp_allows_exactly_the_inline_scripts_and_style():
    html = render_analysis(example_analysis(), "html")
    csp = html_lib.unescape(re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', html).group(1))
    assert csp.startswith("default-src 'none';")
    scripts = [body for attrs, body in SCRIPT.findall(html) if "application/json" not in attrs]
    assert len(scripts) == 2
    style = re.search(r"<style>(.*?)</style>", html, re.DOTALL).group(1)
    for body in [*scripts, style]:
        digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp


def test_vendored_chartjs_is_the_documented_release():
    lib = _asset(CHARTJS_FILE)
    assert lib.startswith(f"/*!\n * Chart.js v{CHARTJS_VERSION}")
    assert "</script" not in lib.lower() and "sourceMappingURL" not in lib
    assert "Permission is hereby granted" in _asset("chart.js.LICENSE.md")


def test_memory_chart_data_per_rank():
    data = _data(render_analysis(example_analysis(), "html"))
    memory = data["startups"][0]["memory"]
    labels = memory["labels"]
    assert sorted(labels) == [f"TP{i}" for i in range(8)]
    tp0, tp1, tp7 = labels.index("TP0"), labels.index("TP1"), labels.index("TP7")
    parts = {d["key"]: d for d in memory["datasets"]}
    assert parts["weights"]["values"][tp0] == 72.36 and "weights" in parts["weights"]["what"]
    assert parts["kv"]["values"] == [10.42] * 8
    assert parts["draft"]["values"][tp7] == 0.6  # TP7 holds the draft pool (K 0.30 + V 0.30)
    assert "159,277 tokens" in parts["kv"]["notes"][tp0]
    # TP0's parts add up to the device total; other ranks show what their lines print plus "not logged"
    assert abs(sum(d["values"][tp0] or 0 for d in memory["datasets"]) - 95.59) < 0.01
    assert parts["unlogged"]["values"][tp0] is None and parts["unlogged"]["values"][tp1] > 70


def test_whatif_curve_matches_the_findings():
    analysis = example_analysis()
    s = analysis.startups[0]
    curve = whatif_curve(s)
    assert curve["knob"] == "mem_fraction_static" and curve["current"] == 0.88
    headroom = next(f for f in s.findings if f.code == "mfs-headroom")
    assert f"+{curve['tokens_per_step']:,} tokens" in headroom.detail
    assert curve["tokens_per_step"] == int(0.01 * s.reference_rank.pre_load_free_gib * GIB // 70272)
    points = {p["x"]: p for p in curve["points"]}
    assert points[0.88]["tokens"] == 159277 and not points[0.88]["risk"]
    if headroom.suggestion is not None:  # the finding's "safe" value is outside the risk region
        assert not points[headroom.suggestion.to_value]["risk"]
    assert points[max(points)]["risk"]
    html = render_analysis(analysis, "html")
    assert _data(html)["startups"][0]["whatif"]["risk_from"] == curve["risk_from"]
    assert 'class="current' in html and "OOM risk" in html


def test_vllm_curve_uses_the_device_total():
    """vLLM: +0.01 gpu_memory_utilization moves 0.01 × device total into the KV cache."""
    pytest.importorskip("kvscope.engines.vllm.lines", reason="the vLLM line patterns are not in this build")
    case = case_dir("vllm", "025")
    s = analyze([str(case / "log.txt")], {"gpu": "L40S", "gpu_memory_utilization": 0.85}).startups[0]
    assert s.capacity.kv_tokens == 158656
    if s.reconciliation is None or not s.reconciliation.bytes_per_token:
        # Llama-3.1-8B, bf16 KV: 32 layers × 8 KV heads × 128 dims × 2 (K, V) × 2 B
        s.reconciliation = Reconciliation(bytes_per_token=131072)
    curve = whatif_curve(s)
    total = 46068 / 1024
    assert curve["knob"] == "gpu_memory_utilization" and curve["current"] == 0.85
    assert curve["tokens_per_step"] == int(0.01 * total * GIB // curve["bytes_per_token"])
    assert abs(curve["risk_from"] - (1 - 2.0 / total)) < 0.01  # 2 GiB outside the budget, as the vLLM findings


def test_log_strings_are_escaped_everywhere(tmp_path):
    html = render_analysis(hostile_analysis(tmp_path), "html", redact=False)
    assert len(SCRIPT.findall(html)) == 3  # data, Chart.js, kvscope: none from the log
    assert "<script>window.__pwned" not in html and "<img" not in html and "<svg" not in html
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html
    assert "{{7*7}}" in html and "{{ config }}" in html  # template syntax from data stays text
    assert "__pwned=1&lt;/script&gt;{{7*7}}" in html  # not evaluated to 49
    body = html.split("<style>")[0] + html.split("</style>", 1)[1]
    assert body.lower().count("</style") == 0  # the log's </style> is escaped, not a tag
    block = re.search(r'id="kvscope-data">(.*?)</script>', html, re.DOTALL).group(1)
    assert "<" not in block and ">" not in block  # JSON for the charts is \\u003c-escaped
    assert 'href="javascript:' not in html.lower()


def test_extra_prediction_and_runtime_are_rendered_when_present():
    analysis = example_analysis()
    s = analysis.startups[0]
    s.runtime = {"samples": [{"t": i * 10.0, "token_usage": 0.1 * i, "running_req": i} for i in range(6)], "peak_usage": 0.5}
    extra = {"prediction": {"mem_fraction_static": 0.91, "kv_tokens": 202402, "note": "<b>x</b>"}}
    html = render_analysis(analysis, "html", extra=extra)
    assert "What-if prediction" in html and "202,402" in html and "&lt;b&gt;x&lt;/b&gt;" in html
    runtime = _data(html)["startups"][0]["runtime"]
    assert runtime["x"] == [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]
    assert {x["name"]: x["axis"] for x in runtime["series"]} == {"token_usage": "y2", "running_req": "y"}
    assert 'data-chart="runtime"' in html and "peak usage" in html and "peak_usage" not in html  # in words
    md = render_analysis(analysis, "markdown", extra=extra)
    assert "## What-if prediction" in md and "### Runtime" in md


def test_no_startup_still_renders(tmp_path):
    log = tmp_path / "empty.log"
    log.write_text("nothing to see here\n")
    html = render_analysis(analyze([str(log)]), "html")
    assert "No engine startup found" in html and _data(html) == {"startups": []}


def test_failed_startup_bar_shows_weights_and_what_was_left():
    """063: the weights left no room for KV; the bar shows weights and the free memory after them."""
    s = analyze([str(case_dir("sglang", "063") / "log.txt")]).startups[0]
    parts = {p["key"]: p for p in memory_segments(s, s.reference_rank)}
    assert parts["weights"]["gib"] == 125.65 and parts["free"]["gib"] == 12.25
    assert "free after weights" in parts["free"]["note"] and "kv" not in parts


def test_vllm_budget_bar():
    """vLLM: the budget (total × utilization) holds weights, KV cache and 'other'; the rest is free."""
    pytest.importorskip("kvscope.engines.vllm.lines", reason="the vLLM line patterns are not in this build")
    s = analyze([str(case_dir("vllm", "046") / "log.txt")]).startups[0]
    r = s.reference_rank
    if r.usable_gib is None or r.total_gib is None:
        pytest.skip("this build's vLLM parser does not read the budget lines")
    parts = {p["key"]: p["gib"] for p in memory_segments(s, r)}
    assert abs(sum(parts.values()) - r.total_gib) < 0.01
    assert abs(parts["free"] - (r.total_gib - r.usable_gib - (r.cuda_graph_gib or 0))) < 0.01


def test_every_fixture_renders(tmp_path):
    """Every real log renders to HTML and markdown (no crash on any shape of startup)."""
    for meta in sorted(LOGS.glob("*/*/meta.json")):
        files = [str(meta.parent / f) for f in json.loads(meta.read_text()).get("files") or ["log.txt"]]
        analysis = analyze(files)
        html = render_analysis(analysis, "html")
        assert html.count("<section class=\"startup\"") == len(analysis.startups), meta.parent.name
        assert render_analysis(analysis, "markdown").startswith("# kvscope report")


def test_whatif_prediction_section_and_calibrated_curve():
    """`kvscope whatif` passes its prediction as extra: a scenario table, and its calibrated curve
    replaces the estimate for the startup it was calibrated on."""
    whatif = pytest.importorskip("kvscope.cli.whatif")
    analysis = example_analysis()
    pred = whatif.build_prediction(analysis.startups[0], {"mem_fraction_static": 0.93}, None, None)
    pred["startup_index"] = 0
    html = render_analysis(analysis, "html", extra={"prediction": pred})
    assert "What-if prediction" in html and "--mem-fraction-static 0.93" in html
    assert re.search(r'<tr class="current risk"><th scope="row" class="mono">--mem-fraction-static 0.93', html)
    curve = _data(html)["startups"][0]["whatif"]
    assert curve["origin"] == "calibrated by kvscope whatif"
    assert [p["tokens"] for p in curve["points"]] == [p["kv_tokens"] for p in pred["mfs_curve"]]
    assert curve["current"] == 0.88 and curve["risk_from"] == min(
        p["mem_fraction_static"] for p in pred["mfs_curve"] if p["risk"] != "low")
    md = render_analysis(analysis, "markdown", extra={"prediction": pred})
    assert "| **`--mem-fraction-static 0.93`** |" in md


def test_runtime_timeline_from_a_real_log():
    """vllm/902 serves until its KV cache saturates: the runtime summary's timeline becomes a chart."""
    pytest.importorskip("kvscope.runtime.summary", reason="the runtime package is not in this build")
    pytest.importorskip("kvscope.engines.vllm.lines", reason="the vLLM line patterns are not in this build")
    analysis = analyze([str(case_dir("vllm", "902") / "log.txt")])
    s = next(s for s in analysis.startups if s.runtime)
    html = render_analysis(analysis, "html")
    index = analysis.startups.index(s)
    runtime = _data(html)["startups"][index]["runtime"]
    names = {x["name"]: x for x in runtime["series"]}
    assert names["usage_max"]["axis"] == "y2" and names["usage_max"]["max"] == 1.0  # saturated
    assert names["queued_max"]["axis"] == "y" and runtime["x"][0] == 0.0
    assert 'data-chart="runtime"' in html and "KV usage, peak" in html and "usage.peak" not in html
    assert "### Runtime" in render_analysis(analysis, "markdown")
