"""llama.cpp on the real logs in tests/fixtures/logs/llamacpp: ledger, capacity, checks, failures, findings."""

from __future__ import annotations

import pytest

from kvscope.api import analyze
from kvscope.render.json_out import to_dict
from tests.conftest import case_dir, case_files, ground_truth, one_startup

MIB = 1 / 1024


def _one(prefix: str):
    return one_startup("llamacpp", prefix)


def _meta(prefix: str) -> dict:
    return ground_truth("llamacpp", prefix)


def _rank(s, label):
    return next(r for r in s.ranks if r.rank == label)


def test_llamasharp_prefix_and_derived_context():
    """LLamaSharp's '[llama Info]: ' wrapper; n_ctx is not logged but the per-layer lines pin it."""
    s = _one("001")
    gt = _meta("001")
    cuda0 = _rank(s, "CUDA0")
    pool = cuda0.pool("target")
    assert pool.gib == gt["kv_self_size_mib"] * MIB == 0.140625  # unrounded MiB/1024
    assert (pool.k_gib, pool.v_gib) == (gt["k_mib"] * MIB, gt["v_mib"] * MIB)
    assert pool.dtype == "f16"
    # 36 layers (0…35) × (256 + 256) × 2 B = 36,864 B per cell → 144 MiB = 4,096 cells exactly
    assert s.reconciliation.bytes_per_token == 36864
    assert s.capacity.kv_tokens == 4096 and "kv_tokens" in s.capacity.extras["derived"]
    assert s.reconciliation.consistent is True
    assert cuda0.extras["compute_buffers_mib"] == {"CUDA0": 300.75}
    host = _rank(s, "CPU")
    assert host.extras["compute_buffers_mib"] == {"CUDA_Host": 12.01}
    assert host.extras["output_gib"] == pytest.approx(gt["output_buffer_mib"] * MIB)
    assert s.era.startswith("early 2025")


def test_early_2024_server_with_slot_listing():
    s = _one("004")
    gt = _meta("004")
    assert s.capacity.kv_tokens == gt["n_ctx"] == 512
    assert s.capacity.context_len == gt["slot_max_context"]
    assert s.settings["n_ctx_slot"] == 512
    cuda0 = _rank(s, "CUDA0")
    assert cuda0.pool("target").gib == gt["kv_buffer_mib"]["CUDA0"] * MIB
    assert _rank(s, "CPU").extras["input_gib"] == pytest.approx(gt["input_buffer_mib"] * MIB)
    assert s.reconciliation.consistent is True
    kv = next(f for f in s.findings if f.code == "llamacpp-kv-cost")
    assert "512 cells × 327,680 B = 160.00 MiB" in kv.title
    assert kv.suggestion.flag == "--cache-type-k/--cache-type-v" and kv.suggestion.to_value == "q8_0/q8_0"


def test_sixteen_gpu_compute_buffers_one_rank_per_device():
    s = _one("005")
    gt = _meta("005")["compute_buffer_mib"]
    gpus = [r for r in s.ranks if r.rank.startswith("CUDA") and r.rank != "CUDA_Host"]
    assert [r.rank for r in gpus] == [f"CUDA{i}" for i in range(1, 15)]  # numeric order, not CUDA1, CUDA10, …
    for r in gpus:
        assert r.extras["compute_buffers_mib"] == {r.rank: gt[r.rank]}
    assert _rank(s, "CPU").extras["compute_buffers_mib"] == {"CUDA_Host": gt["CUDA_Host"]}
    assert s.capacity.max_running_requests == 1
    heavy = next(f for f in s.findings if f.code == "llamacpp-compute-buffers")
    assert heavy.suggestion.flag == "-ub"


def test_two_gpu_q8_cache_split_without_double_counting():
    s = _one("006")
    gt = _meta("006")
    assert s.capacity.kv_tokens == gt["n_ctx"] == 16384
    per_device = {r.rank: r.pool("target").gib for r in s.ranks if r.rank in ("CUDA0", "CUDA1")}
    assert per_device == {k: v * MIB for k, v in gt["kv_buffer_mib"].items()}
    whole = _rank(s, "(all devices)").pool("target")
    assert whole.gib == gt["kv_self_size_mib"] * MIB and whole.k_gib == gt["k_mib"] * MIB
    assert whole.dtype == "q8_0"
    rec = s.reconciliation
    assert rec.consistent is True
    # 799 MiB over 16,384 cells is exactly 48,128 q8_0 elements per cell (1,504 blocks of 32 in 34 bytes)
    assert "48,128.0 q8_0 elements per cell" in rec.detail and "whole blocks" in rec.detail
    assert "sum to 1598.04 MiB" in rec.detail
    assert s.settings["n_ubatch"] == 512 and s.settings["pipeline_parallel_copies"] == 1
    # the per-device ledger counts each device's buffer once; the whole cache lives on its own row
    assert [row.item for row in _rank(s, "CUDA0").ledger][0].startswith("KV cache: target")


def test_journald_split_mode_graph():
    s = _one("008")
    gt = _meta("008")
    split = _rank(s, "CUDA_Split")
    pool = split.pool("target")
    assert pool.gib == gt["kv_self_size_mib"] * MIB
    assert (pool.k_gib, pool.v_gib) == (gt["k_mib"] * MIB, gt["v_mib"] * MIB)
    assert split.extras["target_kv_buffer_gib"] == gt["kv_split_buffer_mib"] * MIB
    assert s.settings["split_mode_graph"] is True
    assert _rank(s, "CUDA0").extras["compute_buffers_mib"] == gt["compute_buffer_mib"]
    assert s.era.startswith("ik_llama.cpp")
    assert s.reconciliation.consistent is True and s.reconciliation.bytes_per_token is None


def test_rocm_hybrid_recurrent_unified():
    s = _one("009")
    gt = _meta("009")
    rocm = _rank(s, "ROCm0")
    assert rocm.pool("target").gib == gt["kv_buffer_mib"]["ROCm0"] * MIB
    assert rocm.pool("target").tokens == gt["kv_cells"]
    assert rocm.pool("recurrent").gib == gt["recurrent_buffer_mib"]["ROCm0"] * MIB
    cap = s.capacity
    assert (cap.kv_tokens, cap.context_len, cap.max_running_requests) == (gt["n_ctx"], gt["n_ctx_seq"], gt["n_seq_max"])
    assert cap.extras["n_ctx_train"] == gt["n_ctx_train"]
    caches = {c["name"]: c for c in cap.extras["kv_caches"]}
    assert caches["target"]["layers"] == gt["kv_layers"]
    assert caches["recurrent"]["r_gib"] == gt["recurrent_r_mib"] * MIB
    assert s.reconciliation.consistent is True
    assert "= 12 layers × 512.0" in s.reconciliation.detail
    codes = {f.code for f in s.findings}
    assert {"llamacpp-unified-slots", "llamacpp-context-below-training"} <= codes


def test_compact_format_compute_oom_recovered_by_retry():
    """The compute buffer OOM is followed by the retry without pipeline parallelism and the server goes on."""
    s = _one("011")
    gt = _meta("011")
    assert s.failure is None
    recovered = next(w for w in s.warnings if w["code"] == "compute-oom-recovered")
    assert recovered["alloc_mib"] == gt["failed_compute_alloc_mib"]
    assert recovered["device"] == gt["failed_device"]
    assert recovered["alloc_bytes"] == gt["failed_compute_alloc_bytes"]
    assert s.capacity.context_len == gt["n_ctx_slot"]
    assert s.settings["kv_unified"] is False
    assert "compact log format" in s.era
    assert any(f.code == "llamacpp-pipeline-parallelism-dropped" for f in s.findings)


def test_mla_cache_and_fatal_compute_oom():
    s = _one("012")
    gt = _meta("012")
    f = s.failure
    assert f.kind == "compute-buffer-oom"
    assert f.data["alloc_mib"] == gt["failed_compute_alloc_mib"]
    assert f.data["alloc_bytes"] == gt["failed_compute_alloc_bytes"]
    assert f.data["device"] == "CUDA0"
    assert {r.rank: r.pool("target").gib for r in s.ranks if r.rank in gt["kv_buffer_mib_partial"]} == {
        k: v * MIB for k, v in gt["kv_buffer_mib_partial"].items()}
    whole = _rank(s, "(all devices)").pool("target")
    assert whole.gib == gt["ckv_mib"] * MIB
    assert s.settings["pipeline_parallel_copies"] == gt["pipeline_copies"]
    err = next(x for x in s.findings if x.severity == "error")
    assert err.code == "llamacpp-compute-oom" and "8,900.01 MiB" in err.title
    assert "4 copies" in err.detail and err.suggestion.flag == "-ub"


@pytest.mark.parametrize("prefix", ["001", "004", "005", "006", "008", "009", "011", "012"])
def test_json_contract_shape(prefix):
    """Every rank has ledger rows with figures; no pseudo rank leaks; pools carry contract names."""
    analysis = analyze(case_files(case_dir("llamacpp", prefix)))
    doc = to_dict(analysis)
    for s in doc["startups"]:
        labels = [r["rank"] for r in s["ranks"]]
        assert "(kv summary)" not in labels
        for r in s["ranks"]:
            assert not any(k.startswith("_buf|") for k in r["extras"])
            assert all(p["name"] in ("target", "swa", "draft", "recurrent") for p in r["kv_pools"])
            assert all(row["gib"] is not None for row in r["ledger"])


def test_an_unlabelled_cache_of_4_bytes_an_element_is_f32():
    """harvested 109 (llama-cpp-python, 2023): 1,560 MB for 512 cells of a 60-layer, 6,656-wide model is
    2 × 60 × 6,656 × 4 B a cell: an f32 cache, twice llama.cpp main's f16 one; f16_kv halves it."""
    from kvscope.api import analyze
    from tests.conftest import FIXTURES, case_files

    case = next((FIXTURES / "harvested" / "llamacpp").glob("109-*"))
    s = analyze(case_files(case)).startups[0]
    f = next(f for f in s.findings if f.code == "llamacpp-kv-cost")
    assert "f32" in f.detail and "780.00 MiB" in f.detail
    assert f.suggestion.flag == "f16_kv" and f.suggestion.to_value is True


def test_a_vulkan_buffer_over_the_allocation_limit_is_not_out_of_vram():
    """harvested 201 (Vulkan, -ctk q8_0): a 2,066 MiB compute buffer over the per-allocation limit: keep K in f16."""
    from kvscope.api import analyze
    from tests.conftest import FIXTURES, case_files

    case = next((FIXTURES / "harvested" / "llamacpp").glob("201-*"))
    s = analyze(case_files(case)).startups[0]
    assert s.failure.kind == "compute-buffer-oom"
    f = next(f for f in s.findings if f.code == "llamacpp-allocation-limit")
    assert "per-allocation limit" in f.detail and "Not out of VRAM" in f.detail
    assert f.suggestion.flag == "--cache-type-k" and f.suggestion.to_value == "f16"


def test_ollama_runner_context_is_num_ctx_times_the_slots():
    """harvested 508 (ollama runner, --ctx-size 8192 --parallel 4): each request gets 2,048 tokens, not 8,192;
    OLLAMA_NUM_PARALLEL is the flag that divides it."""
    from kvscope.api import analyze
    from tests.conftest import FIXTURES, case_files

    case = next((FIXTURES / "harvested" / "llamacpp").glob("508-*"))
    s = analyze(case_files(case)).startups[0]
    assert s.capacity.context_len == 2048 and s.capacity.kv_tokens == 8192
    f = next(f for f in s.findings if f.code == "ollama-slots")
    assert "4 slots × 2,048" in f.title and f.suggestion.flag == "OLLAMA_NUM_PARALLEL"


def test_a_truncated_prompt_asks_for_a_num_ctx_that_holds_it(tmp_path):
    """ollama's 'input truncated | n_ctx=2048 n_erase=39171 n_keep=4 n_left=2044' (#5862): the prompt had
    4 + 39,171 + 1,022 … 2,044 tokens; num_ctx must reach the next power of two above it."""
    from kvscope.api import analyze

    log = tmp_path / "log.txt"
    log.write_text("ollama_llama_server --model /m --ctx-size 8192 --parallel 4\n"
                   "input truncated | n_ctx=2048 n_erase=39171 n_keep=4 n_left=2044 n_shift=1022\n")
    f = next(f for f in analyze([str(log)]).startups[0].findings if f.code == "ollama-slots")
    assert "40,197–41,219" in f.detail
    assert (f.suggestion.flag, f.suggestion.from_value, f.suggestion.to_value) == ("num_ctx", 2048, 65536)


def _question(prefix: str, *args: str):
    from kvscope.api import analyze
    from tests.conftest import FIXTURES

    case = next((FIXTURES / "questions").glob(f"{prefix}-*"))
    model = args[args.index("--model") + 1] if "--model" in args else None
    return analyze([str(case / "log.txt")], {}, model).startups[0]


def test_a_quantized_v_cache_without_flash_attention_is_a_setting_not_memory():
    """question 360: 'V cache quantization requires flash_attn': turn -fa on (or keep V in f16)."""
    s = _question("360")
    f = next(f for f in s.findings if f.code == "llamacpp-v-quant-needs-fa")
    assert s.failure.kind == "engine-init-failed" and "Not memory" in f.detail
    assert f.suggestion.flag == "-fa" and f.suggestion.to_value is True


def test_a_refused_kv_buffer_names_its_size_and_the_context():
    """question 314: 805,306,368,032 B refused on the CPU for n_ctx 163,840 (the default, the training context)."""
    s = _question("314")
    f = next(f for f in s.findings if f.code == "llamacpp-kv-oom")
    assert s.failure.kind == "kv-cache-oom" and "750.00 GiB" in f.title and "163,840" in f.title
    assert f.suggestion.flag == "-c" and f.suggestion.to_value == 8192


def test_the_kv_cache_a_context_will_need_is_said_before_the_log_shows_it():
    """question 312 (Metal, Phi-3.5-mini): n_ctx 131,072 needs 48 GiB of f16 KV against a 49,152 MiB working set."""
    s = _question("312", "--model", "microsoft/Phi-3.5-mini-instruct")
    f = next(f for f in s.findings if f.code == "llamacpp-kv-will-not-fit")
    assert "48.00 GiB" in f.title and "49,152 MiB Metal working set" in f.detail
    assert f.suggestion.flag == "-c" and f.suggestion.to_value < 131072


def test_ollama_names_the_gpus_it_found_and_why_one_is_used():
    """question 350 (2 × Tesla M60): both GPUs were found; a model that fits on one is placed on one."""
    s = _question("350")
    f = next(f for f in s.findings if f.code == "ollama-gpus-found")
    assert "2 GPUs" in f.title and "7.9 GiB" in f.title and f.suggestion.flag == "OLLAMA_SCHED_SPREAD"


def test_the_one_layer_left_on_the_cpu_is_the_output_layer():
    """question 351 (gemma4, 42/43 layers): 'offloading output layer to CPU': that is the layer left behind."""
    s = _question("351")
    f = next(f for f in s.findings if f.code == "llamacpp-output-layer-on-cpu")
    assert "42/43" in f.title and "output layer" in f.title
