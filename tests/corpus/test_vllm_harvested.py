"""vLLM on held-out real logs (tests/fixtures/harvested/vllm): the shapes the first set did not have —
env-var and shell-prompt command lines, upper-case device names, DEBUG profiling lines, the v0.18/v0.20
"from X to Y" CUDA-graph advisories, terminal hard-wraps, two runs pasted together, Ray's nested prefixes,
prefixes glued behind progress bars, and the eras the wording implies."""

from __future__ import annotations

from kvscope.api import analyze
from kvscope.core import events as ev
from kvscope.engines.base import LineContext
from kvscope.engines.vllm import eras
from kvscope.engines.vllm.lines import VLLMLines, split_prefix
from kvscope.reading import clean_line
from tests.conftest import FIXTURES, case_files

HARVESTED = FIXTURES / "harvested" / "vllm"


def _dir(prefix: str):
    matches = sorted(HARVESTED.glob(f"{prefix}*"))
    assert matches, f"no harvested case {prefix}*"
    return matches[0]


def _all(prefix: str, model: str | None = None):
    return analyze(case_files(_dir(prefix)), {}, model).startups


def _one(prefix: str, model: str | None = None):
    startups = _all(prefix, model)
    assert len(startups) == 1, [s.first_line for s in startups]
    return startups[0]


def _line(prefix: str, needle: str) -> str:
    """The first line holding ``needle``, cleaned as the reader cleans it (colour codes, progress-bar CRs)."""
    text = (_dir(prefix) / "log.txt").read_text(encoding="utf-8")
    return next(part for line in text.splitlines() for part in clean_line(line) if needle in part)


def _parse(text: str) -> list:
    return VLLMLines().parse(text, LineContext())


def _codes(s) -> list[str]:
    return [f.code for f in s.findings]


def _finding(s, code: str):
    return next(f for f in s.findings if f.code == code)


def _rank(s, label: str):
    return next(r for r in s.ranks if r.rank == label)


# --- 1, 2: pasted command lines ----------------------------------------------------------------------------------


def test_command_with_env_var_holding_a_digit():
    """001: `VLLM_USE_V1=1 vllm serve … --gpu-memory-utilization 0.98`."""
    s = _one("001")
    assert s.settings["gpu_memory_utilization"] == 0.98 and s.settings["max_model_len"] == 2048
    assert s.model == "neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8"


def test_command_after_a_shell_prompt_keeps_the_model():
    """019: `(.venv312) user@HOST:~/dir$ vllm serve MODEL …`."""
    s = _one("019")
    assert s.settings["gpu_memory_utilization"] == 0.7
    assert s.model == "unsloth/Qwen3.6-27B-NVFP4" and s.settings["kv_cache_dtype"] == "nvfp4"


def test_other_prompt_shapes():
    for prompt in ("$ ", "[user@host dir]$ ", "root@box:/# ", "(venv) me@h:~$ CUDA_VISIBLE_DEVICES=0,1 "):
        parsed = _parse(prompt + "vllm serve org/m --gpu-memory-utilization 0.5")
        settings = next(p.data for p in parsed if p.kind == ev.SETTINGS)
        assert settings["gpu_memory_utilization"] == 0.5 and settings["model"] == "org/m", prompt


# --- 3: device name in the blocks line ----------------------------------------------------------------------------


def test_upper_case_cuda_blocks():
    """004: `# CUDA blocks: 6001, # CPU blocks: 1638` (current_platform.device_name)."""
    s = _one("004")
    assert (s.capacity.num_gpu_blocks, s.capacity.num_cpu_blocks) == (6001, 1638)


# --- 4: DEBUG profiling lines --------------------------------------------------------------------------------------


def test_debug_profiling_lines():
    """010: 'Initial free memory: …; Requested memory: 0.825000 (util), 65.32 GiB' and the MemoryProfilingResult repr."""
    s = _one("010")
    r = s.reference_rank
    assert s.settings["gpu_memory_utilization"] == 0.825
    assert (r.weights_gib, r.activation_peak_gib, r.non_torch_gib) == (0.93, 0.34, 32.4)
    assert r.usable_gib == 65.32 and r.extras["init_free_gib"] == 77.39 and r.extras["non_kv_gib"] == 33.68
    assert s.reconciliation.consistent is True  # 65.32 − 0.93 − 0.34 − 32.4 = 31.65 = K
    assert s.era != "V0 0.6.5–0.10"  # the repr's "Memory profiling takes" is not V0's three-line profile


def test_debug_profiling_repr_consumed_wording():
    [p] = _parse("DEBUG 01-01 00:00:00 [gpu_worker.py:1] Memory profiling takes 31.20 seconds. Total non KV cache "
                 "memory: 63.53GiB; torch peak memory increase: 2.04GiB; total consumed (from mem_get_info): 61.49GiB; "
                 "weights memory: 55.87GiB.")
    assert p.data["consumed_gib"] == 61.49 and p.data["weights_gib"] == 55.87
    assert "non_torch_gib" not in p.data and "activation_peak_gib" not in p.data


# --- 5: CUDA-graph advisories in their "from X to Y" forms ---------------------------------------------------------


def test_v018_advisory_from_to():
    """025: 'In v0.19, CUDA graph memory profiling will be enabled by default … from 0.7000 to 0.7021'."""
    s = _one("025")
    r = s.reference_rank
    assert s.settings["gpu_memory_utilization"] == 0.7
    assert r.extras["util_suggested_with_graph_profiling"] == 0.7021 and r.extras["cuda_graph_profiling"] is False
    assert s.era == "V1 0.18–0.19"
    items = [row.item for row in r.ledger]
    assert "CUDA graphs (estimate) — not subtracted" in items
    assert not any("subtracted from v0.20 on" in i for i in items)


def test_disabled_advisory_from_to():
    text = ("(EngineCore pid=1) WARNING 06-11 10:11:14 [gpu_worker.py:509] CUDA graph memory profiling is disabled "
            "(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0). Without it, CUDA graph memory is not accounted for during KV "
            "cache allocation, which may require lowering --gpu-memory-utilization to avoid OOM. Consider re-enabling it "
            "(the default as of v0.21.0) and increasing --gpu-memory-utilization from 0.9350 to 0.9595.")
    parsed = _parse(text)
    assert next(p.data for p in parsed if p.kind == ev.SETTINGS) == {"gpu_memory_utilization": 0.935}
    assert next(p.data for p in parsed if p.kind == ev.RANK) == {"util_suggested_with_graph_profiling": 0.9595,
                                                                  "cuda_graph_profiling": False}


# --- 6: terminal hard-wraps ----------------------------------------------------------------------------------------


def test_hard_wrapped_lines_are_joined():
    """013: 'finished in 11' / ' secs, took 1.00 GiB', 'num_gpu_blocks is:' / ' 25809', and the args dict."""
    s = _one("013")
    assert s.settings["gpu_memory_utilization"] == 0.5 and s.model == "Qwen2-7B-Instruct"
    assert s.capacity.num_gpu_blocks == 25809
    assert any(r.cuda_graph_gib == 1.0 for r in s.ranks)


# --- 7: two runs pasted without a banner ---------------------------------------------------------------------------


def test_failure_of_another_run_starts_a_new_startup():
    """021: run 1 (100,000, fine), then run 2's ValueError for 221,000: two startups, neither mixed."""
    ok, failed = _all("021")
    assert ok.failure is None
    assert (ok.capacity.max_model_len, ok.capacity.available_kv_gib, ok.capacity.max_concurrency) == (100_000, 10.55, 2.31)
    assert ok.reconciliation.consistent is True
    assert failed.failure.kind == "max-len-too-large" and failed.failure.data["max_model_len"] == 221_000
    assert failed.capacity.available_kv_gib == 5.59 and failed.reconciliation.consistent is True


# --- 8: eras ---------------------------------------------------------------------------------------------------------


def test_eras_from_wording():
    assert _one("001").era == "V1 0.7–0.9.0"  # '# GPU blocks: N' alone, concurrency without separators
    assert _one("012").era == "V1 0.7–0.9.0"
    assert _one("002").era == "V1 0.7–0.9.0"  # two-line 'GPU KV cache size' in a dev build after v0.7.3
    assert _one("022").era.startswith("V0")  # V0's 'max seq len … stored in KV cache' error
    s = _one("019")
    assert s.engine_version == "0.25.1" and s.era == "V1 0.25–0.27"


def test_two_line_capacity_reaches_v026():
    inferred = eras.infer(["INFO 01-01 00:00:00 [kv_cache_utils.py:1] GPU KV cache size: 1,823,372 tokens"])
    assert inferred.first <= (0, 26, 0) <= inferred.last
    assert eras.era_for((0, 25, 1)).name == "V1 0.25–0.27" and eras.era_for((0, 28, 0)).name == "V1 0.28+"


# --- 9, 10: worker prefixes ------------------------------------------------------------------------------------------


def test_ray_nested_prefix_names_the_worker():
    """014: every worker line is '(EngineCore_0 pid=…) (RayWorkerWrapper pid=…, ip=…)': four workers, and
    pid 345 on two nodes is two workers."""
    s = _one("014")
    labels = {r.rank for r in s.ranks}
    assert labels == {"pid=343", "pid=345", "pid=345 ip=10.42.9.225", "pid=1273"}
    assert all(r.weights_gib == 17.2217 for r in s.ranks)
    assert _rank(s, "pid=343").cuda_graph_gib == 1.88
    rank, _, msg, _ = split_prefix(_line("014", "Graph capturing finished"))
    assert rank == "pid=343" and msg.startswith("Graph capturing finished")


def test_ray_two_node_ranks():
    s = _one("013")
    assert {r.rank for r in s.ranks} == {"pid=374", "pid=1384"}


def test_prefix_glued_behind_a_progress_bar():
    """015: the TP1 graph line sits behind a tqdm bar, its prefix 160 characters in."""
    s = _one("015")
    assert _rank(s, "TP1").cuda_graph_gib == 0.65 and _rank(s, "TP0").cuda_graph_gib == 0.65
    rank, _, msg, _ = split_prefix(_line("015", "Graph capturing finished in 4 secs, took 0.65 GiB"))
    assert rank == "TP1" and msg == "Graph capturing finished in 4 secs, took 0.65 GiB"


# --- 11: failure text names the graph estimate --------------------------------------------------------------------


def test_no_memory_failure_names_the_graph_estimate():
    """024: 'Estimated CUDA graph memory: 118.65 GiB' then 'No available memory for the cache blocks'."""
    s = _one("024")
    f = _finding(s, "not-enough-memory")
    assert "118.65 GiB" in f.detail and "CUDA-graph estimate" in f.detail
    assert "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0" in f.detail


# --- 12: reconciliation without the architecture, duplicates, empty ranks -----------------------------------------


def test_hybrid_signals_soften_the_concurrency_check():
    """008 (padding layers) and 025 (Mamba cache blocks): a hybrid's tokens are per KV group before v0.22."""
    for prefix in ("008", "025"):
        s = _one(prefix)
        assert s.reconciliation.consistent is not False, prefix
        assert "hybrid" in s.reconciliation.detail, prefix
        assert _finding(s, "kv-reconciled").severity == "info", prefix


def test_estimate_with_unknown_block_size_is_not_a_mismatch():
    """023 (TPU): 5,632 is whole 256-token blocks; the block size is not in the log."""
    s = _one("023")
    assert s.reconciliation.consistent is True
    assert "block_size 256" in s.reconciliation.detail


def test_repeated_hybrid_warning_is_one_finding():
    assert _codes(_one("028")).count("hybrid-kv-manager-disabled") == 1


def test_rank_without_figures_is_dropped_but_still_counted():
    """026: V0 TP2 whose worker (pid=90) only announced graph capture."""
    from kvscope.engines.vllm.finish import tp_size

    s = _one("026")
    assert [r.rank for r in s.ranks] == ["TP0"]
    assert tp_size(s) == 2


def test_hybrid_pool_memory_is_not_derived_from_tokens_over_sixteen():
    """A hybrid (GDN + attention) model's logged tokens are not blocks × 16: no K is derived from them
    (the catalog's architecture gave 5,453 GiB for an RTX 5090)."""
    s = _one("019")
    assert "available_kv_gib_derived" not in s.capacity.extras


# --- third harvest (201-228): copies' margins, logs inside JSON, worker deaths, per-worker capacity, ports ---------


def test_quote_bar_margin_is_stripped_before_wrapped_lines_join():
    """203: every line behind '▎ ', the max-len error hard-wrapped after '(196608),'."""
    s = _one("203")
    assert s.failure.kind == "max-len-too-large"
    assert (s.failure.data["max_model_len"], s.failure.data["kv_needed_gib"]) == (196_608, 23.25)
    assert s.capacity.max_model_len == 196_608 and s.capacity.extras["estimated_max_model_len"] == 190_272
    assert clean_line("▎ 23.25 GiB KV cache is needed") == ["23.25 GiB KV cache is needed"]


def test_box_and_buildkite_margins_are_stripped():
    """214 (k9s pane '│ … │' padded to the pane width) and 226/227 (Buildkite '  | ')."""
    line = _line("214", "# cuda blocks")
    assert line.startswith("INFO ") and line.endswith("# cuda blocks: 7191, # CPU blocks: 512")
    assert _one("214").capacity.num_gpu_blocks == 7191
    assert _line("227", "No available memory").startswith("(EngineCore_DP0 pid=6804) ValueError")
    assert clean_line(">>> from vllm import LLM") == [">>> from vllm import LLM"]  # a prompt, not a quote
    assert clean_line("| a | b |") == ["| a | b |"]  # a markdown table keeps its first cell


def test_enginecore_hit_an_exception_is_a_weak_failure():
    """226: only 'EngineCore hit an exception: Traceback…' says the startup died (the cause is cut away)."""
    s = _one("226")
    assert s.failure is not None and s.failure.kind == "engine-init-failed"
    assert s.reference_rank.weights_gib == 0.2389
    for text in ("(VllmWorker rank=1 pid=106) ERROR 04-29 01:10:12 [multiproc_executor.py:470] WorkerProc hit an "
                 "exception.",
                 "(VllmWorkerProcess pid=195297) ERROR 03-02 19:49:43 [multiproc_worker_utils.py:242] Exception in "
                 "worker VllmWorkerProcess while processing method load_model."):
        failure = next(p for p in _parse(text) if p.kind == ev.FAILURE)
        assert failure.data["weak"] is True


def test_worker_oom_under_vllm_prefix_gives_failure_and_device_total():
    """207: a V0 worker's torch OOM during load_model on a 14.62 GiB GPU; no vLLM memory line at all."""
    s = _one("207")
    assert s.failure.data["read_as"] == "cuda-oom"
    assert s.failure.data["device_total_gib"] == 14.62
    assert [r.total_gib for r in s.ranks] == [14.62]
    # 14.42 of 14.62 GiB allocated by PyTorch and no weights line: the weights do not fit as this run split them
    # (its TP is not in the excerpt, so more GPUs than it used, or a 4-bit checkpoint)
    f = _finding(s, "weights-oom")
    assert f.title == "Startup failed: the weights do not fit the GPU"
    assert f.suggestion.flag == "--tensor-parallel-size" and f.suggestion.to_value is None
    assert [a.to_value for a in f.suggestion.alternatives] == ["awq"]


def test_capacity_lines_alone_are_a_startup():
    """217: only '# GPU blocks: 507, # CPU blocks: 1024' and a cut worker ERROR line."""
    s = _one("217")
    assert (s.capacity.num_gpu_blocks, s.capacity.num_cpu_blocks) == (507, 1024)
    assert s.failure is not None and s.failure.data.get("error_source") == "worker_base.py"


def test_gaudi_hpu_weights_free_device_memory_and_block_size():
    """218 (Habana docs): weights 'took in total', usable = util × free after profiling, HPU graphs' reserve,
    KV; '# HPU blocks' are 128 tokens each (16 MiB blocks of an 8B GQA model)."""
    s = _one("218")
    ref = s.reference_rank
    assert (ref.weights_gib, ref.total_gib, ref.usable_gib) == (15.05, 94.62, 71.3)
    assert ref.extras["graph_reserved_gib"] == 7.13 and ref.extras["free_after_profile_gib"] == 79.22
    assert s.settings["gpu_memory_utilization"] == 0.9 and s.capacity.available_kv_gib == 64.17
    assert (s.capacity.num_gpu_blocks, s.capacity.num_cpu_blocks) == (4107, 256)
    assert s.capacity.kv_tokens == 4107 * 128
    step = _finding(s, "util-step")
    assert "79.22 GiB" in step.detail and "+5,760 tokens" in step.detail


def test_per_worker_kv_sizes_keep_the_smallest_with_its_concurrency():
    """216: seven workers print different sizes; the engine uses the smallest (520,256 at 7.91x)."""
    s = _one("216")
    assert (s.capacity.kv_tokens, s.capacity.max_concurrency) == (520_256, 7.91)
    assert s.capacity.extras["kv_tokens_per_worker"][:3] == [538_880, 539_072, 520_256]
    assert s.reconciliation.consistent is not False


def test_npu_graph_memory_in_the_free_memory_summary():
    """221 (vllm-ascend): 'Actual usage: … 0.04 GiB for NPU graph memory'."""
    ref = _one("221").reference_rank
    assert (ref.weights_gib, ref.activation_peak_gib, ref.non_torch_gib, ref.cuda_graph_gib) == (1.14, 0.22, 0.13, 0.04)


def test_bare_killed_after_blocks_is_a_weak_failure():
    """219 (Jetson): 'Killed' right after the blocks are sized: the OOM killer."""
    s = _one("219")
    assert s.failure.kind == "killed" and s.failure.source.line_no == 7
    assert "process-killed" in _codes(s)
    ctx = LineContext()
    assert VLLMLines().parse("Killed", ctx) == []  # nothing sized yet: a shell's "Killed" is no vLLM startup's


def test_log_inside_one_json_line_is_read():
    """213: the whole post (HTML inside a WordPress JSON string, cut mid-string) on one physical line."""
    startups = _all("213")
    assert startups and startups[-1].settings["max_model_len"] == 131_072
    assert startups[-1].settings["gpu_memory_utilization"] == 0.9
    assert startups[0].reference_rank.weights_gib == 48.5
    docker = '{"log":"INFO 09-16 13:51:44 [gpu_worker.py:1] Available KV cache memory: 36.5 GiB\\n","stream":"stdout"}'
    assert clean_line(docker) == ["INFO 09-16 13:51:44 [gpu_worker.py:1] Available KV cache memory: 36.5 GiB"]


def test_error_traceback_from_a_worker_before_ready_is_a_weak_failure():
    """204: eight KV/concurrency pairs, then a worker's ERROR-level traceback (the OOM itself is cut away)."""
    s = _one("204")
    assert s.failure is not None and s.failure.kind == "engine-init-failed"
    assert (s.capacity.kv_tokens, s.capacity.max_concurrency) == (106_640, 13.02)
    api = "(APIServer pid=1) ERROR 04-25 10:24:22 [api_server.py:1]   File \"/x.py\", line 3, in f"
    assert _parse(api) == []  # the API server is no engine


def test_summary_quoted_above_the_log_joins_its_startup():
    """212: 'Model loading took …' and 'Available KV cache memory' quoted bare above the log's banner."""
    s = _one("212")
    assert s.engine_version == "0.19.0" and s.reference_rank.weights_gib == 13.72
    assert s.capacity.available_kv_gib == 36.56 and s.settings["max_model_len"] == 131_072


def test_kv_cache_memory_suggestion_names_the_logs_spelling():
    """209 (2026 main): one-line KV size + concurrency, 'CUDA graph pool memory (actual/estimated)', and the
    hint printed as --kv-cache-memory= (the same flag as --kv-cache-memory-bytes in every release with it)."""
    s = _one("209")
    assert (s.capacity.kv_tokens, s.capacity.max_concurrency, s.capacity.max_model_len) == (268_560, 131.13, 2048)
    ref = s.reference_rank
    assert ref.cuda_graph_gib == 0.22 and ref.extras["cuda_graph_estimate_gib"] == 0.42
    sug = _finding(s, "kv-cache-memory-suggestion").suggestion
    assert sug.flag == "--kv-cache-memory-bytes" and sug.to_value == 39_207_879_578
    assert "--kv-cache-memory=" in sug.note


def test_tpu_hbm_tuples_give_total_and_kv_memory():
    """215 (TPU JAX runner): 'hbm=[(used, total), …]Gb' after model init and after KV-cache init."""
    s = _one("215")
    assert s.reference_rank.total_gib == 31.25
    assert s.capacity.available_kv_gib == 24.75  # 28.49 − 3.74
    assert s.reconciliation.consistent is True


# --- review fixes ------------------------------------------------------------------------------------------------

_V0_SERVING = """\
INFO 01-10 10:00:00 api_server.py:585] vLLM API server version 0.6.3
INFO 01-10 10:00:05 model_runner.py:1067] Loading model weights took 14.9888 GB
INFO 01-10 10:00:07 gpu_executor.py:122] # GPU blocks: 2000, # CPU blocks: 2048
INFO 01-10 10:00:20 model_runner.py:1523] Graph capturing finished in 13 secs.
INFO:     Started server process [1234]
INFO:     Application startup complete.
ERROR 01-10 10:02:00 engine.py:158] Traceback (most recent call last):
ERROR 01-10 10:02:00 engine.py:158]   File "/x/vllm/engine/multiprocessing/engine.py", line 156, in start
ERROR 01-10 10:02:00 engine.py:158] RuntimeError: boom
Killed
"""


def _inline(tmp_path, text: str, name: str = "log.txt"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return analyze([str(path)], {}).startups


def test_crash_or_killed_while_serving_is_no_failed_startup(tmp_path):
    """V0 never prints 'init engine … took': the HTTP server's startup lines mark the engine ready."""
    (s,) = _inline(tmp_path, _V0_SERVING)
    assert s.failure is None
    assert [w["code"] for w in s.warnings] == ["error-while-serving"]
    head = "\n".join(_V0_SERVING.splitlines()[:3]) + "\n"
    (s,) = _inline(tmp_path, head + "INFO 01-10 10:05:00 engine.py:200] Killed 3 stale requests\n")
    assert s.failure is None  # under vLLM's header: not the shell's report


def test_tp_labels_without_figures_still_count(tmp_path):
    """A TP4 log whose TP1-3 only announce graph capture is still TP4 (not 4× the bytes per token)."""
    from kvscope.engines.vllm.finish import tp_size

    lines = ["(APIServer pid=1) INFO 09-01 10:00:00 [api_server.py:1] vLLM API server version 0.10.2",
             "(Worker_TP0 pid=100) INFO 09-01 10:00:10 [gpu_model_runner.py:1] Model loading took 8.00 GiB and 10.0 seconds",
             "(Worker_TP0 pid=100) INFO 09-01 10:00:20 [gpu_worker.py:1] Available KV cache memory: 60.00 GiB",
             "(EngineCore_DP0 pid=50) INFO 09-01 10:00:21 [kv_cache_utils.py:1] GPU KV cache size: 1,966,080 tokens"]
    lines += [f"(Worker_TP{i} pid={100 + i}) INFO 09-01 10:00:22 [gpu_model_runner.py:1] Capturing CUDA graphs "
              "(mixed prefill-decode, PIECEWISE): 100%" for i in range(4)]
    (s,) = _inline(tmp_path, "\n".join(lines) + "\n")
    assert [r.rank for r in s.ranks] == ["TP0"] and tp_size(s) == 4
    assert s.reconciliation.consistent is not False


def test_json_line_keeps_its_message_field():
    import json

    line = json.dumps({"level": "ERROR", "message": "EngineCore failed to start.",
                       "exc_info": "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: no"})
    assert clean_line(line) == ["EngineCore failed to start.", "Traceback (most recent call last):",
                                '  File "x.py", line 1', "ValueError: no"]


def test_kv_cache_memory_flag_follows_the_logged_version():
    from kvscope.engines.vllm.findings import _has_kv_memory_flag

    s = _one("209")
    assert _has_kv_memory_flag(s)
    s.engine_version = "0.9.2"
    assert not _has_kv_memory_flag(s)  # the era's newest release has it, 0.9.2 does not


def test_killed_suggests_swap_space_only_to_v0():
    from kvscope.engines.vllm.findings import _killed
    from kvscope.engines.vllm.state import state

    s = _one("219")
    state(s).era = "V1 0.9.1–0.17"
    assert "--swap-space" not in _killed(s).detail
    state(s).era = "V0 0.6.5–0.10"
    assert "--swap-space" in _killed(s).detail


def test_hpu_pre_loading_weights_line():
    """307 (HabanaAI fork): 'Pre-loading model weights on hpu:0 took W GiB of device memory (U GiB/T GiB used)'."""
    s = _one("307")
    assert {(r.weights_gib, r.total_gib) for r in s.ranks} == {(79.41, 94.62)}


def test_command_in_inline_code_after_an_interpreter_word():
    """319: `bash VLLM_PP_LAYER_PARTITION=16,32 … vllm serve ./Qwen/… --tool-call-parser qwen3_coder`."""
    s = _one("319")
    assert s.model == "./Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8"
    assert s.settings["gpu_memory_utilization"] == 0.9 and s.settings["pipeline_parallel_size"] == 2


def test_profiling_time_block_override_is_no_capacity():
    """306: 'Overriding num_gpu_blocks=0 with num_gpu_blocks_override=512' before the KV sizing, then a failure."""
    s = _one("306")
    assert s.failure.kind == "max-len-too-large"
    assert s.capacity.num_gpu_blocks is None and s.capacity.kv_tokens is None
    assert s.capacity.extras["num_gpu_blocks_override_profiling"] == 512


def test_prose_paraphrasing_profile_figures_is_not_read():
    """320: the poster's '…, non_torch_memory takes 0.25GiB; PyTorch activation peak memory takes 0.19GiB'."""
    for s in _all("320"):
        assert all(r.non_torch_gib is None and r.activation_peak_gib is None for r in s.ranks)
    listed = _parse("model weights take 13.95GiB; non_torch_memory takes 0.25GiB; PyTorch activation peak memory "
                    "takes 0.19GiB; the rest of the memory reserved for KV Cache is 8.69GiB.")
    assert any(p.kind == ev.RANK and p.data.get("non_torch_gib") == 0.25 for p in listed)


def test_implausible_non_torch_memory_is_another_process():
    """010 (#55169): 32.4 GiB of 'non-torch' memory while two instances share one H100: the profiler charged the other
    instance's allocation to this one, and the KV cache came out about half of what a quiet GPU gives."""
    s = _one("010")
    f = next(f for f in s.findings if f.code == "foreign-memory-in-profile")
    assert "32.40 GiB" in f.title and "another process" in f.title and "kv-cache-memory-bytes" in f.detail
    assert s.answer is not None and s.answer.situation.startswith(f.title)


def test_killed_after_the_kv_cache_is_sized_lowers_the_utilization():
    """219 (Jetson Orin NX 16G, unified memory): 'Killed' after 11,836 blocks at the default 0.9: lower it."""
    s = _one("219")
    sug = next(f for f in s.findings if f.code == "process-killed").suggestion
    assert sug is not None and sug.flag == "--gpu-memory-utilization" and sug.to_value < sug.from_value == 0.9


def test_the_kv_figure_is_turned_into_requests_at_full_and_typical_lengths():
    """401 (club-3090, 200,769 tokens at max_model_len 200,000, --max-num-seqs 1): one full-length request, 49 of
    4,096 tokens, and the cap of 1 is the real limit for short ones."""
    f = next(f for f in _one("401").findings if f.code == "kv-capacity")
    assert "1.00 requests at that full length" in f.detail and "49 requests of 4,096 tokens" in f.detail
    assert "--max-num-seqs 1 caps" in f.detail and f.context
