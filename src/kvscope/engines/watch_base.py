"""What an engine's watch adapter reads from a live server: its capacity once, its usage per scrape.

Each engine's adapter (``engines/<engine>/watch.py``) fills these records from what that engine
exposes; ``kvscope.watch`` samples, summarises and shows them without knowing which engine it is.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from kvscope.core.errors import NotFound
from kvscope.core.facts import Fact, Facts
from kvscope.reading import prom


class ServerClient(Protocol):
    """What an adapter needs of the HTTP client (kvscope.watch.http.Client)."""

    shown: str

    def get(self, path: str) -> Any: ...

    def get_json(self, path: str) -> Any: ...


class MetricsAdapter:
    """What every adapter shares: where its usage is read each interval and how that page is parsed.
    vLLM and SGLang serve Prometheus text at /metrics; an engine without metrics (ollama) names its own page."""

    engine = ""
    metric_prefix = ""  # a /metrics page with this prefix is this engine's
    scrape_path = "/metrics"

    @staticmethod
    def answers(client: ServerClient) -> bool:
        """Whether the server is this engine's, when its /metrics did not say (no page, or no prefix)."""
        return False

    def parse(self, text: str) -> Any:
        return prom.parse(text)

    def first_page(self, client: ServerClient) -> Any:
        """The first usage page of a server found by ``answers`` (None: it serves none)."""
        return None


@dataclass
class Capacity:
    """What the server said, once, about how much KV cache it has."""

    engine: str
    url: str
    version: str | None = None
    model: str | None = None
    kv_tokens: int | None = None  # whole server (summed over DP engines)
    engines: int = 1
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    num_cpu_blocks: int | None = None
    max_model_len: int | None = None
    max_concurrency: float | None = None
    max_running_requests: int | None = None
    kv_cache_memory_bytes: int | None = None
    memory_fraction: float | None = None  # gpu_memory_utilization / mem_fraction_static
    memory_fraction_flag: str | None = None
    kv_cache_dtype: str | None = None
    prefix_caching: bool | None = None
    metrics: bool = True  # False: the server serves no usage metrics (SGLang without --enable-metrics)
    extras: dict[str, Any] = field(default_factory=dict)  # WatchCapacityFacts
    sources: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and v != {} and v != []}


@dataclass
class Reading:
    """One scrape's raw numbers (counters still cumulative; the sampler turns them into deltas)."""

    kv_usage: float | None = None  # 0..1, the fullest engine
    tokens_used: int | None = None
    running: int | None = None
    waiting: int | None = None
    preemptions_total: float | None = None  # counter (vLLM preemptions, SGLang retractions)
    preemptions_gauge: float | None = None  # SGLang's per-interval gauge when no counter exists
    prefix_hits_total: float | None = None
    prefix_queries_total: float | None = None
    prefix_hit_rate: float | None = None  # a gauge, when the engine only gives that
    start_time: float | None = None  # process_start_time_seconds: changes when the server restarts
    extras: dict[str, Any] = field(default_factory=dict)  # ReadingFacts


class WatchCapacityFacts(Facts):
    """What a live server tells beyond the capacity fields above (its server info, its gauges)."""

    __slots__ = ()
    max_total_num_tokens: Fact[int] = Fact("one scheduler's pool (kv_tokens sums the DP engines)")
    max_req_input_len: Fact[int] = Fact()
    tp_size: Fact[int] = Fact()
    pp_size: Fact[int] = Fact()
    dp_size: Fact[int] = Fact()
    chunked_prefill_size: Fact[int] = Fact()
    max_prefill_tokens: Fact[int] = Fact()
    kv_pool_gib: Fact[float] = Fact("the pool's size as the server reports it")
    weights_gib: Fact[float] = Fact()
    enable_metrics: Fact[bool] = Fact("False: the server serves no usage metrics")
    kv_tokens_estimated_from: Fact[str] = Fact("how the pool size was worked out where no figure said it")
    num_gpu_blocks_per_engine: Fact[int] = Fact()
    loaded_models: Fact[list[dict[str, Any]]] = Fact("ollama's loaded models when the watch began")
    unread: Fact[list[str]] = Fact("auxiliary endpoints that could not be read, and why")

    def note_unread(self, why: str) -> None:
        self._store.setdefault("unread", []).append(why)


class ReadingFacts(Facts):
    """What one scrape also showed (and the sample made of it)."""

    __slots__ = ()
    gen_throughput: Fact[float] = Fact("tokens generated per second, as SGLang's gauge says")
    loaded_models: Fact[list[dict[str, Any]]] = Fact("ollama's loaded models: name, size, size in VRAM, context")
    swapped: Fact[int] = Fact("vLLM v0's swapped requests")
    malformed_lines: Fact[int] = Fact("exposition lines the scrape could not parse")


def _label_num(labels: dict[str, str], key: str) -> float | None:
    raw = labels.get(key)
    if raw is None or raw in ("None", "", "null"):
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _int(value: float | None) -> int | None:
    return None if value is None or not math.isfinite(value) else int(round(value))


def _finite(values: list[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


def _group(series: list[prom.Series], key: str) -> dict[str, list[prom.Series]]:
    out: dict[str, list[prom.Series]] = {}
    for s in series:
        out.setdefault(s.labels.get(key, ""), []).append(s)
    return out


def _sum(series: list[prom.Series]) -> float | None:
    vals = _finite([s.value for s in series])
    return sum(vals) if vals else None


def _max(series: list[prom.Series]) -> float | None:
    vals = _finite([s.value for s in series])
    return max(vals) if vals else None


def _start_time(metrics: prom.Metrics) -> float | None:
    return _max(metrics.get("process_start_time_seconds"))


def server_info(client: ServerClient) -> tuple[str, dict[str, Any]] | None:
    """SGLang's server info from whichever endpoint this release serves; None when neither exists."""
    for path in ("/get_server_info", "/server_info"):
        try:
            data = client.get_json(path)
        except NotFound:
            continue
        if isinstance(data, dict) and ("max_total_num_tokens" in data or "internal_states" in data):
            return path, data
    return None
