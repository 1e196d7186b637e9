"""Fold RUNTIME events into their startup while the input streams past; summarise at the end.

The assembler calls ``add_event`` for every RUNTIME event (``kvscope.ledger.assemble``), so this
is the second half of the per-line hot path: it routes the sample to the stream of the scheduler
that printed it and updates constant-size state (``stream.Stream``). ``finish`` runs once per
startup from ``kvscope.analysis.explain.finish_startup``: it replaces the live state on ``startup.runtime``
by the plain dict the JSON contract emits, and adds the verdict finding.

Which lines count: with DP attention every DP group has its own scheduler, KV pool and queue, so
each group is its own stream; with plain TP every rank prints the same retraction warning, so
within a group only the first rank seen speaks (otherwise TP16 would count each retraction 16×).
"""

from __future__ import annotations

import re
from typing import Any

from kvscope.core.facts import RankFacts
from kvscope.core.startup import Startup
from kvscope.engines.serving import NATIVE, bulk_label, bulk_times, bulk_valid
from kvscope.runtime.stream import Stream

SAMPLES = frozenset(("decode", "prefill", "stats"))
MAX_STREAMS = 64  # DP groups / vLLM engines kept apart; more than this are counted, not kept
_DP = re.compile(r"\bDP(\d+)")
_UNSET = object()


class Accumulator:
    """Live runtime state of one startup (replaced by a dict in ``finish``)."""

    def __init__(self) -> None:
        self.streams: dict[str, Stream] = {}
        self.routes: dict[tuple[str | None, bool], Stream | str | None] = {}
        self.speakers: dict[tuple[str, bool], str | None] = {}
        self.retracted = 0
        self.retract_lines = 0
        self.preempted = 0
        self.preempt_cumulative: int | None = None
        self.preempt_modes: dict[str, int] = {}
        self.v0_hit: list[float] = []  # [sum, n, last] of the V0 "Prefix cache hit rate: GPU: X%" line
        self.ignored = 0  # lines from a rank that repeats another rank's line
        self._label: str | None | object = _UNSET  # last label routed, and where it went
        self._stream: Stream | str | None = None
        self.dropped_streams = 0

    def add(self, data: dict[str, Any], label: str | None, stamp: str | None) -> None:
        src = data["src"]
        if src in SAMPLES:
            if label is self._label:  # consecutive lines of one rank: skip the route lookup
                stream = self._stream
            else:
                stream = self.routes.get((label, True))
                if stream is None:
                    stream = self._route(label, True)
                self._label, self._stream = label, stream
            if src == "stats" and data.get("preempted"):
                self.preempted += data["preempted"]  # vLLM V1 "Preemptions: N" (since the last stats line)
            if stream.__class__ is Stream:
                stream.sample(data, stamp)  # type: ignore[union-attr]
            else:
                self.ignored += 1
            return
        if self._route(label, False) is None:
            self.ignored += 1
            return
        if src == "retract":
            self.retracted += data["retracted"]
            self.retract_lines += 1
        elif src == "preempt":
            self.preempted += data.get("preempted") or 0
            cum = data.get("cumulative")
            if cum is not None and (self.preempt_cumulative is None or cum > self.preempt_cumulative):
                self.preempt_cumulative = cum
            mode = data.get("mode")
            if mode:
                self.preempt_modes[mode] = self.preempt_modes.get(mode, 0) + 1
        elif src == "hit":
            v = data["hit_pct"]
            self.v0_hit = [self.v0_hit[0] + v, self.v0_hit[1] + 1, v] if self.v0_hit else [v, 1, v]

    def add_rows(self, rows: list[tuple]) -> None:
        """Rows of the bulk lane (``kvscope.engines.serving.BULK`` groups), in input order.

        Each scheduler's rows go to its stream in one call; routes are made in order of first
        appearance, as ``add`` makes them line by line, so the same rank speaks for its group.
        """
        if rows.__class__ is not list:
            if self._fold_native(rows):
                return
            rows = rows.rows()  # a stream holds a value the C fold does not take: fold the tuples
        if any(row[17] is not None for row in rows):
            for row in rows:
                if row[17] is not None and bulk_valid(row):
                    self._retract(bulk_label(row[1]), int(row[17]))
            rows = [row for row in rows if row[17] is None]
            if not rows:
                return
        labels = dict.fromkeys(row[1] for row in rows if bulk_valid(row))  # a dropped line routes nothing
        if len(labels) <= 1:
            for ranks in labels:  # sample_rows drops the invalid rows of other labels
                self._rows(bulk_label(ranks), rows)
            return
        buckets: dict[bytes, list[tuple]] = {ranks: [] for ranks in labels}
        for row in rows:
            bucket = buckets.get(row[1])
            if bucket is not None:
                bucket.append(row)
        for ranks, bucket in buckets.items():
            self._rows(bulk_label(ranks), bucket)

    def _fold_native(self, batch: Any) -> bool:
        """The C lane's rows, folded in C into the same streams ``_rows`` would use (routes made in
        the same order: first appearance among the sample rows). False, with nothing folded, when
        the C fold declines."""
        labels = batch.labels()
        streams: list[Stream | None] = [None] * len(labels)
        for k in batch.sample_labels():
            label = bulk_label(labels[k])
            stream = self.routes.get((label, True))
            if stream is None:
                stream = self._route(label, True)
            self._label, self._stream = label, stream
            streams[k] = stream if stream.__class__ is Stream else None  # type: ignore[assignment]
        kept = [s for s in streams if s is not None]
        if len({id(s) for s in kept}) != len(kept):
            return False
        ignored = NATIVE.fold(batch, streams)
        if ignored is None:
            return False
        self.ignored += ignored
        for k, retracted in batch.retracts():
            self._retract(bulk_label(labels[k]), retracted)
        return True

    def _retract(self, label: str | None, retracted: int) -> None:
        """A retraction line (``add`` does the same for one that came line by line)."""
        if self._route(label, False) is None:
            self.ignored += 1
            return
        self.retracted += retracted
        self.retract_lines += 1

    def _rows(self, label: str | None, rows: list[tuple]) -> None:
        stream = self.routes.get((label, True))
        if stream is None:
            stream = self._route(label, True)
        self._label, self._stream = label, stream
        if stream.__class__ is Stream:
            stream.sample_rows(rows, bulk_times)  # type: ignore[union-attr]
        else:
            self.ignored += sum(1 for row in rows if bulk_valid(row))

    def _route(self, label: str | None, sample: bool) -> Stream | str | None:
        """The stream a rank's lines go to; ``"skip"`` when another rank of its group already speaks."""
        key = (label, sample)
        cached = self.routes.get(key)
        if cached is not None:
            return cached if cached != "skip" else None
        group = _group(label)
        speaker_key = (group, sample)
        if speaker_key not in self.speakers:
            self.speakers[speaker_key] = label
        if self.speakers[speaker_key] != label:
            self.routes[key] = "skip"
            return "skip" if sample else None
        if not sample:
            self.routes[key] = "speak"
            return "speak"
        stream = self.streams.get(group)
        if stream is None:
            if len(self.streams) >= MAX_STREAMS:
                self.dropped_streams += 1
                self.routes[key] = "skip"
                return "skip"
            stream = self.streams[group] = Stream(group or label)
        self.routes[key] = stream
        return stream


def _group(label: str | None) -> str:
    """DP group of a SGLang rank label (``DP3 TP3 EP3`` → ``DP3``), vLLM engine label as is, else ''."""
    if not label:
        return ""
    m = _DP.search(label)
    if m:
        return f"DP{m.group(1)}"
    return label if label.startswith("Engine") else ""


def add_event(startup: Startup, event: Any) -> None:
    """Called by the assembler for each RUNTIME event of ``startup``."""
    acc = startup.runtime
    if acc.__class__ is not Accumulator:
        acc = _start(startup, event)
    data = event.data
    if data["src"] == "bulk":
        rows = data.get("rows")
        if rows is not None:
            acc.add_rows(rows)
        else:  # the vLLM lane: samples already read, one per stats line
            add = acc.add
            for sample, label, stamp in data["samples"]:
                add(sample, label, stamp)
    else:
        acc.add(data, event.rank, event.timestamp)


def _start(startup: Startup, event: Any) -> Accumulator:
    """First serving line of a startup. A journal excerpt may hold serving lines only: the rank
    that printed them is then all kvscope knows of the startup, and recording it is what makes the
    assembler keep the startup (it drops startups without content)."""
    if not startup.has_content():
        label = event.rank if event.rank and not event.rank.startswith("Engine") else "TP0"
        RankFacts(startup.rank(label)).seen_in = "serving lines only"
    acc = Accumulator()
    startup.runtime = acc
    return acc


def finish(startup: Startup) -> None:
    """Summary dict on ``startup.runtime`` and the verdict finding (no-op without serving lines)."""
    acc = startup.runtime
    if acc.__class__ is not Accumulator:
        return
    from kvscope.runtime.summary import summarize
    from kvscope.runtime.verdict import verdict

    summary = summarize(acc)
    if summary is None:
        startup.runtime = None
        return
    finding, numbers = verdict(startup, summary)
    summary["verdict"] = numbers
    startup.runtime = summary
    if finding is not None:
        startup.findings.append(finding)
