"""TensorRT-LLM's whatif on real logs: the KV cache manager's rule (fraction × free ÷ bytes per token, capped,
whole blocks) replayed from the logged pool."""

from __future__ import annotations

import pytest

from kvscope.api import analyze
from kvscope.engines.trtllm import whatif
from kvscope.engines.whatif_base import PredictionError
from tests.conftest import FIXTURES

TRT = FIXTURES / "harvested" / "trtllm"


def _startup(prefix: str):
    (case,) = TRT.glob(f"{prefix}-*")
    return analyze([str(case / "log.txt")]).startups[-1]


def test_the_logged_fraction_gives_back_the_logged_pool():
    """Re-sizing at the fraction it ran with lands on the logged tokens: the block rounding is the engine's."""
    cal = whatif.calibrate(_startup("207"))
    sc = whatif.predict(cal, {"kv_cache_free_gpu_mem_fraction": cal.fraction})
    assert sc.kv_tokens_low <= cal.tokens <= sc.kv_tokens_high
    assert whatif.predict(cal, {}).kv_tokens == cal.tokens


def test_a_token_cap_is_whole_blocks_and_a_lower_fraction_scales_the_budget():
    cal = whatif.calibrate(_startup("207"))
    capped = whatif.predict(cal, {"max_tokens": 100_000})
    assert capped.kv_tokens_low == capped.kv_tokens_high == -(-100_000 // cal.tokens_per_block) * cal.tokens_per_block
    lower = whatif.predict(cal, {"fraction": cal.fraction / 2})
    assert lower.kv_tokens == pytest.approx(cal.tokens / 2, rel=0.01)
    assert whatif.predict(cal, {"max_seq_len": 2049}).kv_tokens == cal.tokens  # what fits, not the pool, changes


def test_a_capped_pool_without_its_free_memory_cannot_be_resized():
    cal = whatif.calibrate(_startup("310"))
    with pytest.raises(PredictionError, match="max_tokens_in_paged_kv_cache"):
        whatif.predict(cal, {"kv_cache_free_gpu_mem_fraction": 0.5})
