"""Serving-time line shapes of every SGLang / vLLM era → RUNTIME events (real lines, tests/fixtures/runtime)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from kvscope.core import events as ev
from kvscope.engines import ANCHORS, parse_lines
from kvscope.engines.base import LineContext
from kvscope.engines.serving import ANCHORS as RUNTIME_ANCHORS
from kvscope.engines.serving import RuntimeLines
from kvscope.reading import iter_candidate_lines
from tests.conftest import FIXTURES

RUNTIME = FIXTURES / "runtime"
CPU_RUN = FIXTURES / "logs" / "vllm" / "902-cpu-v0.32-tiny-qwen2-4MiB-kv-saturated"


def runtime_events(path: Path) -> list[ev.Event]:
    lines = iter_candidate_lines([str(path)], ANCHORS)
    return [e for e in parse_lines(lines) if e.kind == ev.RUNTIME]


# file → (engine, Counter of event sources)
EXPECTED = {
    "sglang-2024-08-time-only-decode.txt": ("sglang", {"decode": 10}),
    "sglang-2024-prefill-cache-hit-rate.txt": ("sglang", {"prefill": 7}),
    "sglang-2024-08-bare-decode-line.txt": ("sglang", {"decode": 1}),
    "sglang-2024-11-prefill-queue-low-usage.txt": ("sglang", {"prefill": 7}),
    "sglang-2025-02-decode-period.txt": ("sglang", {"decode": 9}),
    "sglang-2025-03-decode-largest-len.txt": ("sglang", {"decode": 7}),
    "sglang-2025-03-decode-oom-retract-tp8-15.txt": ("sglang", {"retract": 11}),
    "sglang-2025-05-prefill-no-rank.txt": ("sglang", {"prefill": 3}),
    "sglang-2025-11-decode-trailing-comma.txt": ("sglang", {"decode": 8}),
    "sglang-2025-12-decode-full-pool-queue.txt": ("sglang", {"decode": 5}),
    "sglang-2026-04-decode-cuda-graph.txt": ("sglang", {"decode": 8}),
    "sglang-2026-04-mixed-http-input-throughput.txt": ("sglang", {"decode": 1, "prefill": 3}),
    "sglang-2026-07-npu-spec-decode.txt": ("sglang", {"decode": 3, "prefill": 1}),
    "sglang-2026-07-mamba-prefill.txt": ("sglang", {"prefill": 5}),
    "sglang-2026-05-swa-decode-after-retraction.txt": ("sglang", {"decode": 7}),
    "sglang-2026-04-pd-prefill-custom-format.txt": ("sglang", {"prefill": 4}),
    "sglang-0.5.18-qwen3-4b-saturated-retract.txt": ("sglang", {"decode": 85, "prefill": 29, "retract": 20}),
    "vllm-v0-2024-02-metrics.txt": ("vllm", {"stats": 1}),
    "vllm-v0-2024-06-swap-preemption.txt": ("vllm", {"stats": 2, "preempt": 1}),
    "vllm-v0-2025-01-metrics-trailing-period.txt": ("vllm", {"stats": 6}),
    "vllm-v0-2025-01-tt-heartbeat-92pct.txt": ("vllm", {"stats": 5}),
    "vllm-v0-2025-05-prefix-hit-gpu-cpu.txt": ("vllm", {"stats": 3, "hit": 3}),
    "vllm-v1-2025-04-loggers-prefix-hit.txt": ("vllm", {"stats": 2}),
    "vllm-v1-2025-08-lmcache-interleaved.txt": ("vllm", {"stats": 2}),
    "vllm-v1-2026-05-saturated-queue.txt": ("vllm", {"stats": 5}),
    "vllm-v1-2026-03-prefill-bound-queue.txt": ("vllm", {"stats": 5}),
    "vllm-v1-2026-05-docker-timestamps.txt": ("vllm", {"stats": 4}),
    "vllm-v1-2026-05-mm-cache-spec-decoding.txt": ("vllm", {"stats": 2}),
    "vllm-v1-2026-07-prefix-hit-rising.txt": ("vllm", {"stats": 5}),
}


def test_every_fixture_has_a_source() -> None:
    sources = json.loads((RUNTIME / "sources.json").read_text())
    files = {p.name for p in RUNTIME.glob("*.txt")}
    assert files == set(EXPECTED)
    assert files <= set(sources)
    assert all(sources[f]["url"].startswith("https://github.com/") for f in files)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_lines_become_runtime_events(name: str) -> None:
    engine, kinds = EXPECTED[name]
    events = runtime_events(RUNTIME / name)
    assert Counter(e.data["src"] for e in events) == Counter(kinds)
    assert {e.engine for e in events} == {engine}


def test_few_anchors() -> None:
    # the reader's cost grows with the number of anchors; serving lines are the bulk of a journal
    assert len(RUNTIME_ANCHORS) <= 5
    assert all(a in ANCHORS for a in RUNTIME_ANCHORS)


def parse_one(text: str) -> dict:
    parser = RuntimeLines()
    out = parser.parse(text, LineContext())
    assert len(out) == 1, text
    return {"engine": parser.engine, "rank": out[0].rank, "stamp": out[0].timestamp, **out[0].data}


def first_line(name: str, contains: str = "") -> str:
    return next(line for line in (RUNTIME / name).read_text().splitlines() if contains in line)


def test_sglang_decode_fields() -> None:
    d = parse_one(first_line("sglang-0.5.18-qwen3-4b-saturated-retract.txt", "token usage: 1.00"))
    assert d["src"] == "decode" and d["engine"] == "sglang"
    assert (d["usage"], d["tokens"], d["running"], d["queued"], d["gen_tps"]) == (1.0, 87282, 66, 13, 2529.33)
    assert d["stamp"] == "2026-09-13 16:06:07" and d["rank"] is None


def test_sglang_prefill_old_wording_with_hit_rate_and_rank() -> None:
    d = parse_one(first_line("sglang-2024-prefill-cache-hit-rate.txt", "14.16%"))
    assert (d["src"], d["usage"], d["running"], d["queued"]) == ("prefill", 0.18, 4, 34)
    assert (d["new_tokens"], d["cached_tokens"], d["hit_pct"]) == (8192, 2753, 14.16)
    assert d["rank"] == "TP0" and d["stamp"] == "16:43:30"


def test_sglang_hybrid_pools() -> None:
    swa = parse_one(first_line("sglang-2026-05-swa-decode-after-retraction.txt"))
    assert (swa["usage"], swa["swa_usage"], swa["tokens"], swa["queued"]) == (0.92, 0.09, 2435072, None)
    mamba = parse_one(first_line("sglang-2026-07-mamba-prefill.txt"))
    assert (mamba["usage"], mamba["mamba_usage"], mamba["queued"]) == (0.14, 0.2, 97)


def test_sglang_rank_labels() -> None:
    assert parse_one(first_line("sglang-2026-07-npu-spec-decode.txt", "Decode"))["rank"] == "TP0 EP0"
    assert parse_one(first_line("sglang-2025-03-decode-oom-retract-tp8-15.txt"))["rank"] == "TP13"


def test_vllm_v0_and_v1_fields() -> None:
    v0 = parse_one(first_line("vllm-v0-2024-06-swap-preemption.txt", "Avg prompt"))
    assert (v0["running"], v0["queued"], v0["swapped"], v0["cpu_usage_pct"]) == (34, 9832, 100, 70.4)
    assert v0["usage"] == pytest.approx(0.992) and v0["stamp"] == "06-16 21:24:15" and v0["engine"] == "vllm"
    v1 = parse_one(first_line("vllm-v1-2026-05-saturated-queue.txt"))
    assert (v1["running"], v1["queued"], v1["hit_pct"], v1["rank"]) == (18, 43, 0.0, "Engine 000")
    assert v1["usage"] == pytest.approx(0.959)
    pre = parse_one(first_line("vllm-v0-2024-06-swap-preemption.txt", "preempted"))
    assert (pre["src"], pre["cumulative"], pre["mode"]) == ("preempt", 151, "swap")


def test_vllm_cpu_backend_pool_is_the_usage() -> None:
    d = parse_one(first_line(str(CPU_RUN / "load.log"), "CPU KV cache usage: 93.3%"))
    assert d["usage"] == pytest.approx(0.933) and "cpu_usage_pct" not in d


def test_clock_is_monotonic_across_midnight_for_time_only_stamps() -> None:
    parser, ctx = RuntimeLines(), LineContext()
    a = parser.parse("[23:59:59 TP0] Decode batch. #running-req: 1, #token: 9, token usage: 0.00, #queue-req: 0", ctx)
    b = parser.parse("[00:00:01 TP0] Decode batch. #running-req: 1, #token: 9, token usage: 0.00, #queue-req: 0", ctx)
    assert b[0].data["t"] - a[0].data["t"] == 2


def test_non_runtime_lines_say_nothing() -> None:
    parser = RuntimeLines()
    for text in ("[2026-09-13 16:05:21] max_total_num_tokens=87552, chunked_prefill_size=2048",
                 "Capturing batches (avail_mem=9.72 GB): 100%|█| 23/23 [00:08<00:00,  2.59it/s]",
                 "(APIServer pid=92107) INFO 05-08 16:21:55 [metrics.py:101] SpecDecoding metrics: Accepted throughput: 15.60 tokens/s",
                 "(EngineCore_0 pid=3945189) INFO 08-21 07:17:09 [scheduler.py:495] Preempted request cmpl-e59 has been resumed!"):
        assert parser.parse(text, LineContext()) == []


def test_vllm_v1_preemptions_field() -> None:
    # The "Preemptions: N" part vLLM's V1 logger adds when N > 0 (format of vllm/v1/metrics/loggers.py);
    # no posted log with it was found, so the line is built from the format with the 43295 numbers.
    text = ("(APIServer pid=3646) INFO 05-19 10:13:11 [loggers.py:271] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
            "Avg generation throughput: 1055.3 tokens/s, Running: 18 reqs, Waiting: 43 reqs, Preemptions: 3, "
            "GPU KV cache usage: 95.9%, Prefix cache hit rate: 0.0%")
    d = parse_one(text)
    assert (d["preempted"], d["running"], d["queued"]) == (3, 18, 43)
