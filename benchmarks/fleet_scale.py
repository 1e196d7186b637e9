#!/usr/bin/env python3
"""``kvscope fleet`` over a large fleet: 1,000 replicas × 7 days at 30 s steps, served by a local Prometheus API.

The fleet is generated (tests/fixtures/fleet/fakeprom.py evaluates the queries as Prometheus does):
each replica exports vLLM's usage, waiting, running, preemption, prefix-hit and prefix-query series and
its cache_config_info, scraped every 30 s for the whole range (20,161 samples per series), their values
drawn from 16 load shapes (saturated in the afternoons, idle, bursty, …). One run of kvscope first warms
the server's answer cache (encoding 20 million samples per family in Python is the fake's cost, not
kvscope's), then the measured runs:

    kvscope   ``kvscope fleet --format json`` in a child process: wall time and peak RSS (wait4)
    download  the same HTTP requests kvscope made, bodies read and dropped: the floor any client pays

and ratios against that baseline measured in the same run. Flat memory: the peak RSS at the largest
range against a range a seventh as long (``--small``), which must be within ``--tolerance``: what grows
with the fleet is each replica's few kilobytes of counts, never with the range.

    python benchmarks/fleet_scale.py                      # 1,000 replicas × 7 d, and × 1 d
    python benchmarks/fleet_scale.py --replicas 200 --days 2
"""

from __future__ import annotations

import argparse
import math
import os
import random
import subprocess
import sys
import time
import urllib.request
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.fixtures.fleet.fakeprom import FakePrometheus, Series, Store  # noqa: E402

STEP_S = 30.0
END = 1_764_633_600.0
SHAPES = 16


def _shapes(n: int, seed: int = 7) -> list[dict[str, array]]:
    """Load shapes: a daily cycle whose afternoon peak saturates some replicas, bursts, idle ones."""
    rng = random.Random(seed)
    out = []
    per_day = int(86400 / STEP_S)
    for k in range(SHAPES):
        peak = [1.0, 0.97, 0.93, 0.8, 0.6, 0.4, 0.05, 0.0][k % 8]
        usage, waiting, running, pre, hits, queries = (array("d") for _ in range(6))
        p, h, q = 0.0, 0.0, 0.0
        for i in range(n):
            day = (i % per_day) / per_day
            load = max(0.0, math.sin(math.pi * day)) ** 2
            u = min(1.0, round(peak * load + rng.uniform(-0.02, 0.02), 4)) if peak else 0.0
            u = max(0.0, u)
            usage.append(u)
            w = float(rng.randint(1, 20)) if u >= 0.95 and peak >= 0.93 else 0.0
            waiting.append(w)
            running.append(float(round(64 * u)))
            if w and rng.random() < 0.3:
                p += 1
            if i == n // 2 and k % 3 == 0:  # a restart halfway: counters start again
                p, h, q = 0.0, 0.0, 0.0
            q += 1000 * u
            h += 400 * u
            pre.append(p)
            hits.append(round(h))
            queries.append(round(q))
        out.append({"vllm:kv_cache_usage_perc": usage, "vllm:num_requests_waiting": waiting,
                    "vllm:num_requests_running": running, "vllm:num_preemptions_total": pre,
                    "vllm:prefix_cache_hits_total": hits, "vllm:prefix_cache_queries_total": queries})
    return out


def build(replicas: int, days: float) -> Store:
    n = int(days * 86400 / STEP_S) + 1
    t0 = END - (n - 1) * STEP_S
    shapes = _shapes(n)
    ones = array("d", [1.0]) * n
    store = Store()
    for r in range(replicas):
        inst = f"10.{r // 250}.{r % 250}.1:8000"
        labels = {"job": "vllm", "instance": inst, "model_name": "meta-llama/Llama-3.1-8B-Instruct", "engine": "0"}
        for name, values in shapes[r % SHAPES].items():
            store.series.append(Series({"__name__": name, **labels}, t0, STEP_S, values))
        store.series.append(Series({"__name__": "vllm:cache_config_info", "job": "vllm", "instance": inst, "engine": "0",
                                    "block_size": "16", "num_gpu_blocks": str(20000 + 37 * (r % 11)),
                                    "cache_dtype": "auto", "gpu_memory_utilization": "0.9"}, t0, STEP_S, ones))
    return store


def run_kvscope(url: str, days: float) -> tuple[float, int, int]:
    """(wall s, peak RSS KiB, exit code) of one kvscope fleet run."""
    cmd = [sys.executable, "-m", "kvscope", "fleet", "--prometheus", url, "--since", f"{days * 86400:g}s",
           "--step", f"{STEP_S:g}s", "--until", f"{END:.0f}", "--format", "json", "--timeout", "300"]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    err = proc.stderr.read().decode() if proc.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code:
        print(err, file=sys.stderr)
    return wall, usage.ru_maxrss, code


def download(url: str, paths: list[str]) -> float:
    t = time.perf_counter()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for path in paths:
        with opener.open(url + path, timeout=300) as r:
            while r.read(1 << 20):
                pass
    return time.perf_counter() - t


def measure(replicas: int, days: float) -> dict:
    store = build(replicas, days)
    with FakePrometheus(store) as prom:
        run_kvscope(prom.url, days)  # warms the server's answer cache
        prom.requests.clear()
        wall, rss, code = run_kvscope(prom.url, days)
        paths = list(prom.requests)
        base = download(prom.url, paths)
    samples = sum(len(s.values) for s in store.series if s.labels["__name__"] != "vllm:cache_config_info")
    return {"replicas": replicas, "days": days, "samples": samples, "requests": len(paths), "kvscope_s": wall,
            "download_s": base, "peak_rss_mib": rss / 1024, "exit": code}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, default=1000)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--small", default="1000,1", help="REPLICAS,DAYS of the short range for the flat-memory check")
    ap.add_argument("--limit-s", type=float, default=30.0, help="the target: kvscope under this many seconds")
    ap.add_argument("--tolerance", type=float, default=0.25, help="peak RSS may grow this much from small to large")
    args = ap.parse_args()
    small_r, small_d = (float(x) for x in args.small.split(","))
    rows = [measure(int(small_r), small_d), measure(args.replicas, args.days)]
    print(f"{'replicas':>8} {'days':>5} {'samples':>12} {'requests':>8} {'kvscope s':>10} {'download s':>10} "
          f"{'ratio':>6} {'peak RSS MiB':>12}")
    for r in rows:
        print(f"{r['replicas']:>8,} {r['days']:>5g} {r['samples']:>12,} {r['requests']:>8} {r['kvscope_s']:>10.1f} "
              f"{r['download_s']:>10.1f} {r['kvscope_s'] / max(r['download_s'], 1e-9):>6.2f} {r['peak_rss_mib']:>12.0f}")
    small, large = rows
    growth = large["peak_rss_mib"] / small["peak_rss_mib"] - 1
    ok_time = large["kvscope_s"] < args.limit_s
    ok_mem = growth <= args.tolerance
    print(f"time: {large['kvscope_s']:.1f} s for {large['samples']:,} samples "
          f"({'within' if ok_time else 'OVER'} {args.limit_s:g} s); kvscope / download = "
          f"{large['kvscope_s'] / large['download_s']:.2f}")
    print(f"memory: peak RSS {small['peak_rss_mib']:.0f} MiB → {large['peak_rss_mib']:.0f} MiB for "
          f"{large['samples'] / small['samples']:.0f}× the samples ({growth:+.0%}; {'flat' if ok_mem else 'NOT flat'})")
    return 0 if ok_time and ok_mem and not any(r["exit"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
