"""Prometheus range answers on a step grid, and the folds ``kvscope fleet`` makes of them.

Two lanes with one answer: the C module ``_grid`` (built at install where a compiler exists) and the
Python functions here, used where it did not build. A grid is ``n`` doubles as bytes (native order),
one per step from the query's start; NaN where the series had no sample (query_range leaves out
steps with nothing within Prometheus' lookback, so NaN means "not seen", never zero).
"""

from __future__ import annotations

import json
import math
from array import array
from dataclasses import dataclass
from typing import Any

BINS = 1000  # usage histogram: 0.1 % bins, as watch's

try:  # the C lane
    import kvscope.fleet._grid as _native  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - exercised where no compiler built it
    _native = None

NATIVE = _native is not None


def empty(n: int) -> bytes:
    return array("d", [math.nan]) .tobytes() * n


def values(grid: bytes) -> array:
    out = array("d")
    out.frombytes(grid)
    return out


def _py_matrix(body: bytes, start: float, step: float, n: int) -> list[tuple[str, bytes]] | None:
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    data = doc.get("data") if isinstance(doc, dict) else None
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list):
        return None
    out: list[tuple[str, bytes]] = []
    for series in result:
        if not isinstance(series, dict):
            return None
        grid = array("d", [math.nan]) * n
        for pair in series.get("values") or []:
            try:
                ts, v = float(pair[0]), float(pair[1])
            except (TypeError, ValueError, IndexError):
                return None
            idx = math.floor((ts - start) / step + 0.5)
            if 0 <= idx < n:
                grid[idx] = v
        out.append((json.dumps(series.get("metric") or {}), grid.tobytes()))
    return out


def matrix(body: bytes, start: float, step: float, n: int) -> list[tuple[dict[str, str], bytes]] | None:
    """Each series of a query_range answer: its labels and its grid. None: not a matrix answer."""
    raw = _native.matrix(body, start, step, n) if _native is not None else _py_matrix(body, start, step, n)
    if raw is None:
        return None
    out: list[tuple[dict[str, str], bytes]] = []
    for metric, grid in raw:
        try:
            labels = json.loads(metric)
        except ValueError:
            return None
        if not isinstance(labels, dict):
            return None
        out.append(({str(k): str(v) for k, v in labels.items()}, grid))
    return out


@dataclass(frozen=True)
class Fold:
    """One window of one replica (counts are of steps; indices of the window, -1 when none)."""

    usage_n: int
    usage_peak: float
    usage_peak_i: int
    usage_sum: float
    above_high_n: int
    waiting_n: int
    waiting_pos_n: int
    waiting_peak: float
    waiting_peak_i: int
    episodes: int
    longest_run: int
    run_after: int
    waiting_high_n: int
    running_n: int
    running_peak: float
    running_pos_n: int
    running_peak_queued: float


def _py_fold(usage: bytes | None, waiting: bytes | None, running: bytes | None, high: float, hist: Any,
             queued_hist: Any, spark: Any, offset: int, total: int, run_before: int) -> tuple:
    grids = [values(g) if g is not None else None for g in (usage, waiting, running)]
    n = max((len(g) for g in grids if g is not None), default=0)
    U, W, R = (g if g is not None else array("d", [math.nan]) * n for g in grids)
    H, Q, S = (memoryview(b).cast("B").cast("d") for b in (hist, queued_hist, spark))
    ns = len(S)
    usage_n = above = waiting_n = waiting_pos = episodes = waiting_high = running_n = running_pos = 0
    usage_peak_i = waiting_peak_i = -1
    longest = run = run_before
    usage_peak = waiting_peak = running_peak = running_peak_q = math.nan
    usage_sum = 0.0
    for i in range(n):
        uv, wv, rv = U[i], W[i], R[i]
        if uv == uv:
            usage_n += 1
            usage_sum += uv
            H[min(BINS, max(0, math.floor(uv * BINS + 0.5)))] += 1
            if usage_peak != usage_peak or uv > usage_peak:
                usage_peak, usage_peak_i = uv, i
            if uv >= high:
                above += 1
            if ns and total:
                k = min(ns - 1, int((offset + i) * ns / total))
                if k >= 0 and (S[k] != S[k] or uv > S[k]):
                    S[k] = uv
        if wv == wv:
            waiting_n += 1
            if waiting_peak != waiting_peak or wv > waiting_peak:
                waiting_peak, waiting_peak_i = wv, i
            if wv > 0:
                waiting_pos += 1
                if run == 0:
                    episodes += 1
                run += 1
                longest = max(longest, run)
                if uv == uv:
                    Q[min(BINS, max(0, math.floor(uv * BINS + 0.5)))] += 1
                    if uv >= high:
                        waiting_high += 1
                if rv == rv and (running_peak_q != running_peak_q or rv > running_peak_q):
                    running_peak_q = rv
            else:
                run = 0
        else:
            run = 0
        if rv == rv:
            running_n += 1
            if rv > 0:
                running_pos += 1
            if running_peak != running_peak or rv > running_peak:
                running_peak = rv
    return (usage_n, usage_peak, usage_peak_i, usage_sum, above, waiting_n, waiting_pos, waiting_peak, waiting_peak_i,
            episodes, longest, run, waiting_high, running_n, running_peak, running_pos, running_peak_q)


def fold(usage: bytes | None, waiting: bytes | None, running: bytes | None, high: float, hist: bytearray,
         queued_hist: bytearray, spark: bytearray, offset: int, total: int, run_before: int) -> Fold:
    """Fold one window into the running histograms / sparkline (in place) and return its counts."""
    fn = _native.fold if _native is not None else _py_fold
    return Fold(*fn(usage, waiting, running, high, hist, queued_hist, spark, offset, total, run_before))


def _py_counter(grid: bytes, last: float) -> tuple[float, int, float]:
    inc, resets = 0.0, 0
    for v in values(grid):
        if v != v:
            continue
        if last == last:
            if v >= last:
                inc += v - last
            else:
                inc += v
                resets += 1
        last = v
    return inc, resets, last


def counter(grid: bytes, last: float) -> tuple[float, int, float]:
    """(increase, resets, last value) of a counter over the grid, continuing from ``last`` (NaN: none yet).
    A drop is a restart: the counter began again at zero, so its new value is all increase."""
    return _native.counter(grid, last) if _native is not None else _py_counter(grid, last)


def _py_combine(a: bytes, b: bytes, op: int) -> bytes:
    A, B = values(a), values(b)
    if len(A) != len(B):
        raise ValueError("grids of different lengths")
    out = array("d", A)
    for i, y in enumerate(B):
        x = A[i]
        if x != x:
            out[i] = y
        elif y == y:
            out[i] = max(x, y) if op == 0 else x + y
    return out.tobytes()


MAX, SUM = 0, 1


def combine(a: bytes, b: bytes, op: int) -> bytes:
    """Two schedulers of one server, step by step: MAX (usage: the fullest pool preempts first) or SUM."""
    return _native.combine(a, b, op) if _native is not None else _py_combine(a, b, op)


def new_hist() -> bytearray:
    return bytearray(array("d", [0.0]) .tobytes() * (BINS + 1))


def new_spark(buckets: int) -> bytearray:
    return bytearray(empty(buckets))
