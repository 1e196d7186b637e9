"""SGLang on held-out real logs (tests/fixtures/harvested/sglang): the shapes the first set did not have —
0.2/0.3-era prefixes, device errors, a negative profile, upper-case device names in graph lines, Mamba
state pools, wrapped capture failures."""

from __future__ import annotations

import json

import pytest

from kvscope.api import analyze
from kvscope.core import events as ev
from kvscope.engines.base import LineContext
from kvscope.engines.sglang import rules
from kvscope.engines.sglang.facts import SGLangRankFacts
from kvscope.engines.sglang.lines import SGLangLines, split_prefix
from tests.conftest import FIXTURES, case_files

HARVESTED = FIXTURES / "harvested" / "sglang"
CASES = sorted(p.parent for p in HARVESTED.glob("*/meta.json"))


def _dir(prefix: str):
    matches = sorted(HARVESTED.glob(f"{prefix}*"))
    assert matches, f"no harvested case {prefix}*"
    return matches[0]


def _one(prefix: str, model: str | None = None):
    startups = analyze(case_files(_dir(prefix)), {}, model).startups
    assert startups
    return startups[0]


def _rank(s, label: str):
    return next(r for r in s.ranks if r.rank == label)


def _finding(s, code: str):
    return next(f for f in s.findings if f.code == code)


def _label(meta_rank: str) -> str:
    """meta.json names 0.2.x ranks as printed ('gpu_id=0'); kvscope labels them TP0. A note after the
    label ('TP5 (second run)') is the harvester's, not part of the rank."""
    meta_rank = meta_rank.split(" (")[0]
    return f"TP{meta_rank.split('=')[1]}" if meta_rank.startswith("gpu_id=") else meta_rank


FIELDS = {"avail_after_weights_gb": "avail_after_weights_gib", "avail_after_pool_gb": "avail_after_pool_gib"}


@pytest.mark.parametrize("case", [c for c in CASES if json.loads((c / "meta.json").read_text())
                                  ["ground_truth"].get("per_rank")], ids=lambda c: c.name[:3])
def test_every_rank_keeps_its_own_numbers(case):
    """Each rank's printed figures land on that rank (a time-only or gpu_id prefix is still a rank)."""
    startups = analyze(case_files(case)).startups
    per_rank = json.loads((case / "meta.json").read_text())["ground_truth"]["per_rank"]
    for name, values in per_rank.items():
        r = next(r for s in startups for r in s.ranks if r.rank == _label(name))  # a later run's rank: a later startup
        for key, value in values.items():
            if key in FIELDS:
                assert getattr(r, FIELDS[key]) == value, (name, key)


# 1. 0.3.x: "[23:17:01 TP0]" (time, no date)
def test_time_only_prefix_is_a_rank():
    assert split_prefix("[23:17:01 TP7] Memory pool end. avail mem=18.66 GB") == (
        "TP7", "23:17:01", "Memory pool end. avail mem=18.66 GB")
    s = _one("004")
    assert len(s.ranks) == 8
    tp0, tp7 = _rank(s, "TP0"), _rank(s, "TP7")
    assert tp0.avail_after_pool_gib == 18.66 and tp0.avail_after_weights_gib is None  # TP7's load line is not TP0's
    assert tp7.avail_after_weights_gib == 22.01 and tp7.avail_after_pool_gib == 18.66
    assert "avail_after_draft_pool_gib" not in tp0.extras  # eight ranks' pool ends are not a draft pool


def test_run_tp_server_exception_is_a_failure():
    s = _one("004")
    assert s.failure is not None and s.failure.kind == "engine-init-failed" and s.failure.data["read_as"] == "exception"
    assert "run_tp_server" in s.failure.message
    f = _finding(s, "startup-exception")
    assert "while capturing CUDA graphs" in f.title  # "Capture cuda graph begin." without avail mem still counts


# 2. 0.2.x: "[gpu_id=N]" prefix, flashinfer's "CUDA Error: no kernel image …"
def test_gpu_id_prefix_is_a_tp_rank():
    assert split_prefix("[gpu_id=3] Memory pool end. avail mem=2.52 GB")[0] == "TP3"
    s = _one("005")
    assert sorted(r.rank for r in s.ranks) == ["TP0", "TP1", "TP2", "TP3"]
    assert s.reference_rank.rank == "TP0" and s.reference_rank.avail_after_pool_gib == 2.57


def test_cuda_error_is_a_startup_failure_not_an_oom():
    s = _one("005")
    assert s.failure is not None and s.failure.kind == "engine-init-failed" and s.failure.data["read_as"] == "exception"
    assert s.failure.data["device_error"].startswith("no kernel image")
    f = _finding(s, "startup-exception")
    assert f.severity == "error" and "compute capability" in f.detail
    assert "usual cause" not in f.detail


def test_cuda_error_needs_an_sglang_log():
    """The wording is generic: a line alone (no SGLang prefix seen) is left to other parsers."""
    line = "RuntimeError: CUDA error: no kernel image is available for execution on the device"
    assert SGLangLines().parse(line, LineContext()) == []
    ctx = LineContext()
    SGLangLines().parse("[2026-01-01 00:00:00 TP0] Memory pool end. avail mem=2.00 GB", ctx)
    (p,) = SGLangLines().parse(line, ctx)
    assert p.kind == ev.FAILURE and p.data["device_error"].startswith("no kernel image")
    assert SGLangLines().parse("RuntimeError: CUDA error: out of memory", ctx) == []  # engines/common.py reads OOMs


# 3. a negative profile: weights + reserve exceed the budget
def test_negative_profiled_value_is_not_enough_memory():
    s = _one("007")
    assert s.failure is not None and s.failure.kind == "not-enough-memory"
    assert s.failure.data["profiled_tokens"] == -561_981
    f = _finding(s, "not-enough-memory")
    assert f.severity == "error" and "-561,981" in f.detail
    assert not any(f.code == "max-total-tokens-clamped" for f in s.findings)  # no "room for -561,981 tokens"


# 4. graph lines with an upper-case device and "target decode"
def test_npu_graph_end_line_is_read():
    s = _one("012")
    tp0 = s.reference_rank
    assert tp0.cuda_graph_gib == 0.73 and tp0.avail_at_ready_gib == 0.81
    assert tp0.extras["avail_before_graphs_gib"] == 1.54
    assert tp0.extras["graphs"][0]["graph"] == "target decode"
    (p,) = SGLangLines().parse("[2026-01-01 00:00:00 TP0] Capture draft extend NPU graph end. elapsed=1.00 s, "
                               "mem usage=0.20 GB, avail mem=3.00 GB.", LineContext())
    assert p.data == {**p.data, "phase": "graph_end", "graph": "draft extend", "graph_gib": 0.2, "avail_gib": 3.0}


# 5. Mamba state pools (hybrid models)
@pytest.mark.parametrize(("prefix", "gib", "slots"), [("009", 2.77, 38), ("011", 7.42, 82)])
def test_mamba_pool_in_ledger_and_budget(prefix, gib, slots):
    s = _one(prefix)
    ref = s.reference_rank
    mamba = ref.pool("mamba")
    assert mamba is not None and mamba.gib == pytest.approx(gib)
    assert SGLangRankFacts(ref).mamba_mamba_slots == slots
    assert any(row.item.startswith("Mamba state pool") and row.gib == pytest.approx(gib) for row in ref.ledger)
    # the implied mem_fraction_static pays for the state pool too (size of size + 1 slots printed)
    target = ref.pool("target")
    state = gib * slots / (slots + 1)
    want = rules.implied_mfs(ref.pre_load_free_gib, ref.avail_after_weights_gib, target.tokens,
                             s.reconciliation.bytes_per_token, state)
    assert s.capacity.extras["implied_mem_fraction_static"] == pytest.approx(want, abs=1e-4)
    assert "Mamba state pool" in s.reconciliation.detail


def test_mamba_pool_paid_before_kv_when_mfs_is_logged(tmp_path):
    """011 with its implied mem_fraction_static logged: rest − Mamba pool buys exactly the printed token count."""
    log = tmp_path / "log.txt"
    log.write_text("[2026-02-20 10:00:00] server_args=ServerArgs(model_path='x', mem_fraction_static=0.849, tp_size=2)\n"
                   + (_dir("011") / "log.txt").read_text())
    s = analyze([str(log)]).startups[0]
    assert "− Mamba 7.33" in s.reconciliation.detail and s.reconciliation.consistent is True


# 6. "Capture cuda graph failed" + "Possible solutions" before the scheduler's exception line
def test_capture_failed_wording_is_the_cause():
    s = _one("021")
    assert s.failure is not None and s.failure.kind == "engine-init-failed" and s.failure.data["read_as"] == "exception"
    assert s.failure.data.get("stage") == "graph-capture"
    assert "Capture cuda graph failed" in s.failure.message  # not the later "Scheduler hit an exception"
    f = _finding(s, "startup-exception")
    assert "capture" in f.title.lower() and not f.title.endswith(" ")
    assert "traceback after this line" not in f.detail


def test_capture_failed_line_shapes():
    (p,) = SGLangLines().parse("Exception: Capture cuda graph failed: RMSNorm failed with error code no kernel image",
                               LineContext())
    assert p.kind == ev.FAILURE and p.data["cause"] == "RMSNorm failed with error code no kernel image"
    assert "weak" not in p.data  # the cause outranks the scheduler's later "hit an exception"
    # an OOM inside SGLang's wrapper is SGLang's (the line alone starts a failed startup: harvested sglang/402),
    # with the sizes torch printed, read by engines/common.py's OOM reader
    (oom,) = SGLangLines().parse("Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB",
                                 LineContext())
    assert oom.data["kind"] == "cuda-oom" and oom.data["stage"] == "graph-capture" and oom.data["tried_gib"] == 2.0


# 7. a capture failure with ample memory free is not blamed on OOM
def test_capture_failure_with_memory_free_is_not_called_oom():
    f = _finding(_one("010"), "startup-exception")
    assert "35.10 GiB" in f.detail and "unlikely" in f.detail
    assert "usual cause" not in f.detail


# 8. no stray ". ." when a reconciliation has no detail
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name[:3])
def test_no_stray_sentence_joins(case):
    for s in analyze(case_files(case)).startups:
        for f in s.findings:
            assert ". ." not in f.detail and not f.title.endswith(" "), (f.code, f.detail)


# 9. the 0.2.x wording is dated honestly
def test_gpu_id_prefix_era_is_before_0_3():
    s = _one("005")
    assert "before 0.3.0" in s.era and s.era.startswith("E0")


def test_time_only_prefix_gives_no_bogus_date_bound():
    # 0.3.x "Load weight end" without mem usage (≤0.4.3); "23:17:01" is not a date to bound the version with
    assert _one("004").era == "E0 (0.3.0 – 0.4.3)"


# 10. no pool line: the drop in free memory across the pool step, derived
def test_unprinted_pool_derived_in_ledger():
    ref = _one("003").reference_rank
    row = next(row for row in ref.ledger if row.item.startswith("KV pool + request table"))
    assert row.how == "derived" and row.gib == pytest.approx(176.33 - 22.83)


# 11. a rank's traceback after "Capture cuda graph begin" (0.3.x, no avail mem, no wrapper line) stops the startup
def test_rank_traceback_during_capture_is_a_capture_failure():
    s = _one("216")
    assert s.failure is not None and s.failure.kind == "engine-init-failed" and s.failure.data["read_as"] == "exception"
    assert s.failure.data.get("stage") == "graph-capture" and s.failure.data.get("traceback") is True
    f = _finding(s, "startup-exception")
    assert f.title == "Startup failed: CUDA graph capture raised an exception"
    assert "traceback's last lines" in f.detail and "above it" not in f.detail and "8.38 GiB" in f.detail


def test_traceback_needs_an_sglang_rank_and_a_startup_not_yet_ready():
    lines = SGLangLines()
    assert lines.parse("Traceback (most recent call last):", LineContext()) == []  # no prefix: any program's
    assert lines.parse("[12:00:00] Traceback (most recent call last):", LineContext()) == []  # a bare stamp proves nothing
    ctx = LineContext()
    (p,) = lines.parse("[2026-01-01 00:00:00 TP1] Traceback (most recent call last):", ctx)
    assert p.kind == ev.FAILURE and p.data["weak"] and "stage" not in p.data  # no capture began: stage left to findings
    lines.parse("[2026-01-01 00:00:01 TP0] max_total_num_tokens=1000, max_running_requests=8, context_len=512", ctx)
    assert lines.parse("[2026-01-01 00:00:02 TP0] Traceback (most recent call last):", ctx) == []  # serving-time


# 12. a shortened 'Load weight end' (fields by name) and a rounded '#tokens: 273K'
def test_shortened_load_line_and_rounded_token_count():
    s = _one("218")
    ref = s.reference_rank
    assert ref.weights_gib == 28.39 and ref.avail_after_weights_gib is None
    assert ref.extras["model_class"] == "Qwen3_5ForConditionalGeneration"
    assert ref.extras["draft_weights_gib"] == 5.18 and ref.extras["draft_model_class"] == "Qwen3_5ForCausalLMMTP"
    assert s.capacity.kv_tokens is None and not any(p.tokens for p in ref.kv_pools)  # 273K is not a token count
    assert s.capacity.extras["kv_tokens_approx"] == 273_000 and s.capacity.extras["kv_tokens_as_printed"] == "273K"


def test_load_weight_end_fields_are_each_optional():
    ctx = LineContext()
    (p,) = SGLangLines().parse("Load weight end ... type=X, mem usage=2.00 GB", ctx)
    assert p.data["weights_gib"] == 2.0 and p.data["avail_after_weights_gib"] is None
    (p,) = SGLangLines().parse("Load weight end. type=X, dtype=torch.bfloat16, avail mem=28.91 GB", ctx)
    assert p.data["avail_after_weights_gib"] == 28.91 and p.data["weights_gib"] is None
    assert SGLangLines().parse("Load weight end", ctx) == []  # no field: prose, not a load
    (p,) = SGLangLines().parse("KV Cache is allocated ... #tokens: 4096", ctx)  # exact count, sizes cut
    assert p.kind == ev.POOL and p.data["tokens"] == 4096


# 13. the draft model's load, named by its class, is the draft's wherever it comes
def test_nextn_draft_load_is_not_the_target_weights():
    s = _one("202")
    for label, avail in (("TP1", 16.2), ("TP3", 16.18)):
        r = _rank(s, label)
        assert r.weights_gib is None and r.avail_after_weights_gib is None and r.pre_load_free_gib is None
        assert r.extras["draft_weights_gib"] == 2.39 and r.extras["avail_after_draft_weights_gib"] == avail


def test_draft_by_order_still_works_and_class_marks():
    ref = _one("213").reference_rank  # LlamaForCausalLM then LlamaForCausalLMEagle
    assert ref.weights_gib == -4.48 and ref.extras["draft_weights_gib"] == 0.93
    assert ref.extras["avail_after_draft_weights_gib"] == 54.23 and ref.extras["draft_pre_load_free_gib"] == 55.16
    for cls, draft in (("DeepseekV3ForCausalLMNextN", True), ("MiMoMTP", True), ("Eagle3DeepseekV2ForCausalLM", True),
                       ("DFlashDraftModel", True), ("LlamaForCausalLMEagle3", True),
                       ("Eagle2_5_VLForConditionalGeneration", False), ("Qwen3NextForCausalLM", False)):
        (p,) = SGLangLines().parse(f"Load weight end. type={cls}, avail mem=10.00 GB, mem usage=1.00 GB.", LineContext())
        assert (p.data["phase"] == "draft_weights_end") is draft, cls


# 14. --max-total-tokens caps the pool: the budget check, the reserve and the +0.01 advice know it
def test_max_total_tokens_caps_the_pool():
    s = _one("213")
    rec = s.reconciliation
    assert rec.consistent is True and rec.kv_tokens_low == rec.kv_tokens_high == 20_480
    assert "capped at --max-total-tokens 20,480" in rec.detail and "OUTSIDE" not in rec.detail
    assert s.capacity.extras["max_total_tokens_cap"] == 20_480
    codes = {f.code for f in s.findings}
    assert "reserve-is-not-waste" not in codes and "mfs-headroom" not in codes and "thin-reserve" not in codes
    f = _finding(s, "max-total-tokens-caps-pool")
    assert f.suggestion is None and "raise or drop --max-total-tokens" in f.detail and "119,917" in f.detail


def test_capped_pool_under_load_suggests_the_cap_not_the_fraction(tmp_path):
    text = (_dir("213") / "log.txt").read_text()
    startup = text[: text.index("max_total_num_tokens=")]
    startup += text[text.index("max_total_num_tokens="):].split("\n", 1)[0] + "\n"
    serving = "".join(f"[2025-04-01 16:45:{i:02d} TP0] Decode batch. #running-req: 40, #token: 20480, token usage: 1.00, "
                      f"gen throughput (token/s): 900.00, #queue-req: {5 + i}\n" for i in range(30))
    log = tmp_path / "log.txt"
    log.write_text(startup + serving)
    s = analyze([str(log)]).startups[0]
    f = _finding(s, "capacity-bound")
    assert "--max-total-tokens 20,480 set the pool size" in f.detail and "+0.01" not in f.detail
    assert "fp8" not in f.detail  # a smaller cell buys no tokens past the cap
    assert f.suggestion is not None and f.suggestion.flag == "--max-total-tokens" and f.suggestion.to_value > 20_480


# 15. one serving line with a request waiting is no evidence of a scheduler limit
def test_one_queued_sample_is_not_a_not_memory_warning():
    s = _one("210")
    f = _finding(s, "not-memory-bound")
    assert f.severity == "info" and f.suggestion is None and "too brief" in f.detail
    assert s.runtime["verdict"]["limit"] is None and s.runtime["verdict"]["evidence"] == "brief"


# 16. an OOM with an SGLang rank prefix (terminal-wrapped: runs of spaces inside) is this startup's failure
def test_sglang_prefixed_wrapped_oom_is_a_startup():
    s = _one("222")
    assert s.engine == "sglang" and s.failure is not None and s.failure.data["read_as"] == "cuda-oom"
    assert s.failure.data["tried_gib"] == pytest.approx(24 / 1024)
    assert s.failure.data["device_total_gib"] == 47.37 and s.failure.data["device_free_gib"] == pytest.approx(4.31 / 1024)
    # 47.35 of 47.37 GiB in use before any weights line: the weights do not fit as split (a larger --tp)
    assert _finding(s, "weights-oom").suggestion.flag == "--tp"
    # without the prefix the line stays engine-neutral (engines/common.py)
    assert SGLangLines().parse("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", LineContext()) == []


# 17. 0.4.x's multimodal wording: "Automatically reduce --mem-fraction-static to 0.760 …"
def test_automatically_reduced_mem_fraction_static():
    s = _one("221")
    assert s.setting("mem_fraction_static") == 0.76
    (p,) = SGLangLines().parse("Dynamically adjusted --mem-fraction-static from: 0.85 to: 0.79", LineContext())
    assert p.data == {"mem_fraction_static": 0.79, "mem_fraction_static_auto": 0.85}


def test_capped_pool_implies_no_mem_fraction_static(tmp_path):
    """Without mem_fraction_static in the log, a pool of exactly --max-total-tokens says nothing about it."""
    log = tmp_path / "log.txt"
    log.write_text((_dir("213") / "log.txt").read_text().replace("mem_fraction_static=0.88, ", ""))
    s = analyze([str(log)]).startups[0]
    assert s.setting("mem_fraction_static") is None
    assert "implied_mem_fraction_static" not in s.capacity.extras
    assert "the cap, not the memory budget, sized the pool" in s.reconciliation.detail
    assert _finding(s, "max-total-tokens-caps-pool").severity == "info"


def test_runs_pasted_one_after_another_are_separate_startups():
    """217 (PR #5893): three capture attempts quoted under prose headers, no banner between them. A rank that
    ends the target capture again, or a capture progress bar after a capture ended, opens another run; each
    run keeps its own numbers, and the too-small reserve after bs-256 graphs is named with a lower fraction."""
    startups = analyze(case_files(_dir("217")), {"gpu": "H200", "tp_size": 8}).startups
    assert len(startups) == 3
    first, second, third = startups
    assert _rank(first, "TP7").cuda_graph_gib == 6.22 and _rank(first, "TP7").avail_at_ready_gib == 5.61
    assert _rank(second, "TP5").cuda_graph_gib == 6.27 and _rank(second, "TP5").avail_at_ready_gib == 5.09
    assert not any(r.rank == "TP5" for r in first.ranks)
    assert third.ranks[0].extras["avail_during_capture_gib"] == 8.49
    thin = _finding(second, "thin-reserve")
    assert "6.27 GB" in thin.detail and "5.09 GB" in thin.title
    assert thin.suggestion.flag == "--mem-fraction-static" and thin.suggestion.to_value < thin.suggestion.from_value


def test_the_draft_capture_after_the_target_is_one_startup():
    """014: the target's graph end, then the draft's on another rank two minutes later: one run."""
    assert len(analyze(case_files(_dir("014"))).startups) == 1


def test_a_refused_input_names_the_kv_pool():
    """406 (#4048): 'exceeds the maximum allowed length (59862 tokens)' with DeepSeek-R1 (context 163,840): SGLang caps a
    request at min(context_len − 1, pool − 1) − 5, so the pool is 59,868 tokens, and the answer says so."""
    s = _one("406", "deepseek-ai/DeepSeek-R1")
    assert s.capacity.max_total_num_tokens == 59_868
    refused = _finding(s, "input-longer-than-pool")
    assert "59,868" in refused.title and "160,062" in refused.title
    assert s.answer is not None and s.answer.situation.startswith(refused.title)


def test_a_refused_input_with_a_round_bound_is_not_guessed(tmp_path):
    """A bound of 4,096 could be the context length as well as the pool: both are named, neither is set."""
    log = tmp_path / "log.txt"
    log.write_text("[2025-03-03 06:49:28 TP0] Input length (5000 tokens) exceeds the maximum allowed length (4090 tokens). "
                   "Use a shorter input or enable --allow-auto-truncate.\n")
    s = analyze([str(log)]).startups[0]
    assert s.capacity.max_total_num_tokens is None
    assert "the KV pool or the context length is 4,096" in _finding(s, "input-longer-than-pool").title


def test_a_traceback_names_the_step_and_the_error_it_raised():
    """203 (MinerU): 'Scheduler hit an exception' during capture with 1.56 GB free: the traceback ends in a ninja
    CalledProcessError from FlashInfer's JIT, so the answer is a failed kernel build, never an out-of-memory."""
    s = _one("203")
    f = _finding(s, "startup-exception")
    assert "compiling a kernel" in f.title and "FlashInfer's JIT compile" in f.detail
    assert "out of memory" not in f.detail.replace("not an out-of-memory", "")
    assert any("CalledProcessError" in r for r in s.failure.data["raised"])


def test_a_traceback_cut_in_the_attention_backend_says_where():
    """008 (MI355X, AITER): the traceback stops in init_attention_backend right after a 203.9 GB pool."""
    f = _finding(_one("008"), "startup-exception")
    assert "attention backend" in f.title and "workspace" in f.detail


def test_a_runner_after_the_target_graphs_is_the_draft_worker():
    """401 (#4233): 'Init torch distributed begin' on TP4 right after every rank ended the target capture: the draft
    worker, whose balance check trips on the target's own allocations: never 'other processes'."""
    s = _one("401")
    f = _finding(s, "second-model-runner")
    assert "TP4" in f.title and "draft" in f.detail and "other processes" not in f.detail
    assert len(analyze(case_files(_dir("401"))).startups) == 1


def _question(prefix: str, assumptions: dict | None = None, model: str | None = None):
    case = next((FIXTURES / "questions").glob(f"{prefix}-*"))
    return analyze([str(case / "log.txt")], assumptions or {}, model).startups[0]


def test_a_capture_failure_with_small_batches_and_room_is_not_called_memory():
    """question 202 (RTX 5060): capture of bs ≤ 4 for a 0.99 GB model with 4.78 GB free fails: not an out-of-memory."""
    f = _finding(_question("202"), "startup-exception")
    assert "an out-of-memory is unlikely" in f.detail and "batches this small" in f.detail


def test_the_dsa_indexer_cache_left_out_of_the_printed_size_is_named():
    """question 204 (DeepSeek-V3.2 on B200, main branch): 54.52 GB printed, 65.49 GB with the indexer's K cache;
    the ranks are DP-labelled, so DP attention is never suggested as if it were off."""
    s = _question("204", {"mem_fraction_static": 0.8, "tp_size": 8}, "deepseek-ai/DeepSeek-V3.2-Exp")
    f = _finding(s, "dsa-indexer-not-counted")
    assert "54.52 GiB" in f.title and "65.49 GiB" in f.title and "10.97 GiB" in f.detail
    assert not any(x.code == "mla-replicated" for x in s.findings)


def test_a_traceback_through_the_serving_loop_is_a_crash_while_serving():
    """question 210 (#6027, DP attention): 'TpModelWorkerClient hit an exception' through forward_thread_func →
    forward_extend, cut before its error: no failed startup; a crash while serving a prefill, with the levers that
    give a prefill's activations room, never a larger fraction."""
    s = _question("210")
    assert s.failure is None
    f = _finding(s, "error-while-serving")
    assert "while serving a prefill" in f.title and "--max-total-tokens" in f.detail
    assert f.suggestion is None or f.suggestion.to_value < f.suggestion.from_value
