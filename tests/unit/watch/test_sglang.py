"""kvscope watch against SGLang, replaying real /get_server_info, /server_info and /metrics answers
(tests/fixtures/watch/sources.json gives where each was published)."""

from __future__ import annotations

from tests.fixtures.watch.replay import Answer, Replay
from tests.unit.watch.test_faults import FAST, explain_json, jsonl, watch

INFO_2025_05 = "sglang/docs-2025-05-13-get_server_info.json"
INFO_2025_10 = "sglang/docs-2025-10-02-get_server_info.json"
INFO_2026 = "sglang/docs-2026-04-05-server_info.json"
METRICS_DOCS = "sglang/docs-production-metrics-llama31-8b.txt"


def test_sglang_without_metrics_reports_capacity_and_says_how_to_enable_them(capsys):
    """The docs server ran without --enable-metrics: /metrics is 404, capacity still comes from server info."""
    with Replay({"/get_server_info": [Answer.file(INFO_2025_05)]}) as srv:
        code, out, err = watch([srv.url, *FAST], capsys)
    assert code == 2
    assert "SGLang 0.4.6.post3" in out and "KV capacity 20,480 tokens" in out
    assert "max running 200" in out and "--mem-fraction-static 0.88" in out
    assert "max request input 20,474 tokens" in out
    assert "--enable-metrics" in err


def test_sglang_new_server_info_endpoint(capsys):
    """2026 SGLang answers /server_info (404 on nothing else is needed): found after /get_server_info."""
    with Replay({"/server_info": [Answer.file(INFO_2026)]}) as srv:
        code, out, err = watch([srv.url, *FAST, "--format", "jsonl"], capsys)
        hits = dict(srv.hits)
    assert code == 2
    cap = jsonl(out)[0]
    assert cap["engine"] == "sglang" and cap["capacity"]["kv_tokens"] == 20480
    assert cap["capacity"]["max_running_requests"] == 128  # effective_max_running_requests_per_dp
    assert cap["capacity"]["memory_fraction"] == 0.907 and cap["capacity"]["extras"]["kv_pool_gib"] == 0.23
    assert cap["capacity"]["sources"] == ["/server_info"]
    assert hits["/get_server_info"] >= 1 and hits["/server_info"] >= 1


def test_sglang_server_info_plus_metrics(capsys, tmp_path):
    """The 0.5.3 server info with a /metrics page: capacity from the info, usage from the gauges."""
    metrics = Answer.file("sglang/issue-13485-v0.5.1-qwen32b-metrics.txt")
    rec = tmp_path / "rec.jsonl"
    with Replay({"/get_server_info": [Answer.file(INFO_2025_10)], "/metrics": [metrics]}) as srv:
        code, out, err = watch([srv.url, *FAST, "--duration", "0.25", "--record", str(rec)], capsys)
    assert code == 0, err
    assert "KV capacity 20,480 tokens" in out and "running 1" in out and "kv 0.0 %" in out
    lines = jsonl(rec.read_text())
    assert lines[0]["capacity"]["sources"] == ["/get_server_info", "/metrics"]
    assert next(o for o in lines if o["type"] == "sample")["tokens_used"] == 1


def test_sglang_metrics_only_estimates_the_pool(capsys):
    """No server info endpoint: capacity ≈ num_used_tokens / token_usage, shown as an estimate."""
    with Replay({"/metrics": [Answer.file(METRICS_DOCS)]}) as srv:
        code, out, err = watch([srv.url, *FAST, "--duration", "0.25"], capsys)
    assert code == 0, err
    assert "KV capacity ≈442,354 tokens (estimated: num_used_tokens / token_usage)" in out
    assert "kv 28.0 %" in out and "123,859/442,354 tok" in out
    assert "running 162" in out and "waiting 2,826" in out and "hit 0.8 %" in out
    assert "not KV-bound" in out  # 2826 waiting at 28 % usage: the queue is not the KV cache's doing


def test_sglang_2024_capacity_gauges(capsys):
    with Replay({"/metrics": [Answer.file("sglang/pr-1853-2024-llama32-3b-metrics.txt")]}) as srv:
        code, out, err = watch([srv.url, *FAST, "--duration", "0.15", "--format", "jsonl"], capsys)
    assert code == 0
    cap = jsonl(out)[0]["capacity"]
    assert (cap["kv_tokens"], cap["max_running_requests"], cap["max_model_len"]) == (570979, 2231, 131072)


def test_sglang_dp_attention_ranks(capsys):
    with Replay({"/metrics": [Answer.file("sglang/issue-aibrix-1614-deepseek-r1-dp8-metrics.txt")]}) as srv:
        code, out, err = watch([srv.url, *FAST, "--duration", "0.15", "--format", "jsonl"], capsys)
    sample = next(o for o in jsonl(out) if o["type"] == "sample")
    assert code == 0 and sample["waiting"] == 0 and round(sample["extras"]["gen_throughput"]) == 566


def test_sglang_recording_reads_back_as_sglang(capsys, tmp_path):
    rec = tmp_path / "rec.jsonl"
    metrics = Answer.file("sglang/issue-13485-v0.5.1-qwen32b-metrics.txt")
    with Replay({"/get_server_info": [Answer.file(INFO_2025_10)], "/metrics": [metrics]}) as srv:
        watch([srv.url, *FAST, "--duration", "0.25", "--record", str(rec)], capsys)
    (s,) = explain_json(rec, capsys)["startups"]
    assert s["engine"] == "sglang" and s["engine_version"] == "0.5.3rc0"
    assert s["capacity"]["kv_tokens"] == 20480 and s["capacity"]["max_total_num_tokens"] == 20480
    assert s["runtime"]["samples"] >= 2
