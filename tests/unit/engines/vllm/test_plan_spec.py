"""``kvscope plan --engine vllm`` with speculative decoding: draft KV layers and draft weights."""

from __future__ import annotations

import pytest

from kvscope.analysis.plan import PlanRequest, plan
from kvscope.core.errors import InputError

pytest.importorskip("kvscope.engines.vllm.rules")

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
LOGGED_KV = {"max_model_len": 131_072, "kv_cache_memory_bytes": int(51.63 * 2**30)}  # vllm-memory.md §6.1


def _llama(**settings):
    return plan(PlanRequest(model=LLAMA, gpu="H100", engine="vllm", engine_version="0.9.2",
                            settings={**LOGGED_KV, **settings}))


def test_eagle_plan_reproduces_the_section_6_1_log():
    """Llama-3.1-8B + EAGLE on an H100 (vLLM issue #19996): 51.63 GiB → 410,128 tokens, 3.13x at 131,072."""
    p = _llama(speculative_config='{"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", '
                                  '"num_speculative_tokens": 3}')
    assert p["kv"]["num_gpu_blocks"] == 25_633
    assert p["capacity"]["kv_tokens"] == 410_128 and f"{p['capacity']['max_concurrency']:.2f}" == "3.13"
    spec = p["kv"]["speculative"]
    assert spec["draft_kv_layers"] == 1 and spec["draft_bytes_per_token"] == 4096 and spec["method"] == "eagle"
    assert spec["num_speculative_tokens"] == 3
    assert "+ 1 draft layer(s) × 4,096 B (eagle)" in p["kv"]["formula"]
    assert p["settings"]["draft KV layers"]["value"] == 1
    # without the head the same memory gives the §6.1 step-1 figures
    plain = _llama()
    assert plain["capacity"]["kv_tokens"] == 422_944 and "speculative" not in plain["kv"]


def test_draft_weights_come_out_of_the_budget():
    """Unpinned, the head's weights (assumed: one target-shaped bf16 layer + fc) shrink K by that much."""
    base = plan(PlanRequest(model=LLAMA, gpu="H100", engine="vllm", engine_version="0.9.2"))
    eagle = plan(PlanRequest(model=LLAMA, gpu="H100", engine="vllm", engine_version="0.9.2",
                             settings={"speculative_config": {"method": "eagle", "num_speculative_tokens": 3}}))
    draft_gib = eagle["kv"]["speculative"]["draft_weights_gib"]
    assert 0.4 < draft_gib < 0.55
    assert base["kv"]["available_kv_gib"] - eagle["kv"]["available_kv_gib"] == pytest.approx(draft_gib)
    assert any(r["item"].startswith("draft weights (eagle") for r in eagle["ledger"])
    assert any("EAGLE head assumed to be 1 decoder layer" in w for w in eagle["warnings"])
    given = plan(PlanRequest(model=LLAMA, gpu="H100", engine="vllm", engine_version="0.9.2",
                             settings={"speculative_config": {"method": "eagle"}, "draft_weights_gib": 1.0}))
    assert given["kv"]["speculative"]["draft_weights_gib"] == 1.0


def test_eagle3_draft_from_the_catalog():
    """A catalog EAGLE-3 head: its layer count and KV shape from its config, method inferred from it."""
    p = _llama(speculative_config={"model": "specforge-config:llama3-8B-eagle3", "num_speculative_tokens": 3})
    spec = p["kv"]["speculative"]
    assert spec["method"] == "eagle3" and spec["draft_kv_layers"] == 1
    assert spec["draft_kv_layers_from"].startswith("draft config")
    assert p["capacity"]["kv_tokens"] == 410_128  # same shape as the target's layers: the §6.1 count again


def test_ngram_adds_nothing():
    for spec in ('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}',
                 {"method": "suffix"}):
        p = _llama(speculative_config=spec)
        assert p["capacity"]["kv_tokens"] == 422_944
        assert p["kv"]["speculative"]["draft_kv_layers"] == 0 and p["kv"]["speculative"]["draft_weights_gib"] == 0
        assert not any(r["item"].startswith("draft weights") for r in p["ledger"])


def test_short_keys_and_bad_values():
    p = _llama(speculative_method="eagle", num_speculative_tokens=2)
    assert p["capacity"]["kv_tokens"] == 410_128 and p["kv"]["speculative"]["num_speculative_tokens"] == 2
    assert "speculative" not in _llama(speculative_config="none")["kv"]
    with pytest.raises(InputError):
        _llama(speculative_config="{not json")
    with pytest.raises(InputError):
        _llama(speculative_config={"method": "draft_model", "model": "no/such-draft"})


def test_mtp_adds_the_models_nextn_layers():
    """DeepSeek-V3 (num_nextn_predict_layers 1): one more MLA layer per block, plus the MTP layer's weights."""
    kw = dict(model="deepseek-ai/DeepSeek-V3", gpu="H200", tp=8, engine="vllm", engine_version="0.24.0")
    pinned = {"kv_cache_memory_bytes": 40 * 2**30}
    base = plan(PlanRequest(**kw, settings=pinned))
    mtp = plan(PlanRequest(**kw, settings={**pinned, "speculative_config": {"method": "deepseek_mtp"}}))
    spec = mtp["kv"]["speculative"]
    assert spec["draft_kv_layers"] == 1 and spec["draft_bytes_per_token_per_layer"] == 1152
    assert spec["num_speculative_tokens"] == 1  # n_predict
    block = 64 * 1152
    assert base["kv"]["num_gpu_blocks"] == 40 * 2**30 // (block * 61)
    assert mtp["kv"]["num_gpu_blocks"] == 40 * 2**30 // (block * 62)
    unpinned = plan(PlanRequest(**kw, settings={"speculative_config": '{"method": "mtp"}'}))
    assert unpinned["kv"]["speculative"]["draft_weights_gib"] > 1.0


def test_mtp_on_a_hybrid_gdn_model_joins_the_attention_group():
    """Qwen3.6 (mtp_num_hidden_layers 1): 10 + 1 attention layers, so groups of 11 and a larger page."""
    settings = {"kv_cache_dtype": "fp8", "enable_prefix_caching": True, "max_model_len": 131_072,
                "kv_cache_memory_bytes": int(5.98 * 2**30), "speculative_config": {"method": "mtp",
                                                                                 "num_speculative_tokens": 1}}
    p = plan(PlanRequest(model="nvidia/Qwen3.6-35B-A3B-NVFP4", gpu="RTX 5090", engine="vllm",
                         engine_version="0.24.0", settings=settings))
    assert p["kv"]["speculative"]["draft_kv_layers"] == 1
    assert p["kv"]["hybrid"]["group_size"] == 11
    assert p["capacity"]["kv_tokens"] < 567_978  # the log's figure without MTP


def test_eagle_on_gpt_oss_pads_the_sliding_group_instead_of_doubling_the_full_groups():
    """18 sliding + 19 full (with the head) → two groups of 19 (vLLM's 1.5× rule), not three of 18."""
    kw = dict(model="openai/gpt-oss-120b", gpu="H200", engine="vllm")
    pinned = {"kv_cache_memory_bytes": 40 * 2**30}
    base = plan(PlanRequest(**kw, settings=pinned))
    eagle = plan(PlanRequest(**kw, settings={**pinned, "speculative_config": {
        "model": "specforge-config:gpt-oss-120B-eagle3", "num_speculative_tokens": 3}}))
    assert eagle["kv"]["speculative"]["draft_kv_layers"] == 1
    ratio = eagle["kv"]["num_gpu_blocks"] / base["kv"]["num_gpu_blocks"]
    assert ratio == pytest.approx(18 / 19, abs=1e-3)


def _eagle3_on_h200(**settings):
    spec = {"method": "eagle3", "model": "specforge-config:llama3-8B-eagle3", "num_speculative_tokens": 3}
    return plan(PlanRequest(model=LLAMA, gpu="H200", engine="vllm", engine_version="0.26.0",
                            settings={"offline": True, "speculative_config": spec, **settings}))


def test_dummy_weights_make_an_eagle3_head_share_the_lm_head():
    """vLLM shares what the checkpoint does not bring (process_eagle_weight sets has_own_lm_head per loaded
    tensor); dummy weights load none, so the head's 32,000-row lm_head is the target's: 32,000 × 4,096 × 2 B less."""
    real, dummy = _eagle3_on_h200(), _eagle3_on_h200(load_format="dummy")
    saved = real["kv"]["speculative"]["draft_weights_gib"] - dummy["kv"]["speculative"]["draft_weights_gib"]
    assert saved * 2**30 == pytest.approx(32_000 * 4_096 * 2)
    assert "lm_head shared" in dummy["kv"]["speculative"]["draft_weights_from"]
    # the first layer's qkv_proj reads 2 × hidden: one decoder layer + fc 3h→h + that extra hidden of inputs
    layer = 2 * 4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336 + 3 * 4096 * 4096  # qkv, o, MLP, fc (truth 035: 0.55)
    assert dummy["kv"]["speculative"]["draft_weights_gib"] * 2**30 == pytest.approx(layer * 2, rel=1e-4)


def test_the_drafters_prefill_raises_the_profile_peak_by_the_hidden_states_kept_alive():
    """V2's _dummy_run keeps three aux hidden states, the last hidden state and the fc output while the head runs
    over the same 16,384 tokens; its residual is a view: 4 × 16,384 × 4,096 × 2 B = 0.5 GiB over the target's."""
    with_head = _eagle3_on_h200(load_format="dummy")
    alone = plan(PlanRequest(model=LLAMA, gpu="H200", engine="vllm", engine_version="0.26.0",
                             settings={"offline": True}))

    def peak(p):
        return next(-r["gib"] for r in p["ledger"] if r["item"].startswith("activation peak"))

    assert (peak(with_head) - peak(alone)) * 2**30 == pytest.approx(4 * 16_384 * 4_096 * 2)
    assert any("the drafter's prefill 0.50 GiB" in r["item"] for r in with_head["ledger"])


@pytest.mark.parametrize("limits,text_only", [
    ({"image": 0, "video": 0}, True),
    ({"image": 0, "video": {"count": 0, "num_frames": 8}}, True),  # vLLM takes a dict per modality too
    ({"image": 0}, False),  # video left at vLLM's default (999): the tower still serves it
    ({}, False),
])
def test_text_only_needs_every_modality_the_tower_serves_off(limits, text_only):
    from kvscope.engines.vllm.plan import vllm_text_only

    assert vllm_text_only({"limit_mm_per_prompt": limits}) is text_only
    from tests.conftest import FIXTURES

    config = FIXTURES / "gpu" / "041-qwen35-27b-util090-textonly" / "config.json"  # the published one, vision_config in
    if not config.is_file():
        pytest.skip("no Qwen3.5-27B truth run here")
    p = plan(PlanRequest(model=str(config), gpu="H200", engine="vllm", engine_version="0.26.0",
                         settings={"limit_mm_per_prompt": limits}))
    assert ("vision" in p["weights"]["by_component_gib"]) is not text_only
