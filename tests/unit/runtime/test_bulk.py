"""The bulk lane gives exactly what the per-line path gives.

``kvscope.engines.serving.BULK`` takes the dominant SGLang serving lines out of the per-line path
(reading/source.py hands them on as ``Bulk`` runs, runtime/accumulate.py folds them in one call).
Its whole claim is equivalence, so every test here analyses the same input twice, once with the
lane and once without it, and compares the full JSON report: real runtime fixtures, every real
log, journald-wrapped journals built from real lines, lines the lane must leave alone, restarts and
block boundaries.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvscope.api as api
from kvscope.engines.base import LineContext
from kvscope.engines.dispatch import _NEW_RECORD, BULK, BULK_LANE, ENGINES
from kvscope.engines.serving import NATIVE, VLLM_BULK, BulkLane, RuntimeLines, VllmRows, _a_date
from kvscope.reading import clean_line, source
from kvscope.render.json_out import render
from tests.conftest import FIXTURES

FIX = FIXTURES
RUNTIME = sorted((FIX / "runtime").glob("*.txt"))
LOGS = sorted((FIX / "logs").glob("*/*/log.txt"))
SATURATED = FIX / "runtime" / "sglang-0.5.18-qwen3-4b-saturated-retract.txt"


REGEX_LANE = BulkLane(BULK, None)  # the pure-Python lane, also where the C lane was built


def _report(paths: list[Path], bulk: bool | BulkLane, monkeypatch: pytest.MonkeyPatch) -> dict:
    lane = (BULK_LANE if bulk is True else bulk) or None
    monkeypatch.setattr(api, "BULK_LANE", lane)
    return json.loads(render(api.analyze([str(p) for p in paths])))


def _same(paths: list[Path], monkeypatch: pytest.MonkeyPatch) -> dict:
    """The same report with the lane as installed (C where built), the regex lane, and no lane."""
    with_lane = _report(paths, True, monkeypatch)
    without = _report(paths, False, monkeypatch)
    assert with_lane == without
    if NATIVE is not None:
        assert _report(paths, REGEX_LANE, monkeypatch) == without
    return with_lane


def _serving_lines() -> list[str]:
    """Every real SGLang Decode/Prefill batch line of the fixtures."""
    out = []
    for path in RUNTIME + LOGS:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if "Decode batch" in line or "Prefill batch" in line:
                out.append(line)
    return out


def _taken(line: str) -> bool:
    data = b"\n" + line.encode() + b"\n"
    m = BULK.match(data)
    return m is not None and m.end() == len(data) - 1


def test_lane_is_on_and_takes_real_lines():
    assert BULK is not None
    lines = _serving_lines()
    taken = [line for line in lines if _taken(line)]
    assert len(taken) > 50  # the dated, bracketed wordings of 2024-2026 releases
    assert any("Prefill batch" in line for line in taken) and any("cuda graph" in line for line in taken)


@pytest.mark.parametrize("path", RUNTIME, ids=lambda p: p.stem)
def test_runtime_fixtures_same_report(path: Path, monkeypatch: pytest.MonkeyPatch):
    _same([path], monkeypatch)


def test_every_real_log_same_report(monkeypatch: pytest.MonkeyPatch):
    _same(LOGS, monkeypatch)


def test_no_other_engine_reads_a_bulk_line():
    """What lets the lane skip the per-line dispatch: whatever engine is tried first, only the runtime
    parser makes anything of such a line, and no engine waits to join it with the next one."""
    ctx = LineContext()
    for line in _serving_lines():
        if not _taken(line):
            continue
        (text,) = clean_line(line)
        for engine in ENGINES:
            assert not engine.wants_join(text), (engine.engine, line)
            if not isinstance(engine, RuntimeLines):
                assert engine.parse(text, ctx) == [], (engine.engine, line)


def _journal(tmp_path: Path, extra: list[str], name: str = "journal.log") -> Path:
    """The saturated SGLang 0.5.18 run, journald-wrapped, its serving part repeated, with ``extra``
    lines spliced between the serving lines."""
    lines = SATURATED.read_text(encoding="utf-8").splitlines()
    jd = "Mar 01 12:26:11 gpu-node-7 python3[1234]: "
    out = []
    for i, line in enumerate(lines * 3):
        out.append(jd + line)
        if extra and "Decode batch" in line:
            out.append(extra[i % len(extra)])
    path = tmp_path / name
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


def test_journald_journal_with_restarts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    report = _same([_journal(tmp_path, [])], monkeypatch)
    assert len(report["startups"]) == 3
    assert all(s["runtime"] for s in report["startups"])


# Lines the lane must leave to the per-line path (or that sit between its lines), each of which
# would be read differently if the lane took it.
AWKWARD = [
    "[2026-03-01 12:26:11 TP0] Decode batch, #running-req: 3, #token: 100, token usage: 1..2, cuda graph: True, "
    "gen throughput (token/s): 5.00, #queue-req: 0,",  # unconvertible number: no sample
    "[2026-13-01 12:26:11 TP0] Decode batch, #running-req: 3, #token: 100, token usage: 0.50, cuda graph: True, "
    "gen throughput (token/s): 5.00, #queue-req: 0,",  # impossible date
    "[12:26:11 TP0] Decode batch, #running-req: 3, #token: 100, token usage: 0.50, "
    "gen throughput (token/s): 5.00, #queue-req: 2",  # time-only stamp: clock wraps
    "\x1b[32m[2026-03-01 12:26:12 TP0] Decode batch, #running-req: 4, #token: 100, token usage: 0.97, "
    "cuda graph: False, gen throughput (token/s): 5.00, #queue-req: 7\x1b[0m",  # colour
    "[2026-03-01 12:26:12 TP0] Decode batch, #running-req: 4, #token: 100, token usage: 0.60, "
    "gen throughput (token/s): 5.00, #queue-req: 1\r[2026-03-01 12:26:13 TP0] Decode batch, #running-req: 4, "
    "#token: 100, token usage: 0.70, gen throughput (token/s): 5.00, #queue-req: 0",  # CR progress
    "[2026-03-01 12:26:12 TP0] Decode batch, #running-req: 4, #token: 100, token usage: 0.60, "
    "gen throughput (token/s): 5.00, #queue-req: 1, #retracted-req",  # asks for a join
    "0, #more: 1",
    "[2026-03-01 12:26:12 DP1 TP1] Decode batch, #running-req: 9, #token: 500, token usage: 0.99, "
    "cuda graph: True, gen throughput (token/s): 7.00, #queue-req: 30",  # another DP group
    "[2026-03-01 12:26:12 TP1] Decode batch, #running-req: 9, #token: 500, token usage: 0.99, "
    "cuda graph: True, gen throughput (token/s): 7.00, #queue-req: 30",  # a TP rank that does not speak
    "[2026-03-01 12:26:12 rank=3] Decode batch, #running-req: 2, #token: 50, token usage: 0.10, "
    "gen throughput (token/s): 1.00, #queue-req: 0",
    "[2026-03-01 12:26:12 TP0] Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 1, "
    "cache hit rate: 12.50%, token usage: 0.30, #running-req: 2, #queue-req: 0, "
    "input throughput (token/s): 1..5",  # unconvertible optional number
    "[2026-03-01 12:26:12 TP0] Decode batch, #running-req: 2, #token: 50, token usage: 0.10, "
    "gen throughput (token/s): 1.00, #queue-req: 0, caf\u00e9: 1",  # non-ASCII
    'INFO:     127.0.0.1:40000 - "POST /generate HTTP/1.1" 200 OK',
    "[2026-03-01 12:26:12 TP0] Decode batch, #running-req: 4, #token: 100, token usage: 0.12345678901234567, "
    "gen throughput (token/s): 5.00000000000000001, #queue-req: 1",  # floats Python converts (the C lane asks it)
]


def test_awkward_lines_between_bulk_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    _same([_journal(tmp_path, AWKWARD)], monkeypatch)


@pytest.mark.parametrize("block", [257, 4096, 1 << 16])
@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_block_and_stretch_boundaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int, engine: str):
    """Lines cut by block ends, stretches of a few lines: the same report as one big block."""
    path = _journal(tmp_path, AWKWARD) if engine == "sglang" else _vllm_journal(tmp_path, AWKWARD_VLLM)
    expected = _report([path], False, monkeypatch)
    monkeypatch.setattr(source, "BLOCK_BYTES", block)
    monkeypatch.setattr(source, "BULK_BYTES", max(64, block // 3))
    assert _report([path], True, monkeypatch) == expected
    assert _report([path], False, monkeypatch) == expected


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_stretches_split_ahead_on_a_thread_give_the_same_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                engine: str):
    """Small stretches, so that each block has several and the later ones are split on the second
    thread: the C lane's own (a long number, the vLLM lane's stretches handed back to the reader) or,
    once the vLLM lane was needed, the Python one."""
    path = _journal(tmp_path, AWKWARD) if engine == "sglang" else _vllm_journal(tmp_path, AWKWARD_VLLM)
    monkeypatch.setattr(source, "BULK_BYTES", 2048)
    monkeypatch.setattr(source, "PREFETCH_SPLITS", False)
    expected = _report([path], True, monkeypatch)
    monkeypatch.setattr(source, "PREFETCH_SPLITS", True)
    assert _report([path], True, monkeypatch) == expected
    assert expected == _report([path], False, monkeypatch)


def test_two_files_and_an_engine_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    vllm = next(p for p in LOGS if "vllm" in str(p))
    report = _same([_journal(tmp_path, [], "a.log"), vllm, _journal(tmp_path, AWKWARD[:3], "b.log")], monkeypatch)
    assert {s["engine"] for s in report["startups"]} >= {"sglang", "vllm"}


def test_bulk_runs_keep_line_numbers(tmp_path: Path):
    """A run of bulk rows knows its first and last physical line; candidates around it keep theirs."""
    path = tmp_path / "j.log"
    dec = ("[2026-03-01 12:26:1{} TP0] Decode batch, #running-req: 1, #token: 10, token usage: 0.01, "
           "gen throughput (token/s): 1.00, #queue-req: 0")
    pool = "[2026-03-01 12:26:15 TP0] KV Cache is allocated. #tokens: 1000, K size: 1.00 GB, V size: 1.00 GB"
    retract = "[2026-03-01 12:26:16 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1"
    lines = ["x", dec.format(1), dec.format(2), "y", pool, dec.format(3), retract, "z"]
    path.write_text("\n".join(lines) + "\n")
    for lane in (BULK_LANE, REGEX_LANE):
        items = list(source.iter_candidate_lines([str(path)], api.ANCHORS, None, lane))
        got = [(i.line_no, i.last_line, len(i.rows)) if isinstance(i, source.Bulk) else (i.line_no, i.context)
               for i in items]
        assert got == [(2, 3, 2), (5, False), (6, 7, 2)]  # the retraction line joins the run


def test_serving_only_input_says_the_ledger_is_unknown():
    """A serving-log excerpt names ranks but no memory: no empty per-rank table, one plain sentence."""
    from kvscope.render import markdown, terminal

    path = FIX / "runtime" / "sglang-2025-12-decode-full-pool-queue.txt"
    analysis = api.analyze([str(path)])
    text = terminal.render(analysis)
    assert "serving lines only" in text and "Per-rank memory" not in text
    assert "serving lines only" in markdown.render(analysis)


# ---- the vLLM lane --------------------------------------------------------------------------------

VLLM_RUNTIME = [p for p in RUNTIME if p.name.startswith("vllm-")]


def _stats_lines() -> list[str]:
    """Every real vLLM stats line of the fixtures, as posted."""
    out = []
    for path in RUNTIME + LOGS + sorted((FIX / "logs").glob("vllm/*/*.log")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if "Avg prompt throughput" in line:
                out.append(line)
    return out


def _vllm_taken(line: str) -> bool:
    m = VLLM_BULK.fullmatch(line)
    return m is not None and _a_date(m.group(2), m.group(3))


def test_vllm_lane_takes_real_stats_lines():
    lines = _stats_lines()
    taken = [line for line in lines if _vllm_taken(line)]
    assert len(taken) >= 40, len(taken)
    wordings = {("Waiting" in x, "GPU KV" in x, "Prefix cache" in x, "Engine 0" in x, "MM cache" in x) for x in taken}
    assert len(wordings) >= 4  # V0 swapped/pending, V1 GPU and CPU pools, with and without the extras


@pytest.mark.parametrize("line", [x for x in _stats_lines() if _vllm_taken(x)][:80])
def test_vllm_lane_reads_a_line_as_the_per_line_path(line: str):
    """The line-level claim the lane rests on: same sample, label and stamp; no other engine reads
    the line and none waits to join it; it starts a new record (so no pending join takes it in)."""
    _assert_stats_line_same(line)


def _assert_stats_line_same(line: str) -> None:
    (text,) = clean_line(line)
    ctx = LineContext()
    per_line = RuntimeLines().parse(text, ctx)
    assert len(per_line) == 1
    lane = RuntimeLines().stats_rows(VllmRows([VLLM_BULK.fullmatch(line).groups()]), LineContext())
    assert lane == [(per_line[0].data, per_line[0].rank, per_line[0].timestamp)]
    assert _NEW_RECORD.match(text)
    for engine in ENGINES:
        assert not engine.wants_join(text), (engine.engine, line)
        if not isinstance(engine, RuntimeLines):
            assert engine.parse(text, ctx) == [], (engine.engine, line)


_MUTATIONS = st.sampled_from(["", "0", "9", ".", "..", " ", "  ", "%", ":", ",", "[", "[1m", "\x1b[0m", "\r", "\t",
                              "Engine ", "Engine 12: ", "(Engine pid=3) ", "é", "INFO ", "WARNING ", "-", "x"])


@settings(max_examples=int(os.environ.get("KVSCOPE_PROPERTY_EXAMPLES", "300")), deadline=None)
@given(data=st.data())
def test_vllm_lane_on_mutated_real_lines(data):
    """Real stats lines with bytes inserted, deleted or replaced anywhere: whenever the lane still
    takes one, the per-line path reads it the same."""
    line = data.draw(st.sampled_from([x for x in _stats_lines() if _vllm_taken(x)]))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(line)))
        cut = data.draw(st.integers(0, 3))
        line = line[:at] + data.draw(_MUTATIONS) + line[at + cut:]
    if "\n" in line or not _vllm_taken(line):
        return
    _assert_stats_line_same(line)


AWKWARD_VLLM = [
    "(APIServer pid=1) INFO 02-30 12:00:10 [loggers.py:271] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
    "Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 4.0%, "
    "Prefix cache hit rate: 5.0%",  # no such date: the per-line path drops it
    "(APIServer pid=1) INFO 12-31 23:59:55 [loggers.py:271] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
    "Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 9 reqs, GPU KV cache usage: 99.0%, "
    "Prefix cache hit rate: 5.0%",  # new year next: the yearless clock wraps
    "(APIServer pid=1) INFO 01-01 00:00:05 [loggers.py:271] Engine 001: Avg prompt throughput: 1.0 tokens/s, "
    "Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 2 reqs, GPU KV cache usage: 98.5%, "
    "Prefix cache hit rate: 5.0%",  # a second engine
    "(Engine pid=1) INFO 02-28 12:00:10 [loggers.py:271] Avg prompt throughput: 1.0 tokens/s, "
    "Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 4.0%",
    "\x1b[32mINFO 02-28 12:00:10 metrics.py:455] Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: "
    "2.0 tokens/s, Running: 3 reqs, Swapped: 1 reqs, Pending: 4 reqs, GPU KV cache usage: 97.0%, "
    "CPU KV cache usage: 3.0%.\x1b[0m",  # colour
    "INFO 02-28 12:00:10 metrics.py:455] Avg prompt throughput: 1..0 tokens/s, Avg generation throughput: "
    "2.0 tokens/s, Running: 3 reqs, Swapped: 1 reqs, Pending: 4 reqs, GPU KV cache usage: 97.0%, "
    "CPU KV cache usage: 3.0%.",  # a number that does not convert
    "2026-02-28T12:00:10.123456789Z (APIServer pid=1) INFO 02-28 12:00:10 [loggers.py:271] Engine 000: Avg prompt "
    "throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 1 reqs, "
    "GPU KV cache usage: 50.0%, Prefix cache hit rate: 5.0%",  # kubectl timestamps
    "INFO 02-28 12:00:11 [loggers.py:271] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation "
    "throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: 50.0%, Prefix cache hit "
    "rate: 5.0%, External prefix cache hit rate: 7.0%, Preemptions: 2",  # a wording the lane leaves alone
    "INFO 02-28 12:00:12 [loggers.py:271] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation "
    "throughput: 2.0 tokens/s, Running:",  # cut by a wrap: joined with the next line
    "3 reqs, Waiting: 1 reqs, GPU KV cache usage: 50.0%",
    'INFO:     127.0.0.1:40000 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
]


def _vllm_journal(tmp_path: Path, extra: list[str], name: str = "vllm.log") -> Path:
    """Every real vLLM runtime fixture, journald-wrapped, with ``extra`` lines after each stats line."""
    jd = "Feb 28 12:00:10 gpu-node-3 vllm[40034]: "
    out = []
    for path in VLLM_RUNTIME:
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            out.append(jd + line)
            if extra and "Avg prompt throughput" in line:
                out.append(extra[i % len(extra)])
                out.append(jd + extra[(i + 1) % len(extra)])
    path = tmp_path / name
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("path", VLLM_RUNTIME, ids=lambda p: p.stem)
def test_vllm_fixtures_same_report_and_lane_used(path: Path, monkeypatch: pytest.MonkeyPatch):
    _same([path], monkeypatch)


def test_vllm_journal_with_awkward_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = _vllm_journal(tmp_path, AWKWARD_VLLM)
    report = _same([path], monkeypatch)
    assert any(s["runtime"] for s in report["startups"])
    items = list(source.iter_candidate_lines([str(path)], api.ANCHORS, None, BULK_LANE))
    assert sum(len(i.rows) for i in items if isinstance(i, source.Bulk)) > 40  # the lane did take lines


def test_sglang_and_vllm_journals_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Both lanes in one input, an engine change between files and within one."""
    mixed = tmp_path / "mixed.log"
    mixed.write_text(_journal(tmp_path, AWKWARD[:4], "s.log").read_text() + _vllm_journal(tmp_path, AWKWARD_VLLM).read_text())
    report = _same([mixed, _vllm_journal(tmp_path, [], "v2.log"), _journal(tmp_path, [], "s2.log")], monkeypatch)
    assert {s["engine"] for s in report["startups"]} >= {"sglang", "vllm"}


def test_a_rank_whose_only_line_is_invalid_does_not_speak(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A rank label first seen on a line the per-line path drops (an impossible date) must not
    become its DP group's speaker in a lane: the group's real scheduler, seen next, speaks."""
    dec = ("[2026-{} 12:26:1{} {}] Decode batch, #running-req: 3, #token: 100, token usage: 0.50, "
           "cuda graph: True, gen throughput (token/s): 5.00, #queue-req: {}")
    lines = [dec.format("03-01", 1, "DP0 TP0", 0), dec.format("02-30", 1, "DP1 TP1", 4),
             dec.format("03-01", 2, "DP1 TP5", 2), dec.format("03-01", 3, "DP0 TP0", 0),
             dec.format("03-01", 4, "DP1 TP5", 7)]
    path = tmp_path / "dp.log"
    path.write_text("\n".join(lines) + "\n")
    report = _same([path], monkeypatch)
    (startup,) = report["startups"]
    assert startup["runtime"]["samples"] == 4


def test_a_stretch_holding_the_mark_byte_is_read_line_by_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The reader marks lanes' lines with \\x01, so a stretch whose own bytes hold one is left to the
    per-line path: the C lane says so without the GIL (Ellipsis), the regex lane by a find. Both
    engines' journals, the byte inside a serving line and on a line of its own."""
    marked = [AWKWARD[0], "[2026-03-01 12:26:12 TP0] Decode batch, #running-req: 3, #token: 100, token usage: 0.50, "
              "gen throughput (token/s): 5.00, #queue-req: 0 \x01", "\x01"]
    sglang = _journal(tmp_path, marked, "s.log")
    vllm = _vllm_journal(tmp_path, ["\x01", AWKWARD_VLLM[0]], "v.log")
    for path in (sglang, vllm):
        report = _same([path], monkeypatch)
        assert any(s["runtime"] for s in report["startups"])
    if NATIVE is not None:
        data = sglang.read_bytes()
        assert NATIVE.split(data, 0, len(data)) is Ellipsis
