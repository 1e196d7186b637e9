"""vLLM what-if on the worked example of docs/research/vllm-memory.md §6.1 (vLLM issue #19996)."""

from __future__ import annotations

import pytest

from kvscope.api import analyze
from kvscope.engines.sglang.whatif import PredictionError
from kvscope.engines.vllm import whatif as pv
from tests.conftest import case_dir, case_files

LINES = [
    "INFO 06-23 14:21:48 [gpu_worker.py:232] Available KV cache memory: 51.63 GiB",
    "INFO 06-23 14:21:48 [kv_cache_utils.py:716] GPU KV cache size: 410,128 tokens",
    "INFO 06-23 14:21:48 [kv_cache_utils.py:720] Maximum concurrency for 131,072 tokens per request: 3.13x",
]


@pytest.fixture
def cal(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("\n".join(LINES) + "\n")
    [s] = analyze([str(log)], {"gpu": "H100 SXM", "gpu_memory_utilization": 0.9}, "meta-llama/Llama-3.1-8B-Instruct").startups
    return pv.calibrate(s)


def test_calibration_reproduces_the_log(cal):
    assert cal.blocks == 25_633 and cal.block_size == 16
    assert cal.block_bytes == 2_162_688  # 33 layers (32 + EAGLE head) × 16 × 4,096 B
    base = pv.predict(cal, {})
    assert base.kv_tokens_low == 410_128 and base.concurrency_at_context == 3.13


def test_max_model_len_change(cal):
    sc = pv.predict(cal, {"max_model_len": 32_768})
    assert sc.kv_tokens_low == 410_128  # the pool does not depend on the length
    assert sc.concurrency_at_context == 12.52
    assert sc.flags == ["--max-model-len 32768"]


def test_fp8_and_util(cal):
    assert pv.predict(cal, {"kv_cache_dtype": "fp8"}).kv_tokens_low == 820_256
    sc = pv.predict(cal, {"gpu_memory_utilization": 0.91})
    assert sc.kv_tokens_low - 410_128 in range(6_300, 6_340)  # 0.01 × 79.65 GiB / 2,162,688 B × 16


def test_utilization_needs_a_total(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("\n".join(LINES) + "\n")
    [s] = analyze([str(log)], {}, "meta-llama/Llama-3.1-8B-Instruct").startups
    with pytest.raises(PredictionError):
        pv.predict(pv.calibrate(s), {"gpu_memory_utilization": 0.95})


def test_real_v0_log_util_step():
    [s] = analyze(case_files(case_dir("vllm", "002"))).startups
    cal = pv.calibrate(s)
    assert cal.blocks == 1952 and cal.util == 0.9
    sc = pv.predict(cal, {"gpu_memory_utilization": 0.92})
    assert sc.kv_tokens_low > 31_232


def test_hybrid_calibration_keeps_the_enlarged_block():
    """006 (Qwen3.6-35B-A3B): 299 blocks of 10 × 2,146,304 B reproduce 567,978 tokens; bf16 KV doubles the
    attention row, so the block is re-enlarged to 1,056 tokens (16 × 66) for the same 2,146,304 B state."""
    [s] = analyze(case_files(case_dir("vllm", "006"))).startups
    cal = pv.calibrate(s)
    assert (cal.blocks, cal.block_size, cal.block_bytes, cal.kv_tokens) == (299, 2096, 21_463_040, 567_978)
    assert pv.predict(cal, {}).kv_tokens_low == 567_978
    bf16 = pv.predict(cal, {"kv_cache_dtype": "bfloat16"})
    assert bf16.concurrency_at_context == 2.26 and "1,056 tokens" in bf16.notes[-1]
    half = pv.predict(cal, {"max_model_len": 65_536})  # 32 + 3 × 2 blocks per request
    assert half.concurrency_at_context == round(299 / 38, 2)


def test_tensor_parallel_change_reprices_weights_and_kv_heads(cal):
    """TP 1 → 2: Llama-3.1-8B's weights per GPU shrink by 7.48 GiB (all of it splits: embedding,
    attention, MLP, lm_head) and each GPU keeps 4 of the 8 KV heads, so a block holds half the bytes."""
    sc = pv.predict(cal, {"tensor_parallel_size": 2})
    note = next(n for n in sc.notes if n.startswith("TP 1 → 2"))
    assert "shrink by 7.48 GiB" in note and "4,096 to 2,048 B" in note
    expected = int((51.63 + 7.48) * 2**30 // (2_162_688 // 2)) * 16
    assert abs(sc.kv_tokens_low - expected) <= 0.001 * expected
    assert sc.approximate and sc.flags == ["--tensor-parallel-size 2"]


def test_tp_change_keeps_a_fixed_kv_size(cal):
    """--kv-cache-memory-bytes fixes K: a TP change then only re-sizes the block (half the KV heads)."""
    sc = pv.predict(cal, {"tensor_parallel_size": 2, "kv_cache_memory_bytes": "4G"})
    assert sc.kv_tokens_low == (4 * 2**30 // (2_162_688 // 2)) * 16


def test_tp_change_that_leaves_no_kv_says_so(cal):
    from dataclasses import replace

    tiny = replace(cal, kv_low_bytes=float(2**30), kv_high_bytes=float(2**30))  # 1 GiB: TP 2 → 1 adds 7.48 GiB
    sc = pv.predict(replace(tiny, tp=2), {"tensor_parallel_size": 1})
    assert sc.kv_tokens_high == 0 and sc.risk == "high"
    assert any("No available memory for the cache blocks" in n for n in sc.notes)
