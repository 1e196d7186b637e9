"""What ``kvscope fleet`` found, as typed records: each replica, then the fleet (``kvscope.fleet/1`` in JSON).

Times are Unix seconds; durations end in ``_s``; usage is a fraction of the pool (0..1); tokens are KV
tokens as the engine counts them (vLLM: GPU blocks × block size; SGLang: the pool's token slots).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

SCHEMA = "kvscope.fleet/1"


class Verdict(str, Enum):
    """The verdict watch gives one server, per replica."""

    CAPACITY_BOUND = "capacity-bound"  # the KV pool was the limit: evictions, or a queue while ≥ 90 % full
    QUEUE_BOUND = "queue-bound"  # requests waited with room in the pool: the request cap or compute
    NOT_BOUND = "not-capacity-bound"
    IDLE = "idle"  # no load seen
    NO_DATA = "no-data"  # no usage samples

    @property
    def kv_bound(self) -> bool:
        return self is Verdict.CAPACITY_BOUND


@dataclass(frozen=True)
class Capacity:
    """The pool a replica's metrics declare (its last configuration in the range)."""

    kv_tokens: int | None = None
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    schedulers: int = 1  # DP engines / ranks: pools summed into kv_tokens
    kv_cache_dtype: str | None = None
    memory_fraction: float | None = None
    prefix_caching: bool | None = None
    kv_cache_memory_bytes: int | None = None
    max_concurrency: float | None = None  # requests of max_model_len the pool holds, where the engine exports it
    earlier_kv_tokens: tuple[int, ...] = ()  # other capacities it had in the range (a restart with other flags)
    source: str | None = None  # the metric it was read from


@dataclass(frozen=True)
class Usage:
    samples: int
    observed_s: float
    peak: float | None
    peak_at: float | None
    p50: float | None
    p95: float | None
    mean: float | None
    above_90_s: float
    above_90_share: float | None


@dataclass(frozen=True)
class Queue:
    peak: int
    peak_at: float | None
    waiting_s: float
    waiting_share: float | None
    episodes: int
    longest_s: float  # the longest stretch with requests waiting
    waiting_while_90_s: float
    usage_while_queued_p95: float | None
    running_peak: int
    running_peak_while_queued: int | None


@dataclass(frozen=True)
class Fix:
    """The cheapest change for a KV-bound replica, and what it buys."""

    flag: str
    to: str
    tokens_added: int | None
    covers: bool | None  # whether it covers what the queue needed
    text: str


@dataclass(frozen=True)
class Replica:
    name: str  # instance / pod (and model where several share one)
    engine: str
    labels: dict[str, str]
    capacity: Capacity
    usage: Usage
    queue: Queue
    preemptions: int | None  # evicted requests in the range (counter increases; None: not exported)
    restarts: int  # counter resets seen
    prefix_hit_rate: float | None
    verdict: Verdict
    verdict_text: str
    extra_kv_tokens: int | None  # what the queue's peak needed beyond the pool, where it can be sized
    fix: Fix | None
    spark: tuple[float | None, ...]  # peak usage per bucket of the range, for the charts
    model: str | None = None


@dataclass(frozen=True)
class Change:
    """A fleet-wide change and the KV tokens it would add."""

    text: str
    replicas: int
    tokens_added: int
    kv_bound_replicas: int
    kv_bound_tokens_added: int


@dataclass(frozen=True)
class FleetSummary:
    replicas: int
    by_verdict: dict[str, int]
    kv_bound: tuple[str, ...]
    kv_tokens: int  # summed over the replicas whose capacity is known
    idle_kv_tokens: int  # the pool never used at each replica's peak, over replicas that are not KV-bound
    idle_kv_gib: float | None  # the same in GiB where the pools' bytes are known (GiB = bytes / 2^30)
    changes: tuple[Change, ...]


@dataclass(frozen=True)
class Range:
    start: float
    end: float
    step_s: float
    steps: int


@dataclass(frozen=True)
class FleetReport:
    prometheus: str  # the URL, without credentials
    selector: str | None
    range: Range
    replicas: tuple[Replica, ...]
    summary: FleetSummary
    requests: int  # HTTP requests asked of Prometheus
    bytes_read: int
    prometheus_version: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out = {"schema": SCHEMA, **out}
        for r in out["replicas"]:
            r["verdict"] = Verdict(r["verdict"]).value
        return _clean(out)


def _clean(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, float):
        return round(value, 4) if value == value else None
    return value
