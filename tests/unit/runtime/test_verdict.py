"""Verdicts on generated journals built around a real SGLang 0.5.18 startup (journald-prefixed).

The startup lines are the real ones of tests/fixtures/runtime/sglang-0.5.18-qwen3-4b-saturated-retract.txt
(87,552 KV tokens, mem_fraction_static 0.85, max_running_requests 2048); the serving lines are
generated in that release's exact wording so the expected numbers are known in advance.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from kvscope.api import analyze
from tests.conftest import FIXTURES

REAL = FIXTURES / "runtime" / "sglang-0.5.18-qwen3-4b-saturated-retract.txt"
POOL = 87552
T0 = dt.datetime(2026, 9, 13, 16, 5, 30)


def startup_lines() -> list[str]:
    lines = REAL.read_text().splitlines()
    return lines[: next(i for i, line in enumerate(lines) if "fired up" in line) + 1]


def journald(line: str, t: dt.datetime) -> str:
    return f"{t:%b %d %H:%M:%S} gpu-node-7 python3[30489]: {line}"


def decode(t: dt.datetime, running: int, tokens: int, queued: int, graph_bs: int = 4096) -> str:
    usage = tokens / POOL
    return (f"[{t:%Y-%m-%d %H:%M:%S}] Decode batch, #running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, "
            f"cuda graph: {running <= graph_bs}, gen throughput (token/s): {running * 30:.2f}, #queue-req: {queued}")


def write_journal(path: Path, serving: list[str], with_startup: bool = True) -> Path:
    out = [journald(line, T0) for line in startup_lines()] if with_startup else []
    out += serving
    path.write_text("\n".join(out) + "\n")
    return path


def serve(phases: list[tuple[int, callable]], graph_bs: int = 4096) -> list[str]:
    """Serving lines, one a second: each phase is (seconds, i → (running, tokens, queued))."""
    lines, t = [], T0 + dt.timedelta(seconds=10)
    for seconds, shape in phases:
        for i in range(seconds):
            running, tokens, queued = shape(i)
            lines.append(journald(decode(t, running, tokens, queued, graph_bs), t))
            t += dt.timedelta(seconds=1)
    return lines


def the_verdict(path: Path):
    [s] = analyze([str(path)]).startups
    f = next(f for f in s.findings if f.code in ("capacity-bound", "not-memory-bound"))
    return s, s.runtime, f


def test_saturating_pool_with_growing_queue_is_capacity_bound(tmp_path: Path) -> None:
    lines = serve([
        (120, lambda i: (10 + i // 3, int(POOL * (0.10 + 0.75 * i / 120)), 0)),  # ramp to 85 %, nobody waits
        (300, lambda i: (64, POOL, 1 + i // 2)),  # full pool, 64 running, the queue grows to 150
        (60, lambda i: (30, POOL // 2, 0)),  # drained
    ])
    for k in range(140, 420, 30):  # retraction warnings while full
        lines.insert(k, journald(f"[{T0:%Y-%m-%d} 16:09:00] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
                                 "#new_tokens_gained: 700, #new_token_ratio: 0.3 -> 0.4", T0))
    s, rt, f = the_verdict(write_journal(tmp_path / "journal.log", lines))
    assert s.capacity.kv_tokens == POOL and rt["samples"] == 480
    assert rt["usage"]["peak"] == 1.0 and rt["usage"]["above_90_s"] == 300.0 and rt["queue"]["peak"] == 150
    assert rt["retracted"] == 10
    v = rt["verdict"]
    per_request = POOL // 64  # 1,368 KV tokens per running request at saturation
    assert v["code"] == "capacity-bound" and v["tokens_per_request"] == per_request
    assert v["extra_kv_tokens"] == 150 * per_request and v["extra_fraction"] == round(150 * per_request / POOL, 3)
    assert v["options"]["fraction_step"]["tokens_per_step"] == 1678 and v["options"]["fraction_step"]["covers"] is False
    assert v["options"]["fp8_kv"]["covers"] is False  # 205,200 > the 87,552 an fp8 cache adds
    assert f.code == "capacity-bound" and "150 requests waited" in f.title
    assert f"{150 * per_request:,} more KV tokens" in f.detail and "fp8_e4m3" in f.detail and "replica" in f.detail


def test_small_queue_on_a_full_pool_is_covered_by_fp8(tmp_path: Path) -> None:
    lines = serve([(60, lambda i: (64, POOL, 1 + i // 6))])  # queue peaks at 10 → 13,680 tokens
    s, rt, f = the_verdict(write_journal(tmp_path / "journal.log", lines))
    assert rt["verdict"]["extra_kv_tokens"] == 10 * (POOL // 64)
    assert f.suggestion is not None and f.suggestion.flag == "--kv-cache-dtype" and f.suggestion.to_value == "fp8_e4m3"
    assert f.suggestion.kv_tokens_after == 2 * POOL


def test_low_usage_queue_at_the_running_cap_names_max_running_requests(tmp_path: Path) -> None:
    lines = serve([(200, lambda i: (2048, int(POOL * 0.30), 1 + i))])  # 2,048 running = the ready line's cap
    s, rt, f = the_verdict(write_journal(tmp_path / "journal.log", lines))
    assert s.capacity.max_running_requests == 2048
    assert rt["verdict"]["code"] == "not-memory-bound" and rt["verdict"]["limit"] == "max_running_requests"
    assert f.title == "Not memory: the limit was --max-running-requests (2,048)"
    assert f.suggestion is not None and f.suggestion.flag == "--max-running-requests"


def test_low_usage_queue_below_the_cap_names_the_scheduler(tmp_path: Path) -> None:
    lines = serve([(200, lambda i: (40, int(POOL * 0.30), 1 + i // 2))])
    s, rt, f = the_verdict(write_journal(tmp_path / "journal.log", lines))
    assert rt["usage"]["peak"] == 0.3 and rt["queue"]["peak"] == 100
    assert rt["verdict"]["limit"] == "scheduler" and rt["verdict"]["running_peak_while_queued"] == 40
    assert "--chunked-prefill-size 2,048" in f.detail and f.suggestion.flag == "--schedule-conservativeness"


def test_serving_lines_before_any_startup_make_their_own_startup(tmp_path: Path) -> None:
    before = serve([(30, lambda i: (8, POOL // 4, 0))])  # a journal that starts mid-serving
    after = serve([(30, lambda i: (64, POOL, 5))])
    path = tmp_path / "journal.log"
    path.write_text("\n".join(before + [journald(line, T0) for line in startup_lines()] + after) + "\n")
    first, second = analyze([str(path)]).startups
    assert first.engine == "sglang" and first.runtime["samples"] == 30 and first.capacity.kv_tokens is None
    assert first.reference_rank.extras.get("seen_in") == "serving lines only"
    assert first.runtime["verdict"]["code"] == "not-memory-bound"
    assert second.capacity.kv_tokens == POOL and second.runtime["samples"] == 30
    assert second.runtime["verdict"]["code"] == "capacity-bound"


def test_restarts_keep_serving_lines_with_their_startup(tmp_path: Path) -> None:
    lines: list[str] = []
    for queued in (0, 7, 0):
        lines += [journald(line, T0) for line in startup_lines()]
        lines += serve([(20, lambda i, q=queued: (64, POOL if q else POOL // 3, q))])
    path = tmp_path / "journal.log"
    path.write_text("\n".join(lines) + "\n")
    startups = analyze([str(path)]).startups
    assert [s.runtime["queue"]["peak"] for s in startups] == [0, 7, 0]
    assert [s.runtime["verdict"]["code"] for s in startups] == ["not-memory-bound", "capacity-bound", "not-memory-bound"]


def test_low_usage_queue_beyond_the_graph_batch_names_the_cuda_graph_batch(tmp_path: Path) -> None:
    # the real startup captured decode graphs up to bs 24; 40 running decode without them
    lines = serve([(20, lambda i: (8 + i, int(POOL * 0.2), 0)), (200, lambda i: (40, int(POOL * 0.30), 1 + i // 2))],
                  graph_bs=24)
    s, rt, f = the_verdict(write_journal(tmp_path / "journal.log", lines))
    assert rt["cuda_graph"] == {"decode_without_graph_fraction": round(203 / 220, 4), "largest_batch_with_graph": 24,
                                "smallest_batch_without_graph": 25}
    assert rt["verdict"]["limit"] == "cuda_graph_batch" and f.title == "Not memory: decode outgrew the CUDA-graph batch (24)"
    assert f.suggestion.flag == "--cuda-graph-max-bs" and (f.suggestion.from_value, f.suggestion.to_value) == (24, 40)
