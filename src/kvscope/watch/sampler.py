"""Cumulative counters → what happened in each interval, surviving server restarts.

Preemptions and prefix-cache hits are counters since the server started; what a person wants is
"how many in the last interval". A counter that goes down, or a new ``process_start_time_seconds``,
means the server restarted: the interval then counts from zero, the total watched keeps growing,
and the caller re-reads capacity (a restart may come with other flags).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from kvscope.core.margins import MAX_SERVING_COUNT, MAX_USAGE
from kvscope.watch.adapters import Capacity, Reading


@dataclass
class Sample:
    """One sample as shown, recorded and summarised."""

    t: float  # wall clock, seconds since the epoch
    elapsed_s: float  # since the watch started (monotonic)
    interval_s: float  # time this sample stands for (since the previous one)
    kv_usage: float | None = None
    tokens_used: int | None = None
    tokens_capacity: int | None = None
    running: int | None = None
    waiting: int | None = None
    preemptions: int | None = None  # in this interval
    preemptions_total: int | None = None  # since the watch started, across restarts
    prefix_hit_rate: float | None = None  # in this interval (or the engine's own gauge)
    restarted: bool = False
    scrape_s: float | None = None
    gpus: list[dict[str, Any]] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if v is not None and v != [] and v != {}}
        if not self.restarted:
            del out["restarted"]
        for key in ("kv_usage", "prefix_hit_rate"):
            if key in out:
                out[key] = round(out[key], 6)
        for key in ("elapsed_s", "interval_s", "scrape_s"):
            if key in out:
                out[key] = round(out[key], 3)
        out["t"] = round(self.t, 3)
        return out


def plausible(reading: Reading) -> Reading:
    """The reading with every figure no server can report (a usage of 1e308, a negative queue, NaN) made
    unknown, as the log reader treats a mangled line: summaries and bins never see them."""
    def count(v: float | int | None) -> Any:
        return v if v is not None and math.isfinite(v) and 0 <= v <= MAX_SERVING_COUNT else None

    def fraction(v: float | None) -> float | None:
        return v if v is not None and math.isfinite(v) and 0 <= v <= MAX_USAGE else None

    return dataclasses.replace(
        reading, kv_usage=fraction(reading.kv_usage), prefix_hit_rate=fraction(reading.prefix_hit_rate),
        tokens_used=count(reading.tokens_used), running=count(reading.running), waiting=count(reading.waiting),
        preemptions_total=count(reading.preemptions_total), preemptions_gauge=count(reading.preemptions_gauge),
        prefix_hits_total=count(reading.prefix_hits_total), prefix_queries_total=count(reading.prefix_queries_total))


class Sampler:
    """Keeps the previous reading so each new one becomes an interval sample."""

    def __init__(self, started: float | None = None) -> None:
        self.started = time.monotonic() if started is None else started
        self.prev: Reading | None = None
        self.prev_at: float | None = None
        self.preemptions_watched = 0.0
        self.count = 0

    def step(self, reading: Reading, cap: Capacity, now: float | None = None, wall: float | None = None,
             scrape_s: float | None = None) -> Sample:
        reading = plausible(reading)
        now = time.monotonic() if now is None else now
        wall = time.time() if wall is None else wall
        restarted = self._restarted(reading)
        prev = None if restarted else self.prev
        interval = now - self.prev_at if self.prev_at is not None else 0.0
        s = Sample(
            t=wall,
            elapsed_s=now - self.started,
            interval_s=interval,
            kv_usage=reading.kv_usage,
            tokens_used=reading.tokens_used,
            tokens_capacity=cap.kv_tokens,
            running=reading.running,
            waiting=reading.waiting,
            restarted=restarted,
            scrape_s=scrape_s,
            extras=dict(reading.extras),
        )
        s.preemptions = self._preemptions(reading, prev)
        if s.preemptions is not None:
            self.preemptions_watched += s.preemptions
            s.preemptions_total = int(self.preemptions_watched)
        s.prefix_hit_rate = self._hit_rate(reading, prev, first=self.prev is None)
        self.prev, self.prev_at = reading, now
        self.count += 1
        return s

    def is_restart(self, r: Reading) -> bool:
        """True when this reading comes from a restarted server (ask before re-reading capacity)."""
        return self._restarted(r)

    def _restarted(self, r: Reading) -> bool:
        p = self.prev
        if p is None:
            return False
        if r.start_time is not None and p.start_time is not None and r.start_time != p.start_time:
            return True
        return any(
            new is not None and old is not None and new < old
            for new, old in (
                (r.preemptions_total, p.preemptions_total),
                (r.prefix_queries_total, p.prefix_queries_total),
                (r.prefix_hits_total, p.prefix_hits_total),
            )
        )

    def _preemptions(self, r: Reading, prev: Reading | None) -> int | None:
        if r.preemptions_total is not None:
            if prev is None:
                # First sample: the counter holds what happened before we watched; after a
                # restart it holds what happened since the restart, which we did watch.
                return 0 if self.prev is None else int(r.preemptions_total)
            if prev.preemptions_total is None:
                return 0
            return int(r.preemptions_total - prev.preemptions_total)
        if r.preemptions_gauge is not None:
            # SGLang's num_retracted_reqs holds the count of its last decode log (every 40 steps)
            # until the next one: a repeated value is the same log seen twice, not new retractions.
            # Approximate by nature; the num_retractions histogram, when served, is used instead.
            if self.prev is None or (prev is not None and prev.preemptions_gauge == r.preemptions_gauge):
                return 0  # the first sample's log interval began before the watch
            return int(r.preemptions_gauge)
        return None

    @staticmethod
    def _hit_rate(r: Reading, prev: Reading | None, first: bool) -> float | None:
        if r.prefix_queries_total is not None and r.prefix_hits_total is not None:
            if first:
                return None  # lifetime counters say nothing about the interval we watch
            q0 = prev.prefix_queries_total if prev and prev.prefix_queries_total is not None else 0.0
            h0 = prev.prefix_hits_total if prev and prev.prefix_hits_total is not None else 0.0
            dq, dh = r.prefix_queries_total - q0, r.prefix_hits_total - h0
            return dh / dq if dq > 0 else None
        return r.prefix_hit_rate
