"""vLLM line shapes of every release: prefixes, headers, and each memory line's wording.

Lines come from the real logs under tests/fixtures/logs/vllm where one holds the shape; shapes no
fixture holds are quoted from public vLLM issues/PRs (named next to each).
"""

from __future__ import annotations

import pytest

from kvscope.core import events as ev
from kvscope.engines.base import LineContext
from kvscope.engines.vllm.lines import VLLMLines, split_prefix
from tests.conftest import LOGS

V = VLLMLines()


def real_line(case: str, needle: str) -> str:
    path = next((LOGS / "vllm").glob(f"{case}*")) / "log.txt"
    return next(line.rstrip("\n") for line in path.open(encoding="utf-8") if needle in line)


def parse(text: str, ctx: LineContext | None = None):
    return V.parse(text, ctx or LineContext())


def merged(text: str, kind: str) -> dict:
    out: dict = {}
    for p in parse(text):
        if p.kind == kind:
            out.update(p.data)
    return out


# --- prefixes ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "rank", "ts"), [
    ("(VllmWorker TP0 pid=12) INFO 08-01 10:00:00 [gpu_worker.py:1] x", "TP0", "08-01 10:00:00"),
    ("(VllmWorker PP0_TP1 pid=12) INFO 08-01 10:00:00 [gpu_worker.py:1] x", "PP0 TP1", "08-01 10:00:00"),
    ("(Worker_PP1_TP3 pid=4365) INFO 08-31 15:25:55 [gpu_worker.py:805] x", "PP1 TP3", "08-31 15:25:55"),
    ("(Worker_DP1_TP0 pid=1) INFO 08-31 15:25:55 [gpu_worker.py:805] x", "DP1 TP0", "08-31 15:25:55"),
    ("(VllmWorker rank=2 pid=1608647) DEBUG 07-22 20:09:04 [gpu_worker.py:239] x", "rank=2", "07-22 20:09:04"),
    ("(EngineCore_DP0 pid=6880) INFO 10-31 15:07:49 [gpu_worker.py:298] x", "TP0", "10-31 15:07:49"),
    ("(EngineCore_DP1 pid=6881) INFO 10-31 15:07:49 [gpu_worker.py:298] x", "DP1 TP0", "10-31 15:07:49"),
    ("(EngineCore pid=...) INFO ... [kv_cache_utils.py:1733] x", "TP0", None),
    ("(VllmWorkerProcess pid=354) INFO 11-27 02:16:23 worker.py:232] x", "pid=354", "11-27 02:16:23"),
    ("(RayWorkerWrapper pid=2149021, ip=10.124.70.173) INFO 12-15 07:41:22 model_runner.py:1077] x", "pid=2149021",
     "12-15 07:41:22"),
    ("RayWorkerWrapper pid=1861983) INFO 03-27 10:29:03 [model_runner.py:1442] x", "pid=1861983", "03-27 10:29:03"),
    ("(APIServer pid=1) INFO 07-06 22:50:34 [api_utils.py:273] x", None, "07-06 22:50:34"),
    ("[0] INFO 10-13 11:10:20 [gpu_worker.py:255] x", "rank=0", "10-13 11:10:20"),
    ("INFO 07-18 12:26:27 model_runner.py:1071] x", "TP0", "07-18 12:26:27"),
    ("Available KV cache memory: 8.11 GiB", "TP0", None),
])
def test_prefixes(text, rank, ts):
    got_rank, got_ts, msg, _ = split_prefix(text)
    assert (got_rank, got_ts) == (rank, ts)
    assert msg.strip() in ("x", "Available KV cache memory: 8.11 GiB")


def test_ray_repeat_suffix_is_stripped_and_counted():
    text = real_line("040", "Loading model weights took")
    [p] = parse(text)
    assert p.data == {"weights_gib": 3.8761, "repeated_across_cluster": 3}
    assert p.rank == "pid=2149021"


# --- weights ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("case", "needle", "gib"), [
    ("002", "Loading model weights took", 14.9888),  # V0 "GB"
    ("013", "Loading model weights took", 1.9028),
    ("025", "Model loading took", 14.9889),  # "GiB and … seconds"
    ("055", "Model loading took", 3.7682),
])
def test_weights_every_wording(case, needle, gib):
    assert merged(real_line(case, needle), ev.RANK)["weights_gib"] == gib


def test_weights_gb_and_gib_memory_wordings():
    # v0.8.0 (quoted in a public Colab log) and v0.11.2+ ("GiB memory and")
    assert merged("INFO 05-05 15:24:32 [model_runner.py:1146] Model loading took 6.0160 GB and 533.851791 seconds",
                  ev.RANK)["weights_gib"] == 6.016
    assert merged("(Worker_TP0 pid=1) INFO 01-01 00:00:00 [gpu_model_runner.py:3000] Model loading took 15.0 GiB "
                  "memory and 4.123456 seconds", ev.RANK)["weights_gib"] == 15.0


# --- memory profile in three shapes ------------------------------------------------------------------------


def test_profile_one_line_v064():
    text = real_line("002", "Memory profiling results")
    rank = merged(text, ev.RANK)
    assert rank["total_gib"] == 23.58 and rank["non_torch_gib"] == 0.35 and rank["peak_torch_gib"] == 17.06
    assert rank["available_kv_gib"] == 3.81
    assert merged(text, ev.SETTINGS) == {"gpu_memory_utilization": 0.90}
    assert merged(text, ev.CAPACITY) == {"available_kv_gib": 3.81}


def test_profile_one_line_with_commas():
    # vLLM ~0.6.4.post1, quoted from a public benchmark log (Dec 2024)
    text = ("INFO 12-07 17:39:09 worker.py:237] Memory profiling results: duration=39.11 seconds, total_gpu_memory=44.98GiB, "
            "initial_memory_usage=15.23GiB, peak_torch_memory=16.20GiB, memory_usage_post_profile=15.46GiB, "
            "non_torch_memory=0.44GiB, kv_cache_size=23.84GiB, gpu_memory_utilization=0.90.")
    rank = merged(text, ev.RANK)
    assert (rank["total_gib"], rank["peak_torch_gib"], rank["available_kv_gib"], rank["profile_seconds"]) == (
        44.98, 16.20, 23.84, 39.11)


def test_profile_table_dec_2024():
    """PR #10511's table: one 'name   value' row per line, each with the full header."""
    rows = ["INFO 12-13 19:54:18 worker.py:243] total_gpu_memory     79.22GiB",
            "INFO 12-13 19:54:18 worker.py:243] gpu_memory_utilization       0.90",
            "INFO 12-13 19:54:18 worker.py:243] the current vLLM instance can use    71.29GiB",
            "INFO 12-13 19:54:18 worker.py:243] model weights take   14.96GiB",
            "INFO 12-13 19:54:18 worker.py:243] non_torch_memory     1.79GiB",
            "INFO 12-13 19:54:18 worker.py:243] PyTorch activation peak memory       1.26GiB",
            "INFO 12-13 19:54:18 worker.py:243] available_kv_cache_memory    53.29GiB"]
    got: dict = {}
    for row in rows:
        for p in parse(row):
            got.update(p.data)
    assert got == {"total_gib": 79.22, "gpu_memory_utilization": 0.90, "usable_gib": 71.29, "weights_gib": 14.96,
                   "non_torch_gib": 1.79, "activation_peak_gib": 1.26, "available_kv_gib": 53.29}


def test_profile_list_v065_to_v010():
    total = real_line("046", "the current vLLM instance can use")
    assert merged(total, ev.RANK) == {"total_gib": 44.53, "usable_gib": 43.64, "repeated_across_cluster": 30}
    assert merged(total, ev.SETTINGS) == {"gpu_memory_utilization": 0.98}
    listed = merged(real_line("046", "model weights take"), ev.RANK)
    assert (listed["weights_gib"], listed["non_torch_gib"], listed["activation_peak_gib"], listed["available_kv_gib"]) == (
        20.64, 0.28, 1.52, 21.20)


# --- V1 worker and engine lines -------------------------------------------------------------------------------


def test_available_kv_is_per_worker_and_capacity():
    out = parse(real_line("008", "Available KV cache memory"))
    assert [(p.kind, p.rank, p.data) for p in out] == [
        (ev.RANK, "TP0", {"available_kv_gib": 9.84}), (ev.CAPACITY, None, {"available_kv_gib": 9.84})]


def test_capacity_two_lines_with_separators():
    assert merged(real_line("008", "GPU KV cache size"), ev.CAPACITY) == {"kv_tokens": 619_202}
    assert merged(real_line("008", "Maximum concurrency"), ev.CAPACITY) == {"max_model_len": 262_144,
                                                                           "max_concurrency": 2.36}


def test_capacity_merged_line_cpu():
    got = merged(real_line("900", "KV cache size"), ev.CAPACITY)
    assert got == {"kv_tokens": 1_889_280, "kv_device": "CPU", "max_model_len": 1024, "max_concurrency": 1845.0}


@pytest.mark.parametrize(("case", "needle", "blocks", "cpu"), [
    ("004", "# GPU blocks", 27_846, 2048),
    ("002", "GPU blocks:", 1952, 2048),  # posted without the leading '# '
    ("019", "# GPU blocks", 229, 512),
    ("013", "# GPU blocks", 464_716, 16_384),
])
def test_v0_blocks(case, needle, blocks, cpu):
    assert merged(real_line(case, needle), ev.CAPACITY) == {"num_gpu_blocks": blocks, "num_cpu_blocks": cpu}


def test_cuda_blocks_wording():
    # v0.7–0.10 V0 executor_base.py, quoted from a public Unsloth log
    text = "INFO 08-12 22:32:11 [executor_base.py:113] # cuda blocks: 190100, # CPU blocks: 0"
    assert merged(text, ev.CAPACITY) == {"num_gpu_blocks": 190_100, "num_cpu_blocks": 0}


def test_graph_capture_lines():
    assert merged(real_line("004", "Graph capturing finished"), ev.RANK) == {
        "cuda_graph_gib": 0.32, "graph_capture_seconds": 15.0, "graph_capture_done": True}
    assert merged(real_line("046", "Capturing cudagraphs"), ev.RANK) == {"graph_capture_started": True}
    assert merged(real_line("053", "CUDA graph pool memory"), ev.RANK) == {
        "cuda_graph_gib": 0.1, "cuda_graph_estimate_gib": 0.58}


def test_cuda_graph_advisory():
    text = real_line("008", "is equivalent to")
    assert merged(text, ev.SETTINGS) == {"gpu_memory_utilization": 0.88}
    assert merged(text, ev.RANK) == {"util_equivalent_without_graph_profiling": 0.8592,
                                     "util_suggested_with_graph_profiling": 0.9008}


def test_free_memory_ledger_line_v0102():
    rank = merged(real_line("048", "Free memory on device"), ev.RANK)
    assert rank == {"init_free_gib": 177.66, "total_gib": 178.36, "usable_gib": 160.53, "weights_gib": 8.58,
                    "activation_peak_gib": 9.96, "non_torch_gib": 0.07, "cuda_graph_gib": 0.65,
                    "kv_cache_memory_fit_bytes": 151_519_866_880}


def test_free_memory_ledger_line_consumed_wording():
    text = real_line("053", "Free memory on device")
    rank = merged(text, ev.RANK)
    assert rank["consumed_gib"] == 19.47 and rank["activation_peak_gib"] == 0.6 and rank["cuda_graph_gib"] == 0.1
    assert rank["kv_cache_memory_full_bytes"] == 2_798_683_648 and rank["available_kv_gib"] == 1.95
    assert merged(text, ev.SETTINGS) == {"gpu_memory_utilization": 0.935}
    assert parse(text)[0].rank == "PP1 TP3"


def test_kv_cache_memory_bytes_line():
    rank = merged(real_line("020", "reserved 4.25 GiB"), ev.RANK)
    assert rank == {"init_free_gib": 31.16, "available_kv_gib": 4.25, "kv_cache_memory_fixed": True}


def test_cpu_backend_auto_and_explicit():
    auto = merged(real_line("900", "Auto set"), ev.RANK)
    assert (auto["available_kv_gib"], auto["total_gib"], auto["usable_gib"], auto["non_kv_gib"]) == (3.6, 8.84, 4.42, 0.82)
    explicit = next((LOGS / "vllm").glob("902*")) / "log.txt"
    line = next(t for t in explicit.open() if "Explicitly set" in t)
    assert merged(line, ev.RANK)["total_gib"] == 8.84


# --- settings and boundaries ------------------------------------------------------------------------------


def test_non_default_args():
    settings = merged(real_line("006", "non-default args"), ev.SETTINGS)
    assert settings["max_model_len"] == 131_072 and settings["kv_cache_dtype"] == "fp8"
    assert settings["max_num_batched_tokens"] == 8192 and settings["max_num_seqs"] == 1
    assert "served_model_name" not in settings and "host" not in settings
    # The multimodal limits decide whether vLLM profiles the vision encoder (plan and whatif read them).
    assert settings["limit_mm_per_prompt"] == {"image": 2, "audio": 0}


def test_non_default_args_never_copies_secrets():
    text = "(APIServer pid=1) INFO 01-01 00:00:00 [utils.py:1] non-default args: {'model': 'm', 'api_key': 'sk-123', " \
           "'hf_token': 'hf_x', 'max_num_batched_tokens': 4096}"
    settings = merged(text, ev.SETTINGS)
    assert settings == {"model": "m", "max_num_batched_tokens": 4096}


def test_engine_banner():
    out = parse(real_line("019", "Initializing an LLM engine"))
    settings = merged(real_line("019", "Initializing an LLM engine"), ev.SETTINGS)
    assert settings["max_model_len"] == 4096 and settings["tensor_parallel_size"] == 1 and settings["dtype"] == "float16"
    assert any(p.kind == ev.MODEL for p in out)
    banner = real_line("900", "Initializing a V1 LLM engine")
    assert merged(banner, ev.VERSION) == {"engine_version": "0.32.0"}
    assert merged(banner, ev.SETTINGS)["max_model_len"] == 1024


def test_version_logo_and_command_line():
    assert merged(real_line("900", "version 0.32.0"), ev.VERSION) == {"engine_version": "0.32.0"}
    cmd = merged(real_line("004", "-O 3"), ev.SETTINGS)
    assert cmd == {"model": "meta-llama/Meta-Llama-3-8B", "optimization_level": 3}
    assert parse("Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out to enable them.") == []


def test_boundary_only_after_memory_work():
    ctx = LineContext()
    first = parse("(APIServer pid=1) INFO 11-30 05:59:57 [api_utils.py:286] non-default args: {'max_model_len': 1024}", ctx)
    banner = parse("(EngineCore pid=2) INFO 11-30 06:00:02 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with "
                   "config: model='m', max_seq_len=1024", ctx)
    assert not any(p.kind == ev.BOUNDARY for p in first + banner)
    parse("(EngineCore pid=2) INFO 11-30 06:00:31 [kv_cache_utils.py:2327] CPU KV cache size: 2,048 tokens", ctx)
    restart = parse("(APIServer pid=3) INFO 11-30 07:00:00 [api_utils.py:286] non-default args: {'max_model_len': 2048}", ctx)
    assert restart[0].kind == ev.BOUNDARY
    parse("(EngineCore pid=4) INFO 11-30 07:00:31 [kv_cache_utils.py:2327] CPU KV cache size: 2,048 tokens", ctx)
    pasted_late = parse("(APIServer pid=3) INFO 11-30 06:59:00 [api_utils.py:286] non-default args: {'x': 1}", ctx)
    assert not any(p.kind == ev.BOUNDARY for p in pasted_late)


# --- failures ----------------------------------------------------------------------------------------------------


def test_v0_max_len_error():
    out = merged(real_line("003", "max seq len"), ev.FAILURE)
    assert out["kind"] == "max-len-too-large" and out["max_model_len"] == 29_000 and out["kv_tokens"] == 23_648


def test_v1_max_len_error_with_estimate():
    out = merged(real_line("054", "To serve at least one request"), ev.FAILURE)
    assert (out["kind"], out["max_model_len"], out["kv_needed_gib"], out["available_kv_gib"],
            out["estimated_max_model_len"]) == ("max-len-too-large", 32_768, 4.50, 3.58, 26_032)


def test_no_available_memory_error():
    text = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when " \
           "initializing the engine."
    assert merged(text, ev.FAILURE)["kind"] == "not-enough-memory"


def test_free_memory_shortfall_gpu_and_cpu():
    gpu = ("ValueError: Free memory on device (30.12/79.19 GiB) on startup is less than desired GPU memory utilization "
           "(0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.")
    assert merged(gpu, ev.FAILURE)["kind"] == "multi-instance-contention"
    cpu = merged(real_line("901", "less than desired CPU memory utilization"), ev.FAILURE)
    assert (cpu["kind"], cpu["free_gib"], cpu["requested_gib"]) == ("not-enough-memory", 7.51, 8.13)


def test_engine_core_failure_is_weak():
    out = merged(real_line("022", "EngineCore failed to start"), ev.FAILURE)
    assert out["kind"] == "exception" and out["weak"] is True


def test_wrapped_error_is_joined():
    head = real_line("020", "To serve at least one request")
    assert V.wants_join(head)
    joined = head + "e is needed, which is larger than the available KV cache memory (4.25 GiB). Based on the avai"
    assert not V.wants_join(joined)
    out = merged(joined, ev.FAILURE)
    assert (out["max_model_len"], out["kv_needed_gib"], out["available_kv_gib"]) == (100_000, 4.26, 4.25)


def test_torch_oom_is_left_to_the_common_parser():
    assert parse("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 6 has a total capacity "
                 "of 44.53 GiB of which 448.00 KiB is free.") == []


def test_serving_stats_are_not_startup_lines():
    assert parse("(APIServer pid=13236) INFO 11-30 05:58:05 [loggers.py:335] Engine 000: Avg prompt throughput: 1513.1 "
                 "tokens/s, Avg generation throughput: 931.4 tokens/s, Running: 4 reqs, Waiting: 4 reqs, CPU KV cache "
                 "usage: 93.3%, Prefix cache hit rate: 0.0%") == []


@pytest.mark.parametrize("text", [
    "█" * 200_000 + " x",
    "(A_" + "b_" * 50_000 + " pid=1",
    "Free memory on device (" + "1" * 100_000,
    "x" * 100_000 + " Memory profiling results: =",
])
def test_pathological_lines_are_fast(text):
    import time
    start = time.perf_counter()
    parse(text)
    assert time.perf_counter() - start < 1.0


def test_cuda_graph_estimate_line():
    # v0.18+ gpu_worker.py (wording from docs/research/vllm-memory.md §3.2 item 9)
    text = "(Worker_TP0 pid=7) INFO 03-01 10:00:00 [gpu_worker.py:420] Estimated CUDA graph memory: 1.25 GiB total"
    assert merged(text, ev.RANK) == {"cuda_graph_estimate_gib": 1.25}
