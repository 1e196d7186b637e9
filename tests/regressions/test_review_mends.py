"""Behaviour a review of the harvested-log mends found wrong, pinned on small logs built from real lines."""

from __future__ import annotations

from pathlib import Path

from kvscope.api import analyze
from tests.conftest import case_dir, case_files

SGLANG_SERVING = """\
[2025-06-01 10:00:00 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=60.10 GB, mem usage=15.02 GB.
[2025-06-01 10:00:01 TP0] KV Cache is allocated. #tokens: 400000, K size: 24.41 GB, V size: 24.41 GB
[2025-06-01 10:00:01 TP0] Memory pool end. avail mem=10.00 GB
[2025-06-01 10:01:00 TP0] Decode batch. #running-req: 3, #token: 2000, token usage: 0.01, gen throughput (token/s): 100.00, #queue-req: 0,
[2025-06-01 10:01:10 TP0] Decode batch. #running-req: 3, #token: 2100, token usage: 0.01, gen throughput (token/s): 100.00, #queue-req: 0,
[2025-06-01 10:01:20 TP0] Traceback (most recent call last):
"""


def test_a_traceback_while_serving_is_not_a_failed_startup(tmp_path: Path):
    log = tmp_path / "serving.log"
    log.write_text(SGLANG_SERVING)
    (s,) = analyze([str(log)]).startups
    assert s.failure is None


def test_a_bare_time_stamp_does_not_make_an_oom_sglangs(tmp_path: Path):
    """A vLLM excerpt whose lines a pasting tool stamped "[14:02:11] " keeps its OOM (no SGLang startup)."""
    lines = Path(case_files(case_dir("vllm", "025"))[0]).read_text().splitlines()
    log = tmp_path / "stamped.log"
    log.write_text("".join(f"[14:02:11] {line}\n" for line in lines) + "[14:02:11] torch.OutOfMemoryError: CUDA out of "
                   "memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 44.39 GiB of which 1.05 GiB is free.\n")
    startups = analyze([str(log)]).startups
    assert [s.engine for s in startups] == ["vllm"]
    assert startups[0].failure is not None and startups[0].failure.data["read_as"] == "cuda-oom"


def test_sglang_claims_do_not_carry_over_to_the_next_file(tmp_path: Path):
    other = tmp_path / "other.log"
    other.write_text("RuntimeError: CUDA error: an illegal memory access was encountered\n")
    analysis = analyze(case_files(case_dir("sglang", "033")) + [str(other)])
    assert all(s.file != str(other) for s in analysis.startups)


def test_dsv4_pool_follows_the_pool_sizes_line_when_the_sizing_line_is_clipped():
    """A terminal clipped 'full_token=…' on an Ascend log (harvested sglang/323): the pool is sized from the
    'DSV4 pool sizes' count, marked derived, and agrees with the startup's capacity."""
    from tests.conftest import FIXTURES

    case = sorted((FIXTURES / "harvested" / "sglang").glob("323*"))[0]
    (s,) = analyze([str(case / "log.txt")]).startups
    ref = s.reference_rank
    pool = next(p for p in ref.kv_pools if p.name == "DeepSeek-V4 pools")
    assert pool.tokens == s.capacity.kv_tokens != 8529
    assert "dsv4_pool_derived" in ref.extras


def test_a_draft_load_keeps_its_begin_figure(tmp_path: Path):
    """An excerpt holding only the NextN draft's load: its 'Load weight begin' is the draft's free memory, not
    the target's baseline."""
    log = tmp_path / "draft.log"
    log.write_text(
        "[2026-09-21 13:38:14 TP0] Load weight begin. avail mem=18.59 GB\n"
        "[2026-09-21 13:38:18 TP0] Load weight end. elapsed=3.86 s, type=Glm5NextForConditionalGenerationNextN, "
        "quant=fp8, fmt=e4m3, avail mem=16.18 GB, mem usage=2.39 GB.\n")
    (s,) = analyze([str(log)]).startups
    r = s.reference_rank
    assert r.pre_load_free_gib is None and r.weights_gib is None
    assert r.extras["draft_pre_load_free_gib"] == 18.59 and r.extras["draft_weights_gib"] == 2.39


def test_fourth_harvest_sglang_shapes():
    """Harvested sglang/402: a bare 'Capture cuda graph failed: CUDA out of memory' is a failed startup;
    sglang/403 (≤0.1.x): 'Avail mem=' / 'Type=' and 'Initialization failed. router_init_state'."""
    from tests.conftest import FIXTURES

    def one(prefix: str):
        case = sorted((FIXTURES / "harvested" / "sglang").glob(f"{prefix}*"))[0]
        return analyze([str(case / "log.txt")]).startups

    (oom,) = one("402")
    assert oom.failure is not None and oom.failure.data["read_as"] == "cuda-oom" and oom.failure.data["stage"] == "graph-capture"
    (old,) = one("403")
    assert {r.rank: r.avail_after_weights_gib for r in old.ranks}["rank=0"] == 5.64
    assert old.failure is not None


def test_quoted_messages_are_cut_at_a_word_with_an_ellipsis():
    from kvscope.core.text import excerpt

    assert excerpt("this process has 47.35 GiB memory in use.   Of the allocated", 40) == "this process has 47.35 GiB memory in …"
    assert excerpt("short   line", 40) == "short line"
