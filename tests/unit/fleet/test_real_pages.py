"""Real /metrics pages that operators posted (tests/fixtures/prometheus/SOURCES.md), replayed as the series a
Prometheus would have scraped from them: kvscope fleet reads each replica as kvscope watch reads the page
itself — the same KV usage, queue, running requests and capacity — across vLLM V0 / V1 names, the DP
``engine`` label, SGLang's ``name`` / ``model_name`` eras, its TP / DP / EP rank labels and ``pid``.

No publicly posted query_range answer for these metrics was found (SOURCES.md says where we looked), so
the pages are the real part here; the fake Prometheus only repeats each page's values over time."""

from __future__ import annotations

from array import array
from pathlib import Path

import pytest

from kvscope.core.errors import NotFound
from kvscope.engines.sglang.watch import SGLangAdapter
from kvscope.engines.vllm.watch import VLLMAdapter
from kvscope.fleet import scan
from kvscope.fleet.prometheus import API
from kvscope.reading import prom
from kvscope.watch.http import Client
from tests.fixtures.fleet.fakeprom import FakePrometheus, Series, Store

PAGES = Path(__file__).resolve().parents[2] / "fixtures" / "prometheus"
USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")
END, STEP, N = 1_764_633_600.0, 15.0, 21


class _NoServer:
    shown = "http://replay"

    def get(self, path):
        raise NotFound(path)

    get_json = get


def _pages() -> list[Path]:
    return sorted(p for p in PAGES.glob("*.txt") if "-query-" not in p.name and any(u in p.read_text() for u in USAGE))


def test_enough_real_pages():
    names = [p.name for p in _pages()]
    assert sum(n.startswith("sglang") for n in names) >= 3 and sum(n.startswith("vllm") for n in names) >= 2, names


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.stem)
def test_fleet_reads_a_real_page_as_watch_does(page):
    metrics = prom.parse(page.read_text())
    adapter = VLLMAdapter() if metrics.has_prefix("vllm:") else SGLangAdapter()
    cap = adapter.capacity(_NoServer(), metrics)
    reading = adapter.read(metrics, cap)
    store = Store()
    for s in _all_series(metrics):
        labels = {"__name__": s.name, "job": "replay", "instance": "10.1.1.1:8000", **s.labels}
        store.series.append(Series(labels, END - (N - 1) * STEP, STEP, array("d", [s.value]) * N))
    with FakePrometheus(store) as p:
        report = scan.scan(API(Client(p.url)), scan.Query(None, END - (N - 1) * STEP, END, STEP))
    assert len(report.replicas) >= 1
    if len(report.replicas) > 1:  # several models on one page: each its own replica; compare the fullest
        pytest.skip("several replicas on one page")
    (r,) = report.replicas
    assert r.engine == adapter.engine
    assert r.usage.peak == pytest.approx(reading.kv_usage)
    if reading.waiting is not None:
        assert r.queue.peak == reading.waiting
    if reading.running is not None:
        assert r.queue.running_peak == reading.running
    if cap.kv_tokens is not None:
        assert r.capacity.kv_tokens == cap.kv_tokens


def _all_series(metrics: prom.Metrics):
    for name in metrics.names():
        yield from metrics.get(name)
