"""Fold a stream of events into startups: ranks, pools, capacity, settings, failures.

Engine-neutral on purpose: engines differ in which lines they print, not in what a startup is.
The few lifecycle rules (a second weight load on a rank is the draft model, a pool after
"Memory pool end" is the draft's pool, a weight load after the ready line is a restart) are
SGLang's shape but harmless for engines that never emit those phases.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from kvscope import engines
from kvscope.core import events as ev
from kvscope.core.facts import CapacityFacts, RankFacts
from kvscope.core.startup import CAPACITY_FIELDS, RANK_FIELDS, Failure, KvPool, Rank, SourceRef, Startup
from kvscope.runtime.accumulate import add_event as _runtime_add

DEFAULT_RANK = "TP0"
MAX_EVIDENCE = 400  # source lines kept per startup for reports; bounded so huge journals stay small


class _Builder:
    def __init__(self) -> None:
        self.current: Startup | None = None
        self.state: dict[str, dict[str, Any]] = {}
        self.ready = False
        self.prefixed = False
        self.stamped = False  # an event of the current startup carried a timestamp
        self.preface: Startup | None = None  # an untimestamped summary held for the startup after it (_close)
        self.args_seen = False  # the current startup has had its engine's argument dump (SGLang server_args)

    def new(self, e: ev.Event) -> Startup:
        self.current = Startup(engine=e.engine, file=e.file, first_line=e.line_no, last_line=e.line_no)
        self.current.started_at = e.timestamp
        self.state, self.ready, self.prefixed, self.stamped = {}, False, False, False
        self.args_seen = e.kind == ev.BOUNDARY and e.data.get("reason") == "server_args"
        return self.current

    def rank_of(self, s: Startup, e: ev.Event) -> Rank:
        if e.rank is not None:
            self.prefixed = True
            return s.rank(e.rank)
        ref = s.reference_rank
        return ref if ref is not None else s.rank(DEFAULT_RANK)

    def rstate(self, r: Rank) -> dict[str, Any]:
        return self.state.setdefault(r.rank, {"loads": 0, "pool_ends": 0, "graphs": []})


def _source(e: ev.Event) -> SourceRef:
    return SourceRef(e.file, e.line_no, e.text)


def _set_rank(r: Rank, data: dict[str, Any], e: ev.Event, overwrite: bool = True) -> None:
    for key, value in data.items():
        if value is None:
            continue
        if key in RANK_FIELDS:
            if overwrite or getattr(r, key) is None:
                setattr(r, key, value)
                r.sources[key] = _source(e)
        else:
            RankFacts(r).put(key, value)


def _is_restart(b: _Builder, s: Startup, e: ev.Event) -> bool:
    if e.kind == ev.BOUNDARY:
        if e.data.get("reason") == "server_args":
            # what the launch printed while it resolved its arguments, before it logged them (SGLang's "Max
            # running requests is reset to 48 for speculative decoding."), is this launch's, not a run of its own
            first = not b.args_seen
            b.args_seen = True
            if first and e.file == s.file and s.engine == e.engine and _only_settings(s):
                return False
        return s.has_content()
    if s.engine == "common" and e.engine != "common" and e.file == s.file and e.kind == ev.FAILURE:
        # engine-neutral lines (a torch / NPU out of memory) just before an engine's own failure line: one event,
        # whose engine only the later line names (SGLang's "Scheduler hit an exception" under the error it reports).
        # Before any other engine line they are a run the input does not show, dropped with their startup.
        s.engine = e.engine
        return False
    if e.file == s.file and e.engine != s.engine and s.engine in engines.get(e.engine).embeds:
        s.engine = e.engine  # the embedded engine's lines so far were this one's (ollama's llama.cpp runner)
        return False
    if e.file == s.file and e.engine in engines.get(s.engine).embeds:
        return False
    if (e.engine != s.engine or e.file != s.file) and s.has_content() and e.engine != "common":
        return True
    if e.kind == ev.FAILURE and _other_max_len(s, e):
        return True
    return bool(e.kind == ev.PHASE and e.data.get("phase") in ("weights_begin", "engine_init") and b.ready)


def _only_settings(s: Startup) -> bool:
    cap = s.capacity
    return not (s.ranks or s.failure or any(getattr(cap, key) is not None for key in CAPACITY_FIELDS))


def _other_max_len(s: Startup, e: ev.Event) -> bool:
    """A failure about a max_model_len other than the one this startup already runs with (its capacity line
    printed it) is another run's: two runs pasted together without a banner between them."""
    failed, running = e.data.get("max_model_len"), s.capacity.max_model_len
    return isinstance(failed, int) and isinstance(running, int) and failed != running


def _apply_phase(b: _Builder, s: Startup, e: ev.Event) -> None:
    data = dict(e.data)
    phase = data.pop("phase")
    r = b.rank_of(s, e)
    facts = RankFacts(r)
    st = b.rstate(r)
    if phase == "weights_begin":
        key = "pre_load_free_gib" if st["loads"] == 0 else "draft_pre_load_free_gib"
        _set_rank(r, {key: data.get("pre_load_free_gib")}, e)
        st["open_begin"] = key
    elif phase == "draft_weights_end":
        # a load the engine names as the draft's: the begin just read was the draft's too, not the target's
        if st.pop("open_begin", None) == "pre_load_free_gib" and r.pre_load_free_gib is not None:
            facts.draft_pre_load_free_gib = r.pre_load_free_gib
            r.pre_load_free_gib = None
            r.sources.pop("pre_load_free_gib", None)
        _set_rank(r, data, e)
    elif phase == "weights_end":
        st.pop("open_begin", None)
        st["loads"] += 1
        if st["loads"] == 1:
            _set_rank(r, data, e)
        else:
            facts.draft_weights_gib = data.get("weights_gib")
            facts.avail_after_draft_weights_gib = data.get("avail_after_weights_gib")
    elif phase == "pool_end":
        st["pool_ends"] += 1
        if st["pool_ends"] == 1:
            _set_rank(r, data, e)
        else:
            facts.avail_after_draft_pool_gib = data.get("avail_after_pool_gib")
    elif phase == "swa_pool":
        unnamed = [p for p in r.kv_pools if p.name in ("target", "kv")]
        if len(unnamed) >= 2:
            unnamed[0].name = "swa"
        facts.swa_pool_gib = data.get("gib")
        cf = CapacityFacts(s.capacity)
        cf.swa_tokens, cf.full_tokens = data.get("swa_tokens"), data.get("full_tokens")
    elif phase == "graph_begin":
        facts.put("avail_before_graphs_gib", data.get("avail_gib"), first=True)
    elif phase == "graph_progress":  # the capture's progress bar: the largest batch, the least memory left
        if data.get("bs") is not None:
            facts.capture_max_bs = max(data["bs"], facts.capture_max_bs or 0)
        if data.get("total") is not None:
            facts.capture_batch_sizes = data["total"]
        if data.get("avail_gib") is not None:
            low = facts.avail_during_capture_gib
            facts.avail_during_capture_gib = data["avail_gib"] if low is None else min(low, data["avail_gib"])
    elif phase == "graph_end":
        st["graphs"].append(data)
        facts.graphs = st["graphs"]
        if r.cuda_graph_gib is None and "draft" not in data.get("graph", "") and data.get("graph_gib") is not None:
            r.cuda_graph_gib = data["graph_gib"]
            r.sources["cuda_graph_gib"] = _source(e)
        if data.get("avail_gib") is not None:
            facts.avail_after_graphs_gib = data["avail_gib"]
            r.avail_at_ready_gib = data["avail_gib"]
            r.sources["avail_at_ready_gib"] = _source(e)
    elif phase == "ready":
        b.ready = True
        avail = data.pop("available_gpu_mem_gib", None)
        if avail is not None:
            _set_rank(r, {"avail_at_ready_gib": avail}, e)
        for key, value in data.items():
            if key in CAPACITY_FIELDS and value is not None:
                setattr(s.capacity, key, value)
            elif value is not None:
                CapacityFacts(s.capacity).put(key, value)
    else:
        _set_rank(r, data, e)


def _apply_pool(b: _Builder, s: Startup, e: ev.Event) -> None:
    data = e.data
    r = b.rank_of(s, e)
    st = b.rstate(r)
    name = data.get("name") or data.get("label")
    if name in (None, "Draft", "draft", "Target", "target"):
        drafted = (name or "").lower() == "draft" or st["pool_ends"] >= 1
        name = "draft" if drafted else "target"
    pool = KvPool(
        name=name,
        tokens=data.get("tokens"),
        gib=data.get("gib"),
        k_gib=data.get("k_gib"),
        v_gib=data.get("v_gib"),
        dtype=data.get("dtype"),
        source=_source(e),
    )
    if name == "target" and r.pool("target") is not None and st["pool_ends"] == 0:
        # A second pool before "Memory pool end": hybrid SWA logs the SWA pool first, then the full one.
        r.pool("target").name = "swa"  # type: ignore[union-attr]
    r.kv_pools.append(pool)
    for key in ("mamba_slots", "host_gb", "what", "layers", "cells"):
        if data.get(key) is not None:
            RankFacts(r).put(f"{name}_{key}", data[key], first=True)


def _apply(b: _Builder, s: Startup, e: ev.Event) -> None:
    kind = e.kind
    if kind == ev.SETTINGS:
        s.settings.update({k: v for k, v in e.data.items() if v is not None})
    elif kind == ev.MODEL:
        s.model = s.model or e.data.get("model")
    elif kind == ev.VERSION:
        s.engine_version = s.engine_version or e.data.get("engine_version")
    elif kind == ev.RANK:
        _set_rank(b.rank_of(s, e), e.data, e, overwrite=False)
    elif kind == ev.POOL:
        _apply_pool(b, s, e)
    elif kind == ev.PHASE:
        _apply_phase(b, s, e)
    elif kind == ev.CAPACITY:
        for key, value in e.data.items():
            if value is None:
                continue
            if key in PRINTED and len(s.capacity.printed) < MAX_PRINTED:
                s.capacity.printed.append((key, value))
            if key in CAPACITY_FIELDS:
                setattr(s.capacity, key, value)
            else:
                CapacityFacts(s.capacity).put(key, value)
    elif kind == ev.FAILURE:
        weak = bool(e.data.get("weak"))
        if weak and s.runtime is not None:
            # serving had begun (runtime samples read): a generic traceback now is not a failed startup; an echo
            # (a launcher saying its child died) repeats an error already read, and says nothing of its own
            if not e.data.get("echo"):
                s.warnings.append({"code": "error-while-serving", "message": e.data.get("message", ""), "rank": e.rank,
                                   "line": e.line_no})
        elif s.failure is None or (s.failure.kind == "exception" and not weak):
            extra = {k: v for k, v in e.data.items() if k not in ("kind", "message", "weak", "echo")}
            s.failure = Failure(e.data.get("kind", "unknown"), e.data.get("message", ""), _source(e), extra)
    elif kind == ev.FRAME:
        _apply_frame(s, e)
    elif kind == ev.WARNING:
        s.warnings.append({**e.data, "rank": e.rank, "line": e.line_no})
    elif kind == ev.RUNTIME:
        _runtime_add(s, e)


MAX_FRAMES = 16  # frames of a traceback kept on its failure: the outermost OUTER_FRAMES and the innermost rest
OUTER_FRAMES = 8  # a serving loop is about this deep before the model's own frames begin
MAX_RAISED = 4  # exception lines kept: the first is the cause; chained ones wrap it


def _apply_frame(s: Startup, e: ev.Event) -> None:
    """A traceback frame or exception line belongs to the failure it follows; without one it says nothing."""
    f = s.failure
    if f is None:
        return
    _keep_frame(f.data, e)


def _keep_frame(data: dict[str, Any], e: ev.Event) -> None:
    """A frame (or an exception line) into ``data``'s frames / raised, within their bounds."""
    if "raised" in e.data:
        raised = data.setdefault("raised", [])
        if len(raised) < MAX_RAISED:
            raised.append(e.data["raised"])
        return
    frames = data.setdefault("frames", [])
    frames.append(f"{e.data.get('path', '')}:{e.data.get('function', '')}")
    if len(frames) > MAX_FRAMES:  # the outermost say which loop it ran in (serving or startup), the innermost where it stopped
        del frames[OUTER_FRAMES]


# Capacity figures a startup may print more than once (once per worker in vLLM): the last one is the
# startup's here, and every one is kept in order (Capacity.printed) for the engine's finish step to read as its
# engine means them (vLLM's takes the smallest worker's).
PRINTED = ("kv_tokens", "kv_device", "max_concurrency")
MAX_PRINTED = 1024


def assemble(events: Iterable[ev.Event], engine_hint: str | None = None,
             unclaimed: list[Startup] | None = None) -> Iterator[Startup]:
    """Group events into startups, in input order.

    engine_hint: the engine the user's own settings name (``--assume mem_fraction_static=…`` is SGLang's). An input
    of engine-neutral lines only (a pasted torch out of memory and nothing else) is then that engine's startup,
    instead of a run the input does not show; with any engine's own line in the input the hint changes nothing.
    unclaimed: where such a startup goes when nothing names its engine (so the caller can say how to name it).
    """
    found = False
    for s in _assemble(events):
        found = found or s.engine != "common"
        if s.engine != "common":
            yield s
        elif engine_hint and not found:
            s.engine = engine_hint
            yield s
            found = True
        elif unclaimed is not None and s.failure is not None:
            unclaimed.append(s)


def _assemble(events: Iterable[ev.Event]) -> Iterator[Startup]:
    b = _Builder()
    for e in events:
        s = b.current
        if e.kind == ev.FRAME and (s is None or s.failure is None):
            if s is not None and s.warnings and s.warnings[-1].get("code") == "error-while-serving":
                _keep_frame(s.warnings[-1], e)  # the traceback of a crash while serving: which step it hit
            continue  # a traceback line with no failure before it in this startup says nothing, and opens nothing
        if s is None or _is_restart(b, s, e):
            if s is not None:
                yield from _close(b, s, e)
            s = b.new(e)
            if e.kind == ev.BOUNDARY:
                continue
        elif e.kind == ev.BOUNDARY:
            continue
        _apply(b, s, e)
        b.stamped = b.stamped or e.timestamp is not None
        if e.file == s.file:
            s.last_line = max(s.last_line, e.extra.get("last_line", e.line_no) if e.extra else e.line_no)
        if e.kind != ev.RUNTIME and len(s.evidence) < MAX_EVIDENCE:
            s.evidence.append(_source(e))
    if b.current is not None:
        yield from _close(b, b.current, None)
    elif b.preface is not None:
        yield b.preface


def _close(b: _Builder, s: Startup, nxt: ev.Event | None) -> list[Startup]:
    """The startups to report now that ``s`` ended (``nxt`` opens the next one; None at the end of the input).

    A summary quoted above the log it summarises (a post's key lines, then the log) reads as a startup of its
    own, ended by the log's banner. So a startup made only of untimestamped figures (no failure, setting or
    version), followed by a timestamped startup of the same engine and file, is held; it is merged into that
    one where no figure differs, and reported on its own where any does.
    """
    held, b.preface = b.preface, None
    if not _worth_reporting(s):
        neutral = [s] if s.engine == "common" and s.failure is not None and nxt is None else []
        return ([held] if held is not None else []) + neutral  # a neutral failure ending the input: assemble decides
    if held is not None:
        return _settle(held, s)
    if nxt is not None and _is_preface(b, s, nxt):
        b.preface = s
        return []
    return [s]


def _is_preface(b: _Builder, s: Startup, nxt: ev.Event) -> bool:
    return (not b.stamped and nxt.timestamp is not None and nxt.engine == s.engine and nxt.file == s.file
            and s.failure is None and not s.settings and s.engine_version is None and s.model is None)


def _differ(a: Any, b: Any) -> bool:
    return a is not None and b is not None and a != b


def _settle(held: Startup, s: Startup) -> list[Startup]:
    """The held summary merged into the startup after it, or both when a figure differs."""
    pairs = [(r, next((x for x in s.ranks if x.rank == r.rank), None)) for r in held.ranks]
    if any(_differ(getattr(held.capacity, k), getattr(s.capacity, k)) for k in CAPACITY_FIELDS) or any(
            other is not None and _differ(getattr(r, k), getattr(other, k)) for r, other in pairs for k in RANK_FIELDS):
        return [held, s]
    for r, other in pairs:
        target = other if other is not None else s.rank(r.rank)
        for key in RANK_FIELDS:
            if getattr(target, key) is None and getattr(r, key) is not None:
                setattr(target, key, getattr(r, key))
                if key in r.sources:
                    target.sources[key] = r.sources[key]
        if not target.kv_pools:
            target.kv_pools = r.kv_pools
        RankFacts(target).fill_from(RankFacts(r))
    for key in CAPACITY_FIELDS:
        if getattr(s.capacity, key) is None:
            setattr(s.capacity, key, getattr(held.capacity, key))
    CapacityFacts(s.capacity).fill_from(CapacityFacts(held.capacity))
    s.capacity.printed = (held.capacity.printed + s.capacity.printed)[:MAX_PRINTED]
    s.warnings = held.warnings + s.warnings
    s.evidence = (held.evidence + s.evidence)[:MAX_EVIDENCE]
    s.first_line = min(s.first_line, held.first_line)
    return [s]


def _worth_reporting(s: Startup) -> bool:
    """A startup with content from an engine. Engine-neutral lines alone (a torch OOM with no engine
    line before it) belong to a run the input does not show; they are no engine's startup."""
    return s.has_content() and s.engine != "common"
