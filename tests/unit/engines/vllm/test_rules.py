"""vLLM's sizing rules against the worked examples of docs/research/vllm-memory.md §6 and real logs."""

from __future__ import annotations

import pytest

from kvscope.engines.vllm import eras, rules
from kvscope.engines.vllm.rules import GIB
from kvscope.model.arch import Architecture

MIB = 1 << 20


def _mha(layers: int, kv_heads: int, head_dim: int = 128) -> Architecture:
    return Architecture(name="t", model_type="llama", num_layers=layers, attention="mha", num_kv_heads=kv_heads,
                        head_dim=head_dim, v_head_dim=head_dim)


LLAMA_8B = _mha(32, 8)


# --- §6.1 Llama-3.1-8B + EAGLE on H100 (vLLM issue #19996) -------------------------------------------


def test_page_of_llama_8b_is_4_kib_per_token_per_layer():
    page = rules.page_size(LLAMA_8B, 2, 1)
    assert page.bytes_per_token_per_layer == 4096
    assert rules.bytes_per_block(page.bytes_per_token_per_layer, 1, 16) == 65_536


def test_eagle_example_reproduces_exactly():
    """51.63 GiB with 33 layers (32 + the EAGLE head) → 25,633 blocks → 410,128 tokens, 3.13x at 131,072."""
    block = rules.bytes_per_block(4096, 33, 16)
    assert block == 2_162_688
    assert rules.blocks_for(51.63, block) == 25_633
    assert rules.blocks_range(51.63, block) == (25_631, 25_635)
    cap = rules.capacity(25_633, 16, 131_072, "v1")
    assert cap.tokens == 410_128
    assert f"{cap.concurrency:.2f}" == "3.13"
    assert rules.printed_concurrency_matches(cap.concurrency, 3.13)


def test_eagle_example_target_only_does_not_match():
    block = rules.bytes_per_block(4096, 32, 16)
    blocks = rules.blocks_for(51.63, block)
    assert blocks == 26_434
    cap = rules.capacity(blocks, 16, 131_072, "v1")
    assert cap.tokens == 422_944 and f"{cap.concurrency:.2f}" == "3.23"
    assert not rules.blocks_range(51.63, block)[0] <= 25_633 <= rules.blocks_range(51.63, block)[1]


def test_eagle_example_what_ifs():
    fp8_block = rules.bytes_per_block(rules.page_size(LLAMA_8B, 1, 1).bytes_per_token_per_layer, 33, 16)
    fp8 = rules.capacity(rules.blocks_for(51.63, fp8_block), 16, 131_072, "v1")
    assert (fp8.blocks, fp8.tokens, f"{fp8.concurrency:.2f}") == (51_267, 820_272, "6.26")
    short = rules.capacity(25_633, 16, 32_768, "v1")
    assert short.tokens == 410_128 and f"{short.concurrency:.2f}" == "12.52"


# --- §6.2 V0 v0.6.4, RTX 3090, Llama-3.1-8B (issue #10517; logs 002 and 003) --------------------------


def test_v0_budget_and_blocks_20k():
    k = 23.58 * 0.90 - 17.06 - 0.35
    assert f"{k:.2f}" == "3.81"
    block = rules.bytes_per_block(4096, 32, 16)
    assert block == 2 * MIB
    low, high = rules.blocks_range(3.81, block)
    assert (low, high) == (1948, 1953) and low <= 1952 <= high
    cap = rules.capacity(1952, 16, 20_000, "v0")
    assert f"{cap.concurrency:.2f}" == "1.56"
    assert rules.blocks_for(4.0, block) == 2048  # 4 GiB swap space → "# CPU blocks: 2048"


def test_v0_29k_cannot_start():
    assert f"{23.58 * 0.90 - 17.98 - 0.35:.2f}" == "2.89"
    cap = rules.capacity(1478, 16, 29_000, "v0")
    assert cap.tokens == 23_648 < 29_000
    assert f"{cap.concurrency:.2f}" == "0.82"
    assert rules.util_for_kv(29_000 * 131_072 / GIB, 2.89, 23.58, 0.90) == 0.93


# --- §6.3 V1 v0.10.2, Qwen3-14B (LMCache issue #1739) ---------------------------------------------------


def test_qwen3_14b_example():
    block = rules.bytes_per_block(rules.page_size(_mha(40, 8), 2, 1).bytes_per_token_per_layer, 40, 16)
    assert block == 2_621_440
    assert rules.blocks_range(6.51, block) == (2664, 2668)
    cap = rules.capacity(2666, 16, 32_768, "v1")
    assert cap.tokens == 42_656 and f"{cap.concurrency:.2f}" == "1.30"


# --- other rules ------------------------------------------------------------------------------------------


def test_tp_splits_heads_and_replicates_beyond():
    assert rules.page_size(LLAMA_8B, 2, 8).bytes_per_token_per_layer == 512
    assert rules.page_size(LLAMA_8B, 2, 16).bytes_per_token_per_layer == 512  # 1 head, replicated


def test_mla_latent_is_not_split_over_tp():
    """DeepSeek-V2-Lite (27 MLA layers): the 32,768-token request of log 056 needs 0.95 GiB."""
    lite = Architecture(name="dsv2-lite", model_type="deepseek_v2", num_layers=27, attention="mla",
                        kv_lora_rank=512, qk_rope_head_dim=64)
    assert rules.page_size(lite, 2, 1).bytes_per_token_per_layer == 1152
    assert rules.page_size(lite, 2, 8).bytes_per_token_per_layer == 1152
    need = rules.cdiv(32_768, 16) * rules.bytes_per_block(1152, 27, 16) / GIB
    assert f"{need:.2f}" == "0.95"


def test_v1_conc_tokens_rule_rounds_down_for_odd_lengths():
    cap = rules.capacity(1000, 16, 1000, "v1-conc")
    assert cap.concurrency == 1000 / 63
    assert cap.tokens == int(1000 / 63 * 1000) < 1000 * 16


def test_hybrid_groups_window_layers_hold_a_window():
    """gpt-oss-120b: 18 window (128) + 18 full layers, one group each; 131,072 tokens needs ~4.79 GiB."""
    row = 8 * 2 * 64 * 2
    cap = rules.hybrid_capacity(10.0, row, 18, 18, 128, 16, 131_072, 8192, "v1-conc")
    per_request = rules.cdiv(131_072, 16) + rules.cdiv(128 - 1 + 8192, 16) + 1
    assert cap.blocks == int(10 * GIB // (16 * row * 18))
    assert cap.concurrency == cap.blocks / per_request


def test_estimated_max_length_of_real_errors():
    """Logs 054 and 017: the error's own 'needed' figure gives bytes per token; K gives the estimate."""
    lo, hi = rules.implied_bytes_per_token(4.50, 32_768)
    assert lo <= 147_456 <= hi
    block = 147_456 * 16
    assert rules.max_len_that_fits(3.575, block, 16) <= 26_032 <= rules.max_len_that_fits(3.585, block, 16)
    lo, hi = rules.implied_bytes_per_token(22.5, 1_048_576)
    assert lo <= 23_040 <= hi
    assert rules.max_len_that_fits(17.385, 23_040 * 16, 16) <= 810_208 <= rules.max_len_that_fits(17.395, 23_040 * 16, 16)


def test_kv_cache_memory_suggestion_matches_the_logs():
    """Logs 048 and 053: R − non-KV − graphs − 150 MiB, within the rounding of the printed terms."""
    assert abs(rules.suggested_kv_cache_bytes(160.53, 8.58 + 9.96 + 0.07, 0.65) - 151_519_866_880) < 0.03 * GIB
    assert abs(rules.suggested_kv_cache_bytes(22.03, 19.47 + 0.6, 0.1) - 1_828_800_984) < 0.02 * GIB
    assert abs(rules.suggested_kv_cache_bytes(22.93, 19.47 + 0.6, 0.1) - 2_798_683_648) < 0.02 * GIB


def test_util_arithmetic():
    assert rules.kv_after_util(10.0, 80.0, 0.90, 0.92) == pytest.approx(11.6)
    assert rules.graph_gib_from_advisory(0.88, 0.8592, 23.56) == pytest.approx(0.0208 * 23.56)
    assert rules.tokens_per_util_step(23.58, 2 * MIB, 16) == 1920


def test_shortfall_is_contention_only_when_someone_else_holds_memory():
    assert rules.classify_shortfall(7.51, 8.84, "cpu") == "not-enough-memory"  # log 901
    assert rules.classify_shortfall(30.0, 79.19) == "multi-instance-contention"
    assert rules.classify_shortfall(78.6, 79.19) == "not-enough-memory"


def test_pipeline_split():
    assert rules.pp_layers(32, 1) == [32]
    assert sum(rules.pp_layers(61, 4)) == 61 and max(rules.pp_layers(61, 4)) == 16


# --- eras ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("version", "name"), [
    ("0.6.4.post1", "V0 0.6.4"), ("0.8.3.dev172+g2b93162f", "V1 0.7–0.9.0"), ("0.9.2", "V1 0.9.1–0.17"),
    ("0.19.1", "V1 0.18–0.19"), ("0.20.0", "V1 0.20–0.21"), ("0.24.0", "V1 0.22–0.24"), ("0.32.0", "V1 0.28+"),
])
def test_era_of_a_release(version, name):
    assert eras.era_for(eras.parse_version(version)).name == name


def test_eras_cover_every_release_without_gaps():
    for engine in ("V0", "V1"):
        rows = [e for e in eras.ERAS if e.engine == engine]
        for a, b in zip(rows, rows[1:], strict=False):
            assert a.last < b.first
    assert eras.era_for((0, 20, 0)).default_util == 0.92 and eras.era_for((0, 19, 1)).default_util == 0.90


def test_infer_from_wording():
    inferred = eras.infer(["INFO 04-24 16:33:00 [gpu_model_runner.py:1316] Model loading took 14.9889 GiB and 3.65 seconds",
                           "INFO 04-24 16:33:13 [kv_cache_utils.py:634] GPU KV cache size: 158,656 tokens"])
    assert inferred.first == (0, 8, 5) and inferred.last == (0, 11, 0)
    assert all(e.engine == "V1" for e in inferred.eras)
    v0 = eras.infer(["Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB"])
    assert [e.name for e in v0.eras] == ["V0 0.6.4"]


# --- hybrid attention + Mamba / Gated DeltaNet (case 006: Qwen3.6-35B-A3B, v0.24.0, RTX 5090) ---------------


def _qwen36_35b() -> Architecture:
    from kvscope.model.catalog import load_architecture

    arch, where = load_architecture("nvidia/Qwen3.6-35B-A3B-NVFP4")
    assert arch is not None and "catalog" in where
    return arch


def test_gdn_state_page_of_qwen36_35b():
    """conv (2·16·128 + 32·128) × (4 − 1) in bf16 + SSM 32 × 128 × 128 in fp32 (config mamba_ssm_dtype)."""
    arch = _qwen36_35b()
    assert (arch.full_attention_layers, arch.linear_layers, arch.nextn_layers) == (10, 30, 1)
    state = rules.mamba_page(arch, 1, "bfloat16")
    assert state is not None and state.bytes == 8192 * 3 * 2 + 32 * 128 * 128 * 4 == 2_146_304
    assert rules.mamba_page(arch, 1, "bfloat16", mamba_ssm_cache_dtype="bfloat16").bytes == 8192 * 3 * 2 + 524_288 * 2
    assert rules.mamba_page(arch, 2, "bfloat16").bytes == 2_146_304 // 2  # channels and heads split over TP


def test_attention_block_grows_to_hold_one_state():
    # 1,024 B per token (2 KV heads × 2 × 256 × fp8): 16 × cdiv(2,146,304, 16 × 1,024) = 2,096 tokens, no padding
    assert rules.hybrid_block_size(1024, 2_146_304, "align") == 2096
    assert rules.hybrid_block_size(1024, 2_146_304, "none") == 2096
    assert rules.hybrid_block_size(1024, 2_146_304, "none", block_size=4096) == 4096  # a larger block is kept
    # 'all' (Mamba2 models with prefix caching): rounded to lcm(chunk, 16) tokens
    assert rules.hybrid_block_size(1024, 2_146_304, "all", chunk_size=256) == 2304


def test_groups_take_the_smaller_layer_count_unless_close():
    assert rules.layer_group_size([10, 30]) == 10
    assert rules.layer_group_size([17, 48]) == 17
    assert rules.layer_group_size([12, 13]) == 13  # gpt-oss + EAGLE: pad to 13 + 13


def test_case_006_capacity_from_the_printed_kv_memory():
    """5.98 GiB (±0.005) → 298–299 blocks of 10 × 2,146,304 B; 63 + 3 × 2 blocks per request."""
    arch = _qwen36_35b()
    state = rules.mamba_page(arch, 1, "bfloat16")
    layout = rules.mamba_layout(1024, state, 10, 30, rules.mamba_cache_mode(True, arch.model_type))
    assert (layout.mode, layout.block_size, layout.page_bytes, layout.group_size) == ("align", 2096, 2_146_304, 10)
    assert (layout.attn_groups, layout.mamba_groups, layout.blocks_per_request(131_072)) == (1, 3, 69)
    cap = rules.mamba_capacity(5.98, layout, 131_072, "v1-conc")
    assert (cap.blocks, cap.tokens, f"{cap.concurrency:.2f}") == (299, 567_978, "4.33")
    assert rules.mamba_capacity(5.975, layout, 131_072, "v1-conc").tokens == 566_079
    assert rules.mamba_capacity(5.985, layout, 131_072, "v1-conc").tokens == 567_978
    # without prefix caching one state block per request: 63 + 3 = 66 → 4.53x
    plain = rules.mamba_layout(1024, state, 10, 30, rules.mamba_cache_mode(False, arch.model_type))
    assert f"{rules.mamba_capacity(5.98, plain, 131_072, 'v1-conc').concurrency:.2f}" == "4.53"
    # v0.9.1–v0.20 printed blocks // groups × smallest block size instead: 299 // 4 × 2,096
    assert rules.mamba_capacity(5.98, layout, 131_072, "v1").tokens == 74 * 2096


def test_mamba2_state_pads_groups_to_the_tp_size():
    """Nemotron-3-Nano: 64 heads × 64, state 128, 8 groups, kernel 4, SSM state fp32 (config)."""
    from kvscope.model.arch import linear_state_elements
    from kvscope.model.catalog import load_architecture

    arch, _ = load_architecture("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    assert arch is not None and (arch.full_attention_layers, arch.linear_layers) == (6, 23)
    state = arch.linear_state
    assert state is not None and state.kind == "mamba2" and state.chunk_size == 128
    assert linear_state_elements(state, 1) == ((4096 + 2 * 8 * 128) * 3, 64 * 64 * 128)
    assert linear_state_elements(state, 16)[0] == (4096 + 2 * 16 * 128) // 16 * 3  # 8 groups → 16 on TP 16
    assert rules.mamba_page(arch, 1, "bfloat16").bytes == 6144 * 3 * 2 + 524_288 * 4
    assert rules.mamba_cache_mode(True, arch.model_type) == "all"


def test_a_multi_gpu_workers_own_buffers_are_not_another_tenant():
    """An EP16 decode group on B200 (a real post, questions/124): 4.55 GiB in use before vLLM's check, no other
    process on the GPU. A multi-GPU worker holds its NCCL / EFA buffers before the snapshot, so that gap is its
    own; on a single GPU the same gap is another process."""
    from kvscope.engines.vllm.rules import classify_shortfall

    assert classify_shortfall(173.8, 178.35, "gpu", multi_gpu=True) == "not-enough-memory"
    assert classify_shortfall(173.8, 178.35, "gpu") == "multi-instance-contention"
    assert classify_shortfall(160.0, 178.35, "gpu", multi_gpu=True) == "multi-instance-contention"
