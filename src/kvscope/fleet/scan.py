"""Read a fleet from its Prometheus: find the replicas, page them, fold each window, give each a verdict.

The order of questions, and why:
1. ``/api/v1/series`` for every engine's KV-usage metric in the range: which replicas exist, which
   engine and era each runs, and how many series a page of them brings.
2. Per page of replicas (by ``instance``, else ``pod``) and per window of at most 10,000 steps, one
   range query per metric family (usage, waiting, running, evictions, prefix hits, prefix queries…),
   each asking every engine's names of that family at once: folded at once into each replica's
   running numbers, then dropped, so memory is one answer whatever the range or the fleet.
3. Per page, the capacity: the cache configuration at a coarse step (``last_over_time`` keeps a
   replica that lived between two steps), the last one of each replica is its capacity.
A replica is the set of identity labels its series share (``instance``, ``pod``, ``job``, ``model_name``…);
one server's schedulers (vLLM's DP ``engine``, SGLang's ``dp_rank``) are folded into it: usage is the
fullest pool's (it evicts first), requests are summed, counters are summed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from kvscope import engines
from kvscope.core.errors import InputError
from kvscope.engines.base import FleetMetrics
from kvscope.fleet import grid
from kvscope.fleet.prometheus import (
    API,
    DEFAULT_MAX_POINTS,
    Window,
    names_matcher,
    range_error,
    selector_matchers,
    values_matcher,
    vector,
    windows,
)
from kvscope.fleet.report import (
    Capacity,
    Change,
    Fix,
    FleetReport,
    FleetSummary,
    Queue,
    Range,
    Replica,
    Usage,
    Verdict,
)
from kvscope.watch.summary import HIGH, Summary

GIB = 1 << 30  # GiB = bytes / 2^30
IDENTITY = ("cluster", "namespace", "job", "service", "pod", "instance", "model_name")
SPARK_BUCKETS = 120
CAPACITY_STEPS = 500  # the capacity is read on a coarse grid: this many steps over the range
GAUGES = ("usage", "waiting", "running")
COUNTERS = ("preemptions", "prefix_hits", "prefix_queries")
OTHER_GAUGES = ("hit_rate", "preemption_gauges", "used_tokens")
ESTIMATE_FROM = 0.05  # usage below this: used ÷ usage is noise (SGLang rounds usage to two decimals)
_LOW_PRECISION = ("fp8", "int8", "fp4", "int4", "nvfp4")


@dataclass(frozen=True)
class Query:
    """What the user asked: where, which series, over when, at what step."""

    selector: str | None
    start: float
    end: float
    step_s: float
    max_points: int = DEFAULT_MAX_POINTS


@dataclass
class _Replica:
    """One replica's running numbers while its pages and windows are read (mutable on purpose: folded into)."""

    key: tuple[tuple[str, str], ...]
    engine: str
    hist: bytearray = field(default_factory=grid.new_hist)
    queued_hist: bytearray = field(default_factory=grid.new_hist)
    spark: bytearray = field(default_factory=lambda: grid.new_spark(SPARK_BUCKETS))
    usage_n: int = 0
    usage_sum: float = 0.0
    usage_peak: float = math.nan
    usage_peak_at: float | None = None
    above_n: int = 0
    waiting_n: int = 0
    waiting_pos: int = 0
    waiting_peak: float = math.nan
    waiting_peak_at: float | None = None
    episodes: int = 0
    longest: int = 0
    run: int = 0
    waiting_high: int = 0
    running_peak: float = math.nan
    running_peak_queued: float = math.nan
    counter_last: dict[str, float] = field(default_factory=dict)
    counter_inc: dict[str, float] = field(default_factory=dict)
    counter_seen: set[str] = field(default_factory=set)
    resets: int = 0
    hit_gauge_sum: float = 0.0
    hit_gauge_n: int = 0
    evict_gauge_steps: int | None = None
    capacity: dict[tuple[str, ...], tuple[int, dict[str, str], float]] = field(default_factory=dict)
    capacities_seen: set[int] = field(default_factory=set)
    pool_estimates: dict[tuple[str, ...], tuple[float, float]] = field(default_factory=dict)  # sched → (usage, used)


class _Names:
    """metric name → (engine, family, era index) for the engines whose usage the fleet exports."""

    def __init__(self, present: dict[str, FleetMetrics]) -> None:
        self.present = present
        self.of: dict[str, tuple[str, str, int]] = {}
        for engine, fm in present.items():
            for family in (*GAUGES, *COUNTERS, *OTHER_GAUGES):
                for era, name in enumerate(getattr(fm, family)):
                    self.of[name] = (engine, family, era)

    def family(self, family: str) -> tuple[str, ...]:
        return tuple(n for fm in self.present.values() for n in getattr(fm, family))


def _fleet_engines() -> dict[str, FleetMetrics]:
    return {e.name: e.fleet for e in engines.with_capability("fleet") if e.fleet is not None}


def _identity(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple((k, labels[k]) for k in IDENTITY if k in labels)


def _scheduler(labels: dict[str, str], fm: FleetMetrics) -> tuple[str, ...]:
    return tuple(labels.get(k, "") for k in fm.scheduler_labels)


def _repeat_rank(labels: dict[str, str], fm: FleetMetrics) -> tuple[int, ...]:
    out = []
    for k in fm.repeat_labels:
        try:
            out.append(int(labels.get(k, "0")))
        except ValueError:
            out.append(1 << 30)
    return tuple(out)


def scan(api: API, q: Query, progress: Callable[[str], None] | None = None) -> FleetReport:
    """The whole fleet report: every question asked of ``api`` in bounded pages and windows."""
    sel = selector_matchers(q.selector)
    version = api.check()
    all_fm = _fleet_engines()
    usage_names = tuple(n for fm in all_fm.values() for n in fm.usage)
    found = api.series(vector(names_matcher(usage_names), sel), q.start, q.end)
    if not found:
        shown = q.selector or "(no selector)"
        raise InputError(f"{api.client.shown}: no series of {', '.join(usage_names)} match {shown} in the range: "
                         "no vLLM or SGLang replica exported KV usage there (check --selector and --since, or "
                         "that the servers' /metrics are scraped; SGLang needs --enable-metrics)")
    names_of = {n: e for e, fm in all_fm.items() for n in fm.usage}
    present = {names_of[s["__name__"]]: all_fm[names_of[s["__name__"]]] for s in found if s.get("__name__") in names_of}
    names = _Names(present)
    replicas: dict[tuple[tuple[str, str], ...], _Replica] = {}
    per_value: dict[str, int] = {}
    page_label = next((lab for lab in ("instance", "pod") if all(lab in s for s in found)), None)
    for s in found:
        key = _identity(s)
        engine = names_of.get(s.get("__name__", ""), "")
        replicas.setdefault(key, _Replica(key, engine))
        if page_label:
            per_value[s[page_label]] = per_value.get(s[page_label], 0) + 1
    steps = int(math.floor((q.end - q.start) / q.step_s + 1e-9)) + 1
    wins = windows(q.start, steps, q.step_s)
    pages = _pages(per_value, max(w.steps for w in wins), q.max_points) if page_label else [[]]
    notes: list[str] = []
    for p, page in enumerate(pages, 1):
        page_sel = values_matcher(page_label, page) if page_label and page else ""
        if progress:
            progress(f"page {p}/{len(pages)}: {len(page) or len(replicas)} replica(s)")
        for win in wins:
            _read_window(api, names, replicas, vector_parts=(sel, page_sel), win=win, q=q, total=steps)
        _read_capacity(api, present, replicas, (sel, page_sel), q)
    if not page_label and len(found) * steps > q.max_points:
        notes.append("the series carry neither an instance nor a pod label, so the fleet could not be paged: each "
                     "answer held every replica")
    if not grid.NATIVE:
        notes.append("the C reader did not build on this machine, so answers were read in Python (same numbers, "
                     "slower on large fleets)")
    out = [_replica(r, q, steps, present, replicas) for r in sorted(replicas.values(), key=lambda r: r.key)]
    no_cap = sum(1 for r in out if r.capacity.kv_tokens is None)
    if no_cap:
        notes.append(f"{no_cap} replica(s) export no capacity (vLLM's cache_config_info, SGLang's max_total_num_tokens), "
                     "so what their queue needed cannot be sized in tokens")
    return FleetReport(prometheus=api.client.shown, selector=q.selector,
                       range=Range(q.start, q.end, q.step_s, steps), replicas=tuple(out), summary=_summary(out),
                       requests=api.requests, bytes_read=api.bytes, prometheus_version=version, notes=tuple(notes))


def _pages(per_value: dict[str, int], steps: int, max_points: int) -> list[list[str]]:
    """Label values packed so that one family's answer holds at most ``max_points`` samples."""
    pages: list[list[str]] = []
    cur: list[str] = []
    points = 0
    for value in sorted(per_value):
        n = per_value[value] * steps
        if cur and points + n > max_points:
            pages.append(cur)
            cur, points = [], 0
        cur.append(value)
        points += n
    if cur:
        pages.append(cur)
    return pages


def _read_window(api: API, names: _Names, replicas: dict, vector_parts: tuple[str, str], win: Window, q: Query,
                 total: int) -> None:
    gauges: dict[str, dict[tuple, list]] = {}
    for family in (*GAUGES, *COUNTERS, *OTHER_GAUGES):
        wanted = names.family(family)
        if not wanted:
            continue
        body = api.query_range(vector(names_matcher(wanted), *vector_parts), win, q.step_s)
        series = grid.matrix(body, win.start, q.step_s, win.steps)
        if series is None:
            raise range_error(body, api.client.shown + "/api/v1/query_range")
        del body  # one answer at a time: the grids are all that is kept of it
        by_replica: dict[tuple, list] = {}
        for labels, g in series:
            hit = names.of.get(labels.get("__name__", ""))
            if hit is None:
                continue
            engine, _, era = hit
            key = _identity(labels)
            rep = replicas.get(key)
            if rep is None:  # a replica that showed no usage series at discovery (it began later): read it too
                rep = replicas[key] = _Replica(key, engine)
            by_replica.setdefault(key, []).append((era, labels, g))
        if family in COUNTERS:
            for key, items in by_replica.items():
                _count(replicas[key], family, items, names)
        else:
            gauges[family] = by_replica
    keys = set().union(*(set(v) for v in gauges.values())) if gauges else set()
    for key in keys:
        rep = replicas[key]
        fm = names.present.get(rep.engine)
        if fm is None:
            continue
        u, w, r = (_one(gauges.get(f, {}).get(key), fm, op) for f, op in
                   (("usage", grid.MAX), ("waiting", grid.SUM), ("running", grid.SUM)))
        if u is not None or w is not None or r is not None:
            _fold(rep, u, w, r, win, q, total)
        hit = _one(gauges.get("hit_rate", {}).get(key), fm, grid.MAX)
        if hit is not None:
            f = grid.fold(hit, None, None, 2.0, grid.new_hist(), grid.new_hist(), bytearray(), 0, 0, 0)
            rep.hit_gauge_sum += f.usage_sum
            rep.hit_gauge_n += f.usage_n
        used = gauges.get("used_tokens", {}).get(key)
        if used:
            _estimate_pool(rep, gauges.get("usage", {}).get(key) or [], used, fm)
        ev = _one(gauges.get("preemption_gauges", {}).get(key), fm, grid.SUM)
        if ev is not None:
            f = grid.fold(None, ev, None, 2.0, grid.new_hist(), grid.new_hist(), bytearray(), 0, 0, 0)
            rep.evict_gauge_steps = (rep.evict_gauge_steps or 0) + f.waiting_pos_n


def _estimate_pool(rep: _Replica, usage: list, used: list, fm: FleetMetrics) -> None:
    """Each scheduler's pool ≈ tokens used ÷ usage, at the step where its usage was highest (most digits)."""
    by_sched = {(_scheduler(lab, fm), _repeat_rank(lab, fm)): g for _, lab, g in used}
    for _, labels, g in usage:
        sched, rank = _scheduler(labels, fm), _repeat_rank(labels, fm)
        u = grid.fold(g, None, None, 2.0, grid.new_hist(), grid.new_hist(), bytearray(), 0, 0, 0)
        tokens = by_sched.get((sched, rank))
        if tokens is None or u.usage_peak_i < 0 or not u.usage_peak >= ESTIMATE_FROM:
            continue
        at = grid.values(tokens)[u.usage_peak_i]
        best = rep.pool_estimates.get(sched)
        if at == at and (best is None or u.usage_peak > best[0]):
            rep.pool_estimates[sched] = (u.usage_peak, at)


def _one(items: list | None, fm: FleetMetrics, op: int) -> bytes | None:
    """One grid per replica: its earliest-era name only, one series per scheduler (the lowest repeating rank),
    folded over schedulers with ``op``."""
    if not items:
        return None
    era = min(i[0] for i in items)
    best: dict[tuple[str, ...], tuple[tuple[int, ...], bytes]] = {}
    for e, labels, g in items:
        if e != era:
            continue
        sched, rank = _scheduler(labels, fm), _repeat_rank(labels, fm)
        cur = best.get(sched)
        if cur is None or rank < cur[0]:
            best[sched] = (rank, g)
    out: bytes | None = None
    for _, g in best.values():
        out = g if out is None else grid.combine(out, g, op)
    return out


def _count(rep: _Replica, family: str, items: list, names: _Names) -> None:
    fm = names.present.get(rep.engine)
    if fm is None:
        return
    era = min(i[0] for i in items)
    best: dict[tuple[str, ...], tuple[tuple[int, ...], dict[str, str], bytes]] = {}
    for e, labels, g in items:
        if e != era:
            continue
        sched, rank = _scheduler(labels, fm), _repeat_rank(labels, fm)
        cur = best.get(sched)
        if cur is None or rank < cur[0]:
            best[sched] = (rank, labels, g)
    for _, labels, g in best.values():
        skey = family + json.dumps(sorted(labels.items()))
        inc, resets, last = grid.counter(g, rep.counter_last.get(skey, math.nan))
        rep.counter_last[skey] = last
        rep.counter_inc[family] = rep.counter_inc.get(family, 0.0) + inc
        rep.counter_seen.add(family)
        rep.resets = max(rep.resets, resets)


def _fold(rep: _Replica, u: bytes | None, w: bytes | None, r: bytes | None, win: Window, q: Query, total: int) -> None:
    f = grid.fold(u, w, r, HIGH, rep.hist, rep.queued_hist, rep.spark, win.offset, total, rep.run)
    rep.usage_n += f.usage_n
    rep.usage_sum += f.usage_sum
    if f.usage_peak_i >= 0 and not (f.usage_peak <= rep.usage_peak):
        rep.usage_peak, rep.usage_peak_at = f.usage_peak, win.start + f.usage_peak_i * q.step_s
    rep.above_n += f.above_high_n
    rep.waiting_n += f.waiting_n
    rep.waiting_pos += f.waiting_pos_n
    if f.waiting_peak_i >= 0 and not (f.waiting_peak <= rep.waiting_peak):
        rep.waiting_peak, rep.waiting_peak_at = f.waiting_peak, win.start + f.waiting_peak_i * q.step_s
    rep.episodes += f.episodes
    rep.longest = max(rep.longest, f.longest_run)
    rep.run = f.run_after
    rep.waiting_high += f.waiting_high_n
    if not (f.running_peak <= rep.running_peak) and f.running_n:
        rep.running_peak = f.running_peak
    if f.running_peak_queued == f.running_peak_queued and not (f.running_peak_queued <= rep.running_peak_queued):
        rep.running_peak_queued = f.running_peak_queued


def _read_capacity(api: API, present: dict[str, FleetMetrics], replicas: dict, parts: tuple[str, str], q: Query) -> None:
    span = max(q.end - q.start, q.step_s)
    cstep = max(q.step_s, math.ceil(span / CAPACITY_STEPS))
    steps = int(span // cstep) + 1
    win = Window(q.end - (steps - 1) * cstep, steps, 0)
    for engine, fm in present.items():
        for family in ("capacity_info", "capacity_tokens"):
            for name in getattr(fm, family):
                query = f"last_over_time({vector(names_matcher((name,)), *parts)}[{int(cstep)}s])"
                body = api.query_range(query, win, cstep)
                series = grid.matrix(body, win.start, cstep, win.steps)
                if series is None:
                    raise range_error(body, api.client.shown + "/api/v1/query_range")
                for labels, g in series:
                    vals = grid.values(g)
                    last = max((i for i, v in enumerate(vals) if v == v), default=-1)
                    if last < 0:
                        continue
                    tokens = _tokens(labels, vals[last], family)
                    for rep in _matching(replicas, labels, engine):
                        sched = _scheduler(labels, fm)
                        cur = rep.capacity.get(sched)
                        if tokens is not None:
                            rep.capacities_seen.add(tokens)
                        if cur is None or last >= cur[0]:
                            rep.capacity[sched] = (last, {**labels, "__source__": name}, tokens if tokens is not None
                                                   else math.nan)


def _tokens(labels: dict[str, str], value: float, family: str) -> int | None:
    if family == "capacity_tokens":
        return int(value) if value == value and value > 0 else None
    size = _num(labels.get("kv_cache_size_tokens"))
    if size is None:
        blocks, block = _num(labels.get("num_gpu_blocks")), _num(labels.get("block_size"))
        size = blocks * block if blocks is not None and block is not None else None
    return int(size) if size else None


def _num(raw: str | None) -> float | None:
    if raw is None or raw in ("None", "", "null"):
        return None
    try:
        v = float(raw)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _matching(replicas: dict, labels: dict[str, str], engine: str) -> list[_Replica]:
    """Replicas the capacity series belongs to: an info metric may lack some identity labels (model_name)."""
    ident = _identity(labels)
    exact = replicas.get(ident)
    if exact is not None:
        return [exact]
    want = dict(ident)
    return [r for k, r in replicas.items() if r.engine == engine and all(dict(k).get(a) == v for a, v in want.items())]


def _capacity(rep: _Replica) -> Capacity:
    if not rep.capacity:
        if rep.pool_estimates:
            est = round(sum(used / usage for usage, used in rep.pool_estimates.values()))
            return Capacity(kv_tokens=est, schedulers=len(rep.pool_estimates),
                            source="estimate: tokens used ÷ usage (no capacity gauge)")
        return Capacity()
    items = list(rep.capacity.values())
    tokens = [int(t) for _, _, t in items if t == t]
    labels = items[0][1]
    blocks = [_num(lab.get("num_gpu_blocks")) for _, lab, _ in items]
    memory = [_num(lab.get("kv_cache_memory_bytes")) for _, lab, _ in items]
    total = sum(tokens) if tokens else None
    prefix = labels.get("enable_prefix_caching")
    return Capacity(
        kv_tokens=total,
        num_gpu_blocks=int(sum(b for b in blocks if b is not None)) if any(b is not None for b in blocks) else None,
        block_size=int(b) if (b := _num(labels.get("block_size"))) else None,
        schedulers=len(items),
        kv_cache_dtype=labels.get("cache_dtype") or labels.get("kv_cache_dtype"),
        memory_fraction=_num(labels.get("gpu_memory_utilization")) or _num(labels.get("mem_fraction_static")),
        prefix_caching=None if prefix is None else prefix == "True",
        kv_cache_memory_bytes=int(sum(m for m in memory if m)) if memory and all(memory) else None,
        max_concurrency=_num(labels.get("kv_cache_max_concurrency")),
        earlier_kv_tokens=tuple(sorted(t for t in rep.capacities_seen
                                       if len(items) == 1 and t != total)),
        source=labels.get("__source__"),
    )


def _name(rep: _Replica, all_keys: list[tuple]) -> str:
    labels = dict(rep.key)
    base = labels.get("pod") or labels.get("instance") or labels.get("job") or "replica"
    same = sum(1 for k in all_keys if (dict(k).get("pod") or dict(k).get("instance")) == base)
    if same > 1 and labels.get("model_name"):
        base += f" {labels['model_name']}"
    return base


def _replica(rep: _Replica, q: Query, steps: int, present: dict[str, FleetMetrics], replicas: dict) -> Replica:
    hist = list(grid.values(bytes(rep.hist)))
    preempt = rep.counter_inc.get("preemptions") if "preemptions" in rep.counter_seen else None
    if preempt is None and rep.evict_gauge_steps is not None:
        preempt = float(rep.evict_gauge_steps)
    hits, queries = rep.counter_inc.get("prefix_hits"), rep.counter_inc.get("prefix_queries")
    hit_rate = (hits / queries if hits is not None and queries else
                rep.hit_gauge_sum / rep.hit_gauge_n if rep.hit_gauge_n else None)
    if hit_rate is not None and hit_rate > 1.0:  # SGLang's early cache_hit_rate was a percentage
        hit_rate /= 100.0
    hit_rate = None if hit_rate is None else round(hit_rate, 6)
    peak = rep.usage_peak if rep.usage_n else None
    summary = Summary.of_counts(
        step_s=q.step_s, samples=rep.usage_n, watched_s=steps * q.step_s, peak_usage=peak, usage_hist=hist,
        above_high_steps=rep.above_n, waiting_steps=rep.waiting_pos, waiting_peak=_i(rep.waiting_peak),
        waiting_while_high_steps=rep.waiting_high, running_peak=_i(rep.running_peak),
        preemptions=None if preempt is None else int(round(preempt)), restarts=rep.resets, prefix_hit_rate=hit_rate)
    code, text = summary.verdict()
    verdict = Verdict(code)
    cap = _capacity(rep)
    qsum = Summary.of_counts(step_s=q.step_s, samples=rep.waiting_pos, watched_s=0, peak_usage=peak,
                             usage_hist=list(grid.values(bytes(rep.queued_hist))), above_high_steps=0,
                             waiting_steps=0, waiting_peak=0, waiting_while_high_steps=0, running_peak=0,
                             preemptions=None, restarts=0, prefix_hit_rate=None)
    usage = Usage(samples=rep.usage_n, observed_s=rep.usage_n * q.step_s, peak=peak, peak_at=rep.usage_peak_at,
                  p50=summary.percentile(0.5), p95=summary.percentile(0.95),
                  mean=round(rep.usage_sum / rep.usage_n, 6) if rep.usage_n else None, above_90_s=rep.above_n * q.step_s,
                  above_90_share=rep.above_n / rep.usage_n if rep.usage_n else None)
    queue = Queue(peak=_i(rep.waiting_peak), peak_at=rep.waiting_peak_at, waiting_s=rep.waiting_pos * q.step_s,
                  waiting_share=rep.waiting_pos / rep.waiting_n if rep.waiting_n else None, episodes=rep.episodes,
                  longest_s=rep.longest * q.step_s, waiting_while_90_s=rep.waiting_high * q.step_s,
                  usage_while_queued_p95=qsum.percentile(0.95) if rep.waiting_pos else None,
                  running_peak=_i(rep.running_peak),
                  running_peak_while_queued=_i(rep.running_peak_queued) if rep.running_peak_queued == rep.running_peak_queued else None)
    extra = _extra(verdict, cap, queue)
    labels = dict(rep.key)
    return Replica(name=_name(rep, list(replicas)), engine=rep.engine, labels=labels, capacity=cap, usage=usage,
                   queue=queue, preemptions=None if preempt is None else int(round(preempt)), restarts=rep.resets,
                   prefix_hit_rate=hit_rate, verdict=verdict, verdict_text=text, extra_kv_tokens=extra,
                   fix=_fix(rep.engine, verdict, cap, extra),
                   spark=tuple(None if v != v else round(v, 4) for v in grid.values(bytes(rep.spark))),
                   model=labels.get("model_name"))


def _i(v: float) -> int:
    return int(round(v)) if v == v else 0


def _extra(verdict: Verdict, cap: Capacity, queue: Queue) -> int | None:
    """KV tokens the queue's peak needed: waiting requests × the tokens a running request held when the pool was
    full (the pool ÷ the requests running while others waited)."""
    if not verdict.kv_bound or not cap.kv_tokens or not queue.peak or not queue.running_peak_while_queued:
        return None
    per_request = cap.kv_tokens * (queue.usage_while_queued_p95 or 1.0) / queue.running_peak_while_queued
    return math.ceil(queue.peak * per_request)


def _sixteen_bit(dtype: str | None) -> bool:
    return dtype is not None and not any(k in dtype.lower() for k in _LOW_PRECISION)


def _fix(engine: str, verdict: Verdict, cap: Capacity, extra: int | None) -> Fix | None:
    if not verdict.kv_bound:
        return None
    knobs = engines.get(engine).knobs
    if cap.kv_tokens and _sixteen_bit(cap.kv_cache_dtype):
        covers = None if extra is None else cap.kv_tokens >= extra
        need = "" if extra is None else (f"; enough for the {extra:,} the queue needed" if covers else
                                         f"; not enough on its own for the {extra:,} the queue needed")
        return Fix("--kv-cache-dtype", knobs.fp8_kv_value, cap.kv_tokens, covers,
                   f"--kv-cache-dtype {knobs.fp8_kv_value}: an fp8 cache holds ≈ 2× the tokens in the same memory "
                   f"(+{cap.kv_tokens:,}, from {cap.kv_cache_dtype}){need}; check output quality")
    flag = knobs.memory.flag if knobs.memory else "the memory fraction"
    if cap.kv_tokens:
        n = 1 if extra is None else max(1, math.ceil(extra / cap.kv_tokens))
        return Fix("replicas", f"+{n}", n * cap.kv_tokens, True if extra is not None else None,
                   f"the cache is already {cap.kv_cache_dtype}: add {n} replica(s) (+{cap.kv_tokens:,} tokens each), "
                   f"or raise {flag}" + (f" above {cap.memory_fraction:g}" if cap.memory_fraction else "")
                   + " where the GPUs have memory to spare (the metrics do not show the GPU's size)")
    return Fix(flag, "higher", None, None, f"raise {flag} or use an fp8 KV cache; the replica exports no capacity, "
               "so the change cannot be sized")


def _summary(reps: list[Replica]) -> FleetSummary:
    by: dict[str, int] = {}
    for r in reps:
        by[r.verdict.value] = by.get(r.verdict.value, 0) + 1
    kv_bound = [r for r in reps if r.verdict.kv_bound]
    idle_tokens, idle_bytes, bytes_known = 0, 0.0, True
    for r in reps:
        if r.verdict.kv_bound or not r.capacity.kv_tokens or r.usage.peak is None:
            continue
        unused = max(0.0, 1.0 - r.usage.peak)
        idle_tokens += round(r.capacity.kv_tokens * unused)
        if r.capacity.kv_cache_memory_bytes:
            idle_bytes += r.capacity.kv_cache_memory_bytes * unused
        else:
            bytes_known = False
    fp8 = [r for r in reps if r.capacity.kv_tokens and _sixteen_bit(r.capacity.kv_cache_dtype)]
    fp8_bound = [r for r in fp8 if r.verdict.kv_bound]
    changes = []
    if fp8:
        changes.append(Change("an fp8 KV cache on every replica whose cache is 16-bit", len(fp8),
                              sum(r.capacity.kv_tokens or 0 for r in fp8), len(fp8_bound),
                              sum(r.capacity.kv_tokens or 0 for r in fp8_bound)))
    return FleetSummary(replicas=len(reps), by_verdict=by, kv_bound=tuple(r.name for r in kv_bound),
                        kv_tokens=sum(r.capacity.kv_tokens or 0 for r in reps), idle_kv_tokens=idle_tokens,
                        idle_kv_gib=round(idle_bytes / GIB, 2) if bytes_known and idle_bytes else None,
                        changes=tuple(changes))
