"""What a watch saw, folded into a few numbers and a verdict: was the KV cache the limit?

Streaming on purpose: a watch may run for days at a 1 s interval, so nothing grows with its length.
Usage percentiles come from a 1000-bin histogram (0.1 % resolution), and every statistic is
time-weighted by the interval each sample stands for, so a slow scrape does not count less.

The verdict separates three situations that look alike from outside (requests wait):
capacity-bound (the cache was full: preemptions, or long stretches above 90 % with a queue),
queue-bound with room in the cache (the limit is max_num_seqs / max_running_requests or compute),
and neither.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvscope.watch.sampler import Sample

HIGH = 0.90  # "above 90 %": the zone where vLLM/SGLang start preempting/retracting
_BINS = 1000
BOUND_SHARE = 0.10  # time share above HIGH (with a queue) that makes a run capacity-bound
QUEUE_SHARE = 0.10


@dataclass
class Summary:
    samples: int = 0
    watched_s: float = 0.0
    usage_time_s: float = 0.0
    peak_usage: float | None = None
    peak_tokens: int | None = None
    above_high_s: float = 0.0
    waiting_time_s: float = 0.0  # time with at least one waiting request
    waiting_peak: int = 0
    waiting_while_high_s: float = 0.0
    running_peak: int = 0
    preemptions: int = 0
    preemptions_seen: bool = False
    restarts: int = 0
    hit_num: float = 0.0
    hit_den: float = 0.0
    gpu_peak_bytes: dict[int, int] = field(default_factory=dict)
    _hist: list[float] = field(default_factory=lambda: [0.0] * (_BINS + 1))

    def add(self, s: Sample) -> None:
        self.samples += 1
        dt = s.interval_s if s.interval_s > 0 else 0.0
        self.watched_s = max(self.watched_s, s.elapsed_s)
        if s.restarted:
            self.restarts += 1
        if s.kv_usage is not None:
            w = dt if dt > 0 else (1e-9 if self.usage_time_s == 0 else 0.0)  # first sample: tiny weight
            self.usage_time_s += w
            self._hist[min(_BINS, max(0, int(round(s.kv_usage * _BINS))))] += w
            if self.peak_usage is None or s.kv_usage > self.peak_usage:
                self.peak_usage = s.kv_usage
            if s.kv_usage >= HIGH:
                self.above_high_s += dt
                if (s.waiting or 0) > 0:
                    self.waiting_while_high_s += dt
        if s.tokens_used is not None:
            self.peak_tokens = max(self.peak_tokens or 0, s.tokens_used)
        if (s.waiting or 0) > 0:
            self.waiting_time_s += dt
        self.waiting_peak = max(self.waiting_peak, s.waiting or 0)
        self.running_peak = max(self.running_peak, s.running or 0)
        if s.preemptions is not None:
            self.preemptions_seen = True
            self.preemptions += max(0, s.preemptions)
        if s.prefix_hit_rate is not None:
            self.hit_num += s.prefix_hit_rate * max(dt, 1e-9)
            self.hit_den += max(dt, 1e-9)
        for g in s.gpus:
            if g.get("used_bytes") is not None:
                idx = int(g.get("index", 0))
                self.gpu_peak_bytes[idx] = max(self.gpu_peak_bytes.get(idx, 0), int(g["used_bytes"]))

    @classmethod
    def of_counts(cls, *, step_s: float, samples: int, watched_s: float, peak_usage: float | None,
                  usage_hist: list[float], above_high_steps: int, waiting_steps: int, waiting_peak: int,
                  waiting_while_high_steps: int, running_peak: int, preemptions: int | None, restarts: int,
                  prefix_hit_rate: float | None) -> Summary:
        """A summary of samples counted elsewhere on a grid of ``step_s`` (kvscope fleet reads Prometheus'
        range answers), so that a replica in a fleet gets the verdict watch would give it."""
        out = cls(samples=samples, watched_s=watched_s, usage_time_s=samples * step_s, peak_usage=peak_usage,
                  above_high_s=above_high_steps * step_s, waiting_time_s=waiting_steps * step_s,
                  waiting_peak=waiting_peak, waiting_while_high_s=waiting_while_high_steps * step_s,
                  running_peak=running_peak, preemptions=preemptions or 0, preemptions_seen=preemptions is not None,
                  restarts=restarts)
        out._hist = [c * step_s for c in usage_hist]
        if prefix_hit_rate is not None:
            out.hit_num, out.hit_den = prefix_hit_rate, 1.0
        return out

    def percentile(self, q: float) -> float | None:
        if self.usage_time_s <= 0:
            return None
        target, acc = q * self.usage_time_s, 0.0
        for i, w in enumerate(self._hist):
            acc += w
            if acc >= target and w > 0:
                return i / _BINS
        return self.peak_usage

    def share(self, seconds: float) -> float:
        span = self.usage_time_s if self.usage_time_s > 1e-6 else self.watched_s
        return seconds / span if span > 0 else 0.0

    def verdict(self) -> tuple[str, str]:
        """(code, sentence): capacity-bound / queue-bound / not-capacity-bound / idle / no-data."""
        if self.samples == 0 or self.peak_usage is None:
            return "no-data", "no usage samples were read, so there is nothing to judge"
        high_share = self.share(self.above_high_s)
        if self.preemptions > 0 or (high_share >= BOUND_SHARE and self.waiting_while_high_s > 0):
            why = []
            if self.preemptions:
                why.append(f"{self.preemptions} preemption(s)")
            if self.above_high_s > 0:
                why.append(f"{high_share:.0%} of the time above {HIGH:.0%}")
            if self.waiting_peak:
                why.append(f"up to {self.waiting_peak} request(s) waiting")
            return "capacity-bound", ("capacity-bound: the KV cache was the limit (" + ", ".join(why) + "); "
                                      "more KV memory, a smaller KV dtype or fewer concurrent sequences would help")
        if self.peak_usage < 0.05 and self.running_peak == 0:
            return "idle", "idle: no load was seen, so capacity was never tested"
        if self.share(self.waiting_time_s) >= QUEUE_SHARE:
            return "queue-bound", (f"not KV-bound: requests waited {self.share(self.waiting_time_s):.0%} of the time "
                                   f"while the cache peaked at {self.peak_usage:.0%}; the limit is the running-request "
                                   "cap (max_num_seqs / max_running_requests) or compute, not KV memory")
        p95 = self.percentile(0.95)
        return "not-capacity-bound", (f"not capacity-bound: peak {self.peak_usage:.0%}, p95 {p95:.0%}, "
                                      "no preemptions")

    def as_dict(self) -> dict[str, Any]:
        code, sentence = self.verdict()
        out: dict[str, Any] = {
            "samples": self.samples,
            "watched_s": round(self.watched_s, 3),
            "peak_usage": _r(self.peak_usage),
            "p95_usage": _r(self.percentile(0.95)),
            "p50_usage": _r(self.percentile(0.50)),
            "peak_tokens": self.peak_tokens,
            "above_90_s": round(self.above_high_s, 3),
            "above_90_share": _r(self.share(self.above_high_s)),
            "waiting_s": round(self.waiting_time_s, 3),
            "waiting_share": _r(self.share(self.waiting_time_s)),
            "waiting_peak": self.waiting_peak,
            "running_peak": self.running_peak,
            "preemptions": self.preemptions if self.preemptions_seen else None,
            "prefix_hit_rate": _r(self.hit_num / self.hit_den) if self.hit_den > 0 else None,
            "restarts": self.restarts,
            "verdict": code,
            "verdict_text": sentence,
        }
        if self.gpu_peak_bytes:
            out["gpu_peak_used_bytes"] = {str(k): v for k, v in sorted(self.gpu_peak_bytes.items())}
        return {k: v for k, v in out.items() if v is not None}


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
