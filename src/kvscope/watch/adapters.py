"""Which engine serves at a URL, and the adapter that reads it (``engines/<engine>/watch.py``).

/metrics first: both engines serve it (SGLang only with --enable-metrics) and its metric prefix names
the engine. Without it, SGLang still answers /get_server_info or /server_info.
"""

from __future__ import annotations

from kvscope import engines
from kvscope.engines.sglang.watch import SGLangAdapter
from kvscope.engines.vllm.watch import VLLMAdapter
from kvscope.engines.watch_base import Capacity, MetricsAdapter, Reading, server_info
from kvscope.reading import prom
from kvscope.watch.http import Client, NotFound, WatchError

__all__ = ["Adapter", "Capacity", "NotAnEngine", "Reading", "SGLangAdapter", "VLLMAdapter", "detect", "server_info"]


Adapter = MetricsAdapter


class NotAnEngine(WatchError):
    """The URL answers, but not as vLLM or SGLang."""

    kind = "not-an-engine"
    retry = False


def detect(client: Client) -> tuple[Adapter, prom.Metrics | None]:
    """Which engine serves at the URL, and its first /metrics page (None: it serves none).

    /metrics first: both engines serve it (SGLang only with --enable-metrics) and its metric
    prefix names the engine. Without it, SGLang still answers /get_server_info or /server_info.
    """
    metrics: prom.Metrics | None = None
    try:
        metrics = prom.parse(client.get("/metrics").text())
    except NotFound:
        metrics = None
    adapters = [e.watch() for e in engines.with_capability("watch")]
    for adapter in adapters:
        if metrics is not None and metrics.has_prefix(adapter.metric_prefix):
            return adapter(), metrics
    for adapter in adapters:
        if adapter.answers(client):
            found = adapter()
            return found, found.first_page(client)
    if metrics is not None:
        raise NotAnEngine(f"{client.shown}/metrics has no vllm: or sglang: metrics: not a vLLM, SGLang or ollama "
                          "server (or vLLM started with --disable-log-stats, which turns its metrics off)")
    raise NotAnEngine(f"{client.shown}: no /metrics, no SGLang server info and no ollama /api/version: not a vLLM, "
                      "SGLang or ollama server")
