"""The C reader and folds give the Python lane's answers, and both read what json.loads reads."""

from __future__ import annotations

import json
import math
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.fleet import grid

native = pytest.mark.skipif(not grid.NATIVE, reason="the C lane did not build here")

values = st.one_of(
    st.floats(min_value=0, max_value=1, allow_nan=False).map(lambda v: f"{v:.4f}"),
    st.floats(allow_nan=False, allow_infinity=False, width=64).map(repr),
    st.integers(min_value=-10**12, max_value=10**12).map(str),
    st.sampled_from(["NaN", "+Inf", "-Inf", "1e-05", "3.5E+3", "0", "-0", "0.000000000000000000000001"]),
)
label_values = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)


def _grid(raw: bytes) -> list[float]:
    return list(struct.unpack(f"{len(raw) // 8}d", raw))


def _same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all((x != x and y != y) or x == y for x, y in zip(a, b, strict=True))


@st.composite
def answers(draw):
    start = draw(st.integers(min_value=1_600_000_000, max_value=1_800_000_000)) * 1.0
    step = draw(st.sampled_from([1.0, 15.0, 30.0, 0.5]))
    n = draw(st.integers(min_value=0, max_value=40))
    series = []
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        steps = sorted(draw(st.sets(st.integers(min_value=-3, max_value=n + 3), max_size=n + 6)))
        pts = [[start + k * step, draw(values)] for k in steps]
        labels = draw(st.dictionaries(st.sampled_from(["__name__", "instance", "job", "le", "a\"b"]), label_values,
                                      max_size=4))
        series.append({"metric": labels, "values": pts})
    body = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": series}},
                      ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 1])))
    return body.encode(), start, step, n, series


@given(answers())
@settings(max_examples=300, deadline=None)
def test_matrix_reads_what_json_reads(answer):
    body, start, step, n, series = answer
    got = grid.matrix(body, start, step, n)
    assert got is not None and len(got) == len(series)
    for (labels, g), want in zip(got, series, strict=True):
        assert labels == want["metric"]
        expect = [math.nan] * n
        for ts, v in want["values"]:
            k = round((ts - start) / step)
            if 0 <= k < n:
                expect[k] = float(v)
        assert _same(_grid(g), expect)


@native
@given(answers())
@settings(max_examples=200, deadline=None)
def test_native_and_python_lanes_agree_on_answers(answer):
    body, start, step, n, _ = answer
    c = grid._native.matrix(body, start, step, n)
    p = grid._py_matrix(body, start, step, n)
    assert [json.loads(m) for m, _ in c] == [json.loads(m) for m, _ in p]
    assert all(_same(_grid(a), _grid(b)) for (_, a), (_, b) in zip(c, p, strict=True))


@pytest.mark.parametrize("body", [b"", b"{", b'{"status":"error","error":"x"}', b'{"data":{"result":[{"metric":{},"values":[[1,"x"]]}]}}',
                                  b'{"data":{"result":[{"metric":{},"values":[[1,"0.5"]', b"<html>login</html>"])
def test_not_a_matrix_is_none_not_a_crash(body):
    assert grid.matrix(body, 0.0, 1.0, 4) is None


cells = st.one_of(st.just(math.nan), st.floats(min_value=0, max_value=1.2, allow_nan=False),
                  st.integers(min_value=0, max_value=20).map(float))


@st.composite
def windows(draw):
    n = draw(st.integers(min_value=0, max_value=60))
    col = st.lists(cells, min_size=n, max_size=n)
    grids = [draw(st.one_of(st.none(), col.map(lambda xs: struct.pack(f"{n}d", *xs)))) for _ in range(3)]
    return grids, n, draw(st.integers(min_value=0, max_value=5)), draw(st.integers(min_value=1, max_value=9))


@native
@given(windows())
@settings(max_examples=300, deadline=None)
def test_native_and_python_folds_agree(w):
    (u, wq, r), n, run_before, buckets = w
    total = n + 3
    outs = []
    for fn in (grid._native.fold, grid._py_fold):
        h, q, s = grid.new_hist(), grid.new_hist(), grid.new_spark(buckets)
        res = fn(u, wq, r, 0.9, h, q, s, 2, total, run_before)
        outs.append((res, bytes(h), bytes(q), _grid(bytes(s))))
    (a, ah, aq, asp), (b, bh, bq, bsp) = outs
    assert _same(list(a), list(b)) and ah == bh and aq == bq and _same(asp, bsp)


def test_fold_counts_a_queue_by_hand():
    n = 8
    usage = struct.pack("8d", 0.5, 0.95, 0.95, math.nan, 0.2, 0.92, 0.91, 0.1)
    waiting = struct.pack("8d", 0, 2, 3, 3, 0, 1, 1, 0)
    running = struct.pack("8d", 4, 8, 8, 8, 2, 7, 9, 1)
    h, q, s = grid.new_hist(), grid.new_hist(), grid.new_spark(4)
    f = grid.fold(usage, waiting, running, 0.9, h, q, s, 0, n, 0)
    assert (f.usage_n, f.usage_peak, f.usage_peak_i, f.above_high_n) == (7, 0.95, 1, 4)
    assert (f.waiting_pos_n, f.waiting_peak, f.episodes, f.longest_run, f.run_after) == (5, 3, 2, 3, 0)
    assert f.waiting_high_n == 4  # step 3 waits but has no usage sample
    assert (f.running_peak, f.running_peak_queued) == (9, 9)
    assert _grid(bytes(s)) == [0.95, 0.95, 0.92, 0.91]
    assert sum(_grid(bytes(h))) == 7 and _grid(bytes(h))[950] == 2


def test_a_queue_running_over_a_window_edge_is_one_episode():
    h, q, s = grid.new_hist(), grid.new_hist(), grid.new_spark(1)
    first = grid.fold(None, struct.pack("3d", 0, 1, 1), None, 0.9, h, q, s, 0, 6, 0)
    second = grid.fold(None, struct.pack("3d", 1, 0, 1), None, 0.9, h, q, s, 3, 6, first.run_after)
    assert first.episodes + second.episodes == 2 and second.longest_run == 3


def test_counter_counts_across_a_restart():
    g = struct.pack("6d", 10, 12, math.nan, 15, 2, 5)
    assert grid.counter(g, math.nan) == (5 + 2 + 3, 1, 5)
    assert grid.counter(struct.pack("1d", 7), 5) == (2, 0, 7)


def test_combine_treats_nan_as_absent():
    a, b = struct.pack("3d", 0.2, math.nan, 0.5), struct.pack("3d", 0.4, 0.1, math.nan)
    assert _grid(grid.combine(a, b, grid.MAX)) == [0.4, 0.1, 0.5]
    assert _grid(grid.combine(a, b, grid.SUM)) == [pytest.approx(0.6), 0.1, 0.5]
