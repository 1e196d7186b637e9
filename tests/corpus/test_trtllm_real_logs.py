"""TensorRT-LLM on the real logs in tests/fixtures/logs/trtllm, plus the PyTorch-backend and failure line
shapes quoted from public logs that no fixture covers yet."""

from __future__ import annotations

import pytest

from kvscope.api import analyze
from kvscope.core import events as ev
from kvscope.engines.base import LineContext
from kvscope.engines.trtllm.lines import TRTLLMLines
from tests.conftest import ground_truth, one_startup

GIB = 1 << 30


def _one(prefix: str):
    return one_startup("trtllm", prefix)


def _meta(prefix: str) -> dict:
    return ground_truth("trtllm", prefix)


def test_triton_pytorch_backend_blocks_line():
    s = _one("003")
    gt = _meta("003")
    assert s.capacity.kv_tokens == gt["max_tokens_in_paged_kv_cache"]
    assert s.capacity.num_gpu_blocks == gt["primary_blocks"] and s.capacity.num_cpu_blocks == gt["secondary_blocks"]
    assert s.capacity.extras["tokens_per_block"] == gt["tokens_per_block"]
    assert s.capacity.extras["window_size"] == gt["window_size"]
    pool = s.reference_rank.pool("target")
    assert pool.gib == gt["kv_allocated_gib"] and pool.tokens == gt["max_tokens_in_paged_kv_cache"]
    assert s.reconciliation.consistent is True
    assert "116,617 primary blocks × 32 tokens per block = 3,731,744" in s.reconciliation.detail
    assert s.era.endswith("Triton backend")


def test_v08_bytes_line_reconciles_to_the_byte():
    s = _one("004")
    gt = _meta("004")
    pool = s.reference_rank.pool("target")
    assert pool.gib == gt["kv_allocated_bytes"] / GIB and pool.tokens == gt["max_tokens_in_paged_kv_cache"]
    assert s.reconciliation.bytes_per_token == 524288  # 69,524,783,104 B / 132,608 tokens, exactly
    assert s.reconciliation.consistent is True
    assert s.reference_rank.extras["trt_managed_gpu_mib"] == gt["engine_activation_mib_after_context_creation"]
    greedy = next(f for f in s.findings if f.code == "trtllm-default-fraction-takes-free-memory")
    assert "max_tokens_in_paged_kv_cache" in greedy.detail


def test_tp2_double_spaced_engine_only():
    s = _one("005")
    gt = _meta("005")
    assert s.settings["tp_size"] == gt["tp"]
    assert s.settings["max_num_tokens"] == gt["max_num_tokens"]
    assert s.capacity.max_model_len == gt["max_seq_len"]
    assert s.capacity.max_running_requests == gt["max_num_sequences"]
    ref = s.reference_rank
    assert ref.weights_gib == gt["engine_size_mib_per_rank"] / 1024
    assert ref.extras["execution_context_gib"] == pytest.approx(gt["execution_context_mib"] / 1024)
    assert s.failure is None and s.reconciliation is None


def test_rtx4090_full_ledger_and_default_fraction():
    s = _one("008")
    gt = _meta("008")
    r = s.reference_rank
    assert r.total_gib == gt["total_gib"] and r.avail_after_weights_gib == gt["available_gib"]
    assert r.weights_gib == gt["engine_size_mib"] / 1024
    assert r.extras["runtime_buffers_gib"] == pytest.approx(gt["runtime_buffers_kb"] / (1 << 20))  # TRT "KB" is KiB
    assert r.extras["decoder_gib"] == pytest.approx(gt["decoder_mb"] / 1024)
    assert s.capacity.num_gpu_blocks * s.capacity.extras["tokens_per_block"] == gt["max_tokens_in_paged_kv_cache"]
    assert s.capacity.extras["implied_kv_cache_free_gpu_mem_fraction"] == pytest.approx(11.00 / 12.22, abs=1e-4)
    rec = s.reconciliation
    assert rec.consistent is True and rec.kv_tokens_low <= gt["max_tokens_in_paged_kv_cache"] <= rec.kv_tokens_high
    items = [row.item for row in r.ledger]
    assert items[0] == "device total" and "KV budget 0.9 × free" in items
    budget = next(f for f in s.findings if f.code == "trtllm-kv-budget")
    assert budget.suggestion.flag == "kv_cache_free_gpu_mem_fraction" and budget.suggestion.from_value == 0.9


P = TRTLLMLines()


def test_pytorch_backend_two_passes(tmp_path):
    """trtllm-serve 1.1.0rc3, gpt-oss-120b on DGX Spark (a public setup guide): the estimation pool is freed and
    the second allocation serves."""
    log = "\n".join([
        "[TensorRT-LLM] TensorRT-LLM version: 1.1.0rc3",
        "[12/20/2025-04:20:04] [TRT-LLM] [I] Using LLM with PyTorch backend",
        "[12/20/2025-04:20:21] [TRT-LLM] [I] Use 63.32 GB for model weights.",
        "[TensorRT-LLM][INFO] Number of tokens per block: 32.",
        "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 0.56 GiB for max tokens in paged KV cache (8224).",
        "[12/20/2025-04:21:10] [TRT-LLM] [I] max_seq_len=8224, max_num_requests=64, max_num_tokens=8192, max_batch_size=64",
        "[12/20/2025-04:21:50] [TRT-LLM] [I] Memory used after loading model weights (inside torch) in memory usage profiling: 63.52 GiB",
        "[12/20/2025-04:21:51] [TRT-LLM] [I] Memory dynamically allocated during inference (inside torch) in memory usage profiling: 0.85 GiB",
        "[12/20/2025-04:21:51] [TRT-LLM] [I] Memory used outside torch (e.g., NCCL and CUDA graphs) in memory usage profiling: 49.28 GiB",
        "[12/20/2025-04:21:51] [TRT-LLM] [I] Peak memory during memory usage profiling (torch + non-torch): 113.65 GiB, "
        "available KV cache memory when calculating max tokens: 5.95 GiB, fraction is set 0.8999999761581421, "
        "kv size is 73728. device total memory 119.70 GiB, , tmp kv_mem 0.56 GiB",
        "[12/20/2025-04:21:51] [TRT-LLM] [W] Attention window size 131072 exceeds upper bound 86720 for available blocks. Reducing to 86720.",
        "[TensorRT-LLM][INFO] Number of tokens per block: 32.",
        "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 5.95 GiB for max tokens in paged KV cache (86720).",
        "[12/20/2025-04:21:52] [TRT-LLM] [I] max_seq_len=86720, max_num_requests=64, max_num_tokens=8192, max_batch_size=64",
    ])
    path = tmp_path / "serve.log"
    path.write_text(log)
    [s] = analyze([str(path)]).startups
    r = s.reference_rank
    assert [p.name for p in r.kv_pools] == ["target"]
    assert r.pool("target").gib == 5.95 and r.pool("target").tokens == 86720
    assert r.extras["estimation_kv_gib"] == [0.56]
    assert r.total_gib == 119.70 and r.weights_gib == 63.32  # the first weights figure the backend printed
    assert (r.activation_peak_gib, r.non_torch_gib) == (0.85, 49.28)
    assert s.capacity.kv_tokens == 86720 and s.capacity.available_kv_gib == 5.95
    assert s.capacity.max_model_len == 86720 and s.capacity.max_running_requests == 64
    assert s.engine_version == "1.1.0rc3" and s.settings["free_gpu_memory_fraction"] == 0.9
    assert s.reconciliation.bytes_per_token == 73728 and s.reconciliation.consistent is True
    assert any(f.code == "trtllm-attention-window-reduced" for f in s.findings)


def test_executor_component_oom_report(tmp_path):
    """mlcommons/inference#2501: the PyTorch executor's insufficient-memory report names the component."""
    log = "\n".join([
        "[02/06/2026-10:00:00] [TRT-LLM] [RANK 0] [E] Failed to initialize executor on rank 0: "
        "Executor creation failed due to insufficient GPU memory.",
        "",
        "The following component could not be created: KV cache",
        "Total GPU memory (GiB): 276.50",
        "Free GPU memory before component creation attempt (GiB): 200.47",
        "",
        "Previously created components and free GPU memory before/after creation (GiB):",
        "model: 274.64 / 208.12",
        "sampler: 208.12 / 204.34",
    ])
    path = tmp_path / "oom.log"
    path.write_text(log)
    [s] = analyze([str(path)]).startups
    assert s.failure.kind == "kv-cache-oom" and s.failure.data["component"] == "KV cache"
    r = s.reference_rank
    assert r.rank == "rank=0" and r.total_gib == 276.50
    assert (r.pre_load_free_gib, r.avail_after_weights_gib) == (274.64, 208.12)
    err = next(f for f in s.findings if f.severity == "error")
    assert err.suggestion.flag == "kv_cache_free_gpu_mem_fraction" and err.suggestion.to_value == 0.8


@pytest.mark.parametrize(
    ("line", "data"),
    [
        ("[TensorRT-LLM][ERROR] [TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, mCudaStream->get()): "
         "out of memory (/code/tensorrt_llm/cpp/tensorrt_llm/runtime/tllmBuffers.h:112)",
         {"kind": "not-enough-memory", "where": "/code/tensorrt_llm/cpp/tensorrt_llm/runtime/tllmBuffers.h:112"}),
        ("[TensorRT-LLM][ERROR] 2: Requested amount of GPU memory (57662592 bytes) could not be allocated. "
         "There may not be enough free memory for allocation to succeed.",
         {"kind": "not-enough-memory", "requested_bytes": 57662592}),
    ],
)
def test_failure_lines(line, data):
    [p] = P.parse(line, LineContext())
    assert p.kind == ev.FAILURE
    for k, v in data.items():
        assert p.data[k] == v


def test_rank_prefix():
    [p] = P.parse("[07/08/2025-19:47:15] [TRT-LLM] [RANK 3] [I] Memory used outside torch (e.g., NCCL and CUDA graphs) "
                  "in memory usage profiling: 2.10 GiB", LineContext())
    assert p.rank == "rank=3" and p.data == {"non_torch_gib": 2.10}
    assert p.timestamp == "07/08/2025-19:47:15"


def test_engine_limits_without_kv_lines():
    s = _one("005")
    limits = next(f for f in s.findings if f.code == "trtllm-engine-limits")
    assert "8 × 1,048,576 = 8,388,608 tokens" in limits.title and "2 TP ranks" in limits.detail
    assert s.era == "C++ TensorRT-engine runtime (TRTGptModel)"


def test_an_old_runtime_token_count_is_tokens_rounded_up_to_blocks():
    """question 301 (TensorRT-LLM 0.5, A10): 'Using 10718 tokens in paged KV cache' with 16-token blocks:
    tokens, not blocks; the pool is 670 blocks = 10,720 tokens."""
    from kvscope.api import analyze
    from tests.conftest import FIXTURES

    case = next((FIXTURES / "questions").glob("301-*"))
    s = analyze([str(case / "log.txt")], {"tokens_per_block": 16}).startups[0]
    f = next(f for f in s.findings if f.code == "trtllm-kv-tokens")
    assert "670 blocks of 16" in f.title and "10,720 tokens" in f.detail and "not blocks" in f.detail


def _build_suggestion(case: str, **assume):
    from tests.conftest import FIXTURES
    files = [str(next((FIXTURES / "questions").glob(f"{case}-*")) / "log.txt")]
    s = analyze(files, {"gpu": "Quadro A4000", **assume}).startups[0]
    return next(f.suggestion for f in s.findings if f.code == "trtllm-build-buffers")


def test_buffers_that_dwarf_the_engine_give_a_computed_max_batch_size():
    """A real A4000 log (runtime buffers 2.66 GB + decoder 5.76 GB for a 0.85 GiB engine, build limits unstated):
    the build is taken to have kept the default of the newest release (2048), and the target is the largest
    power of two at which the buffers, scaled in proportion, fit in 1 GiB (the engine is smaller)."""
    sug = _build_suggestion("302")
    assert (sug.flag, sug.from_value, sug.to_value) == ("--max_batch_size", 2048, 128)
    assert "default since 0.14" in sug.note and "--assume max_batch_size" in sug.note
    stated = _build_suggestion("302", max_batch_size=64)  # the user's own build value wins over the default
    assert (stated.from_value, stated.to_value) == (64, 4) and "default" not in stated.note


@pytest.mark.parametrize("version, batch", [(None, 2048), ("0.15.0", 2048), ("0.12.0", 256), ("0.9.0", None)])
def test_default_max_batch_size_by_release(version, batch):
    from kvscope.engines.trtllm.eras import default_max_batch_size
    got = default_max_batch_size(version)
    assert (got[0] if got else None) == batch
