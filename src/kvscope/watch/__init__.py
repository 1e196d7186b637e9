"""``kvscope watch``: read a running vLLM / SGLang server's KV capacity once, then sample its usage.

The package is layered so each part can be tested against real payloads without a server:
``http`` (one GET, every network fault mapped to a :class:`~kvscope.watch.http.WatchError` with a
message a person can act on), ``prom`` (Prometheus text → series), ``adapters`` (what vLLM and
SGLang expose, and where capacity lives for each), ``sampler`` (counters → per-interval deltas,
restarts), ``summary`` (peak / p95 / time above 90 % / verdict), ``view`` (rich live view),
``recorder`` (JSONL lines that ``kvscope explain`` reads back through ``lines``), ``nvml``
(optional per-GPU memory) and ``loop`` (retry, backoff, give-up: the only place that sleeps).
"""

from __future__ import annotations

from kvscope.engines.recording import FORMAT_VERSION, MARKER

__all__ = ["FORMAT_VERSION", "MARKER"]
