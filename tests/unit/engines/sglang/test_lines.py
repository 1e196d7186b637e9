"""Every SGLang line shape of §7 of docs/research/sglang-memory.md, one by one (format strings from the doc)."""

from __future__ import annotations

import pytest

from kvscope.core import events as ev
from kvscope.engines.base import LineContext
from kvscope.engines.sglang.lines import SGLangLines, split_prefix
from tests.conftest import FIXTURES

P = SGLangLines()


def parse(text: str):
    return P.parse(text, LineContext())


@pytest.mark.parametrize(
    ("text", "rank"),
    [
        ("[2026-02-28 12:26:11 TP0] x", "TP0"),
        ("[2026-02-28 12:26:11 DP3 TP3] x", "DP3 TP3"),
        ("[2026-02-28 12:26:11 PP1 TP4] x", "PP1 TP4"),
        ("[2026-02-28 12:26:11 DP0 TP0 EP0] x", "DP0 TP0 EP0"),
        ("[2026-02-28 12:26:11 ATTN_CP0 TP0] x", "ATTN_CP0 TP0"),
        ("[2026-02-28 12:26:11.123 TP2] x", "TP2"),
        ("(Actor pid=77, ip=10.0.0.2) [2026-02-28 12:26:11 TP5] x", "TP5"),
        ("[rank=3] x", "rank=3"),
        ("[2026-02-28 12:26:11] x", "TP0"),
        ("no prefix at all", None),
    ],
)
def test_rank_prefixes(text, rank):
    assert split_prefix(text)[0] == rank


@pytest.mark.parametrize(
    ("msg", "phase", "fields"),
    [
        ("Load weight begin. avail mem=94.04 GB", "weights_begin", {"pre_load_free_gib": 94.04}),
        ("Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=28.91 GB",
         "weights_end", {"avail_after_weights_gib": 28.91, "weights_gib": None}),
        ("Load weight end. type=X, dtype=torch.bfloat16, avail mem=28.91 GB, mem usage=15.09 GB.",
         "weights_end", {"avail_after_weights_gib": 28.91, "weights_gib": 15.09}),
        ("Load weight end. elapsed=5.05 s, type=Qwen3MoeForCausalLM, avail mem=121.90 GB, mem usage=16.39 GB.",
         "weights_end", {"weights_gib": 16.39, "load_seconds": 5.05}),
        ("Load weight end. elapsed=3.1 s, type=K, quant=compressed-tensors, bits=4, avail mem=21.71 GB, mem usage=72.33 GB.",
         "weights_end", {"weights_gib": 72.33, "weights_quant": "compressed-tensors"}),
        ("Memory pool end. avail mem=11.18 GB", "pool_end", {"avail_after_pool_gib": 11.18}),
        ("Capture cuda graph begin. This can take up to several minutes. avail mem=13.95 GB", "graph_begin", {"avail_gib": 13.95}),
        ("Capture cuda graph end. Time elapsed: 5.92 s. mem usage=1.44 GB. avail mem=37.06 GB.", "graph_end",
         {"graph_gib": 1.44, "avail_gib": 37.06}),
        ("Capture cuda graph end. Time elapsed: 5.92 s. avail mem=37.06 GB. mem usage=1.44 GB.", "graph_end",
         {"graph_gib": 1.44, "avail_gib": 37.06}),
        ("Capture target decode cuda graph end. elapsed=8.00 s, mem usage=0.95 GB, avail mem=21.75 GB.", "graph_end",
         {"graph": "target decode", "graph_gib": 0.95}),
        ("Capture draft extend cuda graph end. Time elapsed: 2.0 s. mem usage=0.20 GB. avail mem=9.1 GB.", "graph_end",
         {"graph": "draft extend", "graph_gib": 0.20}),
        ("Capture piecewise CUDA graph end. Time elapsed: 4.00 s. mem usage=0.30 GB. avail mem=10.51 GB.", "graph_end",
         {"graph": "piecewise", "graph_gib": 0.30}),
        ("Capture npu graph begin. This can take up to several minutes. avail mem=11.91 GB", "graph_begin", {"avail_gib": 11.91}),
        ("max_total_num_tokens=105600, chunked_prefill_size=4096, max_prefill_tokens=16384, max_running_requests=2048, "
         "context_len=40960, available_gpu_mem=21.09 GB", "ready",
         {"max_total_num_tokens": 105600, "max_running_requests": 2048, "context_len": 40960, "available_gpu_mem_gib": 21.09}),
        ("max_total_num_tokens=5000, max_prefill_tokens=16384, max_running_requests=2000, context_len=4096", "ready",
         {"max_total_num_tokens": 5000, "context_len": 4096}),
    ],
)
def test_phases(msg, phase, fields):
    (p,) = parse(f"[2026-01-01 00:00:00 TP0] {msg}")
    assert p.kind == ev.PHASE and p.data["phase"] == phase
    for key, value in fields.items():
        assert p.data.get(key) == value, key


@pytest.mark.parametrize(
    ("msg", "fields"),
    [
        ("KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB", {"tokens": 159277, "gib": 10.42}),
        ("KV Cache is allocated. #tokens: 22095, K size: 5.23 GB, V size: 5.23 GB", {"tokens": 22095, "k_gib": 5.23}),
        ("KV Cache is allocated. K size: 1.00 GB, V size: 1.00 GB.", {"tokens": None, "k_gib": 1.0}),
        ("KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 454112, K size: 3.46 GB, V size: 3.46 GB",
         {"dtype": "torch.float8_e4m3fn", "tokens": 454112}),
        ("Draft KV Cache is allocated. dtype: torch.bfloat16, #tokens: 10, KV size: 1.00 GB", {"label": "Draft"}),
        ("Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: 900, KV size: 2.00 GB, avail mem=3.00 GB",
         {"tokens": 900, "gib": 2.0}),
    ],
)
def test_pools(msg, fields):
    (p,) = parse(f"[2026-01-01 00:00:00 TP1] {msg}")
    assert p.kind == ev.POOL and p.rank == "TP1"
    for key, value in fields.items():
        assert p.data.get(key) == value, key


def test_host_pools_both_eras():
    (old,) = parse("[2026-03-25 09:32:19] Allocating 15.58 GB host memory for hierarchical KV cache.")
    assert old.data["label"] == "host" and old.data["host_gb"] == 15.58
    (new,) = parse("[2026-10-31 10:01:00 TP0] Allocating kv hierarchical KV host pool: 3200001 tokens, 209.72 GB host memory.")
    assert new.data["tokens"] == 3200001 and abs(new.data["gib"] - 209.72e9 / 2**30) < 1e-9


def test_server_args_both_forms():
    repr_form = parse("[2026-01-01 00:00:00] server_args=ServerArgs(model_path='/m/Qwen3-8B', tp_size=2, "
                      "mem_fraction_static=0.88, cuda_graph_bs=[1, 2, 4], api_key=None, enable_dp_attention=False)")
    dict_form = parse("[2026-10-31 10:00:00] server_args={'model_path': '/m/Qwen3-8B', 'tp_size': 2, "
                      "'mem_fraction_static': 0.88, 'cuda_graph_bs': [1, 2, 4], 'enable_dp_attention': False}")
    for events in (repr_form, dict_form):
        kinds = [p.kind for p in events]
        assert kinds[:2] == [ev.BOUNDARY, ev.SETTINGS]
        settings = events[1].data
        assert settings["tp_size"] == 2 and settings["mem_fraction_static"] == 0.88
        assert settings["cuda_graph_bs"] == [1, 2, 4] and settings["enable_dp_attention"] is False
        assert events[2].data["model"] == "/m/Qwen3-8B"


@pytest.mark.parametrize(
    ("msg", "kind"),
    [
        ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
         "self.server_args.mem_fraction_static=0.7", "not-enough-memory"),
        ("ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.88. Raise "
         "--mem-fraction-static above 0.91 (minimum viable = 1 - available/pre = 0.905).", "not-enough-memory"),
        ("AssertionError: Memory pool size is too small", "not-enough-memory"),
        ("ValueError: Not enough host memory available. Requesting 400.00 GB but only have 380.00 GB free. "
         "Please reduce the size of the hierarchical cache.", "host-memory"),
    ],
)
def test_failures(msg, kind):
    (p,) = parse(msg)
    assert p.kind == ev.FAILURE and p.data["kind"] == kind


def test_warnings():
    (w,) = parse("[2025-12-26 20:03:09] max_total_tokens=100000 is larger than the profiled value 23063. "
                 "Use the profiled value instead.")
    assert w.data == {**w.data, "code": "max-total-tokens-above-profile", "requested": 100000, "profiled": 23063}
    (u,) = parse("[2026-01-01 00:00:00 TP3] The memory capacity is unbalanced. Some GPUs may be occupied by other "
                 "processes. min_per_gpu_memory=60.12, local_gpu_memory=78.50, local_gpu_memory * 0.9=70.65")
    assert u.data["code"] == "rank-imbalance" and u.data["min_gib"] == 60.12


def test_hard_wrapped_pool_line_is_joined(tmp_path):
    from kvscope.api import analyze

    log = tmp_path / "wrapped.log"
    log.write_text("[2026-02-28 12:26:11 TP0] KV Cache is allocated. #tokens: 159277, K size: 0.3\n"
                   "0 GB, V size: 0.30 GB\n[2026-02-28 12:26:11 TP0] Memory pool end. avail mem=11.18 GB\n")
    s = analyze([str(log)]).startups[0]
    pool = s.reference_rank.pool("target")
    assert pool.tokens == 159277 and pool.k_gib == 0.30 and pool.v_gib == 0.30


def test_prefixed_and_decorated_real_log(tmp_path):
    """journald + CRLF + ANSI (with and without ESC) around the founding case's real lines."""
    from kvscope.api import analyze
    from tests.conftest import case_dir

    raw = (case_dir("sglang", "000") / "log.txt").read_text().splitlines()
    decorated = []
    for i, line in enumerate(raw):
        line = line.replace("KV Cache", "\x1b[32mKV Cache\x1b[0m" if i % 2 else "[32mKV Cache[0m")
        decorated.append(f"Feb 28 12:26:11 gpu-node python3[1234]: {line}\r\n")
    log = tmp_path / "journal.log"
    log.write_text("".join(decorated))
    s = analyze([str(log)]).startups[0]
    assert s.capacity.kv_tokens == 159277 and len(s.ranks) == 8
    assert sum(len(r.kv_pools) for r in s.ranks) == 9


def test_dsv4_sizing_lines_become_a_pool_and_a_finding():
    """DeepSeek-V4 prints no 'KV Cache is allocated' line: its pools come from 'DSV4 memory calculation'
    (bytes per full token × tokens + fixed ratio-128 states) and 'DSV4 pool sizes'."""

    from kvscope.api import analyze

    path = FIXTURES / "dsv4" / "sglang-0.5.15-v4pro-mi355x-sizing-lines.txt"
    s = analyze([str(path)]).startups[0]
    assert s.engine == "sglang" and s.capacity.kv_tokens == 9_217_792
    x = s.capacity.extras
    assert x["dsv4_bytes_per_full_token"] == 13735.04 and x["dsv4_c128_state_fixed_gib"] == 1.01
    assert x["dsv4_swa_tokens"] == 1_382_656 and x["dsv4_c4_tokens"] == 2_304_448 and x["dsv4_c128_tokens"] == 72_014
    pool = s.reference_rank.kv_pools[0]
    assert pool.gib == pytest.approx(118.93, abs=0.01)  # tokens × bytes + fixed = the available bytes it printed
    f = next(f for f in s.findings if f.code == "dsv4-pools")
    assert "13,735.04 B" in f.title and "15% of the tokens" in f.detail


def test_dsv4_sizing_per_rank_and_dp_groups():
    """Each DP rank prints its own V4 sizing line: the reference rank's become the capacity (not the last
    one printed), and the flag the finding suggests is global (256 slots per DP rank × 8 = 2048)."""

    from kvscope.api import analyze

    path = FIXTURES / "dsv4" / "constructed-sglang-v4pro-dp8-ranks.log"
    s = analyze([str(path)]).startups[0]
    assert s.capacity.kv_tokens == 142_080 and s.capacity.extras["dsv4_full_tokens"] == 142_080
    f = next(f for f in s.findings if f.code == "dsv4-pools")
    assert f.suggestion.from_value == 2048 and f.suggestion.to_value == 512
    assert "per DP rank (2048 in all)" in f.detail
