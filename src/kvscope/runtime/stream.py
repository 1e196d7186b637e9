"""Constant-memory state of one scheduler's serving samples: histogram, timeline, queue episodes.

A week of journal holds millions of samples, so nothing here grows with the input: usage goes
into a fixed histogram of 0.1 % bins (peak and percentiles come from it), the timeline is at most
``TIMELINE_POINTS`` buckets whose width doubles when it fills (each bucket keeps min/max, so a
spike never disappears by downsampling), and queueing episodes keep counts plus the few longest.
Time-weighted figures (time above 90 %, time queued) charge each interval between two samples to
the earlier sample's state, capped at ``GAP_CAP_S`` so an idle gap (SGLang prints nothing while
idle) is not counted as pressure.
"""

from __future__ import annotations

from typing import Any

from kvscope.core.margins import MAX_SERVING_COUNT, MAX_USAGE

USAGE_BINS = 1001  # 0.0 % … 100.0 % in 0.1 % steps
QUEUED_BINS = 101  # usage while requests waited, 1 % steps
GAP_CAP_S = 30.0  # longest interval charged to one sample (vLLM logs every 5–10 s, SGLang ~1 s under load)
MERGE_S = 15.0  # queue episodes this close together are one episode (a queue flickering at 0/1)
TOP_EPISODES = 8
TIMELINE_POINTS = 500
MAX_RUNNING_KEYS = 512  # distinct running-request counts remembered while requests waited
SATURATED = 0.90
FULL = 0.99


CACHE_MAX = 65536  # values kept by the bulk lane's number caches
_FLOATS: dict[bytes, float] = {}
_INTS: dict[bytes, int] = {}
_GRAPHS: dict[bytes, bool | None] = {}
_NO = object()


def _graph_flag(text: bytes) -> bool | None:
    """The per-line path's CUDA-graph flag of a decode line: None without ``graph: ``."""
    return None if b"graph: " not in text else b"graph: True" in text


class Timeline:
    """At most ``TIMELINE_POINTS`` buckets [t0, t1, usage min, usage max, queue max, running max, n]."""

    __slots__ = ("width", "points", "max_points")

    def __init__(self, max_points: int = TIMELINE_POINTS) -> None:
        self.width = 1.0
        self.points: list[list[float]] = []
        self.max_points = max_points

    def add(self, t: float, u: float, q: int, r: int) -> None:
        pts = self.points
        if pts:
            b = pts[-1]
            if t < b[0] + self.width:
                if t > b[1]:
                    b[1] = t
                if u < b[2]:
                    b[2] = u
                if u > b[3]:
                    b[3] = u
                if q > b[4]:
                    b[4] = q
                if r > b[5]:
                    b[5] = r
                b[6] += 1
                return
        pts.append([t, t, u, u, q, r, 1])
        if len(pts) >= 2 * self.max_points:
            self._halve()

    def _halve(self) -> None:
        """Merge neighbours pairwise and double the bucket width: memory stays bounded."""
        merged = []
        pts = self.points
        for i in range(0, len(pts) - 1, 2):
            a, b = pts[i], pts[i + 1]
            merged.append([a[0], b[1], min(a[2], b[2]), max(a[3], b[3]), max(a[4], b[4]), max(a[5], b[5]), a[6] + b[6]])
        if len(pts) % 2:
            merged.append(pts[-1])
        self.points = merged
        self.width *= 2

    def finished(self) -> list[list[float]]:
        """Buckets, merged down to ``max_points`` or fewer."""
        while len(self.points) > self.max_points:
            self._halve()
        return self.points


class Stream:
    """Everything kept about one scheduler's samples (one DP group or one vLLM engine)."""

    __slots__ = (
        "label",
        "n",
        "kinds",
        "timed",
        "first_t",
        "last_t",
        "first_stamp",
        "last_stamp",
        "last_u",
        "last_q",
        "span_s",
        "hist",
        "usage_n",
        "usage_time",
        "above90_s",
        "above99_s",
        "peak_u",
        "peak_u_stamp",
        "peak_q",
        "q_seen",
        "peak_q_stamp",
        "queued_s",
        "queued_n",
        "queued_hist",
        "queued_running",
        "peak_r",
        "sum_r",
        "r_n",
        "peak_r_queued",
        "sat_n",
        "sat_u_per_req",
        "sat_tok_per_req",
        "sat_tok_n",
        "sat_queued_n",
        "peak_q_sat",
        "pool_u",
        "pool_tok",
        "low_queued_n",
        "peaks",
        "gen",
        "rates",
        "new_tokens",
        "cached_tokens",
        "prefill_last",
        "prefill_peak",
        "episode",
        "closed",
        "episodes",
        "episodes_s",
        "top",
        "timeline",
        "graph_on",
        "graph_off",
        "graph_max_on",
        "graph_min_off",
    )

    def __init__(self, label: str | None) -> None:
        self.label = label
        self.n = 0
        self.kinds: dict[str, int] = {}
        self.timed: bool | None = None
        self.first_t: float | None = None
        self.last_t: float | None = None
        self.first_stamp: str | None = None
        self.last_stamp: str | None = None
        self.last_u: float | None = None
        self.last_q = 0
        self.span_s = 0.0
        self.hist = [0] * USAGE_BINS
        self.usage_n = 0
        self.usage_time = 0.0  # ∫ usage dt, for the time-weighted mean
        self.above90_s = 0.0
        self.above99_s = 0.0
        self.peak_u = -1.0
        self.peak_u_stamp: str | None = None
        self.peak_q = 0
        self.q_seen = 0  # samples that printed a queue length at all
        self.peak_q_stamp: str | None = None
        self.queued_s = 0.0
        self.queued_n = 0
        self.queued_hist = [0] * QUEUED_BINS
        self.queued_running: dict[int, int] = {}
        self.peak_r = 0
        self.sum_r = 0
        self.r_n = 0
        self.peak_r_queued = 0
        self.sat_n = 0
        self.sat_u_per_req = 0.0
        self.sat_tok_per_req = 0.0
        self.sat_tok_n = 0
        self.sat_queued_n = 0
        self.peak_q_sat = 0
        self.pool_u = 0.05  # usage below this gives no useful pool-size estimate (2 printed decimals)
        self.pool_tok = 0
        self.low_queued_n = 0  # samples with waiting requests while usage < 80 %
        self.peaks: dict[str, float] = {}  # secondary pools: swa_usage, mamba_usage
        self.gen = [0.0, 0, 0.0, 0.0]  # generation tokens/s of decode lines: sum, n, max, last
        self.rates: dict[str, list[float]] = {"gen_tps": self.gen}  # name → [sum, n, max, last]
        self.new_tokens = 0
        self.cached_tokens = 0
        self.prefill_last = 0  # new tokens of the last prefill batch (SGLang), what a crash in a prefill ran
        self.prefill_peak = 0  # and of the largest
        self.episode: list[Any] | None = None  # [start, end, peak_q, peak stamp, start stamp, max usage]
        self.closed: list[Any] | None = None
        self.episodes = 0
        self.episodes_s = 0.0
        self.top: list[list[Any]] = []
        self.timeline = Timeline()
        self.graph_on = 0
        self.graph_off = 0
        self.graph_max_on = 0
        self.graph_min_off: int | None = None

    # -- the hot path -----------------------------------------------------------------------
    def sample(self, d: dict[str, Any], stamp: str | None) -> None:  # noqa: C901 - one pass per line, kept flat
        for key in ("running", "queued", "tokens", "new_tokens", "cached_tokens"):
            v = d.get(key)
            if v is not None and v > MAX_SERVING_COUNT:
                return  # dropped like a line whose numbers do not convert (sample_rows does the same)
        self.n += 1
        src = d["src"]
        self.kinds[src] = self.kinds.get(src, 0) + 1
        t = d["t"]
        if self.timed is None:
            self.timed = t is not None
            self.first_t = t if t is not None else 0.0
            self.first_stamp = stamp
        if not self.timed:
            t = float(self.n)  # a log without timestamps: the sample index is the clock
        elif t is None:
            t = self.last_t
        u = d["usage"]
        if u is not None and not 0.0 <= u <= MAX_USAGE:
            u = None  # a mangled line (usage is a fraction of the pool): keep its other numbers only
        q = d["queued"]
        r = d["running"]
        prev = self.last_t
        if prev is not None:
            dt = t - prev
            if dt > 0:
                if dt > GAP_CAP_S:
                    dt = GAP_CAP_S
                self.span_s += dt
                pu = self.last_u
                if pu is not None:
                    self.usage_time += pu * dt
                    if pu >= SATURATED:
                        self.above90_s += dt
                        if pu >= FULL:
                            self.above99_s += dt
                if self.last_q:
                    self.queued_s += dt
        if prev is None or t >= prev:
            self.last_t = t
            self.last_stamp = stamp
        if u is not None:
            i = int(u * 1000 + 0.5)
            self.hist[i if i < USAGE_BINS else USAGE_BINS - 1] += 1
            self.usage_n += 1
            if u > self.peak_u:
                self.peak_u, self.peak_u_stamp = u, stamp
            self.last_u = u
        if r is not None:
            self.sum_r += r
            self.r_n += 1
            if r > self.peak_r:
                self.peak_r = r
        if q is not None:
            self.q_seen += 1
            if q > 0 or self.episode is not None:
                self._queue(t, q, u, r, stamp)
            self.last_q = q
        tok = d.get("tokens")
        if tok and u is not None and u >= self.pool_u:
            self.pool_u, self.pool_tok = u, tok  # #token / usage ≈ pool size, most precise at high usage
        if u is not None and u >= SATURATED and r:
            self.sat_n += 1
            self.sat_u_per_req += u / r
            if tok:
                self.sat_tok_per_req += tok / r
                self.sat_tok_n += 1
            if q:
                self.sat_queued_n += 1
                if q > self.peak_q_sat:
                    self.peak_q_sat = q
        self.timeline.add(t, u if u is not None else 0.0, q or 0, r or 0)
        if src == "decode" and len(d) == 8:  # the fast-path decode dict: generation rate and graph flag only
            graph = d["graph"]
            if graph is not None and r is not None:
                self._graph(graph, r)
            gen = d.get("gen_tps")
            if gen is not None:
                acc = self.gen
                acc[0] += gen
                acc[1] += 1
                if gen > acc[2]:
                    acc[2] = gen
                acc[3] = gen
        else:
            self._extras(d)

    def sample_rows(self, rows: list[tuple], times: Any) -> None:  # noqa: C901 - the hot loop, kept flat
        """``sample`` for rows of the bulk lane (``kvscope.engines.serving.BULK`` groups), in order.

        Same arithmetic in the same order as ``sample`` on the events the per-line path makes of
        those lines, with the per-sample state held in locals for the length of the run: that is
        what makes a row cost a fraction of an event. ``times(stamp bytes)`` gives (seconds, stamp
        text) and raises ValueError for an impossible date; a row whose numbers do not convert is
        dropped, as the per-line path drops the line.
        """
        n, kinds, hist, gen, tl = self.n, self.kinds, self.hist, self.gen, self.timeline
        last_t, last_stamp, last_u, last_q = self.last_t, self.last_stamp, self.last_u, self.last_q
        span_s, usage_time, above90_s, above99_s = self.span_s, self.usage_time, self.above90_s, self.above99_s
        usage_n, peak_u, peak_u_stamp = self.usage_n, self.peak_u, self.peak_u_stamp
        sum_r, r_n, peak_r, q_seen = self.sum_r, self.r_n, self.peak_r, self.q_seen
        pool_u, pool_tok = self.pool_u, self.pool_tok
        sat_n, sat_u_per_req, sat_tok_per_req, sat_tok_n = self.sat_n, self.sat_u_per_req, self.sat_tok_per_req, self.sat_tok_n
        prev_stamp_b, t0, stamp = None, 0.0, None
        floats, ints, graphs = _FLOATS, _INTS, _GRAPHS
        if len(floats) > CACHE_MAX or len(ints) > CACHE_MAX or len(graphs) > CACHE_MAX:
            floats.clear(), ints.clear(), graphs.clear()
        try:
            for row in rows:
                decode = row[2] is not None
                try:
                    if row[0] != prev_stamp_b:
                        t0, stamp = times(row[0])
                        prev_stamp_b = row[0]
                    if decode:
                        # usage, running and queued repeat all the time: converted once per value
                        u = floats.get(row[4])
                        if u is None:
                            u = floats[row[4]] = float(row[4])
                        r = ints.get(row[2])
                        if r is None:
                            r = ints[row[2]] = int(row[2])
                        q = ints.get(row[8])
                        if q is None:
                            q = ints[row[8]] = int(row[8])
                        tok, g = int(row[3]), float(row[6])
                        src = "decode"
                    else:
                        r, q, u = int(row[14]), int(row[15]), float(row[13])
                        new_tok, cached = int(row[10]), int(row[11])
                        hit = float(row[12]) if row[12] else None
                        tps = float(row[16]) if row[16] is not None else None
                        tok, src = None, "prefill"
                except ValueError:
                    prev_stamp_b = None
                    continue
                if r > MAX_SERVING_COUNT or q > MAX_SERVING_COUNT or (tok if decode else max(new_tok, cached)) > MAX_SERVING_COUNT:
                    continue  # a mangled count: dropped, as sample drops it
                n += 1
                kinds[src] = kinds.get(src, 0) + 1
                t = t0
                if self.timed is None:
                    self.timed = True
                    self.first_t = t
                    self.first_stamp = stamp
                if not self.timed:
                    t = float(n)
                if not 0.0 <= u <= MAX_USAGE:
                    u = None
                prev = last_t
                if prev is not None:
                    dt = t - prev
                    if dt > 0:
                        if dt > GAP_CAP_S:
                            dt = GAP_CAP_S
                        span_s += dt
                        if last_u is not None:
                            usage_time += last_u * dt
                            if last_u >= SATURATED:
                                above90_s += dt
                                if last_u >= FULL:
                                    above99_s += dt
                        if last_q:
                            self.queued_s += dt
                if prev is None or t >= prev:
                    last_t = t
                    last_stamp = stamp
                if u is not None:
                    i = int(u * 1000 + 0.5)
                    hist[i if i < USAGE_BINS else USAGE_BINS - 1] += 1
                    usage_n += 1
                    if u > peak_u:
                        peak_u, peak_u_stamp = u, stamp
                    last_u = u
                sum_r += r
                r_n += 1
                if r > peak_r:
                    peak_r = r
                q_seen += 1
                if q > 0 or self.episode is not None:
                    self._queue(t, q, u, r, stamp)
                last_q = q
                if tok and u is not None and u >= pool_u:
                    pool_u, pool_tok = u, tok
                if u is not None and u >= SATURATED and r:
                    sat_n += 1
                    sat_u_per_req += u / r
                    if tok:
                        sat_tok_per_req += tok / r
                        sat_tok_n += 1
                    if q:
                        self.sat_queued_n += 1
                        if q > self.peak_q_sat:
                            self.peak_q_sat = q
                tl.add(t, u if u is not None else 0.0, q, r)
                if decode:
                    if len(row[7]) > 6 or len(row[9]) > 6:  # shorter text cannot hold "graph: "
                        graph = _graph_flag(row[5] + b"|" + row[7] + b"|" + row[9])
                    else:
                        graph = graphs.get(row[5], _NO)
                        if graph is _NO:
                            graph = graphs[row[5]] = _graph_flag(row[5])
                    if graph is not None:
                        self._graph(graph, r)
                    gen[0] += g
                    gen[1] += 1
                    if g > gen[2]:
                        gen[2] = g
                    gen[3] = g
                else:
                    if tps is not None:
                        self._rate("input_tps", tps)
                    if hit is not None:
                        self._rate("hit_pct", hit)
                    self.new_tokens += new_tok
                    self.cached_tokens += cached
                    self.prefill_last = new_tok
                    if new_tok > self.prefill_peak:
                        self.prefill_peak = new_tok
        finally:
            self.n, self.last_t, self.last_stamp, self.last_u, self.last_q = n, last_t, last_stamp, last_u, last_q
            self.span_s, self.usage_time, self.above90_s, self.above99_s = span_s, usage_time, above90_s, above99_s
            self.usage_n, self.peak_u, self.peak_u_stamp = usage_n, peak_u, peak_u_stamp
            self.sum_r, self.r_n, self.peak_r, self.q_seen = sum_r, r_n, peak_r, q_seen
            self.pool_u, self.pool_tok = pool_u, pool_tok
            self.sat_n, self.sat_u_per_req, self.sat_tok_per_req, self.sat_tok_n = sat_n, sat_u_per_req, sat_tok_per_req, sat_tok_n

    def _rate(self, key: str, v: float) -> None:
        """[sum, n, max, last] of one rate; updated in place (``self.gen`` is ``rates["gen_tps"]``)."""
        acc = self.rates.get(key)
        if acc is None:
            self.rates[key] = [v, 1, v, v]
        elif not acc[1]:
            acc[:] = [v, 1, v, v]
        else:
            acc[0] += v
            acc[1] += 1
            if v > acc[2]:
                acc[2] = v
            acc[3] = v

    def _queue(self, t: float, q: int, u: float | None, r: int | None, stamp: str | None) -> None:
        if q > self.peak_q:
            self.peak_q, self.peak_q_stamp = q, stamp
        if q <= 0:
            if self.episode is not None:
                self.episode[1] = t
                self.closed, self.episode = self.episode, None
            return
        ep = self.episode
        if ep is None:
            if self.closed is not None and t - self.closed[1] <= MERGE_S:
                ep = self.closed
            else:
                self._close()
                ep = [t, t, 0, stamp, stamp, 0.0]
            self.closed, self.episode = None, ep
        ep[1] = t
        if q > ep[2]:
            ep[2], ep[3] = q, stamp
        self.queued_n += 1
        if u is not None:
            if u > ep[5]:
                ep[5] = u
            self.queued_hist[min(QUEUED_BINS - 1, int(u * 100 + 0.5))] += 1
            if u < 0.8:
                self.low_queued_n += 1
        if r is not None:
            if r > self.peak_r_queued:
                self.peak_r_queued = r
            counts = self.queued_running
            if r in counts or len(counts) < MAX_RUNNING_KEYS:
                counts[r] = counts.get(r, 0) + 1

    def _graph(self, graph: bool, r: int) -> None:
        """Decode batches with / without a CUDA graph: more running requests than the largest captured batch."""
        if graph:
            self.graph_on += 1
            if r > self.graph_max_on:
                self.graph_max_on = r
        else:
            self.graph_off += 1
            if self.graph_min_off is None or r < self.graph_min_off:
                self.graph_min_off = r

    def _extras(self, d: dict[str, Any]) -> None:
        """Throughputs, prefix-cache tokens and secondary pools: present on some lines only."""
        graph, r = d.get("graph"), d.get("running")
        if graph is not None and r is not None:
            self._graph(graph, r)
        for key in ("gen_tps", "prompt_tps", "input_tps", "hit_pct", "external_hit_pct"):
            v = d.get(key)
            if v is not None:
                self._rate(key, v)
        nt = d.get("new_tokens")
        if nt is not None:
            self.new_tokens += nt
            self.prefill_last = nt
            if nt > self.prefill_peak:
                self.prefill_peak = nt
            self.cached_tokens += d.get("cached_tokens") or 0
        for key in ("swa_usage", "mamba_usage", "swapped"):
            v = d.get(key)
            if v is not None and v > self.peaks.get(key, -1):
                self.peaks[key] = v

    # -- closing ----------------------------------------------------------------------------
    def _close(self) -> None:
        ep = self.closed
        if ep is None:
            return
        self.closed = None
        self.episodes += 1
        length = ep[1] - ep[0]
        self.episodes_s += length
        self.top.append(ep)
        self.top.sort(key=lambda e: (e[1] - e[0], e[2]), reverse=True)
        del self.top[TOP_EPISODES:]

    def close(self) -> None:
        """End of input: an episode still open counts as lasting until the last sample."""
        if self.episode is not None:
            self.closed, self.episode = self.episode, None
        self._close()

    def pool_estimate(self) -> int | None:
        """Pool size implied by a SGLang decode line: #token / token usage (± half a printed digit)."""
        return round(self.pool_tok / self.pool_u) if self.pool_tok else None

    def percentile(self, p: float) -> float | None:
        """The usage below which ``p`` of the samples fall (from the 0.1 % histogram)."""
        return _percentile(self.hist, self.usage_n, p, 1000)

    def queued_percentile(self, p: float) -> float | None:
        return _percentile(self.queued_hist, sum(self.queued_hist), p, 100)


def _percentile(hist: list[int], n: int, p: float, scale: int) -> float | None:
    if n <= 0:
        return None
    want = p * n
    seen = 0
    for i, c in enumerate(hist):
        seen += c
        if seen >= want and c:
            return i / scale
    return (len(hist) - 1) / scale
