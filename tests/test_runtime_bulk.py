"""The bulk lane gives exactly what the per-line path gives.

``kvscope.runtime.lines.BULK`` takes the dominant SGLang serving lines out of the per-line path
(reading/source.py hands them on as ``Bulk`` runs, runtime/accumulate.py folds them in one call).
Its whole claim is equivalence, so every test here analyses the same input twice, once with the
lane and once without it, and compares the full JSON report: real runtime fixtures, every real
log, journald-wrapped journals built from real lines, lines the lane must leave alone, restarts and
block boundaries.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvscope.api as api
from kvscope.engines import BULK, BULK_LANE, ENGINES
from kvscope.engines.base import LineContext
from kvscope.reading import clean_line, source
from kvscope.render.json_out import render
from kvscope.runtime.lines import NATIVE, BulkLane, RuntimeLines

FIX = Path(__file__).parent / "fixtures"
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
]


def test_awkward_lines_between_bulk_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    _same([_journal(tmp_path, AWKWARD)], monkeypatch)


@pytest.mark.parametrize("block", [257, 4096, 1 << 16])
def test_block_and_stretch_boundaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int):
    """Lines cut by block ends, stretches of a few lines: the same report as one big block."""
    path = _journal(tmp_path, AWKWARD)
    expected = _report([path], False, monkeypatch)
    monkeypatch.setattr(source, "BLOCK_BYTES", block)
    monkeypatch.setattr(source, "BULK_BYTES", max(64, block // 3))
    assert _report([path], True, monkeypatch) == expected
    assert _report([path], False, monkeypatch) == expected


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
