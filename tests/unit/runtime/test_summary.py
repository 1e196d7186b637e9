"""Runtime summaries of real serving logs: the numbers each log prints, folded per startup."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvscope.api import analyze
from kvscope.render.terminal import render
from kvscope.runtime.stream import TIMELINE_POINTS, USAGE_BINS, Stream
from tests.conftest import FIXTURES

RUNTIME = FIXTURES / "runtime"
CPU_RUN = FIXTURES / "logs" / "vllm" / "902-cpu-v0.32-tiny-qwen2-4MiB-kv-saturated"


def runtime_of(path: Path, index: int = 0) -> tuple:
    analysis = analyze([str(path)])
    s = analysis.startups[index]
    return s, s.runtime


def verdict_finding(s):
    return next(f for f in s.findings if f.code in ("capacity-bound", "not-memory-bound"))


def test_sglang_0518_saturated_run() -> None:
    s, rt = runtime_of(RUNTIME / "sglang-0.5.18-qwen3-4b-saturated-retract.txt")
    assert s.engine == "sglang" and s.capacity.kv_tokens == 87552
    assert rt["samples"] == 114 and rt["lines"] == {"decode": 85, "prefill": 29}
    assert (rt["first"], rt["last"]) == ("2026-09-13 16:05:51", "2026-09-13 16:07:13")
    usage = rt["usage"]
    assert (usage["peak"], usage["peak_at"], usage["p95"]) == (1.0, "2026-09-13 16:06:07", 1.0)
    assert usage["above_90_s"] == 42.0 and usage["above_99_s"] == 15.0 and usage["observed_s"] == 82.0
    queue = rt["queue"]
    assert (queue["peak"], queue["peak_at"]) == (59, "2026-09-13 16:06:25")
    # one blip at 16:05:59 (1 waiting, gone 1 s later) merges with the episode that starts at 16:06:01
    assert queue["episodes"] == 1 and queue["longest"]["start"] == "2026-09-13 16:05:59"
    assert rt["retracted"] == 20 and rt["running"]["peak"] == 68
    assert rt["prefix_cache"]["cached_tokens"] == 1755 and rt["prefix_cache"]["prefilled_tokens"] == 21411
    assert rt["prefix_cache"]["hit_rate"] == pytest.approx(1755 / (1755 + 21411), abs=1e-4)
    assert rt["saturation"]["tokens_per_request"] == 2030 and rt["saturation"]["peak_queued"] == 59
    assert rt["saturation"]["pool_tokens_estimate"] == 87405  # #token / usage of the last line at 1.00 (16:06:56)

    verdict = rt["verdict"]
    assert verdict["code"] == "capacity-bound"
    assert verdict["extra_kv_tokens"] == 59 * 2030 and verdict["kv_tokens"] == 87552
    step = verdict["options"]["fraction_step"]
    assert step["flag"] == "--mem-fraction-static" and step["from"] == 0.85 and step["tokens_per_step"] == 1678
    assert step["safe_steps"] == 0 and step["covers"] is False  # 1.91 GiB free at ready < 2 GiB margin
    assert verdict["options"]["fp8_kv"] == {"from": "torch.bfloat16", "tokens_added": 87552, "covers": False}
    f = verdict_finding(s)
    assert f.severity == "warning" and "59 requests waited" in f.title
    assert "119,770 more KV tokens" in f.detail and "+1,678 tokens" in f.detail and "fp8_e4m3" in f.detail


def test_vllm_v1_cpu_run_with_startup_is_sized() -> None:
    s, rt = runtime_of(CPU_RUN / "log.txt")
    assert s.engine == "vllm" and rt["lines"] == {"stats": 8}
    assert rt["usage"]["peak"] == 1.0 and rt["queue"]["peak"] == 4 and rt["queue"]["episodes"] == 1
    assert rt["throughput"]["generation_tokens_per_s"]["peak"] == 1495.4
    assert rt["prefix_cache"]["hit_rate"] == 0.0
    v = rt["verdict"]
    if s.capacity.kv_tokens == 2048:  # the vLLM startup parser read "CPU KV cache size: 2,048 tokens"
        assert v["code"] == "capacity-bound" and v["kv_tokens"] == 2048 and v["extra_kv_tokens"] is not None


def test_vllm_v1_saturated_queue_is_capacity_bound_but_unsized() -> None:
    s, rt = runtime_of(RUNTIME / "vllm-v1-2026-05-saturated-queue.txt")
    assert s.engine == "vllm" and rt["stream"] == "Engine 000"
    assert rt["usage"]["peak"] == 0.984 and rt["usage"]["above_90_s"] == 30.0 and rt["usage"]["observed_s"] == 40.0
    assert rt["queue"]["peak"] == 43 and rt["saturation"]["peak_queued"] == 43
    assert rt["verdict"]["code"] == "capacity-bound" and rt["verdict"]["extra_kv_tokens"] is None
    assert "cannot be sized" in verdict_finding(s).detail


def test_vllm_v1_prefill_bound_queue_is_not_memory() -> None:
    s, rt = runtime_of(RUNTIME / "vllm-v1-2026-03-prefill-bound-queue.txt")
    assert rt["usage"]["peak"] == 0.654 and rt["queue"]["peak"] == 90
    assert rt["verdict"] == {"code": "not-memory-bound", "peak_usage": 0.654, "peak_queued": 90, "limit": "scheduler",
                             "cap": None, "running_peak_while_queued": 34}
    f = verdict_finding(s)
    assert "max-num-batched-tokens" in f.detail and "23,999 tokens/s" in f.detail


def test_sglang_prefill_queue_with_empty_pool_is_not_memory() -> None:
    s, rt = runtime_of(RUNTIME / "sglang-2024-11-prefill-queue-low-usage.txt")
    assert rt["queue"]["peak"] == 155 and rt["usage"]["peak"] == 0.01
    assert rt["verdict"]["code"] == "not-memory-bound" and rt["verdict"]["limit"] == "scheduler"
    assert "--schedule-conservativeness" in verdict_finding(s).detail


def test_retraction_printed_by_every_tp_rank_is_counted_once() -> None:
    s, rt = runtime_of(RUNTIME / "sglang-2025-03-decode-oom-retract-tp8-15.txt")
    assert rt["retracted"] == 2 and rt["duplicate_lines_ignored"] == 9  # TP13 speaks for TP8-15
    assert rt["verdict"]["code"] == "capacity-bound" and rt["verdict"]["evicted_requests"] == 2


def test_vllm_v0_swap_preemption() -> None:
    s, rt = runtime_of(RUNTIME / "vllm-v0-2024-06-swap-preemption.txt")
    assert rt["preempted"] == 151 and rt["preemption_modes"] == {"swap": 1}  # the cumulative counter
    assert rt["swapped_peak"] == 137 and rt["queue"]["peak"] == 9832 and rt["usage"]["peak"] == 0.992
    assert rt["verdict"]["code"] == "capacity-bound"


def test_vllm_v0_separate_prefix_hit_line() -> None:
    _, rt = runtime_of(RUNTIME / "vllm-v0-2025-05-prefix-hit-gpu-cpu.txt")
    assert rt["prefix_cache"]["source"].startswith("vLLM V0") and rt["prefix_cache"]["hit_rate"] == 0.0


def test_vllm_v1_prefix_hit_rate_last_and_mean() -> None:
    _, rt = runtime_of(RUNTIME / "vllm-v1-2026-07-prefix-hit-rising.txt")
    assert rt["prefix_cache"]["hit_rate"] == 0.775
    assert rt["prefix_cache"]["mean"] == pytest.approx((0 + 48.4 + 64.6 + 72.6 + 77.5) / 500, abs=1e-4)


def test_untimed_bare_line_uses_sample_fractions_and_pool_estimate() -> None:
    s, rt = runtime_of(RUNTIME / "sglang-2024-08-bare-decode-line.txt")
    assert rt["timed"] is False and rt["usage"]["above_90_s"] is None and rt["usage"]["above_90_fraction"] == 1.0
    assert rt["saturation"]["pool_tokens_estimate"] == round(55006 / 0.93)
    v = rt["verdict"]
    assert v["code"] == "capacity-bound" and v["tokens_per_request"] == 54 and v["extra_kv_tokens"] == 12279 * 54


def test_time_only_stamps_are_timed() -> None:
    _, rt = runtime_of(RUNTIME / "sglang-2024-08-time-only-decode.txt")
    assert rt["timed"] is True and rt["usage"]["observed_s"] == 2.0 and rt["first"] == "04:40:55"
    assert rt["verdict"]["code"] == "not-memory-bound" and rt["verdict"]["limit"] is None  # nobody waited


def test_swa_lines_without_queue_give_no_verdict() -> None:
    s, rt = runtime_of(RUNTIME / "sglang-2026-05-swa-decode-after-retraction.txt")
    assert rt["usage"]["peak"] == 0.92 and rt["other_pools"] == {"swa_usage": 0.09}
    assert rt["verdict"]["code"] is None and not any(f.code.endswith("bound") for f in s.findings)


def test_mamba_pool_peak_is_reported() -> None:
    _, rt = runtime_of(RUNTIME / "sglang-2026-07-mamba-prefill.txt")
    assert rt["other_pools"] == {"mamba_usage": 0.6} and rt["usage"]["peak"] == 0.4


def test_terminal_shows_sparklines_and_summaries() -> None:
    text = render(analyze([str(RUNTIME / "sglang-0.5.18-qwen3-4b-saturated-retract.txt")]))
    usage_line = next(line for line in text.splitlines() if line.startswith("KV usage "))
    assert "█" in usage_line and "peak 100%" in usage_line
    assert "≥90 % for 42 s" in text and "20 requests retracted" in text
    assert any(line.startswith("queued ") and "peak 59" in line for line in text.splitlines())


def test_stream_state_is_bounded() -> None:
    st = Stream(None)
    for i in range(200_000):
        queued = 3 if (i // 50) % 2 else 0  # 50 s of waiting, 50 s of none: 2,000 episodes
        st.sample({"src": "decode", "t": float(i), "usage": (i % 1000) / 1000, "queued": queued, "running": 8,
                   "tokens": 10}, None)
    st.close()
    assert len(st.hist) == USAGE_BINS and len(st.timeline.finished()) <= TIMELINE_POINTS
    assert len(st.top) <= 8 and st.episodes == 2000 and st.top[0][1] - st.top[0][0] == 50
    assert st.percentile(0.5) == pytest.approx(0.5, abs=0.002)


def test_dp_attention_groups_are_separate_streams() -> None:
    # Routing unit test: each DP group (its own scheduler and pool) is a stream; within a group one rank speaks.
    from kvscope.runtime.accumulate import Accumulator
    from kvscope.runtime.summary import summarize

    acc = Accumulator()
    for i in range(10):
        for label, usage, queued in (("DP0 TP0 EP0", 0.30, 0), ("DP1 TP1 EP1", 0.95, 4), ("DP1 TP1 EP1", 0.96, 5)):
            acc.add({"src": "decode", "t": float(i), "usage": usage, "running": 8, "queued": queued, "tokens": 800,
                     "gen_tps": 10.0}, label, None)
        acc.add({"src": "retract", "t": float(i), "retracted": 1}, "DP1 TP1 EP1", None)
        acc.add({"src": "retract", "t": float(i), "retracted": 1}, "DP1 TP9 EP9", None)  # same group, other rank
    rt = summarize(acc)
    assert rt["stream"] == "DP1" and rt["usage"]["peak"] == 0.96 and rt["queue"]["peak"] == 5
    assert sorted(g["group"] for g in rt["groups"]) == ["DP0", "DP1"]
    assert rt["retracted"] == 10 and rt["duplicate_lines_ignored"] == 10
