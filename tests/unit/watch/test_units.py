"""kvscope watch, piece by piece, on real payloads: Prometheus parsing, vLLM/SGLang adapters,
interval deltas and restarts, the summary verdict, NVML absent-safety, and the recording read back
by ``kvscope explain``.

vLLM payloads were scraped from a real vLLM 0.32.0 CPU server (tiny random Llama, 8 MiB KV cache,
8 concurrent clients); SGLang payloads were posted in public issues/PRs or printed by SGLang's docs
CI (tests/fixtures/watch/sources.json)."""

from __future__ import annotations

import json
import math

import pytest

from kvscope.engines.recording import WatchLines
from kvscope.engines.sglang.watch import _schedulers
from kvscope.reading import prom
from kvscope.watch.adapters import Capacity, Reading, SGLangAdapter, VLLMAdapter
from kvscope.watch.http import Malformed
from kvscope.watch.nvml import GPUMemory
from kvscope.watch.recorder import line
from kvscope.watch.sampler import Sampler
from kvscope.watch.summary import Summary
from kvscope.watch.view import sparkline
from tests.conftest import FIXTURES

FIX = FIXTURES / "watch"


def page(name: str) -> prom.Metrics:
    return prom.parse((FIX / name).read_text())


def vllm_cap() -> Capacity:
    """Capacity as the adapter builds it from the loaded page (no HTTP)."""
    m = page("vllm/cpu-0.32.0-8MiB-loaded-a-metrics.txt")

    class NoHTTP:
        shown = "http://127.0.0.1:1"

        def get_json(self, path):
            return json.loads((FIX / {"/v1/models": "vllm/cpu-0.32.0-8MiB-v1-models.json",
                                      "/version": "vllm/cpu-0.32.0-version.json"}[path]).read_text())

    return VLLMAdapter().capacity(NoHTTP(), m)  # type: ignore[arg-type]


# -- Prometheus text ------------------------------------------------------------------------------

def test_prom_reads_every_sample_of_real_vllm_page():
    m = page("vllm/cpu-0.32.0-8MiB-loaded-b-metrics.txt")
    assert m.malformed_lines == 0
    assert m.get("vllm:num_preemptions_total")[0].value == 43.0
    assert m.get("vllm:kv_cache_usage_perc")[0].labels == {"engine": "0", "model_name": "/tmp/tiny-llama"}
    assert m.get("process_start_time_seconds")[0].value == pytest.approx(1.796021054e9, abs=1)


def test_prom_keeps_good_lines_around_a_mangled_one():
    text = (FIX / "sglang/docs-production-metrics-llama31-8b.txt").read_text()
    lines = text.splitlines()
    lines.insert(5, 'sglang:token_usage{model_name="cut')  # a proxy cut this line
    lines.insert(9, "garbage without a value")
    m = prom.parse("\n".join(lines))
    assert m.malformed_lines == 2
    assert m.get("sglang:token_usage")[0].value == 0.28
    assert m.get("sglang:num_queue_reqs")[0].value == 2826.0


def test_prom_escapes_special_values_and_timestamps():
    m = prom.parse('a{x="q\\"uo\\\\te",y="n\\nl"} NaN\nb +Inf 1712345678000\nc{} -1e3\n')
    assert m.get("a")[0].labels == {"x": 'q"uo\\te', "y": "n\nl"} and math.isnan(m.get("a")[0].value)
    assert m.get("b")[0].value == math.inf
    assert m.get("c")[0].value == -1000.0


@pytest.mark.parametrize("body", ["<html><body>502 Bad Gateway</body></html>", '{"detail":"Not Found"}'])
def test_prom_refuses_a_page_that_is_not_metrics(body):
    with pytest.raises(Malformed, match="not Prometheus text"):
        prom.parse(body)


# -- vLLM -----------------------------------------------------------------------------------------

def test_vllm_capacity_is_what_the_server_logged():
    cap = vllm_cap()
    # The real server's log said: "CPU KV cache size: 2,048 tokens, Maximum concurrency for 1,024
    # tokens per request: 2.00x" (tests/fixtures/logs/vllm/902-… is the same configuration).
    assert (cap.kv_tokens, cap.num_gpu_blocks, cap.block_size) == (2048, 16, 128)
    assert cap.max_concurrency == 2.0 and cap.max_model_len == 1024
    assert cap.kv_cache_memory_bytes == 8 << 20 and cap.memory_fraction == 0.92
    assert cap.version == "0.32.0" and cap.model == "/tmp/tiny-llama"
    assert cap.prefix_caching is True


def test_vllm_capacity_of_the_1gib_server():
    m = page("vllm/cpu-0.32.0-idle-1GiB-metrics.txt")
    labels = m.get("vllm:cache_config_info")[0].labels
    assert labels["num_gpu_blocks"] == "2048" and labels["kv_cache_size_tokens"] == "262144"


def test_vllm_reading_under_load():
    cap = vllm_cap()
    r = VLLMAdapter().read(page("vllm/cpu-0.32.0-8MiB-loaded-b-metrics.txt"), cap)
    assert r.kv_usage == pytest.approx(0.9333, abs=1e-4)
    assert r.tokens_used == round(0.9333333333333333 * 2048)
    assert (r.running, r.waiting) == (4, 4)
    assert r.preemptions_total == 43 and r.prefix_hits_total == 3840 and r.prefix_queries_total == 7502


# -- SGLang ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, version, mfs, running", [
    ("docs-2025-05-13-get_server_info.json", "0.4.6.post3", 0.88, 200),
    ("docs-2025-10-02-get_server_info.json", "0.5.3rc0", 0.841, 128),
    ("docs-2026-04-05-server_info.json", "0.0.0.dev1+g5dd2c243e", 0.907, 128),
])
def test_sglang_capacity_from_real_server_info(name, version, mfs, running):
    data = json.loads((FIX / "sglang" / name).read_text())
    cap = Capacity("sglang", "x")
    SGLangAdapter._from_info(cap, data)
    assert cap.kv_tokens == 20480 and cap.extras["max_total_num_tokens"] == 20480
    assert cap.version == version and cap.memory_fraction == mfs and cap.memory_fraction_flag == "--mem-fraction-static"
    assert cap.max_running_requests == running
    assert cap.model == "qwen/qwen2.5-0.5b-instruct"
    assert cap.max_model_len is None and cap.extras["max_req_input_len"] == 20474  # context_length: null
    assert cap.extras.get("enable_metrics") is False  # the docs servers ran without --enable-metrics


def test_sglang_2024_capacity_gauges():
    cap = Capacity("sglang", "x")
    SGLangAdapter._from_metrics(cap, page("sglang/pr-1853-2024-llama32-3b-metrics.txt"))
    assert (cap.kv_tokens, cap.max_running_requests, cap.max_model_len) == (570979, 2231, 131072)
    assert cap.model.endswith("Llama-3.2-3B/5cc0ffe09ee49f7be6ca7c794ee6bd7245e84e60/")


def test_sglang_usage_from_docs_metrics_and_estimated_pool():
    m = page("sglang/docs-production-metrics-llama31-8b.txt")
    cap = Capacity("sglang", "x")
    SGLangAdapter._from_metrics(cap, m)
    assert cap.kv_tokens == round(123859 / 0.28) and "estimated" in str(cap.extras)
    r = SGLangAdapter().read(m, cap)
    assert (r.kv_usage, r.tokens_used, r.running, r.waiting) == (0.28, 123859, 162, 2826)
    assert r.prefix_hit_rate == pytest.approx(0.0075, abs=1e-4)


def test_sglang_0_5_1_labels():
    r = SGLangAdapter().read(page("sglang/issue-13485-v0.5.1-qwen32b-metrics.txt"), Capacity("sglang", "x"))
    assert (r.kv_usage, r.tokens_used, r.running) == (0.0, 1, 1)
    assert r.extras["gen_throughput"] == pytest.approx(0.8371, abs=1e-4)


def test_sglang_dp_ranks_are_separate_schedulers():
    m = page("sglang/issue-aibrix-1614-deepseek-r1-dp8-metrics.txt")
    assert len(_schedulers(m.get("sglang:gen_throughput"))) == 7
    r = SGLangAdapter().read(m, Capacity("sglang", "x"))
    assert r.extras["gen_throughput"] == pytest.approx(566.0, abs=1.0) and r.waiting == 0


# -- sampler --------------------------------------------------------------------------------------

def test_sampler_turns_counters_into_interval_deltas():
    cap = vllm_cap()
    a = VLLMAdapter().read(page("vllm/cpu-0.32.0-8MiB-loaded-a-metrics.txt"), cap)
    b = VLLMAdapter().read(page("vllm/cpu-0.32.0-8MiB-loaded-b-metrics.txt"), cap)
    sampler = Sampler(started=0.0)
    s1 = sampler.step(a, cap, now=0.0, wall=1.0)
    s2 = sampler.step(b, cap, now=6.0, wall=7.0)
    assert s1.preemptions == 0  # what happened before the watch is not counted
    assert s2.preemptions == 43 - 38 and s2.preemptions_total == 5 and s2.interval_s == 6.0
    assert s1.prefix_hit_rate is None


def test_sampler_survives_a_restart_with_other_flags():
    cap = vllm_cap()
    loaded = VLLMAdapter().read(page("vllm/cpu-0.32.0-8MiB-loaded-b-metrics.txt"), cap)
    fresh = VLLMAdapter().read(page("vllm/cpu-0.32.0-idle-1GiB-metrics.txt"), cap)
    sampler = Sampler(started=0.0)
    sampler.step(loaded, cap, now=0.0)
    assert sampler.is_restart(fresh)  # new process_start_time_seconds, counters back to 0
    s = sampler.step(fresh, cap, now=1.0)
    assert s.restarted and s.preemptions == 0 and s.preemptions_total == 0


def test_sampler_counter_reset_without_start_time():
    sampler = Sampler(started=0.0)
    cap = Capacity("vllm", "x", kv_tokens=100)
    sampler.step(Reading(preemptions_total=50), cap, now=0)
    sampler.step(Reading(preemptions_total=53), cap, now=1)
    s = sampler.step(Reading(preemptions_total=2), cap, now=2)
    assert s.restarted and s.preemptions == 2 and s.preemptions_total == 5


# -- summary and verdict --------------------------------------------------------------------------

def _run(usages, waiting=0, preempt=0, running=4):
    summary, sampler = Summary(), Sampler(started=0.0)
    cap = Capacity("vllm", "x", kv_tokens=2048)
    total = 0
    for i, u in enumerate(usages):
        total += preempt
        summary.add(sampler.step(Reading(kv_usage=u, running=running, waiting=waiting,
                                         preemptions_total=float(total)), cap, now=float(i)))
    return summary


def test_verdict_capacity_bound():
    s = _run([0.5, 0.95, 1.0, 0.97, 0.99, 1.0], waiting=3, preempt=2)
    code, text = s.verdict()
    assert code == "capacity-bound" and "10 preemption(s)" in text
    assert s.as_dict()["peak_usage"] == 1.0 and s.above_high_s == 5.0


def test_verdict_queue_bound_with_room():
    code, text = _run([0.3, 0.4, 0.35, 0.4], waiting=5).verdict()
    assert code == "queue-bound" and "max_num_seqs" in text


def test_verdict_not_bound_and_idle():
    assert _run([0.2, 0.5, 0.6, 0.4]).verdict()[0] == "not-capacity-bound"
    assert _run([0.0, 0.0, 0.0], running=0).verdict()[0] == "idle"
    assert Summary().verdict()[0] == "no-data"


def test_p95_is_time_weighted():
    s = _run([0.1] * 19 + [0.9] * 2)
    assert s.percentile(0.5) == pytest.approx(0.1) and s.percentile(0.96) == pytest.approx(0.9)


def test_sparkline():
    assert sparkline([0, 0.5, 1.0, None], hi=1.0) == "▁▅█ "
    assert sparkline([0, 0]) == "▁▁"


# -- NVML, absent or broken -----------------------------------------------------------------------

def test_gpu_memory_without_nvidia_ml_py(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_pynvml(name, *a, **kw):
        if name == "pynvml":
            raise ImportError("no module named pynvml")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    g = GPUMemory()
    assert not g.available and "nvidia-ml-py" in g.reason and g.read() == []


class _FakeNVML:
    class NVMLError(Exception):
        pass

    def __init__(self, fail_init=False, fail_read=False):
        self.fail_init, self.fail_read = fail_init, fail_read

    def nvmlInit(self):  # noqa: N802 - NVML's names
        if self.fail_init:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlDeviceGetCount(self):  # noqa: N802
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):  # noqa: N802
        return i

    def nvmlDeviceGetName(self, h):  # noqa: N802
        return b"NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, h):  # noqa: N802
        if self.fail_read:
            raise self.NVMLError("GPU is lost")
        return type("M", (), {"used": (h + 1) << 30, "total": 141 << 30})()

    def nvmlShutdown(self):  # noqa: N802
        pass


class _FakeNVMLv2(_FakeNVML):
    nvmlMemory_v2 = 0x02000028

    def nvmlDeviceGetMemoryInfo(self, h, version=None):  # noqa: N802
        if version is None:
            return type("M", (), {"used": 600 << 20, "total": 141 << 30})()  # v1: reserved counted as used
        return type("M", (), {"used": 0, "reserved": 600 << 20, "total": 141 << 30})()


def test_gpu_memory_prefers_v2_like_nvidia_smi():
    (gpu, _) = GPUMemory(_FakeNVMLv2()).read()
    assert gpu["used_bytes"] == 0 and gpu["reserved_bytes"] == 600 << 20


def test_gpu_memory_broken_driver_and_lost_gpu():
    g = GPUMemory(_FakeNVML(fail_init=True))
    assert not g.available and "Driver Not Loaded" in g.reason and g.read() == []
    g = GPUMemory(_FakeNVML(fail_read=True))
    assert g.available and g.read() == [] and not g.available and "stopped" in g.reason
    g = GPUMemory(_FakeNVML())
    assert [d["used_bytes"] for d in g.read()] == [1 << 30, 2 << 30] and g.read()[0]["name"] == "NVIDIA H200"


# -- recording → explain --------------------------------------------------------------------------

def test_recorded_lines_become_events():
    cap = vllm_cap().as_dict()
    cap.pop("engine"), cap.pop("url")
    p, ctx = WatchLines(), __import__("kvscope.engines.base", fromlist=["LineContext"]).LineContext()
    events = p.parse(line("capacity", 1.0, engine="vllm", url="http://127.0.0.1:8000", capacity=cap), ctx)
    kinds = [e.kind for e in events]
    assert kinds[0] == "boundary" and "capacity" in kinds and p.engine == "vllm"
    capacity = next(e for e in events if e.kind == "capacity").data
    assert capacity["kv_tokens"] == 2048 and capacity["num_gpu_blocks"] == 16 and capacity["max_concurrency"] == 2.0
    settings = next(e for e in events if e.kind == "settings").data
    assert settings["gpu_memory_utilization"] == 0.92 and settings["block_size"] == 128
    (sample,) = p.parse(line("sample", 2.0, kv_usage=0.93, running=4, waiting=4, tokens_used=1911, preemptions=5,
                             prefix_hit_rate=0.5), ctx)
    assert sample.kind == "runtime"
    assert sample.data == {"src": "stats", "t": 2.0, "usage": 0.93, "running": 4, "queued": 4, "tokens": 1911,
                           "preempted": 5, "hit_pct": 50.0}
    assert p.parse('{"kvscope_watch": 1, "type": "sample", "kv_usage": 0.5', ctx) == []  # a cut last line
    assert p.parse('{"other": 1}', ctx) == []


def test_nan_never_reaches_a_recorded_line():
    obj = json.loads(line("sample", 0.0, kv_usage=float("nan"), extras={"x": float("inf")}))
    assert "kv_usage" in obj and obj["kv_usage"] is None and obj["extras"]["x"] is None


def test_gpu_memory_with_the_real_nvidia_ml_py():
    """The real bindings: GPU numbers on a GPU machine, a one-line reason on any other (CI has no GPU)."""
    pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed (pip install 'kvscope[watch]')")
    g = GPUMemory()
    if g.available:
        gpus = g.read()
        assert gpus and all(0 < d["used_bytes"] <= d["total_bytes"] for d in gpus)
    else:
        assert g.reason.startswith("NVML unavailable") and g.read() == []
    g.close()


def test_live_view_draws_a_frame_on_a_terminal():
    import io

    from rich.console import Console

    from kvscope.watch.view import LiveView

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120, color_system=None)
    cap = vllm_cap()
    sampler = Sampler(started=0.0)
    view = LiveView(console, interval=1.0)
    view.start()
    view.capacity(cap)
    for i, name in enumerate(["vllm/cpu-0.32.0-8MiB-loaded-a-metrics.txt", "vllm/cpu-0.32.0-8MiB-loaded-b-metrics.txt"]):
        s = sampler.step(VLLMAdapter().read(page(name), cap), cap, now=float(i))
        s.gpus = [{"index": 0, "name": "NVIDIA H200", "used_bytes": 4847370240, "total_bytes": 150754820096}]
        view.sample(s)
    view.message("the last scrape took 3.1 s, longer than the 1 s interval")
    view.stop()
    text = buf.getvalue()
    assert "kvscope watch · vLLM 0.32.0 · http://127.0.0.1:1" in text
    assert "KV capacity 2,048 tokens (16 blocks × 128)" in text and "93.3 %  1,911 / 2,048 tokens" in text
    assert "+5 this interval · 5 watched" in text and "GPU0" in text and "4.51 GiB / 140.40 GiB" in text
    assert "longer than the 1 s interval" in text


def test_sglang_retraction_gauge_counts_each_log_once():
    sampler, cap = Sampler(started=0.0), Capacity("sglang", "x", kv_tokens=100)
    got = [sampler.step(Reading(kv_usage=0.9, preemptions_gauge=g), cap, now=float(i)).preemptions
           for i, g in enumerate([0.0, 3.0, 3.0, 0.0, 2.0])]
    assert got == [0, 3, 0, 0, 2]
