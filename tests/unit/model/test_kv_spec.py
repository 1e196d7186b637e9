"""Layer specs own their bytes: checked against figures real engines printed for these models."""

from kvscope.model.arch import Architecture, LinearState
from kvscope.model.kv_spec import (
    FullAttentionSpec,
    IndexerSpec,
    MLASpec,
    SlidingWindowSpec,
    attention_spec,
    mamba_spec,
)

LLAMA_8B = Architecture("llama-3.1-8b", "llama", 32, "mha", num_kv_heads=8, head_dim=128)
DSV32 = Architecture("deepseek-v3.2", "deepseek_v32", 61, "mla", kv_lora_rank=512, qk_rope_head_dim=64,
                     index_head_dim=128)


def test_gqa_row_splits_heads_over_tp_and_replicates_beyond_them():
    # vLLM prints 'KV head(s) × 2 × 128 × 2 B' rows of 4,096 B at TP1 for Llama-3.1-8B (8 KV heads)
    assert attention_spec(LLAMA_8B, 2, 1).row_bytes == 8 * 256 * 2
    assert attention_spec(LLAMA_8B, 2, 2).row_bytes == 4 * 256 * 2
    # TP16 > 8 heads: one head per rank, not zero
    spec = attention_spec(LLAMA_8B, 2, 16)
    assert isinstance(spec, FullAttentionSpec) and spec.kv_heads == 1 and spec.row_bytes == 512


def test_v_head_dim_counts_unless_the_engine_ignores_it():
    arch = Architecture("mimo", "mimo", 4, "mha", num_kv_heads=4, head_dim=192, v_head_dim=128)
    assert attention_spec(arch, 2, 1).row_bytes == 4 * (192 + 128) * 2
    assert attention_spec(arch, 2, 1, v_head_dim=False).row_bytes == 4 * (192 + 192) * 2
    assert attention_spec(arch, 2, 1).k_fraction == 192 / 320


def test_mla_latent_is_not_split_by_tp_and_fp8_rows_carry_scales_and_16_bit_rope():
    spec = attention_spec(DSV32, 2, 8)
    assert isinstance(spec, MLASpec) and spec.row_bytes == 576 * 2
    fp8 = MLASpec(512, 64, 1)
    assert fp8.row_bytes == 576 and fp8.fp8_row_bytes == 656  # 512 + 4 scales × 4 B + 64 × 2 B
    assert IndexerSpec(128).row_bytes == 132


def test_sliding_spec_holds_the_window_plus_the_prefill_chunk_at_most_the_request():
    arch = Architecture("gemma-3", "gemma3_text", 62, "mha", num_kv_heads=16, head_dim=128, sliding_window=1024,
                        full_attention_layers=10, sliding_layers=52)
    spec = SlidingWindowSpec(attention_spec(arch, 2, 1), 1024)
    assert spec.row_bytes == 16 * 256 * 2
    assert spec.tokens_held(131072, 8192) == 1023 + 8192
    assert spec.tokens_held(4096, 8192) == 4096


def test_mamba_state_bytes_follow_the_state_dtypes_given():
    # Qwen3-Next GDN: 16 K heads × 128, 32 V heads × 128, conv kernel 4
    state = LinearState("gdn", 2 * 16 * 128 + 32 * 128, 4, 32, 128, 128)
    spec = mamba_spec(state, 1, 2, 4)
    assert spec.conv_elements == 8192 * 3 and spec.ssm_elements == 32 * 128 * 128
    assert spec.page_bytes == 8192 * 3 * 2 + 32 * 128 * 128 * 4
    assert mamba_spec(state, 2, 2, 4).page_bytes * 2 == spec.page_bytes


def test_layer_split_reads_gemmas_window_pattern_and_the_catalogs_count_summaries():
    """Gemma-3's config says 'every 6th layer is global' with sliding_window_pattern; the built-in catalog keeps
    layer_types as counts. Both must give the split, or plan counts every layer as full attention."""
    from kvscope.model.arch import architecture_from_config
    from kvscope.model.catalog import catalog_entry

    gemma = architecture_from_config(catalog_entry("google/gemma-3-27b-it")["config"], "gemma-3-27b")
    assert (gemma.full_attention_layers, gemma.sliding_layers, gemma.sliding_window) == (10, 52, 1024)
    summary = {"num_hidden_layers": 24, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
               "hidden_size": 2880, "sliding_window": 128,
               "layer_types": {"counts": {"sliding_attention": 12, "full_attention": 12}}}
    arch = architecture_from_config(summary, "gpt-oss-like")
    assert (arch.full_attention_layers, arch.sliding_layers) == (12, 12)


def test_a_compressed_layer_pays_one_row_per_ratio_tokens():
    """DeepSeek-V4's ratio-4 layer: a 584-B row (448 fp8 nope + 64 × 2 B rope + scales) and a 132-B indexer row per
    4 tokens; its ratio-128 layer a row per 128 tokens (dsv4.py reproduces the logged bytes per token with these)."""
    from kvscope.model.kv_spec import CompressedSpec, padded_row_bytes

    assert CompressedSpec(4, 584, 132).bytes_per_token == (584 + 132) / 4
    assert CompressedSpec(128, 584).bytes_per_token == 584 / 128
    # from 0.5.21 a page of 256 tokens holds 64 ratio-4 rows padded to 576 B: 64 × 584 = 37,376 → 65 × 576
    padded = CompressedSpec(4, 584, 132, rows_per_page=64, align=576)
    assert padded.stored_row_bytes == 65 * 576 / 64 == padded_row_bytes(64, 584, 576)
    assert padded.bytes_per_token == 65 * 576 / 64 / 4 + 132 / 4
    assert CompressedSpec(4, 584, rows_per_page=64).stored_row_bytes == 584  # no alignment given: unpadded
