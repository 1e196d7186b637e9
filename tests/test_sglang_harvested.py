"""SGLang on held-out real logs (tests/fixtures/harvested/sglang): the shapes the first set did not have —
0.2/0.3-era prefixes, device errors, a negative profile, upper-case device names in graph lines, Mamba
state pools, wrapped capture failures."""

from __future__ import annotations

import json

import pytest

from kvscope import events as ev
from kvscope.api import analyze
from kvscope.engines.base import LineContext
from kvscope.engines.sglang import rules
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
    """meta.json names 0.2.x ranks as printed ('gpu_id=0'); kvscope labels them TP0."""
    return f"TP{meta_rank.split('=')[1]}" if meta_rank.startswith("gpu_id=") else meta_rank


FIELDS = {"avail_after_weights_gb": "avail_after_weights_gib", "avail_after_pool_gb": "avail_after_pool_gib"}


@pytest.mark.parametrize("case", [c for c in CASES if json.loads((c / "meta.json").read_text())
                                  ["ground_truth"].get("per_rank")], ids=lambda c: c.name[:3])
def test_every_rank_keeps_its_own_numbers(case):
    """Each rank's printed figures land on that rank (a time-only or gpu_id prefix is still a rank)."""
    s = analyze(case_files(case)).startups[0]
    per_rank = json.loads((case / "meta.json").read_text())["ground_truth"]["per_rank"]
    for name, values in per_rank.items():
        r = _rank(s, _label(name))
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
    assert s.failure is not None and s.failure.kind == "exception"
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
    assert s.failure is not None and s.failure.kind == "exception"
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
    assert ref.extras["mamba_mamba_slots"] == slots
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
    assert s.failure is not None and s.failure.kind == "exception"
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
    # an OOM inside the wrapper is left to engines/common.py, which reads "Tried to allocate"
    assert SGLangLines().parse("Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB",
                               LineContext()) == []


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
