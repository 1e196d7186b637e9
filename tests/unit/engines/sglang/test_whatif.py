"""Calibrated what-if on the founding case (issue #3 done-means)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvscope.api import analyze
from kvscope.engines.sglang.whatif import PredictionError, calibrate, predict
from kvscope.examples import example_path
from tests.conftest import FIXTURES


@pytest.fixture(scope="module")
def cal():
    ex, path = example_path("kimi-k2.5-tp8")
    return calibrate(analyze([path], ex.assumptions).startups[0])


def test_mfs_092_about_216700(cal):
    sc = predict(cal, {"mem_fraction_static": 0.92})
    assert sc.kv_tokens_high - sc.kv_tokens_low <= 300  # ±150
    assert abs(sc.kv_tokens - 216_700) <= 150
    assert sc.risk in ("tight", "low", "high")  # priced against the 7.9 GiB the operator saw at ready
    assert sc.flags == ["--mem-fraction-static 0.92"]


def test_fp8_doubles(cal):
    sc = predict(cal, {"kv_cache_dtype": "fp8_e4m3"})
    assert sc.kv_tokens_low in (2 * 159_277, 2 * 159_277 + 1)  # 70,272 → 35,136 B/token


def test_hicache_ratio_4_against_host_ram(cal):
    sc = predict(cal, {"hicache_ratio": 4}, host_ram_gb=396)
    h = sc.host
    # ≈ 8 ranks × 4 × 10.42 GiB (MLA: every TP rank mirrors the latent cache)
    assert abs(h["total_gb"] - 8 * 4 * 10.42 * 2**30 / 1e9) < 2
    assert h["replicated"] is True
    assert h["fits"] is True and 30 < h["margin_gb"] < 45
    assert sc.flags[0] == "--enable-hierarchical-cache"


def test_dp_attention_node_capacity(cal):
    """Each rank's pool serves only its own requests (node = 8 × per GPU), but every GPU then holds
    Kimi-K2.5's whole bf16 attention, input embedding and vision attention: +11.5 GiB per GPU, more than
    the 10.42 GiB pool. At 0.88 no pool fits (SGLang would stop); from ~0.892 it does, at 0.93 ≈ 55k per GPU."""
    sc = predict(cal, {"enable_dp_attention": True})
    assert sc.kv_tokens_high == 0 and sc.risk == "high"
    assert any("grow by 11.53 GiB" in n for n in sc.notes)
    assert any("a pool starts above 0.892" in n for n in sc.notes)
    assert sc.approximate and "--dp-size 8" in sc.flags
    roomier = predict(cal, {"enable_dp_attention": True, "mem_fraction_static": 0.93})
    assert 54_500 < roomier.kv_tokens_low < 55_500
    assert roomier.node_kv_tokens_low == 8 * roomier.kv_tokens_low


def test_tp_change_uses_the_config_for_replicated_parts(cal):
    """TP 8 → 16 halves the split weights only: MLA's down-projections and norms stay whole."""
    sc = predict(cal, {"tp_size": 16})
    note = next(n for n in sc.notes if n.startswith("TP 8 → 16"))
    assert "shrink by 34.54 GiB" in note and 34.54 < 72.36 / 2  # (vision attention splits 16 ways too)


def test_unknown_setting_is_a_usage_error(cal):
    with pytest.raises(PredictionError):
        predict(cal, {"warp_drive": 9})


def test_cli_json_prediction():
    out = subprocess.run([sys.executable, "-m", "kvscope", "whatif", "--example", "kimi-k2.5-tp8",
                          "--set", "mem_fraction_static=0.92", "--format", "json"], capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout)
    assert doc["schema"] == "kvscope.explain/1"
    req = doc["prediction"]["requested"]
    assert abs(req["kv_tokens"] - 216_700) <= 150


def test_cli_bad_set_exit_2():
    out = subprocess.run([sys.executable, "-m", "kvscope", "whatif", "--example", "kimi-k2.5-tp8", "--set", "nope=1"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr


def test_a_dp_attention_log_keeps_dp_attention():
    """A run logged with DP attention (DeepSeek-V3.2 on 8×B200, 'DP0 TP0' rank labels) stays one:
    the as-logged row is the log's own pool, and a change elsewhere does not re-shard attention."""
    from tests.conftest import case_dir

    log = case_dir("sglang", "026") / "log.txt"
    s = analyze([str(log)], {"model": "deepseek-ai/DeepSeek-V3.2-Exp", "mem_fraction_static": 0.8, "tp_size": 8,
                             "dp_size": 8, "enable_dp_attention": True}).startups[0]
    c = calibrate(s)
    assert c.attn_tp == 1
    base = predict(c, {})
    assert base.kv_tokens_low == 975_424 and base.node_kv_tokens_low == 8 * 975_424
    assert not any("attention TP" in n for n in predict(c, {"mem_fraction_static": 0.82}).notes)


@pytest.mark.parametrize("changes", [{"enable_dp_attention": True, "dp_size": 3},
                                     {"enable_dp_attention": True, "dp_size": 16}, {"tp_size": 0}])
def test_impossible_parallelism_is_a_usage_error(cal, changes):
    with pytest.raises(PredictionError):
        predict(cal, changes)


def test_unknown_model_leaves_the_tp_change_unpriced(cal):
    from dataclasses import replace

    sc = predict(replace(cal, model="acme/not-a-model"), {"enable_dp_attention": True})
    assert sc.risk == "unknown" and any("not in the catalog" in n for n in sc.notes)


def test_dsv4_whatif_calibrates_on_the_sizing_line():
    """DeepSeek-V4: tokens = floor₂₅₆((budget − fixed states) / bytes per full token). +0.01
    mem_fraction_static adds F × 0.01 to the budget; 64 request slots keep 8,576 of 33,152 state rows."""
    from kvscope.api import analyze
    from kvscope.engines.sglang import whatif_dsv4 as p4

    path = FIXTURES / "dsv4" / "constructed-sglang-v4pro-8xh200-startup.log"
    cal = p4.calibrate(analyze([str(path)]).startups[0])
    assert cal.tokens == 81_664 and cal.slots == 256 and cal.mfs == 0.95 and cal.pre_load_free_gib == 137.27
    base = p4.predict(cal, {})
    assert base.kv_tokens_low == base.kv_tokens_high == 81_664
    up = p4.predict(cal, {"mem_fraction_static": 0.96})
    expected = int((0.8365 + 1.3727) * 2**30 / 10993.84) // 256 * 256
    assert abs(up.kv_tokens_low - expected) <= 512
    slots = p4.predict(cal, {"max_running_requests": 64})
    freed = 3.92 * (1 - 8576 / 33152)
    assert slots.kv_tokens_low == pytest.approx(81_664 + freed * 2**30 / 10993.84, abs=600)
    assert p4.predict(cal, {"mem_fraction_static": 0.93}).risk == "high"  # the fixed states no longer fit
    with pytest.raises(PredictionError):
        p4.predict(cal, {"kv_cache_dtype": "bf16"})
    with pytest.raises(PredictionError):
        p4.predict(cal, {"max_running_requests": 0})


def test_dsv4_whatif_on_real_lines_says_what_the_log_lacks():
    """The four real lines (no ready line): slots and the pre-load basis are unknown, and whatif says so."""
    path = FIXTURES / "dsv4" / "sglang-0.5.15-v4pro-mi355x-sizing-lines.txt"
    out = subprocess.run([sys.executable, "-m", "kvscope", "whatif", str(path), "--set", "max_running_requests=32"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "max_running_requests" in out.stderr
    capped = subprocess.run([sys.executable, "-m", "kvscope", "whatif", str(path), "--set", "max_total_tokens=1000000",
                             "--format", "json"], capture_output=True, text=True, timeout=120)
    assert capped.returncode == 0, capped.stderr
    import json

    req = json.loads(capped.stdout)["prediction"]["requested"]
    assert req["kv_tokens_low"] == req["kv_tokens_high"] == 999_936  # capped, floored to the 256-token page
