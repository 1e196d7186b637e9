"""Weight bytes per rank from config.json + quantization, checked against weights real logs printed."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.engines.sglang.rules import SGLANG_WEIGHTS
from kvscope.engines.vllm.rules import VLLM_WEIGHTS
from kvscope.model.planning import rope_cache_bytes
from kvscope.model.weights import (
    GIB,
    Parallel,
    Scheme,
    estimate_weights,
    load_model_config,
    quant_plan,
    rank_tensors,
    stage_layers,
)
from tests.conftest import case_dir


def est(model: str, **par):
    mc = load_model_config(model)
    assert mc is not None, model
    return estimate_weights(mc, Parallel(**par), rules=SGLANG_WEIGHTS)


def test_llama_8b_bf16_matches_vllm_model_loading_line_exactly():
    """vLLM logs torch-allocated bytes after loading: weights + the bf16 rope table (131072 × 128 × 2 B)."""
    mc = load_model_config("meta-llama/Llama-3.1-8B-Instruct")
    w = estimate_weights(mc, Parallel(), rules=VLLM_WEIGHTS)
    assert w.bytes_per_rank == 8_030_261_248 * 2
    total = (w.bytes_per_rank + rope_cache_bytes(mc.cfg, 2)) / GIB
    for case in ("002", "025"):
        text = (case_dir("vllm", case) / "log.txt").read_text()
        logged = float(re.search(r"(?:Loading model weights|Model loading) took ([\d.]+) Gi?B", text).group(1))
        assert total == pytest.approx(logged, abs=0.0002)


def test_kimi_k25_int4_tp8_load_replay_matches_the_logged_mem_usage():
    """Case study: 'Load weight end … mem usage=72.33 GB' per GPU (INT4 experts, bf16 attention, MoonViT).

    The parameters are 71.71 GiB (MoonViT's attention split over the 8 ranks as SGLang's VisionAttention
    does, its MLP whole); SGLang 0.5.9's DeepSeek rope keeps three fp32 tables (0.19 GiB); the caching
    allocator holds 0.39 GiB more: segment rounding, and the holes the WNA16 MoE's freed g_idx tensors
    and the rope's temporaries leave between live weights. Together 72.29.
    """
    from kvscope.engines.sglang.load_memory import sglang_load_memory
    from kvscope.model.weights import sglang_parallel

    meta = json.loads((case_dir("sglang", "000") / "meta.json").read_text())
    assert "72.33" in meta["notes"]
    mc = load_model_config("moonshotai/Kimi-K2.5")
    w = estimate_weights(mc, sglang_parallel(8), rules=SGLANG_WEIGHTS)
    assert w.quantization == "compressed-tensors int4 (group 32)"
    assert w.by_component["experts"] / GIB == pytest.approx(66.45, abs=0.01)
    assert 0.6 < w.by_component["vision"] / GIB < 0.7  # 0.88 whole; attention split 8 ways
    load = sglang_load_memory(mc.cfg, sglang_parallel(8), quant_plan(mc.cfg), (0, 5, 9))
    assert load.tensor_bytes - load.rope_bytes == w.bytes_per_rank
    assert load.rope_bytes == 3 * 262144 * 64 * 4
    assert load.reserved_bytes / GIB == pytest.approx(72.33, abs=0.06)
    older = sglang_load_memory(mc.cfg, sglang_parallel(8), quant_plan(mc.cfg), (0, 5, 6))
    assert older.rope_bytes == 262144 * 64 * 4  # before 0.5.7 the two extra tables were built on NPUs only


def test_sglang_load_replay_for_dense_and_moe_bf16():
    """sglang/031: Qwen3-30B-A3B bf16 TP4 logged mem usage 14.31 GiB (parameters 14.24 + rope 0.02 +
    0.05 of allocator rounding: its 1–10 MiB shards share 20 MiB segments). Llama-3.1-8B at TP1: every
    matrix is a multiple of 2 MiB, so params + rope alone (15.02, what public 0.5.x logs print)."""
    from kvscope.engines.sglang.load_memory import sglang_load_memory
    from kvscope.model.weights import sglang_parallel

    logged = _logged_load("sglang", "031", r"mem usage=([\d.]+) GB")
    mc = load_model_config("Qwen/Qwen3-30B-A3B")
    load = sglang_load_memory(mc.cfg, sglang_parallel(4), quant_plan(mc.cfg), (0, 5, 4))
    assert load.reserved_bytes / GIB == pytest.approx(logged, abs=0.01)
    assert 40 < load.allocator_slack_bytes / 2**20 < 70
    llama = load_model_config("meta-llama/Llama-3.1-8B-Instruct")
    dense = sglang_load_memory(llama.cfg, sglang_parallel(1), quant_plan(llama.cfg), (0, 5, 4))
    assert dense.reserved_bytes / GIB == pytest.approx(15.02, abs=0.005) and dense.allocator_slack_bytes < 2 << 20


def test_kimi_ignore_list_keeps_attention_shared_and_dense_mlp_in_bf16():
    mc = load_model_config("moonshotai/Kimi-K2.5")
    plan = quant_plan(mc.cfg)
    int4 = plan.scheme_for("model.layers.5.mlp.experts.0.gate_proj", "expert")
    assert int4.bits == 4 and int4.group == 32 and int4.zero_bits == 0  # symmetric: no zero points
    for module in ("model.layers.5.self_attn.q_b_proj", "model.layers.5.mlp.shared_experts.up_proj",
                   "model.layers.0.mlp.gate_proj", "lm_head"):
        assert plan.scheme_for(module, "linear").bits == 16, module


def test_scheme_bytes():
    # fp8 with 128×128 block scales: one fp32 per block
    fp8 = Scheme("fp8", bits=8, block=(128, 128), scale_bytes=4)
    assert fp8.linear_bytes(2048, 7168) == 2048 * 7168 + 16 * 56 * 4
    # int4 group 32, bf16 scales: 4.5 bits per weight
    assert Scheme("i4", bits=4, group=32, scale_bytes=2).linear_bytes(256, 7168) == 256 * 7168 // 2 + 256 * 224 * 2
    # mxfp4: 4 bits + one e8m0 byte per 32 = 4.25 bits
    assert Scheme("mx", bits=4, group=32, scale_bytes=1).linear_bytes(64, 64) * 8 / (64 * 64) == 4.25
    # nvfp4: 4 bits + one fp8 byte per 16 = 4.5 bits
    assert Scheme("nv", bits=4, group=16, scale_bytes=1).linear_bytes(64, 64) * 8 / (64 * 64) == 4.5


def test_gptq_awq_store_zero_points_and_leave_lm_head_alone():
    cfg = {"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True}}
    plan = quant_plan(cfg)
    s = plan.scheme_for("model.layers.0.mlp.down_proj", "linear")
    assert s.bits == 4 and s.zero_bits == 4 and s.g_idx
    assert plan.scheme_for("lm_head", "linear").bits == 16
    assert s.linear_bytes(4096, 1024) == 4096 * 1024 // 2 + 8 * 4096 * (2 + 0.5) + 1024 * 4


def test_gpt_oss_mxfp4_quantizes_experts_only():
    w = est("openai/gpt-oss-120b")
    plan = quant_plan(load_model_config("openai/gpt-oss-120b").cfg)
    assert plan.scheme_for("model.layers.3.self_attn.q_proj", "linear").bits == 16
    assert plan.scheme_for("model.layers.3.mlp.experts.0.gate_proj", "expert").bits == 4
    # 36 layers × 128 experts × 3 × 2880² weights at 4.25 bits, plus bf16 biases
    experts = 36 * 128 * (3 * 2880 * 2880 * 4.25 / 8 + (2 * 2880 + 2880) * 2)
    assert w.by_component["experts"] == pytest.approx(experts, rel=1e-6)


def test_modelopt_mixed_precision_targets():
    plan = quant_plan(load_model_config("nvidia/Qwen3.6-35B-A3B-NVFP4").cfg)
    assert plan.scheme_for("lm_head", "linear").bits == 4
    assert plan.scheme_for("model.layers.0.linear_attn.in_proj_qkv", "linear").bits == 8
    assert plan.scheme_for("model.layers.3.self_attn.q_proj", "linear").bits == 8
    assert plan.scheme_for("model.layers.5.mlp.experts.7.down_proj", "expert").bits == 4
    assert plan.scheme_for("model.layers.0.linear_attn.in_proj_ba", "linear").bits == 16  # not targeted


def test_fp8_truncated_ignore_sample_is_widened():
    plan = quant_plan(load_model_config("Qwen/Qwen3-235B-A22B-FP8").cfg)
    assert plan.ignore_is_sample
    assert plan.scheme_for("model.layers.50.mlp.gate", "linear").bits == 16
    assert plan.scheme_for("model.layers.50.self_attn.q_proj", "linear").bits == 8


def test_dp_attention_replicates_attention_and_embedding():
    tp8 = est("deepseek-ai/DeepSeek-V3.2-Exp", tp=8)
    dpa = est("deepseek-ai/DeepSeek-V3.2-Exp", tp=8, attn_tp=1, replicate_embedding=True)
    assert dpa.by_component["embeddings"] == pytest.approx(8 * tp8.by_component["embeddings"], rel=0.01)
    assert dpa.by_component["attention"] > 3 * tp8.by_component["attention"]
    assert dpa.by_component["experts"] == tp8.by_component["experts"]
    # SGLang's absorbed w_kc / w_vc copies: heads × (128 + 128) × 512 × 2 B × 61 layers
    assert dpa.by_component["mla absorbed w_kc/w_vc (engine copy)"] == 128 * 256 * 512 * 2 * 61


def test_kv_heads_replicate_when_tp_exceeds_them():
    cfg = load_model_config("meta-llama/Llama-3.1-8B-Instruct").cfg
    k16 = [t for t in rank_tensors(cfg, Parallel(tp=16)) if t.module.endswith("k_proj")][0]
    k8 = [t for t in rank_tensors(cfg, Parallel(tp=8)) if t.module.endswith("k_proj")][0]
    assert k16.out_f == k8.out_f == 128  # one full head per rank


def test_pipeline_stages_split_layers_and_embeddings():
    assert [len(stage_layers(61, 4, s)) for s in range(4)] == [15, 15, 15, 16]
    whole = est("meta-llama/Llama-3.1-8B-Instruct").bytes_per_rank
    pp2 = est("meta-llama/Llama-3.1-8B-Instruct", pp=2).bytes_per_rank
    assert whole / 2 < pp2 < whole / 2 * 1.01


def test_local_checkpoint_index_total_replaces_the_estimate(tmp_path):
    cfg = dict(load_model_config("meta-llama/Llama-3.1-8B-Instruct").cfg)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    total = 16_060_522_496 + 1_000_000_000
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total}}))
    w = estimate_weights(load_model_config(str(tmp_path)), Parallel(tp=2), rules=SGLANG_WEIGHTS)
    assert w.checkpoint_bytes == total
    assert "safetensors" in w.method
    est_tp2 = estimate_weights(load_model_config("meta-llama/Llama-3.1-8B-Instruct"), Parallel(tp=2), rules=SGLANG_WEIGHTS)
    assert w.bytes_per_rank == pytest.approx(est_tp2.bytes_per_rank * total / 16_060_522_496, rel=1e-3)


_PARTS = ["model", "language_model", "layers", "0", "1", "12", "mlp", "experts", "gate_proj", "self_attn", "q_proj",
          "linear_attn", "in_proj_qkv", "backbone", "mtp", "*", "?"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_PARTS), min_size=1, max_size=5).map(".".join), max_size=6),
       st.lists(st.sampled_from([p for p in _PARTS if p not in "*?"]), min_size=1, max_size=6).map(".".join))
def test_target_index_matches_as_each_pattern_would(targets, module):
    """The set lookup for plain target names (MIXED_PRECISION lists thousands) = matching each one."""
    from kvscope.model import weights as W

    targets = [t if i % 3 else "model.language_model." + t for i, t in enumerate(targets)]
    assert W._Targets(tuple(targets)).matches(module) == any(W._matches(t, module) for t in targets)


def test_moe_layer_freq_as_per_layer_flags():
    """MiMo-V2-Flash and MiniMax-M3 give moe_layer_freq as one 0/1 flag per layer: layer 0 (and 0–2) dense."""
    from kvscope.model.weights import _moe_layer

    for model, dense in (("XiaomiMiMo/MiMo-V2-Flash", 1), ("MiniMaxAI/MiniMax-M3", 3)):
        cfg = load_model_config(model).cfg
        flags = [_moe_layer(cfg, i) for i in range(int(cfg["num_hidden_layers"]))]
        assert flags[:dense] == [False] * dense and all(flags[dense:])


def test_gpt_oss_mxfp4_experts_padded_to_the_kernel_tiles():
    """vLLM 0.19 on an A100 logged 'Model loading took 13.72 GiB' for gpt-oss-20b: Marlin pads the
    experts' 2,880 to 2,944 (intermediate) and 3,072 (hidden); unpadded they would be 12.83 GiB."""
    from kvscope.model.planning import rope_cache_bytes

    mc = load_model_config("openai/gpt-oss-20b")
    rope = rope_cache_bytes(mc.cfg, 2) / 2**30
    a100 = estimate_weights(mc, Parallel(tp=1), rules=VLLM_WEIGHTS, sm_major=8)
    assert a100.gib + rope == pytest.approx(13.72, abs=0.05)
    assert any("2,880 → 2,944" in n and "3,072" in n for n in a100.notes)
    hopper = estimate_weights(mc, Parallel(tp=1), rules=VLLM_WEIGHTS, sm_major=9)  # Triton: 2,880 is a multiple of 64
    assert hopper.gib + rope == pytest.approx(12.83, abs=0.01) and not any("padded" in n for n in hopper.notes)
    b200 = estimate_weights(mc, Parallel(tp=1), rules=SGLANG_WEIGHTS, sm_major=10)  # FlashInfer: 256 both ways
    experts = hopper.by_component["experts"]
    assert b200.by_component["experts"] / experts == pytest.approx((3072 / 2880) ** 2, rel=0.01)
    assert a100.by_component["experts"] / experts == pytest.approx(2944 * 3072 / 2880**2, rel=0.01)


# vLLM's "Model loading took X GiB" in public logs (weights + the rope cos/sin table it builds in the
# model dtype), for catalog models: the estimate from config.json alone lands on the logged figure.
VLLM_MODEL_LOADING = [
    ("Qwen/Qwen3-8B", 1, 15.2683),                     # vLLM 0.9.2 on an A100-SXM4-40GB (public notes)
    ("Qwen/Qwen3-235B-A22B", 8, 54.9206),              # vLLM V0, TP8 + expert parallel (vllm#18446)
    ("Qwen/Qwen3-30B-A3B-FP8", 1, 29.0435),            # vLLM V1 on a GB10 (public notes)
    ("mistralai/Mistral-7B-Instruct-v0.3", 1, 13.5084),  # vLLM V1 (a deployment README quoting its log)
    ("meta-llama/Llama-3.1-8B-Instruct", 1, 14.9889),  # vLLM 0.8.5 V1 on an L40S (vllm#17122; fixture vllm/025)
]


@pytest.mark.parametrize("model,tp,logged", VLLM_MODEL_LOADING)
def test_weights_match_vllm_model_loading_lines(model, tp, logged):
    from kvscope.model.planning import rope_cache_bytes

    mc = load_model_config(model)
    est = estimate_weights(mc, Parallel(tp=tp), rules=VLLM_WEIGHTS)
    assert est.gib + rope_cache_bytes(mc.cfg, 2) / 2**30 == pytest.approx(logged, abs=0.005)


# ------------------------------------------------------------------------------------------------
# DeepSeek-V4: MXFP4 experts under an fp8 quantization_config, and the attention V4 really has
# ------------------------------------------------------------------------------------------------


def _logged_load(engine: str, case: str, pattern: str) -> float:
    return float(re.search(pattern, (case_dir(engine, case) / "log.txt").read_text()).group(1))


def test_deepseek_v4_pro_sglang_h200_matches_the_load_line():
    """sglang/063: 8×H200, TP8 → 'Load weight end … mem usage=125.65 GB'. Experts are MXFP4 on disk
    (config.json expert_dtype fp4; quantization_config's fp8 covers the rest); SGLang's Hopper Marlin
    path keeps the loader's float32 scales too. As all-fp8 the estimate was 188 GiB, more than an H200."""
    from kvscope.model.weights import sglang_parallel

    mc = load_model_config("deepseek-ai/DeepSeek-V4-Pro")
    logged = _logged_load("sglang", "063", r"mem usage=([\d.]+) GB")
    hopper = estimate_weights(mc, sglang_parallel(8), rules=SGLANG_WEIGHTS, sm_major=9)
    assert hopper.gib + rope_cache_bytes(mc.cfg, 4) / GIB == pytest.approx(logged, abs=1.0)
    assert "mxfp4" in hopper.quantization and any("float32 expert scales" in n for n in hopper.notes)
    plain = estimate_weights(mc, sglang_parallel(8), rules=SGLANG_WEIGHTS, sm_major=10)
    kept = hopper.bytes_per_rank - plain.bytes_per_rank
    assert kept / GIB == pytest.approx(95.70 / 0.53125 * 0.125, rel=0.01)  # 0.125 B on top of 0.53125 B per weight


def test_deepseek_v4_flash_vllm_pp2_tp4_matches_the_worker_ledger():
    """vllm/053: 8×RTX 3090 as PP2 × TP4 → '19.47 GiB for consumed memory (weights + non-torch)'."""
    mc = load_model_config("deepseek-ai/DeepSeek-V4-Flash")
    logged = _logged_load("vllm", "053", r"Actual usage is ([\d.]+) GiB for consumed memory")
    w = estimate_weights(mc, Parallel(tp=4, pp=2), rules=VLLM_WEIGHTS, sm_major=8)
    ours = w.gib + rope_cache_bytes(mc.cfg, 2) / GIB
    assert ours < logged and ours == pytest.approx(logged, abs=0.5)  # the rest is non-torch memory


def test_deepseek_v4_nvfp4_requantizes_only_the_experts():
    """nvidia/DeepSeek-V4-Pro-NVFP4: ModelOpt groups over the fp8 checkpoint; its ignore list (attention,
    shared experts, head) stays fp8, not bf16."""
    plan = quant_plan(load_model_config("nvidia/DeepSeek-V4-Pro-NVFP4").cfg)
    assert plan.expert_scheme is not None and plan.expert_scheme.bits == 4 and plan.expert_scheme.group == 16
    assert plan.scheme_for("model.layers.3.attn.wq_b", "linear").bits == 8
    nv = est("nvidia/DeepSeek-V4-Pro-NVFP4", tp=8)
    fp4 = est("deepseek-ai/DeepSeek-V4-Pro", tp=8)
    assert nv.by_component["attention"] == fp4.by_component["attention"]
    assert nv.by_component["experts"] / fp4.by_component["experts"] == pytest.approx(0.5625 / 0.53125, rel=1e-3)


def test_deepseek_v4_attention_layout():
    """V4 Pro at TP8: wq_a/wkv, compressors and indexers replicated; wq_b, wo_a, wo_b split. The
    compress ratios decide which layers carry an indexer (ratio 4) or a compressor at all (not 0)."""
    cfg = load_model_config("deepseek-ai/DeepSeek-V4-Pro").cfg
    names = {t.module.split(".attn.")[-1]: t for t in rank_tensors(cfg, Parallel(tp=8)) if ".layers.2.attn." in t.module}
    assert names["wo_a"].out_f == 16 * 1024 // 8 and names["wo_a"].in_f == 128 * 512 // 16
    assert names["wq_b"].out_f == 128 // 8 * 512 and names["wq_a"].out_f == 1536
    assert "indexer.wq_b" in names and names["compressor.wkv_gate"].out_f == 2 * 2 * 512  # layer 2: ratio 4
    one = {t.module.split(".attn.")[-1]: t for t in rank_tensors(cfg, Parallel(tp=8)) if ".layers.1.attn." in t.module}
    assert one["compressor.wkv_gate"].out_f == 2 * 512 and "indexer.wq_b" not in one  # layer 1: ratio 128
    flash = load_model_config("deepseek-ai/DeepSeek-V4-Flash").cfg  # its first two layers: ratio 0
    first = [t for t in rank_tensors(flash, Parallel(tp=8)) if ".layers.0.attn." in t.module]
    assert first and not any("compressor" in t.module or "indexer" in t.module for t in first)


def test_catalog_name_never_maps_to_a_different_model():
    """Only format/tuning words may follow a catalog name: a distilled 7B is not DeepSeek-R1 (a held-out
    public log planned R1's 629 GiB of weights onto one RTX 3090)."""
    from kvscope.model.catalog import catalog_entry

    assert catalog_entry("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B") is None
    assert catalog_entry("Kimi-K2.5-INT4")["hf_id"] == "moonshotai/Kimi-K2.5"
    assert catalog_entry("meta-llama/Llama-3.1-8B-Instruct-FP8")["hf_id"] == "meta-llama/Llama-3.1-8B-Instruct"


def test_quantization_named_but_not_in_the_catalog_entry_is_assumed_and_said():
    from kvscope.model.weights import load_model_config, quant_plan

    mc = load_model_config("Qwen3-32B-AWQ")
    plan = quant_plan(mc.cfg)
    assert plan.method == "awq"
    assert any("assumed from the model name" in n for n in plan.notes)
    assert quant_plan(load_model_config("Qwen/Qwen3-32B").cfg).method == "none"


def test_gguf_file_names_find_their_model_and_say_the_format_is_not_sized():
    from kvscope.model.catalog import catalog_entry
    from kvscope.model.weights import load_model_config, quant_plan

    assert catalog_entry("/models/Llama-3.1-8B-Instruct-Q4_K_M.gguf")["hf_id"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert catalog_entry("Qwen3-32B-UD-Q4_K_XL")["hf_id"] == "Qwen/Qwen3-32B"
    plan = quant_plan(load_model_config("Qwen3-32B-Q8_0").cfg)
    assert any("not modelled" in n for n in plan.notes)
