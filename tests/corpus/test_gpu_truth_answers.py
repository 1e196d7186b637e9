"""The answer to each failure provoked on the H200 (tests/fixtures/gpu, vLLM 0.26.0, causes known) is the move an
expert would make, with an amount that works against the truth: the device total the run really had (meta.json's
engine_total_gib, which the failed logs mostly do not print) makes the suggested utilization hold one max_model_len
request, and the smallest such step; a model whose weights fill the GPU is split over more GPUs or made fp8."""

from __future__ import annotations

import json
import math

import pytest

from kvscope.api import analyze
from tests.conftest import FIXTURES

GPU = FIXTURES / "gpu"
# run → (flag of the primary move, its target, the contract's failure kind); why each is the expert's answer:
EXPECTED = {
    # Llama-3.1-405B: 756 GiB of bf16 weights; fp8 fits 4 H200s, bf16 needs 8 (TP must divide its 128 heads, and at
    # TP 4 each GPU would hold 189 GiB): the move needing the fewest GPUs first
    "037-": ("--quantization", "fp8", "weights-oom"),
    # Llama-3.1-70B: 131.45 GiB of weights on a 139.8 GiB GPU; even at 0.97 a 131,072-token request does not fit;
    # fp8 weights (~68 GiB) fit this one GPU, bf16 needs two
    "038-": ("--quantization", "fp8", "not-enough-memory"),
    # the utilization itself was too low: sized to hold one request, on the GPU the log's budget equation implies
    "034-": ("--gpu-memory-utilization", 0.26, "not-enough-memory"),
    "027-": ("--gpu-memory-utilization", None, "not-enough-memory"),
    # another process held 24 / 40 GiB: at most what was free
    "013-": ("--gpu-memory-utilization", 0.81, "multi-instance-contention"),
    "036-": ("--gpu-memory-utilization", 0.69, "multi-instance-contention"),
    # the pool exists but one max_model_len request does not fit: the same memory, a shorter context
    "012-": ("--max-model-len", 89_728, "max-len-too-large"),
    "029-": ("--max-model-len", 21_184, "max-len-too-large"),
    # a hybrid model at 0.7: vLLM's own check (one Mamba cache block per decode sequence) stops it; the answer's
    # max_num_seqs is the block count, and run 046 started with exactly that (698,792 tokens)
    "043-": ("--max-num-seqs", 891, "not-enough-memory"),
}


def _case(prefix: str):
    found = sorted(GPU.glob(f"{prefix}*"))
    if not found:
        pytest.skip(f"no truth run {prefix}*")
    d = found[0]
    meta = json.loads((d / "meta.json").read_text())
    return d, meta, analyze([str(d / "log.txt")], model=str(d / "config.json")).startups[-1]


@pytest.mark.parametrize("prefix", sorted(EXPECTED))
def test_each_provoked_failure_gets_the_experts_move(prefix):
    _, _, s = _case(prefix)
    flag, to, kind = EXPECTED[prefix]
    assert s.failure is not None and s.failure.kind == kind
    assert s.answer is not None and s.answer.suggestion is not None, s.answer
    assert s.answer.suggestion.flag == flag, s.answer.suggestion
    if to is not None:
        assert s.answer.suggestion.to_value == to, s.answer.suggestion


@pytest.mark.parametrize("prefix,bytes_per_token", [("027-", 131_072), ("034-", 31_104)])
def test_a_sized_utilization_holds_one_request_on_the_real_gpu(prefix, bytes_per_token):
    """K = T × u − (weights + activation + non-torch) holds for the failed run: with the real total, the suggested
    utilization gives at least one max_model_len request, and (where the log's figures pin the card) the step
    below it does not."""
    _, meta, s = _case(prefix)
    total = meta["observed"].get("engine_total_gib") or 139.8  # torch's total on the H200 (every truth run)
    k = meta["observed"]["available_kv_gib"]
    u = meta["settings"]["llm_kwargs"]["gpu_memory_utilization"]
    m = meta["observed"]["max_model_len"]
    need = math.ceil(m / 16) * 16 * bytes_per_token / 2**30
    to = s.answer.suggestion.to_value
    assert k + (to - u) * total >= need, (to, k, need)
    if "139.8" in s.answer.suggestion.note:  # sized on the H200 itself: the smallest step that works
        assert k + (to - 0.01 - u) * total < need, (to, k, need)


def test_a_split_leaves_room_the_log_can_check():
    """038 printed its K (-9.32 GiB): TP 2 moves it by the weights each GPU sheds (131.45 → 65.71 GiB, both config
    estimates of the same checkpoint) less NCCL's buffers, and a token's KV per GPU halves with the 8 KV heads."""
    _, _, s = _case("038-")
    fp8 = s.answer.suggestion
    assert fp8.to_value == "fp8" and "on this GPU" in fp8.note  # ~68 GiB of fp8 weights fit one GPU
    (split,) = [a for a in fp8.alternatives if a.flag == "--tensor-parallel-size"]
    per_gpu_kv_gib = -9.32 + (131.45 - 65.71) - 0.5
    assert split.to_value == 2
    assert split.kv_tokens_after == pytest.approx(per_gpu_kv_gib * 2**30 / (80 * 4 * 128 * 2 * 2), rel=0.01)


def test_the_405b_split_is_the_smallest_that_divides_its_heads():
    _, _, s = _case("037-")
    (split,) = [a for a in s.answer.suggestion.alternatives if a.flag == "--tensor-parallel-size"]
    assert split.to_value == 8 and "at --tensor-parallel-size 4" in s.answer.suggestion.note


def test_the_mamba_block_answer_started_on_the_device():
    """043's move (--max-num-seqs 891, the Mamba cache blocks its memory held) is what run 046 launched with, at the
    same utilization: it reached its pool and a ready engine."""
    _, meta_failed, failed = _case("043-")
    _, meta, started = _case("046-")
    assert failed.answer is not None and failed.answer.suggestion is not None
    assert meta["settings"]["llm_kwargs"]["max_num_seqs"] == failed.answer.suggestion.to_value
    assert meta["settings"]["llm_kwargs"]["gpu_memory_utilization"] == \
        meta_failed["settings"]["llm_kwargs"]["gpu_memory_utilization"]
    assert started.failure is None and started.capacity.kv_tokens == meta["observed"]["kv_tokens"]

