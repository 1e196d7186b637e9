"""The ledger data model: what a startup of an inference server did with each GPU's memory.

Every memory figure is GiB = bytes / 2**30, because every engine kvscope reads prints GiB (even
when the label says "GB"); keeping the log's unit avoids re-rounding what the log printed.
Objects here are plain dataclasses so the Python API returns exactly what the CLI renders.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kvscope.core.facts import CapacityFacts, RankFacts
from kvscope.core.provenance import Figure, How, SourceRef

GIB = 1 << 30

# Rank fields the JSON contract names, in ledger order.
RANK_FIELDS = (
    "total_gib",
    "pre_load_free_gib",
    "weights_gib",
    "avail_after_weights_gib",
    "activation_peak_gib",
    "non_torch_gib",
    "usable_gib",
    "avail_after_pool_gib",
    "cuda_graph_gib",
    "avail_at_ready_gib",
)

CAPACITY_FIELDS = (
    "kv_tokens",
    "max_total_num_tokens",
    "max_running_requests",
    "context_len",
    "available_kv_gib",
    "num_gpu_blocks",
    "num_cpu_blocks",
    "max_model_len",
    "max_concurrency",
)


def finite_number(value: Any) -> float | None:
    """A setting as a finite number, else None (settings come from text; anything can be in them)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) and abs(number) < 1e18 else None


@dataclass
class KvPool:
    """One KV (or state) pool on one rank, as logged."""

    name: str
    tokens: int | None = None
    gib: float | None = None
    k_gib: float | None = None
    v_gib: float | None = None
    dtype: str | None = None
    source: SourceRef | None = None

    def size_gib(self) -> float | None:
        """Total pool size: the logged total, else K + V."""
        if self.gib is not None:
            return self.gib
        if self.k_gib is not None and self.v_gib is not None:
            return self.k_gib + self.v_gib
        return None


@dataclass
class LedgerRow:
    """One line of a rank's memory ledger: an amount and what it is."""

    item: str
    gib: float | None
    how: How
    note: str = ""


@dataclass
class Rank:
    """One GPU worker (a TP/DP/PP/EP rank) of one startup."""

    rank: str
    total_gib: float | None = None
    pre_load_free_gib: float | None = None
    weights_gib: float | None = None
    avail_after_weights_gib: float | None = None
    activation_peak_gib: float | None = None
    non_torch_gib: float | None = None
    usable_gib: float | None = None
    kv_pools: list[KvPool] = field(default_factory=list)
    avail_after_pool_gib: float | None = None
    cuda_graph_gib: float | None = None
    avail_at_ready_gib: float | None = None
    derived: list[str] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)  # the fact store: read it through the engine's views
    sources: dict[str, SourceRef] = field(default_factory=dict)
    ledger: list[LedgerRow] = field(default_factory=list)

    def pool(self, name: str) -> KvPool | None:
        return next((p for p in self.kv_pools if p.name == name), None)

    def has_figures(self) -> bool:
        """Whether the log gave this rank any memory figure (a serving-only excerpt names ranks, no memory)."""
        return bool(self.kv_pools) or any(
            getattr(self, k) is not None
            for k in ("total_gib", "pre_load_free_gib", "weights_gib", "avail_after_weights_gib",
                      "activation_peak_gib", "non_torch_gib", "usable_gib", "avail_after_pool_gib",
                      "cuda_graph_gib", "avail_at_ready_gib")
        )

    def how(self, key: str) -> How:
        """Where a rank field's value came from, in one place: assumed (the user's --assume), derived
        (kvscope computed it) or read (the log printed it). The JSON's ``derived`` list names every field not
        read, assumed ones included, as the contract says; the ledger and the reports say which of the two."""
        if key in (RankFacts(self).assumed or ()):
            return How.ASSUMED
        return How.DERIVED if key in self.derived else How.READ

    def figure(self, key: str) -> Figure | None:
        """A rank field with its provenance: the value, how it was known and the log line that printed it."""
        value = getattr(self, key)
        if value is None:
            return None
        how = self.how(key)
        return Figure(value, how, self.sources.get(key) if how is How.READ else None)

    def set_derived(self, key: str, value: float | None) -> None:
        """Fill a contract field kvscope computed (never overwrites a read figure)."""
        if value is None or getattr(self, key) is not None:
            return
        setattr(self, key, value)
        if key not in self.derived:
            self.derived.append(key)


class LedgerRows:
    """A rank's ledger as an engine's finish step writes it, top to bottom. A figure that is None
    makes no row; a row says where the rank field ``key`` came from (``Rank.how``: read, derived or
    assumed), unless ``how`` names it (assumed, derived, estimated)."""

    def __init__(self, rank: Rank) -> None:
        self.rank = rank
        self.rows: list[LedgerRow] = []

    def add(self, item: str, gib: float | None, key: str | None = None, note: str = "", how: How | None = None) -> None:
        if gib is None:
            return
        kind = how or (self.rank.how(key) if key else How.READ)
        self.rows.append(LedgerRow(item, gib, kind, note))


@dataclass
class Capacity:
    kv_tokens: int | None = None
    max_total_num_tokens: int | None = None
    max_running_requests: int | None = None
    context_len: int | None = None
    available_kv_gib: float | None = None
    num_gpu_blocks: int | None = None
    num_cpu_blocks: int | None = None
    max_model_len: int | None = None
    max_concurrency: float | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    # (key, value) of the capacity figures a startup can print more than once, in the log's order (one per worker
    # in vLLM): filled by ledger/assemble, read by the engine's finish step; not part of the JSON contract.
    printed: list[tuple[str, Any]] = field(default_factory=list, repr=False)


@dataclass
class Suggestion:
    flag: str
    from_value: Any
    to_value: Any
    kv_tokens_after: int | None = None
    note: str = ""
    alternatives: list[Suggestion] = field(default_factory=list)  # other moves that would also fix it, best first


@dataclass
class Finding:
    code: str
    severity: str  # "info" | "warning" | "error"
    title: str
    detail: str
    suggestion: Suggestion | None = None
    # context only: a healthy figure worth reading in the findings, never the answer's situation (a startup with
    # nothing to change is answered as such, not with the first figure that happens to be listed)
    context: bool = False
    # its fix is its own: as the answer, no other finding's move is offered beside it (a crash while serving is
    # not mended by a reconciliation's or a capacity step's suggestion)
    own_fix_only: bool = False


@dataclass
class Answer:
    """The operator's question answered in a few lines: what happened, why, what to change (with its value),
    what else would work, how sure kvscope is, and which missing fact would make it surer."""

    situation: str
    cause: str
    suggestion: Suggestion | None = None
    alternatives: list[Suggestion] = field(default_factory=list)
    confidence: str = "medium"  # "high": the engine's rule and the log's own numbers; "low": a guess from wording
    missing: list[str] = field(default_factory=list)  # "--assume mem_fraction_static=…" lines that would unlock more


@dataclass
class Failure:
    kind: str
    message: str
    source: SourceRef | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Reconciliation:
    """The engine's own sizing rule replayed against what the log printed."""

    bytes_per_token: int
    kv_tokens_low: int | None = None
    kv_tokens_high: int | None = None
    consistent: bool | None = None
    method: str = ""
    detail: str = ""
    architecture: dict[str, Any] = field(default_factory=dict)


@dataclass
class Startup:
    """One start of one server: its ranks, capacity, reconciliation and findings."""

    engine: str
    file: str = ""
    first_line: int = 0
    last_line: int = 0
    engine_version: str | None = None
    era: str | None = None
    model: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    ranks: list[Rank] = field(default_factory=list)
    capacity: Capacity = field(default_factory=Capacity)
    reconciliation: Reconciliation | None = None
    findings: list[Finding] = field(default_factory=list)
    failure: Failure | None = None
    warnings: list[dict[str, Any]] = field(default_factory=list)
    evidence: list[SourceRef] = field(default_factory=list)
    assumptions: dict[str, Any] = field(default_factory=dict)
    runtime: Any = None
    started_at: str | None = None
    answer: Answer | None = None
    # the engine's own typed record of what its finish step worked out (engines/<engine>/state.py): no log figure
    # and no assumption of the user's, so never serialised
    engine_state: Any = None
    _rank_index: dict[str, Rank] = field(default_factory=dict, repr=False, compare=False)  # for rank(): label → Rank

    def rank(self, label: str) -> Rank:
        """Get or create a rank by label, keeping first-seen order. O(1): a log of 100,000 ranks asks once a line.
        The index is rebuilt when ``ranks`` changed length under it (a finish step dropped or added one)."""
        index = self._rank_index
        if len(index) != len(self.ranks):
            index.clear()
            for r in self.ranks:
                index.setdefault(r.rank, r)
        found = index.get(label)
        if found is not None:
            return found
        r = Rank(rank=label)
        self.ranks.append(r)
        index[label] = r
        return r

    def setting(self, key: str, default: Any = None) -> Any:
        """A setting as logged, else as assumed by the user (--assume), else default."""
        if self.settings.get(key) is not None:
            return self.settings[key]
        return self.assumptions.get(key, default)

    def setting_number(self, key: str) -> float | None:
        """A setting (or assumption) as a finite number; None when absent or not a number."""
        return finite_number(self.setting(key))

    @property
    def reference_rank(self) -> Rank | None:
        """The rank whose numbers speak for the startup: TP0 if logged, else the first."""
        for r in self.ranks:
            if r.rank.endswith("TP0") or r.rank in ("TP0", "rank=0", "(single)"):
                return r
        return self.ranks[0] if self.ranks else None

    def has_content(self) -> bool:
        """Whether the startup says anything: ranks, a failure, settings or any capacity figure (a log cut
        after V0's ``# GPU blocks: …`` line holds nothing else)."""
        cap = self.capacity
        return bool(self.ranks or self.failure or self.settings
                    or any(getattr(cap, key) is not None for key in CAPACITY_FIELDS)
                    or CapacityFacts(cap).max_req_input_len is not None)  # a request refused at the pool's limit
