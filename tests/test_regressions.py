"""Crashes the mutation corpus and the property tests found, each reduced to the real log lines that
triggered it (the mangled number or prefix is the only change), kept so they stay fixed.

Each entry: the lines, and where the crash was. Every one must give contract-valid JSON, exit 0 or 2.
"""

from __future__ import annotations

import pytest

from kvscope.engines.base import to_float, to_int
from tests.test_properties_contract import assert_valid, explain_json

ONES = "1" * 400

CRASHES = {
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
    # llamacpp/004: "n_ctx = 1e308" → int(inf) in the q8_0 suggestion (findings/llamacpp.py).
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
    # sglang/056: an unreadable "profiled value" left None in a finding's f"{:,}" (findings/sglang.py).
    "sglang-profiled-value-unreadable": [
        "[2025-12-26 -1:03:09] max_total_tokens=100000 is larger than the profiled value "
        "9999999999999999999999999999999999999999. Use the profiled value instead.",
        "Feb 28 12:26:11 host python3[1]: Feb 28 12:26:11 host python3[1]: [2025-12-26 20:03:09] KV Cache is "
        "allocated. #tokens: 23063, K size: 2.73 GB, V size: 2.73 GB",
    ],
    # llamacpp/011: only a torch OOM line left (the engine's lines cut away) made a startup of
    # engine "common", which the contract does not allow (ledger/assemble.py).
    "only-an-engine-neutral-oom-line": [
        "iled: out of memory",
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
    assert doc["startups"][0]["capacity"]["kv_tokens"] == 834615


@pytest.mark.parametrize("text", ["1e308", "-1e308", "1e999", "nan", "inf", ONES, "1,000,000,000,000,000,000"])
def test_implausible_numbers_read_as_unknown(text):
    assert to_float(text) is None and to_int(text) is None


@pytest.mark.parametrize("text, value", [("159277", 159277), ("10.42", 10.42), ("1,000", 1000), ("-0.5", -0.5)])
def test_real_numbers_still_read(text, value):
    assert to_float(text) == value
