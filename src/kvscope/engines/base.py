"""The Engine protocol: what every engine package provides (lines, finish, findings, whatif, plan,
watch, the knobs its advice names), and the small number-parsing helpers their line readers share."""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from kvscope.core.facts import CapacityFacts, RankFacts
from kvscope.model.layout import WeightRules

NUM = r"[-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)"


# No memory figure, token, block or request count any engine prints comes near 1e15 (a petabyte, a
# quadrillion tokens). A larger number is corrupt text, and letting it through only moves the
# failure downstream: 1e308 × 2 is inf, and int(inf) raises in whatever code derives figures from it.
MAX_PLAUSIBLE = 1e15


def to_float(text: str | None) -> float | None:
    """Parse a printed number; anything non-finite, implausibly large or unreadable is None (never garbage). ASCII
    digits only: no engine prints others, and ``float`` would read Arabic-Indic or fullwidth digits as numbers."""
    if text is None or not text.isascii():
        return None
    try:
        value = float(_decimal_point(text) if "," in text else text)
    except (ValueError, OverflowError):
        return None
    return value if math.isfinite(value) and abs(value) <= MAX_PLAUSIBLE else None


def _decimal_point(text: str) -> str:
    """Commas as printed: thousands separators ("1,234,567", "158,656") are dropped; a lone comma not
    followed by exactly three digits is a decimal comma ("34,00 MiB" from a C locale with ',' decimals).

    Ambiguous by construction: "0,125" reads as 125 (three digits look like thousands). No engine prints
    three decimals after a comma (llama.cpp's sizes have two), so the thousands reading is the safe one.
    """
    head, _, tail = text.partition(",")
    if "," not in tail and "." not in text and not (len(tail) == 3 and tail.isdigit()):
        return f"{head}.{tail}"
    return text.replace(",", "")


def to_int(text: str | None) -> int | None:
    value = to_float(text)
    return None if value is None else int(value)


@dataclass(slots=True)
class Parsed:
    """An event before the dispatcher stamps it with file, line and engine."""

    kind: str
    data: dict[str, Any]
    rank: str | None = None
    timestamp: str | None = None


@dataclass
class LineContext:
    """Per-input state an engine parser may keep (e.g. a multi-line table being read)."""

    state: dict[str, Any] = field(default_factory=dict)
    file: str | None = None  # the file the line being parsed came from (state about one log must not leak to the next)
    raw: str = ""  # the line as read, before its prefixes were stripped (a journald prefix names the program)


class EngineLines(Protocol):
    """An engine's line knowledge."""

    engine: str
    anchors: tuple[bytes, ...]

    def parse(self, text: str, ctx: LineContext) -> list[Parsed]:
        """Events in one cleaned line; [] when the line says nothing kvscope uses."""
        ...

    joins: bool = True  # False: wants_join never says yes (the dispatcher then does not ask)

    def wants_join(self, text: str) -> bool:
        """True when the line starts a known message that looks cut by a hard wrap."""
        ...


TYPICAL_REQUEST_TOKENS = (4_096, 32_768)  # prompt + output of a chat turn and of a long-document request


def typical_fits(tokens: int, ceiling: int | None, lead: str, cap_name: str, cap: int | None,
                 advice: str = "") -> str | None:
    """'At typical lengths <lead> N requests of 4,096 tokens or M requests of 32,768 tokens' for the typical lengths
    under one request's ceiling, and the engine's request cap named as the real limit where it binds (each engine
    says it in its own flag); None when no typical length is under the ceiling."""
    typical = [(n, tokens // n) for n in TYPICAL_REQUEST_TOKENS if not ceiling or n < ceiling]
    if not typical:
        return None
    text = f"At typical lengths {lead} " + " or ".join(f"{k:,} requests of {n:,} tokens" for n, k in typical)
    if cap and any(k > cap for _, k in typical):
        text += (f"; {cap_name} {cap:,} caps how many run at once, so with short requests that cap, not the KV cache, "
                 f"is the limit{advice}")
    return text


def cut_short(text: str, joinable: tuple[tuple[str, re.Pattern[str]], ...]) -> bool:
    """Whether ``text`` holds a known message head (the fast ``in`` test) whose whole pattern does
    not match: a line a terminal wrapped. A plain loop: it runs for every candidate line."""
    for head, pattern in joinable:  # noqa: SIM110 - a plain loop is 3x any(genexpr)
        if head in text and not pattern.search(text):
            return True
    return False


def first_match(patterns: list[re.Pattern[str]], text: str) -> re.Match[str] | None:
    for p in patterns:
        m = p.search(text)
        if m:
            return m
    return None


class Deferred:
    """A capability module imported the first time one of its names is used.

    Why: every run registers every engine, but ``explain`` never plans, predicts or watches; importing
    those modules up front cost a third of a short run's time. Not a guard: a module that fails to
    import raises at first use like any import.
    """

    def __init__(self, module: str) -> None:
        self._module = module
        self._loaded: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._loaded is None:
            self._loaded = importlib.import_module(self._module)
        return getattr(self._loaded, name)


def deferred(module: str, name: str) -> Callable[..., Any]:
    """A function of ``module`` that imports it on its first call (see Deferred)."""
    proxy = Deferred(module)

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(proxy, name)(*args, **kwargs)

    return call


class FractionBasis(str, Enum):
    """What an engine's memory fraction is a fraction *of* (it decides what +0.01 is worth)."""

    FREE_BEFORE_WEIGHTS = "free memory before weights"  # SGLang: mem_fraction_static × free at start
    DEVICE_TOTAL = "device total"  # vLLM: gpu_memory_utilization × the GPU's total


@dataclass(frozen=True)
class MemoryKnob:
    """The setting that decides how much memory an engine gives its KV cache."""

    setting: str  # option name as the engine's config spells it: "mem_fraction_static"
    flag: str  # as the user types it: "--mem-fraction-static"
    basis: FractionBasis
    default: float | None = None  # the release-independent default when the log omits it (vLLM 0.9)
    reserve_label: str = "free after the KV pool (GiB)"  # what the memory left outside the budget is called


@dataclass(frozen=True)
class Knobs:
    """Engine settings the neutral layers name in their advice (runtime verdict, reports)."""

    memory: MemoryKnob | None = None
    request_cap: tuple[str, str] | None = None  # (flag, setting): "--max-running-requests", "max_running_requests"
    fp8_kv_value: str = "fp8"  # the --kv-cache-dtype value that halves the KV bytes
    host_tier: str | None = None  # how this engine keeps evicted prefixes in host RAM
    dp_attention_for_mla: bool = False  # DP attention gives each rank its own MLA pool
    graph_batch_flag: str | None = None  # the largest batch CUDA graphs cover
    ranks_share_one_pool_size: bool = False  # every rank of one TP group sizes the same pool
    kv_memory_flags: frozenset[str] = frozenset()  # flags that give the KV cache more memory when raised


@dataclass(frozen=True)
class FleetMetrics:
    """Where an engine's Prometheus metrics say what ``kvscope fleet`` reads, every era's name in order
    (the first a replica exports is the one used: releases rename metrics and some export both for a while).

    Gauges are read on the step grid; counters as increases (a drop is a restart); the capacity from the
    labels of an info metric (vLLM's cache_config_info) or from a gauge of tokens (SGLang's)."""

    usage: tuple[str, ...]  # KV pool usage, 0..1
    waiting: tuple[str, ...]  # requests queued
    running: tuple[str, ...]  # requests running
    preemptions: tuple[str, ...] = ()  # counters: requests evicted from a full pool (preempted / retracted)
    preemption_gauges: tuple[str, ...] = ()  # where only a per-interval gauge exists
    prefix_hits: tuple[str, ...] = ()  # counters: prompt tokens served from the prefix cache …
    prefix_queries: tuple[str, ...] = ()  # … of the prompt tokens looked up
    hit_rate: tuple[str, ...] = ()  # a 0..1 hit-rate gauge, where no counters exist
    capacity_info: tuple[str, ...] = ()  # an info metric whose labels carry the cache configuration
    capacity_tokens: tuple[str, ...] = ()  # a gauge of the pool's tokens
    used_tokens: tuple[str, ...] = ()  # a gauge of the tokens in use: with usage, it sizes a pool no gauge states
    scheduler_labels: tuple[str, ...] = ()  # labels that tell one server's schedulers (pools) apart
    repeat_labels: tuple[str, ...] = ()  # labels whose other values repeat the first's numbers (SGLang TP ranks)

    def names(self) -> tuple[str, ...]:
        return (*self.usage, *self.waiting, *self.running, *self.preemptions, *self.preemption_gauges,
                *self.prefix_hits, *self.prefix_queries, *self.hit_rate, *self.capacity_info, *self.capacity_tokens,
                *self.used_tokens)


@dataclass(frozen=True)
class Engine:
    """Everything kvscope knows about one inference engine, behind one object.

    Every capability but ``name`` is optional: an engine that only reads lines (a recording, the
    common OOM lines) leaves the rest None, and the neutral layers skip what is absent instead of
    asking which engine it is.
    """

    name: str  # the id in JSON and --engine: "sglang"
    label: str  # as people write it: "SGLang"
    lines: EngineLines | None = None
    finish: Callable[[Any], None] | None = None  # reconcile an assembled startup (kvscope.core.startup.Startup)
    findings: Callable[[Any], list] | None = None  # plain-words findings with the flag to change
    whatif: Any = None  # module-like: can_calibrate(startup), build_prediction(startup, changes, context, host_ram_gb)
    plan: Callable[[Any], dict] | None = None  # kvscope.model.planning.Context → the plan body
    watch: Callable[[], type] | None = None  # → the adapter class kvscope watch uses
    fleet: FleetMetrics | None = None  # its Prometheus metric names, for kvscope fleet
    knobs: Knobs = field(default_factory=Knobs)
    runtime_advice: Callable[..., Any] | None = None  # scheduler-limit advice for the runtime verdict
    weights: WeightRules = field(default_factory=WeightRules)  # how it lays a checkpoint out in memory
    plan_estimates: tuple[str, ...] = ()  # what its plan estimates beyond the weights (the plan's error bars)
    # the KV budget its rule builds from one startup's figures (core/budget.py), for kvscope diff; None: the
    # engine sizes its cache in tokens, not from a memory fraction
    kv_budget: Callable[[Any], Any] | None = None
    # the rules of the release a startup ran (core/budget.RuleFact), so a diff can name a rule that changed
    release_rules: Callable[[Any], tuple] | None = None
    # the setting names its rules read: what `--assume KEY=…` may name for it (anything else has no effect,
    # so the CLI refuses it with a did-you-mean instead of giving a silently unchanged answer)
    settings: frozenset[str] = frozenset()
    # engines whose lines this one's logs embed (ollama's runner is llama.cpp): a startup of one of them that this
    # engine's own line then claims, in the same file, is this engine's
    embeds: frozenset[str] = frozenset()
    # the typed views of what its ranks and capacity show beyond the contract fields (core/facts.py)
    rank_facts: type[RankFacts] = RankFacts
    capacity_facts: type[CapacityFacts] = CapacityFacts
