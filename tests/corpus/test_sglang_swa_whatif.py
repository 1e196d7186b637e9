"""SGLang's swa_full_tokens_ratio on real sliding-window hybrids: the same memory re-split between the
full-attention and the sliding-window pool (the log's two pool lines give each token's cost)."""

from __future__ import annotations

import pytest

from kvscope.api import analyze
from kvscope.engines.sglang import whatif, whatif_swa
from kvscope.engines.whatif_base import PredictionError
from tests.conftest import FIXTURES

GPT_OSS = FIXTURES / "harvested" / "sglang" / "101-gptoss120b-rtxpro6000-tp1-swa-pr19718" / "log.txt"


def _startup():
    return analyze([str(GPT_OSS)]).startups[-1]


def test_the_logged_ratio_gives_back_the_logged_pools():
    cal = whatif_swa.calibrate(_startup())
    assert cal.full_tokens == 318_715 and cal.swa_tokens == 254_972 and cal.ratio == pytest.approx(0.8, abs=1e-4)
    sc = whatif_swa.predict(cal, cal.ratio)
    assert sc.kv_tokens_low <= cal.full_tokens <= sc.kv_tokens_high


def test_another_ratio_re_splits_the_same_memory():
    cal = whatif_swa.calibrate(_startup())
    for ratio in (0.5, 1.0):
        sc = whatif_swa.predict(cal, ratio)
        full = sc.kv_tokens
        memory = full * cal.full_bytes + full * ratio * cal.swa_bytes
        assert memory == pytest.approx((cal.full_gib + cal.swa_gib) * (1 << 30), rel=2e-4)
    assert whatif_swa.predict(cal, 0.5).kv_tokens > cal.full_tokens > whatif_swa.predict(cal, 1.0).kv_tokens


def test_through_whatif_and_alone():
    pred = whatif.build_prediction(_startup(), {"swa_ratio": 0.5}, None, None)
    assert pred["requested"]["flags"] == ["--swa-full-tokens-ratio 0.5"]
    assert "sliding-window pool 254,972 →" in pred["requested"]["notes"][0]
    with pytest.raises(PredictionError, match="on its own"):
        whatif.build_prediction(_startup(), {"swa_full_tokens_ratio": 0.5, "mem_fraction_static": 0.9}, None, None)
