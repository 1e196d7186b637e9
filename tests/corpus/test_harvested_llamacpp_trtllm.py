"""llama.cpp / ollama / TensorRT-LLM behaviour on held-out public logs (tests/fixtures/harvested).

Each test pins a gap these logs exposed: a crash on an empty cache, context sizes printed only by
the cache constructor or the sampler, ollama's logfmt engine, a draft model's free memory, the
backend a failure happened on, and TensorRT-LLM wordings."""

from __future__ import annotations

from kvscope.api import analyze
from tests.conftest import FIXTURES

HARVESTED = FIXTURES / "harvested"


def _one(engine: str, prefix: str):
    case = sorted((HARVESTED / engine).glob(f"{prefix}*"))[0]
    analysis = analyze([str(case / "log.txt")])
    assert len(analysis.startups) == 1
    return analysis.startups[0]


def _codes(s) -> dict:
    return {f.code: f for f in s.findings}  # analyze() has run the findings


def test_empty_main_cache_costs_the_swa_cache_instead():
    """DeepSeek-V4 builds print a 0-layer, 0.00 MiB non-SWA cache: no division by zero, and the
    cost finding speaks of the SWA cache's own cells, not -c."""
    s = _one("llamacpp", "104")
    kv = _codes(s)["llamacpp-kv-cost"]
    assert "4,352 cells" in kv.title and "swa cache" in kv.title
    assert "-c 4,352" not in kv.detail
    assert s.capacity.kv_tokens == 64000
    _one("llamacpp", "111")  # the other empty-cache log: no crash


def test_kv_size_line_gives_the_context_and_cache_types():
    s = _one("llamacpp", "101")
    assert s.capacity.kv_tokens == 32768
    assert s.setting("type_k") == "q8_0"
    cuda1 = next(r for r in s.ranks if r.rank == "CUDA1")
    # the draft model's "using device CUDA1 … 9866 MiB free" is after the target's weights: not its baseline
    assert cuda1.pre_load_free_gib is None
    assert abs(cuda1.extras["draft_pre_load_free_gib"] - 9866 / 1024) < 1e-9


def test_sampler_ctx_size_line_gives_n_ctx():
    s = _one("llamacpp", "107")
    assert s.capacity.context_len == 4096 or s.capacity.kv_tokens == 4096


def test_2023_load_internal_hparams():
    s = _one("llamacpp", "109")
    assert s.capacity.kv_tokens == 512
    assert s.setting("n_layer") == 60


def test_ollama_logfmt_buffers():
    s = _one("llamacpp", "110")
    cuda0 = next(r for r in s.ranks if r.rank == "CUDA0")
    assert abs(cuda0.pool("target").gib - 936.0 / 1024) < 1e-12
    assert abs(cuda0.extras["compute_gib"] - 98.0 / 1024) < 1e-12


def test_failure_names_the_rocm_device():
    s = _one("llamacpp", "113")
    assert s.failure is not None and s.failure.data["device"] == "ROCm0"


def test_private_slots_need_n_times_the_training_context():
    """-np 8 with 2,048 per slot: the training context in every slot needs -c 8 × n_ctx_train, and
    the cheaper cache-type change keeps the q4_0 K as it is."""
    s = _one("llamacpp", "108")
    codes = _codes(s)
    train = codes["llamacpp-context-below-training"]
    assert train.suggestion.to_value == 163840 * 8 and train.suggestion.from_value == 16384
    kv = codes["llamacpp-kv-cost"]
    assert kv.suggestion.to_value == "q4_0/q8_0"


def test_trtllm_total_tokens_and_one_sequence_failure():
    s = _one("trtllm", "104")
    assert s.capacity.kv_tokens == 29184
    assert s.capacity.extras["max_blocks_per_seq"] == 272
    assert s.failure.kind == "max-len-too-large"
    f = _codes(s)["trtllm-kv-below-one-sequence"]
    assert "29,184 < 34,816" in f.title
    assert f.suggestion.flag == "kv_cache_free_gpu_mem_fraction"  # max_tokens was never set in that log


def test_trtllm_runtime_buffer_oom_does_not_blame_the_fraction():
    s = _one("trtllm", "105")
    f = _codes(s)["trtllm-oom"]
    assert "before the KV cache was sized" in f.title and f.suggestion is None


def test_trtllm_max_tokens_cap_with_free_and_total():
    s = _one("trtllm", "107")
    ref = s.reference_rank
    assert abs(ref.extras["kv_sizing_free_gib"] - 1.687347412109375) < 1e-12
    budget = _codes(s)["trtllm-kv-budget"]
    assert "capped the pool" in budget.detail
    assert budget.suggestion.flag == "max_tokens_in_paged_kv_cache"


def test_decimal_comma_and_two_rpc_servers():
    """A locale with decimal commas ("34,00 MiB") and two RPC servers both named "RPC" (2024)."""
    from kvscope.engines.base import to_float

    assert to_float("34,00") == 34.0 and to_float("7072,53") == 7072.53
    assert to_float("158,656") == 158656 and to_float("2,640,144") == 2640144
    s = _one("llamacpp", "206")
    ranks = {r.rank: r for r in s.ranks}
    assert abs(ranks["RPC"].weights_gib - 7072.53 / 1024) < 1e-9
    assert abs(ranks["RPC#2"].weights_gib - 6537.36 / 1024) < 1e-9
    assert abs(ranks["RPC"].pool("target").gib - 34 / 1024) < 1e-12


def test_ollama_scheduler_estimate_and_runner_command():
    s = _one("llamacpp", "209")
    assert s.capacity.kv_tokens == 64000
    offload = _codes(s)["llamacpp-partial-offload"]
    assert "cannot all fit" in offload.detail  # 87.3 GiB of weights + the graph against 88 GiB: not at any context
    sug = offload.suggestion  # but a shorter context (19.5 GiB of KV at 64,000) moves more layers onto the GPUs
    assert sug.flag == "num_ctx" and sug.from_value == 64000 and sug.to_value < 64000 and "layers" in sug.note


def test_offload_advice_says_what_the_layers_need():
    s = _one("llamacpp", "208")
    offload = _codes(s)["llamacpp-partial-offload"]
    assert "370.6 GiB more" in offload.detail and "370.6 GiB" in offload.suggestion.note


def test_kv_cache_failure_on_rocm_wins_over_the_tensor_range_line():
    s = _one("llamacpp", "212")
    assert s.failure.kind == "kv-cache-oom" and s.failure.data["device"] == "ROCm0"


def test_llama_server_reload_is_a_second_startup():
    analysis = analyze([str(sorted((HARVESTED / "llamacpp").glob("210*"))[0] / "log.txt")])
    assert len(analysis.startups) == 2


def test_trtllm_round_two_shapes():
    oom = _one("trtllm", "202")
    assert [r.rank for r in oom.ranks if r.pre_load_free_gib is not None] == ["rank=1"]
    bytes_line = _one("trtllm", "204")
    assert abs(bytes_line.reference_rank.pool("target").gib - 54022635520 / (1 << 30)) < 1e-12
    fake = _one("trtllm", "205")
    assert "not in the log" in _codes(fake)["trtllm-kv-budget"].title
    encdec = _one("trtllm", "201")
    assert _codes(encdec)["trtllm-kv-budget"].suggestion is None  # no advice from a sub-GiB implied fraction


def test_ollama_2024_quoted_offload_line():
    """ollama#8922: 'msg="offload to cuda" … layers.model=81 … memory.required.kv="2.5 GiB"' (the 2024 wording)."""
    s = _one("llamacpp", "509")
    assert s.setting("n_layers_offloadable") == 81
    assert s.setting("ollama_memory_required_kv_gib") == 2.5
