"""Crashes the mutation corpus and the property tests found, each reduced to the real log lines that
triggered it (the mangled number or prefix is the only change), kept so they stay fixed.

Each entry: the lines, and where the crash was. Every one must give contract-valid JSON, exit 0 or 2.
"""

from __future__ import annotations

import pytest

from kvscope.engines.base import to_float, to_int
from tests.properties.test_contract import assert_valid, explain_json

ONES = "1" * 400

CRASHES = {
    # trtllm (a real Triton line, its beam width mangled past what to_int believes): the unknown factor was
    # multiplied into the tokens one sequence needs, a TypeError out of the reader (engines/trtllm/lines.py)
    "trtllm-too-small-implausible-factor": [
        "E0306 16:40:07.708802 117 backend_model.cc:691] ERROR: Failed to create instance: unexpected error when "
        "creating modelInstanceState: maxTokensInPagedKvCache (29184) must be large enough to process at least 1 "
        "sequence to completion (i.e. must be larger than beam_width (99999999999999999999) * tokensPerBlock (128) * "
        "maxBlocksPerSeq (272))",
    ],
    # llamacpp (a real llama_kv_cache line, its stream count mangled past MAX_PLAUSIBLE): the count read as
    # unknown (None) was multiplied by the cells, a TypeError out of parse_lines (engines/llamacpp/lines.py)
    "llamacpp-kv-streams-implausible": [
        "llama_kv_cache: size =  768.00 MiB ( 32768 cells,  12 layers,  4/9999999999999999 seqs), K (f16):  384.00 MiB, "
        "V (f16):  384.00 MiB",
    ],
    # vllm/054: a number of "-1e308 GiB needed" overflowed to inf in the printed-consistency check
    # (engines/vllm/finish.py, OverflowError). Fixed at the root: to_float rejects implausible numbers.
    "vllm-needed-gib-1e308": [
        "To serve at least one request with the models's max seq len (32768), (-1e308 GiB KV cache is needed, "
        "which is larger than the available KV cache memory (3.58 GiB). Based on the available memory, the "
        "estimated maximum model length is 26032\r",
    ],
    # vllm/030: "Available KV cache memory: 1e308 GiB" → inf tokens → int(inf) (engines/vllm/finish.py).
    "vllm-available-kv-1e308": [
        "INFO 18446744073709551617-NaN 0.0000000001:-1e308:--5 [gpu_worker.py:1,000,000] Available KV cache "
        "memory: 1e308 GiB",
        "6:08:46 [kv_cache_utils.py:1305] GPU KV cache size: 175,856 token",
        "s",
    ],
    # sglang/012: "V size: -1e308 GB" → K + V = -inf → int(-inf) in the reconciliation (engines/sglang/finish.py).
    "sglang-v-size-1e308": [
        "[2025-03-27 21:33:31 TP0] KV Cache is allocated. #tokens: 834615, K size: 54.12 GB, V size: -1e308 GB",
    ],
    # llamacpp/004: "n_ctx = 1e308" → int(inf) in the q8_0 suggestion (engines/llamacpp/findings.py).
    "llamacpp-n-ctx-1e308": [
        "llama_new_context_with_model: n_ctx      = 1e308",
        "llama_new_context_with_model: KV self size  =  160.00 MiB, K (f16):   80.00 MiB, V (f16):   80.00 MiB",
    ],
    # llamacpp/004: a 400-digit n_ctx, kept as text, became a 400-digit int, then float() overflowed
    # (engines/llamacpp/finish.py _int).
    "llamacpp-n-ctx-400-digits": [
        "." * 93 + "llama_new_context_with_model: n_ctx      = " + ONES,
        "llama_new_context_with_model: KV self size  =  160.00 MiB, K (f16):   80.00 MiB, V (f16):   80.00 MiB",
    ],
    # trtllm/005: a 400-digit TP rank became world_size_seen, then float() overflowed (engines/trtllm/lines.py).
    "trtllm-rank-400-digits": [
        "[TensorRT-LLM][INFO] TP group is intra-node for rank " + ONES,
    ],
    # sglang/056: an unreadable "profiled value" left None in a finding's f"{:,}" (engines/sglang/findings.py).
    "sglang-profiled-value-unreadable": [
        "[2025-12-26 -1:03:09] max_total_tokens=100000 is larger than the profiled value "
        "9999999999999999999999999999999999999999. Use the profiled value instead.",
        "Feb 28 12:26:11 host python3[1]: Feb 28 12:26:11 host python3[1]: [2025-12-26 20:03:09] KV Cache is "
        "allocated. #tokens: 23063, K size: 2.73 GB, V size: 2.73 GB",
    ],
    # vllm/003: "total_gpu_memory=0x10GiB" read as a 0 GiB device, then ΔU = need / total divided by
    # zero in the utilization suggestion (engines/vllm/findings.py, engines/vllm/rules.py).
    "vllm-total-gpu-memory-zero": [
        "Memory profiling results: total_gpu_memory=0x10GiB initial_memory_usage=15.34GiB peak_torch_memory=17.98GiB "
        "memory_usage_post_profile=15.35GiB non_torch_memory=0.35GiB kv_cache_size=2.89GiB gpu_memory_utilization=0.90",
        "The model's max seq len (29000) is larger than the maximum number of tokens that can be stored in KV cache "
        "(23648). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
    ],
    # vllm/048: a 400-digit --kv-cache-memory suggestion became an int no float holds (engines/vllm/findings.py).
    "vllm-kv-cache-memory-400-digits": [
        "Free memory on device (177.66/178.36 GiB) on startup. Desired GPU memory utilization is (0.9, 160.53 GiB). "
        "Actual usage is 8.58 GiB for weight, 9.96 GiB for peak activation, 0.07 GiB for non-torch memory, and 0.65 "
        "GiB for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=" + ONES + "` to fit "
        "into requested memory, or `--kv-cache-memory=" + ONES + "` to fully utilize gpu memory.",
    ],
    # trtllm/008: a pool of "0 GiB" divided the half-cent tolerance by zero (engines/trtllm/finish.py).
    "trtllm-pool-zero-gib": [
        "[TensorRT-LLM][INFO] Memory usage when calculating max tokens in paged kv cache: total: 23.99 GiB, "
        "available: 12.22 GiB",
        "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 0 GiB for max tokens in paged KV cache (288384).",
    ],
    # trtllm/008: a pool of 1e-10 GiB rounds the implied fraction to 0, then tokens / 0 (engines/trtllm/findings.py).
    "trtllm-pool-tiny-gib": [
        "[TensorRT-LLM][INFO] Memory usage when calculating max tokens in paged kv cache: total: 23.99 GiB, "
        "available: 12.22 GiB",
        "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 0.0000000001 GiB for max tokens in paged KV cache (288384).",
    ],
    # llamacpp/011: only a torch OOM line left (the engine's lines cut away) made a startup of
    # engine "common", which the contract does not allow (ledger/assemble.py).
    "only-an-engine-neutral-oom-line": [
        "iled: out of memory",
    ],
    # vllm stats line (the property test's mangling of a real one): a 400-digit running count summed, then divided
    # into a float for the mean (runtime/summary.py, OverflowError). Fixed in runtime/stream.py: a count past
    # MAX_SERVING_COUNT (core/margins.py) drops the sample in both lanes, as a line whose numbers do not convert is dropped.
    "vllm-running-400-digits": [
        "INFO 04-08 10:01:02 [loggers.py:118] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation "
        f"throughput: 1.0 tokens/s, Running: {ONES} reqs, Waiting: 0 reqs, GPU KV cache usage: 5.0%, "
        "Prefix cache hit rate: 0.0%",
        "INFO 04-08 10:01:12 [loggers.py:118] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation "
        "throughput: 1.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 6.0%, "
        "Prefix cache hit rate: 0.0%",
    ],
}


@pytest.mark.parametrize("name", sorted(CRASHES))
def test_crash_stays_fixed(name, tmp_path):
    path = tmp_path / f"{name}.log"
    path.write_text("\n".join(CRASHES[name]) + "\n", encoding="utf-8")
    text, code = explain_json([str(path)])
    assert code in (0, 2)
    assert_valid(text)


def test_oom_line_before_an_engine_startup_is_not_a_startup_of_its_own(tmp_path):
    """The OOM of a run the input does not show is dropped; the engine startup after it is reported."""
    path = tmp_path / "log.txt"
    path.write_text("torch.OutOfMemoryError: CUDA out of memory.\n"
                    "[2025-03-27 21:33:31 TP0] KV Cache is allocated. #tokens: 834615, K size: 54.12 GB, "
                    "V size: 54.12 GB\n", encoding="utf-8")
    doc = assert_valid(explain_json([str(path)])[0])
    assert [s["engine"] for s in doc["startups"]] == ["sglang"]
    assert doc["startups"][0]["capacity"]["kv_tokens"] == 834615 and doc["startups"][0]["failure"] is None


@pytest.mark.parametrize("text", ["1e308", "-1e308", "1e999", "nan", "inf", ONES, "1,000,000,000,000,000,000",
                                  "١٥٩٢٧٧", "１２"])  # Arabic-Indic and fullwidth digits: no engine prints them
def test_implausible_numbers_read_as_unknown(text):
    assert to_float(text) is None and to_int(text) is None


@pytest.mark.parametrize("text, value", [("159277", 159277), ("10.42", 10.42), ("1,000", 1000), ("-0.5", -0.5)])
def test_real_numbers_still_read(text, value):
    assert to_float(text) == value


def test_a_mangled_count_drops_its_sample_only(tmp_path):
    path = tmp_path / "log.txt"
    path.write_text("\n".join(CRASHES["vllm-running-400-digits"]) + "\n", encoding="utf-8")
    doc = assert_valid(explain_json([str(path)])[0])
    runtime = doc["startups"][0]["runtime"]
    assert runtime["samples"] == 1 and runtime["running"]["peak"] == 3
