"""The C bulk lane (``kvscope._bulk``) is the regex lane, only faster.

Two claims, each tested directly: ``split`` gives the text and the group tuples that
``BULK.split`` gives (on every real log, on generated journals, and on lines mutated at random),
and ``fold`` leaves a ``Stream`` in exactly the state ``Stream.sample_rows`` leaves it (every slot,
bit for bit), whatever state the stream was in before. The whole-report equivalence of the lanes is
in test_runtime_bulk.py.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvscope.engines.serving import BULK, NATIVE, bulk_times
from kvscope.runtime.stream import Stream
from tests.conftest import FIXTURES, REPO

FIX = FIXTURES
REAL = sorted((FIX / "runtime").glob("*.txt")) + sorted((FIX / "logs").glob("*/*/log.txt"))
sys.path.insert(0, str(REPO / "benchmarks"))

pytestmark = pytest.mark.skipif(NATIVE is None, reason="the C bulk lane is not built here")


def test_native_lane_is_built_where_ci_asks_for_it():
    """CI sets KVSCOPE_REQUIRE_NATIVE: there the lane must be built (a compiler is installed)."""
    if os.environ.get("KVSCOPE_REQUIRE_NATIVE"):
        assert NATIVE is not None


def _regex_split(view: bytes) -> tuple[bytes, list[tuple]] | None:
    parts = BULK.split(view)
    if len(parts) == 1:
        return None
    k = BULK.groups + 1
    return b"\n\x01".join(parts[::k]), list(zip(*[parts[i::k] for i in range(1, k)], strict=True))


def _same_split(view: bytes) -> None:
    want = _regex_split(view)
    got = NATIVE.split(view, 1, len(view))
    if got is False:  # a number too long for the C lane: allowed, the regex then reads the stretch
        return
    if got is Ellipsis:  # the stretch holds the mark byte: no lane takes it, the per-line path does
        assert b"\x01" in view[1:]
        return
    assert b"\x01" not in view[1:]  # a stretch holding it never reaches here (Ellipsis above)
    if want is None:
        assert got is None
        return
    assert got is not None
    assert got[0] == want[0]
    assert got[1].rows() == want[1]
    assert len(got[1]) == len(want[1])


@pytest.mark.parametrize("path", REAL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_split_matches_regex_on_real_logs(path: Path):
    data = path.read_bytes()
    _same_split(b"\n" + data + (b"" if data.endswith(b"\n") else b"\n"))


def _serving_lines() -> list[str]:
    lines = []
    for path in REAL:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if "Decode batch" in line or "Prefill batch" in line or "#retracted_reqs" in line:
                lines.append(line)
    return lines


SERVING = _serving_lines()
JOURNALD = ["", "Sep 01 00:00:00 gpu-node-7 python3[30000]: ", "Mar  1 12:26:11.123 host-1 sglang: ",
            "2026-03-01T12:26:11.123+00:00 host python3[12]: ", "svc-1  | ", "Sep 1 00:00:00 h x[: "]
JUNK = ["x" * 1100, "", " ", "\t", "\r", "[", "]", "x", "0", ".", ",", "%", ")", "graph: True", "graph: False", ", cuda graph: True",
        "1.2.3", "99999999999999999999", "\x1b[0m", "é", "#queue-req: 3", "gen throughput (token/s): 5.00, ",
        "input throughput (token/s): 7.5", " TP0", "DP1 ", "2026-02-30 ", "0000-01-01 ", " -> ", ", #new_tokens_gained: 9",
        "KV cache pool is full. Retract requests. #retracted_reqs: 2"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_split_matches_regex_on_mutated_lines(data: st.DataObject):
    """Real serving lines, with prefixes and junk cut in at random places, split alike."""
    lines = []
    for _ in range(data.draw(st.integers(1, 6))):
        line = data.draw(st.sampled_from(JOURNALD)) + data.draw(st.sampled_from(SERVING))
        for _ in range(data.draw(st.integers(0, 3))):
            at = data.draw(st.integers(0, len(line)))
            cut = data.draw(st.integers(0, 3))
            line = line[:at] + data.draw(st.sampled_from(JUNK)) + line[at + cut:]
        lines.append(line)
    ending = data.draw(st.sampled_from(["\n", "\r\n", "  \n", ""]))
    _same_split(("\n" + "\n".join(lines) + ending).encode("utf-8", "surrogateescape"))


@pytest.mark.parametrize("head", [b"", b"\n", b"partial line, no newline ", b"Sep 01 00:00:00 h p[1]: "])
def test_split_works_in_place_on_a_region(head: bytes):
    """split(buf, lo, hi) reads buf[lo:hi] as if a newline came before lo: what the reader hands it."""
    body = "\n".join(SERVING[:50]).encode() + b"\n"
    buf = head + body + b"trailing bytes not in the region"
    got = NATIVE.split(buf, len(head), len(head) + len(body))
    want = _regex_split(b"\n" + body)
    assert got[0] == want[0] and got[1].rows() == want[1]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_split_matches_regex_on_bytes(blob: bytes):
    _same_split(b"\n" + blob + b"\n")


# --- fold ---------------------------------------------------------------------------------


def _state(stream: Stream) -> dict:
    out = {}
    for name in Stream.__slots__:
        value = getattr(stream, name)
        if name == "timeline":
            value = (value.width, [list(p) for p in value.points])
        out[name] = repr(value)  # repr: 0.1 + 0.2 and 0.30000000000000004 differ; types too
    return out


def _journal(seed: int, seconds: int) -> bytes:
    import runtime_vs_grep  # the benchmark's generator: saturation, queues, retractions, restarts

    rng = random.Random(seed)
    out: list[str] = []
    from datetime import datetime

    t = datetime(2026, 9, 1)
    for i in range(seconds):
        t = runtime_vs_grep._serving_block(out, t, 30000, 6.2832 * i / seconds, rng)
    return ("\n" + "\n".join(out) + "\n").encode()


def _fold_both(view: bytes, before: list[dict] | None = None) -> tuple[Stream, Stream]:
    """Fold one stretch into two fresh streams, by sample_rows and by the C fold."""
    got = NATIVE.split(view, 1, len(view))
    assert got not in (None, False)
    text, batch = got
    py, c = Stream("DP0"), Stream("DP0")
    for d in before or []:
        py.sample(dict(d), d.get("stamp"))
        c.sample(dict(d), d.get("stamp"))
    assert len(batch.labels()) == 1  # these journals have one scheduler: one stream takes every row
    rows = batch.rows()
    assert [(0, int(r[17])) for r in rows if r[17] is not None] == batch.retracts()
    py.sample_rows([r for r in rows if r[17] is None], bulk_times)  # retractions go elsewhere
    assert NATIVE.fold(batch, [c]) == 0
    return py, c


@pytest.mark.parametrize("seed", range(4))
def test_fold_matches_sample_rows(seed: int):
    py, c = _fold_both(_journal(seed, 1500))
    assert _state(py) == _state(c)
    py.close()
    c.close()
    assert _state(py) == _state(c)


def test_fold_continues_a_stream_already_fed_line_by_line():
    before = [
        {"src": "decode", "t": 63946339200.0 + 5, "usage": 0.95, "running": 7, "queued": 3, "tokens": 100,
         "graph": True, "gen_tps": 10.0},
        {"src": "stats", "t": 63946339200.0 + 6, "usage": 0.5, "running": 2, "queued": 0, "prompt_tps": 3.0},
    ]
    py, c = _fold_both(_journal(7, 600), before)
    assert _state(py) == _state(c)


@pytest.mark.parametrize("seed", range(3))
def test_running_counts_while_queued_keep_the_dicts_order_and_bound(seed: int):
    """queued_running is counted in C below RUNNING_CAP (1024) and by the dict above it: more than
    MAX_RUNNING_KEYS distinct counts, both sides of the cap interleaved, keys already there."""
    rng = random.Random(seed)
    lines = []
    for i in range(4000):
        r = rng.choice([rng.randrange(0, 1024), rng.randrange(1000, 1100), rng.randrange(1024, 5000)])
        q = rng.choice([0, 1, 3]) if i % 50 else 0
        lines.append(f"[2026-09-01 00:{i // 60 % 60:02d}:{i % 60:02d}] Decode batch, #running-req: {r}, #token: 9, "
                     f"token usage: 0.50, gen throughput (token/s): 1.00, #queue-req: {q}")
    view = ("\n" + "\n".join(lines) + "\n").encode()
    before = [{"src": "decode", "t": 63946339200.0, "usage": 0.9, "running": r, "queued": 2, "tokens": 1,
               "graph": None, "gen_tps": 1.0} for r in (5, 2000, 7)]
    py, c = _fold_both(view, before)
    assert len(py.queued_running) == 512
    assert _state(py) == _state(c)


def test_fold_into_an_untimed_stream():
    before = [{"src": "decode", "t": None, "usage": 0.2, "running": 1, "queued": 1, "tokens": 5, "graph": None,
               "gen_tps": 1.0}]
    py, c = _fold_both(_journal(3, 300), before)
    assert _state(py) == _state(c)


def test_flickering_queues_and_many_ranks_report_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The reader benchmark's journal: queues flicker 0..7 (episodes open, merge and close all the
    time), TP ranks interleave, four restarts. The C lane, the regex lane and no lane agree."""
    import json

    import synth

    import kvscope.api as api
    from kvscope.engines.serving import BULK_LANE, BulkLane
    from kvscope.render.json_out import render

    path = tmp_path / "journal.log"
    synth.generate(path, 3 << 20, restarts=3, seed=5)
    reports = []
    for lane in (BULK_LANE, BulkLane(BULK, None), None):
        monkeypatch.setattr(api, "BULK_LANE", lane)
        reports.append(json.loads(render(api.analyze([str(path)]))))
    assert reports[0] == reports[1] == reports[2]
    queue = reports[0]["startups"][0]["runtime"]["queue"]
    assert queue and json.dumps(queue) != "{}"  # there were queueing episodes to fold


# --- regressions from the review of _bulk.c (each failed on the first build) ----------------------


def _dec(t="2026-09-01 12:00:05", r=3, tok=100, u="0.50", gen="1.0", q=0) -> str:
    return (f"[{t}] Decode batch. #running-req: {r}, #token: {tok}, token usage: {u}, "
            f"gen throughput (token/s): {gen}, #queue-req: {q}")


def _pre(t="2026-09-01 12:00:05", r=3, new=10, cached=0, u="0.50", q=0) -> str:
    return (f"[{t}] Prefill batch. #new-seq: 1, #new-token: {new}, #cached-token: {cached}, "
            f"token usage: {u}, #running-req: {r}, #queue-req: {q}")


def _fold_compare(lines: list[str], setup=None) -> tuple:
    """(fold result, Python error, differing slots) for one stretch folded both ways; where the C
    fold declines (None) the accumulator folds the tuples in Python, as it does here."""
    view = ("\n" + "\n".join(lines) + "\n").encode()
    text, batch = NATIVE.split(view, 1, len(view))
    py, c = Stream("DP0"), Stream("DP0")
    if setup:
        setup(py)
        setup(c)
    rows = [r for r in batch.rows() if r[17] is None]
    try:
        py.sample_rows(rows, bulk_times)
        py_error = None
    except Exception as e:  # noqa: BLE001 - compared with what the C side does
        py_error = repr(e)
    result = NATIVE.fold(batch, [c])
    if result is None:
        c.sample_rows(rows, bulk_times)
    a, b = _state(py), _state(c)
    return result, py_error, {k: (a[k], b[k]) for k in a if a[k] != b[k]}


@pytest.mark.parametrize("later", ["", "graph: True, ", "npu graph: True, "])
def test_graph_off_first_then_on_later_reads_as_the_per_line_path(later: str):
    """The decode line's first free text 'cuda graph: False, ' is read at once (batches past the graphs'
    sizes, half of a busy journal's lines); a later 'graph: True' still turns the flag on."""
    lines = []
    for i in range(6):
        line = _dec(t=f"2026-09-01 12:00:{5 + i:02d}", r=3 + i, gen="2.5")
        line = line.replace("token usage: 0.50, ", "token usage: 0.50, cuda graph: False, ")
        lines.append(line.replace("#queue-req", later + "#queue-req") if i % 2 else line)
    result, py_error, differ = _fold_compare(lines)
    assert py_error is None and result is not None and differ == {}


def test_hostile_line_splits_in_linear_time():
    """Thousands of gen/queue fields on one line: 6.7 s at 44 KiB in C, 328 s in the regex, before
    (every pair was tried, each with a rescan of the line)."""
    import time

    head = "[2026-09-01 12:00:05] Decode batch. #running-req: 1, #token: 1, token usage: 0.5, "
    line = head + "gen throughput (token/s): 1, #queue-req: 1 x" * 4000  # 176 KiB
    view = ("\n" + line + "\n").encode()
    start = time.perf_counter()
    assert NATIVE.split(view, 1, len(view)) is None
    assert time.perf_counter() - start < 0.5
    start = time.perf_counter()  # the regex lane bounds its free-text groups the same way
    assert _regex_split(view) is None
    assert time.perf_counter() - start < 2.0


def test_sums_never_wrap():
    def near_max(s: Stream) -> None:
        s.sum_r = 2**63 - 10
        s.new_tokens = 2**63 - 10

    assert _fold_compare([_dec(r=100), _pre(new=100)], near_max)[2] == {}


def test_batch_sums_that_saturate_take_the_exact_check():
    """Split notes each batch's sums (saturating); past LLONG_MAX the fold checks row by row, and a
    fresh stream still folds in C, as Python would."""
    lines = [_dec(r=999999999999999, tok=1, u="0.50") for _ in range(9300)]  # 9.3e18 > 2**63 - 1
    result, py_error, differ = _fold_compare(lines)
    assert differ == {} and py_error is None


def test_big_ints_divide_as_python_does():
    """18 digits: the C lane declines (ints above 2^53 are not exact doubles) or divides exactly."""
    line = _dec(r=11, tok=123456789012345678, u="0.95")
    view = ("\n" + line + "\n").encode()
    if NATIVE.split(view, 1, len(view)) is not False:
        assert _fold_compare([line])[2] == {}


def test_timed_of_another_type_declines():
    class Truthy:
        def __bool__(self) -> bool:
            raise RuntimeError("no truth")

    def setup(s: Stream) -> None:
        s.timed = Truthy()

    with pytest.raises(RuntimeError):  # the Python fold's own error, not a SystemError from C
        _fold_compare([_dec()], setup)


@pytest.mark.parametrize("value", [1.0, 2**70])
def test_kinds_values_of_any_type(value):
    def setup(s: Stream) -> None:
        s.kinds = {"decode": value}

    assert _fold_compare([_dec()], setup)[:2] == (0, None)


def test_count_lines_is_bytes_count():
    b = b"x\n" * 50
    for lo, hi in [(0, -1), (-10, 100), (-200, -3), (30, 10), (0, 1000), (3, 99)]:
        assert NATIVE.count_lines(b, lo, hi) == b.count(b"\n", lo, hi)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=5000) | st.lists(st.sampled_from([b"\0", b"\n", b"x" * 17, b"\0" * 40, b"\x01", b"\x02"]),
                                          max_size=200).map(b"".join))
def test_counts_are_bytes_counts(blob: bytes):
    """count_lines and low_bytes (the reading thread's NUL count and mark check, without the GIL) =
    bytes.count / ``in``, across the 64-, 16-, 8- and 1-byte parts of the loops."""
    assert NATIVE.low_bytes(blob) == (blob.count(b"\0"), b"\x01" in blob)
    assert NATIVE.count_lines(blob, 0, len(blob)) == blob.count(b"\n")
    assert NATIVE.count_lines(blob, 3, len(blob) - 5) == blob.count(b"\n", 3, len(blob) - 5)


def test_many_rank_labels_go_to_the_regex():
    lines = [f"[2026-09-01 12:00:05 TP{i}] " + _dec()[22:] for i in range(2000)]
    view = ("\n" + "\n".join(lines) + "\n").encode()
    assert NATIVE.split(view, 1, len(view)) is False


# ---- the anchor scan ---------------------------------------------------------------------------

def _naive_line_starts(body: bytes, lo: int, hi: int, anchors: list[bytes]) -> list[int]:
    """Starts of the lines of body[lo:hi] holding an anchor that lies wholly inside [lo, hi)."""
    out, pos = [], lo
    for line in body[lo:hi].split(b"\n"):
        if any(a in line for a in anchors):
            out.append(pos)
        pos += len(line) + 1
    return out


_ANCHOR = st.binary(min_size=1, max_size=9).filter(lambda b: b"\n" not in b)


@settings(max_examples=int(os.environ.get("KVSCOPE_PROPERTY_EXAMPLES", "300")), deadline=None)
@given(data=st.data(), anchors=st.lists(_ANCHOR, min_size=1, max_size=8))
def test_anchor_scan_finds_the_naive_lines(data, anchors):
    """Any anchors (one and two bytes take the slow path, three and more the hashed one), any
    bytes, any region, including one that ends inside a line or inside an anchor."""
    piece = st.one_of(st.sampled_from(anchors), st.binary(max_size=12), st.sampled_from([b"\n", b"x" * 40]))
    body = data.draw(st.lists(piece, max_size=30).map(b"".join))
    lo = data.draw(st.integers(0, len(body)))
    lo = body.rfind(b"\n", 0, lo) + 1  # a region starts at a line start
    hi = data.draw(st.integers(lo, len(body)))
    got = NATIVE.Anchors(anchors).line_starts(body, lo, hi)
    assert got == _naive_line_starts(body, lo, hi, anchors)


def test_anchor_scan_on_real_logs_matches_the_python_scanner():
    """The engines' anchors over every real log: the C pass and the planned Python search agree."""
    from kvscope.engines import ANCHORS
    from kvscope.reading.scan import AnchorScanner

    native, python = AnchorScanner(ANCHORS), AnchorScanner(ANCHORS, native=False)
    assert native.native is not None and python.native is None
    for path in sorted(FIXTURES.glob("**/*.txt")) + sorted(FIXTURES.glob("**/*.log")):
        body = path.read_bytes()
        body = body if body.endswith(b"\n") else body + b"\n"
        assert native.line_starts(body, 0, len(body))[0] == python.line_starts(body, 0, len(body))[0], path


def test_anchor_scan_refuses_what_the_python_scanner_refuses():
    for bad in ([b""], [b"a\nb"], ["text"]):
        with pytest.raises(ValueError):
            NATIVE.Anchors(bad)
    with pytest.raises(ValueError):
        NATIVE.Anchors([b"mem"]).line_starts(b"mem\n", 2, 1)


@settings(max_examples=int(os.environ.get("KVSCOPE_PROPERTY_EXAMPLES", "300")), deadline=None)
@given(data=st.data(), word=st.sampled_from([b"Avg prompt throughput", b"ab", b"x", b"\xff\x00"]))
def test_lines_with_is_the_python_search(data, word):
    from kvscope.engines.serving import _lines_with

    piece = st.one_of(st.just(word), st.binary(max_size=12), st.just(b"\n"), st.just(word[:-1]))
    body = data.draw(st.lists(piece, max_size=30).map(b"".join)) + b"\n"
    lo = body.rfind(b"\n", 0, data.draw(st.integers(0, len(body) - 1))) + 1
    hi = body.find(b"\n", data.draw(st.integers(lo, len(body) - 1))) + 1
    assert NATIVE.lines_with(body, lo, hi, word) == _lines_with(body, lo, hi, word)


_HEADS = ["[2026-09-01 12:00:05] ", "[2026-09-01 12:00:05 TP0] ", "[2026-02-30 12:00:05 DP1 TP1] ",
          "Sep 01 00:00:00 gpu-node-7 python3[30000]: [2026-09-01 12:00:05.123 TP0] ", "[0000-01-01 00:00:00] "]
_BODIES = [line[line.index("] ") + 2:] for line in SERVING if "] " in line]


@settings(max_examples=int(os.environ.get("KVSCOPE_PROPERTY_EXAMPLES", "300")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_runs_of_one_head_split_and_fold_alike(data):
    """Lines of one second and rank share their head, which the C split parses once per run: runs
    of such lines (an impossible date, bodies that fail, lines shorter than the head, a head that
    changes by one byte) split as the regex does, and fold into the same stream state."""
    lines = []
    for _ in range(data.draw(st.integers(1, 12))):
        head = data.draw(st.sampled_from(_HEADS))
        if data.draw(st.booleans()):
            at = data.draw(st.integers(0, len(head)))
            head = head[:at] + data.draw(st.sampled_from(["1", " ", "]", "x", ""])) + head[at + 1:]
        body = data.draw(st.sampled_from(_BODIES + ["", "x", "Decode batch, #running-req: 1"]))
        lines.append(head + body if data.draw(st.integers(0, 9)) else head[: data.draw(st.integers(0, len(head)))])
    view = ("\n" + "\n".join(lines) + "\n").encode()
    _same_split(view)
    got = NATIVE.split(view, 1, len(view))
    if got and len(got[1].labels()) == 1:
        result, py_error, diff = _fold_compare(lines)
        assert py_error is None or result is None
        assert not diff


@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["02-30", "09-01"]), st.sampled_from("dpr")), max_size=60))
@settings(max_examples=200, deadline=None)
def test_sample_labels_and_retracts_noted_by_split_match_a_look_at_the_rows(lines):
    """split notes the label order and the retractions while it makes the rows; a slice of a batch
    (rows not made by split) finds them by looking at the rows. Same answer, impossible dates included."""
    text = {"d": "Decode batch, #running-req: 3, #token: 9, token usage: 0.50, gen throughput (token/s): 1.00, "
                 "#queue-req: 1",
            "p": "Prefill batch, #new-seq: 1, #new-token: 5, #cached-token: 0, token usage: 0.50, #running-req: 1, "
                 "#queue-req: 0",
            "r": "KV cache pool is full. Retract requests. #retracted_reqs: 2"}
    body = "".join(f"[2026-{day} 00:00:01 DP{rank} TP0] {text[kind]}\n" for rank, day, kind in lines)
    view = ("\n" + body + "[2026-09-01 00:00:02 DP9 TP0] " + text["d"] + "\n").encode()
    got = NATIVE.split(view, 1, len(view))
    assert got not in (None, False)
    batch = got[1]
    looked = batch[0 : len(batch) - 1]  # the same rows but the last, by the slow path
    if not lines:
        return
    ours = NATIVE.split(("\n" + body).encode(), 1, len(body) + 1)[1]
    assert ours.sample_labels() == looked.sample_labels()
    assert ours.retracts() == looked.retracts()


_FLOATS = st.one_of(st.sampled_from(["0.5", "1.", ".5", "0", "00.250", "1.2.3", ".", "..", "12345678901234.5",
                                     "1234567890123456", "0.1234567890123456789", "99999999999999999999.9"]),
                    st.from_regex(r"\A[0-9]{1,18}(\.[0-9]{0,18})?\Z"),
                    st.floats(0, 2, allow_nan=False).map(lambda f: f"{f:.6f}"))
_INTS = st.one_of(st.integers(0, 10**15), st.sampled_from(["0", "007", "1" * 15, "9" * 16, "1" * 19]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.booleans(), _INTS, _INTS, _FLOATS, _FLOATS, _INTS), min_size=1, max_size=8))
def test_numbers_read_while_matching_convert_as_python_does(rows):
    """The split reads each number as it matches it (int_run / num_run): whatever the digits (leading
    zeros, no integer part, two dots, more than 15 digits), the folded stream is the one Python's
    int() / float() of the same groups gives, or the C lane declines the stretch."""
    lines = [_dec(r=r, tok=tok, u=u, gen=gen, q=q) if decode else _pre(r=r, new=tok, u=u, q=q)
             for decode, r, tok, u, gen, q in rows]
    view = ("\n" + "\n".join(lines) + "\n").encode()
    if NATIVE.split(view, 1, len(view)) in (False, None):
        return  # a number too long for the C lane (the regex reads the stretch) or no line taken
    result, py_error, differ = _fold_compare(lines)
    assert differ == {}, (py_error, result)


# --- the C thread's jobs (kvscope._bulk.Job) ----------------------------------------------------

JOB = getattr(NATIVE, "Job", None)
needs_jobs = pytest.mark.skipif(JOB is None, reason="no C job thread on this platform")


def _anchors():
    from kvscope.engines import ANCHORS
    from kvscope.reading.scan import AnchorScanner

    return AnchorScanner(ANCHORS).native


@needs_jobs
def test_job_result_is_the_split_with_its_anchor_scan():
    body = "\n".join([*SERVING[:40], "INFO:     127.0.0.1:1 - \"POST /generate HTTP/1.1\" 200 OK", *SERVING[40:80]])
    buf = ("junk before\n" + body + "\n").encode()
    lo, anchors = len("junk before\n"), _anchors()
    text, batch, starts = JOB(buf, lo, len(buf), anchors, True, None, 1 << 20).result()
    want_text, want_batch, want_starts = NATIVE.split(buf, lo, len(buf), anchors)
    assert text == want_text and batch.rows() == want_batch.rows() and starts == want_starts
    assert batch.labels() == want_batch.labels() and batch.retracts() == want_batch.retracts()


@needs_jobs
def test_job_hands_back_what_the_c_lane_does_not_read():
    anchors, big = _anchors(), 1 << 20
    startup = b"[2026-09-01 12:00:00] Load weight end. mem usage=7.5 GB\nplain line\n"
    assert JOB(startup, 0, len(startup), anchors, True, None, big).result() == \
        anchors.line_starts(startup, 0, len(startup))  # no serving line: the raw region's candidates
    vllm = b"INFO 09-01 12:00:00 [loggers.py:1] Engine 000: Avg prompt throughput: 1.0 tokens/s\n"
    assert JOB(vllm, 0, len(vllm), anchors, True, b"Avg prompt throughput", big).result() == 1
    marked = ("\n".join(SERVING[:5]) + "\n\x01\n").encode()
    assert JOB(marked, 0, len(marked), anchors, False, None, big).result() == 2
    long_line = ("\n".join(SERVING[:5]) + "\n" + "x" * 300 + "\n").encode()
    assert JOB(long_line, 0, len(long_line), anchors, True, None, 64).result() == 2  # a line may pass max_line
    long_number = (_dec(gen="1." + "1" * 30) + "\n").encode()
    assert JOB(long_number, 0, len(long_number), anchors, True, None, big).result() == 2


@needs_jobs
def test_jobs_queued_then_dropped_or_run_here_are_safe():
    """Many jobs at once: some taken back (run_here), some dropped while queued or running, the rest
    waited for; every result is the split's."""
    body = ("\n".join(SERVING * 20) + "\n").encode()
    anchors = _anchors()
    want = NATIVE.split(body, 0, len(body), anchors)
    jobs = [JOB(body, 0, len(body), anchors, True, None, 1 << 20) for _ in range(40)]
    ran_here = [j.run_here() for j in jobs[::-3]]
    del jobs[1::4]  # dropped whatever their state
    for j in jobs:
        text, batch, starts = j.result()
        assert j.done() and text == want[0] and starts == want[2] and batch.rows() == want[1].rows()
    assert any(ran_here) or all(j.done() for j in jobs)


@needs_jobs
@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no fork here")
def test_jobs_survive_a_fork():
    """A forked child has no job thread: its jobs (queued, or begun by the parent's thread) run
    where their results are asked for, and come out the same."""
    import os

    body = ("\n".join(SERVING * 30) + "\n").encode()
    anchors = _anchors()
    want = NATIVE.split(body, 0, len(body), anchors)
    jobs = [JOB(body, 0, len(body), anchors, True, None, 1 << 20) for _ in range(12)]
    pid = os.fork()
    if pid == 0:  # the child: exit status says whether every result matched
        ok = all(j.result()[0] == want[0] and j.result()[1].rows() == want[1].rows() for j in jobs)
        fresh = JOB(body, 0, len(body), anchors, True, None, 1 << 20).result()
        os._exit(0 if ok and fresh[0] == want[0] else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert all(j.result()[0] == want[0] for j in jobs)
