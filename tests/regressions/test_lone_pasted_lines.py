"""One line pasted and nothing else, as operators often post. A torch out of memory (GB200, SGLang at
--mem-fraction-static 0.95, NVIDIA/srt-slurm#172 in questions/212): the user's own --assume names the engine, and
what the process held says where it failed. A lone vLLM concurrency figure: what it counts."""

from __future__ import annotations

from kvscope.analysis.assumptions import implied_engine
from kvscope.api import analyze
from tests.conftest import FIXTURES

LOG = next((FIXTURES / "questions").glob("212-*")) / "log.txt"


def test_settings_of_one_engine_name_it_and_neutral_facts_do_not():
    assert implied_engine({"mem_fraction_static": 0.95, "gpu": "GB200"}) == "sglang"
    assert implied_engine({"gpu_memory_utilization": 0.9}) == "vllm"
    assert implied_engine({"gpu": "H100", "tp_size": 4}) is None
    assert implied_engine({"mem_fraction_static": 0.9, "gpu_memory_utilization": 0.9}) is None


def test_a_lone_oom_is_no_startup_until_the_user_names_the_engine():
    assert analyze([str(LOG)], {"gpu": "GB200", "tp_size": 4}).startups == []
    (s,) = analyze([str(LOG)], {"gpu": "GB200", "tp_size": 4, "mem_fraction_static": 0.95}).startups
    assert s.engine == "sglang"


def test_an_oom_held_past_the_static_budget_came_out_of_the_reserve():
    """181.77 of 184 GiB held > 0.95 × 184: weights and pool were in place; the 4 GiB came out of the reserve,
    which must grow by the whole allocation (+0.5 GiB): 3 steps of 1.84 GiB, 0.95 → 0.92."""
    (s,) = analyze([str(LOG)], {"gpu": "GB200", "mem_fraction_static": 0.95}).startups
    assert s.failure.kind == "compute-buffer-oom" and s.failure.data["process_gib"] == 181.77
    sug = s.answer.suggestion
    assert (sug.flag, sug.from_value, sug.to_value) == ("--mem-fraction-static", 0.95, 0.92)
    # at a fraction the process stayed under, nothing says the pool was in place
    (low,) = analyze([str(LOG)], {"gpu": "GB200", "mem_fraction_static": 0.99}).startups
    assert "held_past_budget" not in low.failure.data


def test_a_lone_concurrency_line_says_what_it_counts():
    """vllm#8031: only 'Maximum concurrency for 8192 tokens per request: 4.61x' was posted; it counts full-length
    requests the cache holds (≈ 37,765 tokens), not a speed-up."""
    log = next((FIXTURES / "questions").glob("127-*")) / "log.txt"
    (s,) = analyze([str(log)]).startups
    f = next(f for f in s.findings if f.code == "kv-capacity")
    assert f.title == "Maximum concurrency 4.61x: about 4.6 requests of 8,192 tokens fit at once"
    assert "≈ 37,765 tokens" in f.detail and "(37,724–37,806" in f.detail
