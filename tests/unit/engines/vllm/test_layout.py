"""vLLM's one KV layout (engines/vllm/layout.py), the one explain, whatif and plan all size through."""

from kvscope.engines.vllm import rules
from kvscope.engines.vllm.layout import kv_layout
from kvscope.model.arch import Architecture

LLAMA_8B = Architecture("llama-3.1-8b", "llama", 32, "mha", num_kv_heads=8, head_dim=128)
GPT_OSS = Architecture("gpt-oss-20b", "gpt_oss", 24, "mha", num_kv_heads=8, head_dim=64, sliding_window=128,
                       full_attention_layers=12, sliding_layers=12)


def test_plain_layout_reproduces_a_logged_block_count():
    # Llama-3.1-8B bf16 TP1: 131,072 B per 16-token block per layer × 32 layers = 2 MiB per block
    layout = kv_layout(LLAMA_8B, 2, 1)
    assert layout is not None and layout.block_bytes(16) == 2 << 20
    cap = layout.capacity(10.0, 16, 8192, 8192, "v1")
    assert cap.blocks == 5120 and cap.tokens == 81920 and cap.concurrency == 5120 / 512
    assert layout.request_bytes(16, 8192, 8192) == 512 * (2 << 20)


def test_same_shape_draft_layers_are_more_layers_another_shape_pays_its_own_row():
    eagle = kv_layout(LLAMA_8B, 2, 1, draft_layers=1)
    assert eagle is not None and eagle.layers == 33 and eagle.block_bytes(16) == 33 * 16 * 4096
    other = kv_layout(LLAMA_8B, 2, 1, draft_layers=2, draft_row_bytes=1024)
    assert other is not None and other.layers == 32
    assert other.block_bytes(16) == 32 * 16 * 4096 + 16 * 2 * 1024
    assert other.bytes_per_token == 32 * 4096 + 2 * 1024


def test_sliding_window_groups_only_under_the_hybrid_manager_on_one_stage():
    hybrid = kv_layout(GPT_OSS, 2, 1)
    assert hybrid is not None and hybrid.hybrid and hybrid.bytes_per_token == 12 * hybrid.row_bytes
    expect = rules.hybrid_capacity(10.0, hybrid.row_bytes, 12, 12, 128, 16, 8192, 8192, "v1")
    assert hybrid.capacity(10.0, 16, 8192, 8192, "v1") == expect
    off = kv_layout(GPT_OSS, 2, 1, hybrid_manager=False)
    assert off is not None and not off.hybrid and off.bytes_per_token == 24 * off.row_bytes
    staged = kv_layout(GPT_OSS, 2, 1, pp=2)
    assert staged is not None and not staged.hybrid and staged.layers == 12


def test_grouped_layout_counts_another_shape_draft_in_target_layers_rounded_up():
    layout = kv_layout(GPT_OSS, 2, 1, draft_layers=1, draft_row_bytes=3072)  # 1.5 target rows
    assert layout is not None and layout.full_layers == 12 + 2 and layout.extra_block_row_bytes == 0


def test_a_layer_without_bytes_gives_no_layout():
    assert kv_layout(Architecture("x", "x", 4, "mha", num_kv_heads=0, head_dim=0), 2, 1) is None
