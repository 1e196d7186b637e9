"""kvscope fleet against a real Prometheus (Debian's package) scraping two real vLLM CPU servers.

Everything runs on 127.0.0.1 and stops by itself: two tiny-model vLLM servers (the watch tests' venv and
model), one with a 2,048-token pool that 8 clients saturate, one with a 4,096-token pool that gets no
traffic; a Prometheus scraping both every second into a temporary TSDB. The load stops once Prometheus
has seen a preemption (bounded by LOAD_S). Then ``kvscope fleet`` must report each replica's capacity as
its log printed it, the saturated one as KV-bound and the idle one as idle.

Runs where the watch integration tests run (CI, or KVSCOPE_INTEGRATION=1); skips, saying why, when the
vLLM venv cannot be built or no ``prometheus`` binary is installed (``.ci/run`` installs Debian's).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.fixtures.watch.replay import free_port
from tests.integration.test_watch_vllm import (
    _LOGGED,
    HERE,
    SERVE_ARGS,
    STARTUP_S,
    _ensure_venv,
    _load,
    _stop_group,
)

pytestmark = pytest.mark.integration

LOAD_S = 150
IDLE_ARGS = [a if a != "8M" else "16M" for a in SERVE_ARGS]  # a 4,096-token pool, never loaded


def _start_vllm(venv, model, work, name, args):
    import os

    port = free_port()
    log = work / f"{name}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env.update(VLLM_LOGGING_COLOR="0", NO_COLOR="1", TOKENIZERS_PARALLELISM="false")
    with open(log, "w") as fh:
        proc = subprocess.Popen([str(venv / "bin/vllm"), "serve", str(model), *args, "--host", "127.0.0.1",
                                 "--port", str(port)], stdout=fh, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, cwd=work)
    return {"name": name, "proc": proc, "log": log, "url": f"http://127.0.0.1:{port}", "port": port}


def _wait_ready(url: str, proc, log, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"{url}: exited with {proc.returncode}:\n{log.read_text()[-3000:] if log else ''}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"{url} not ready after {timeout:g} s:\n{log.read_text()[-3000:] if log else ''}")
        time.sleep(2)


def _instant(prom: str, query: str) -> list:
    with urllib.request.urlopen(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": query}), timeout=10) as r:
        return json.loads(r.read())["data"]["result"]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("no prometheus binary (.ci/run installs Debian's package 'prometheus')")
    venv = _ensure_venv()
    work = tmp_path_factory.mktemp("fleet")
    model = work / "tiny-llama"
    made = subprocess.run([str(venv / "bin/python"), str(HERE / "make_tiny_model.py"), str(model)],
                          capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-2000:]
    servers = [_start_vllm(venv, model, work, "busy", SERVE_ARGS), _start_vllm(venv, model, work, "idle", IDLE_ARGS)]
    prom_port = free_port()
    (work / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: vllm\n    static_configs:\n      - targets: ["
        + ", ".join(f"'127.0.0.1:{s['port']}'" for s in servers) + "]\n")
    prom_log = work / "prometheus.log"
    with open(prom_log, "w") as fh:
        prom = subprocess.Popen([binary, f"--config.file={work / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}",
                                 "--storage.tsdb.retention.time=1d"], stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    prom_url = f"http://127.0.0.1:{prom_port}"
    try:
        _wait_ready(prom_url + "/-/ready", prom, prom_log, 60)
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda s: _wait_ready(s["url"] + "/health", s["proc"], s["log"], STARTUP_S * 1.5), servers))
        yield {"prometheus": prom_url, "servers": {s["name"]: s for s in servers}, "model": str(model)}
    finally:
        for s in servers:
            _stop_group(s["proc"])
        _stop_group(prom)


def _load_until_preempted(fleet) -> None:
    busy = fleet["servers"]["busy"]
    stop = threading.Event()
    loader = threading.Thread(target=_load, args=(busy["url"], fleet["model"], LOAD_S, stop), daemon=True)
    loader.start()
    deadline = time.monotonic() + LOAD_S
    try:
        while time.monotonic() < deadline:
            seen = _instant(fleet["prometheus"], f'vllm:num_preemptions_total{{instance="127.0.0.1:{busy["port"]}"}}')
            if any(float(r["value"][1]) > 0 for r in seen):
                time.sleep(5)  # a few more scrapes of the saturated pool
                break
            time.sleep(2)
    finally:
        stop.set()
        loader.join(timeout=180)
    time.sleep(3)  # the last scrapes land


def test_fleet_reads_capacity_and_tells_the_saturated_replica_from_the_idle_one(fleet):
    _load_until_preempted(fleet)
    done = subprocess.run([sys.executable, "-m", "kvscope", "fleet", "--prometheus", fleet["prometheus"],
                           "--selector", '{job="vllm"}', "--since", "15m", "--step", "1s", "--format", "json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    by = {r["labels"]["instance"]: r for r in doc["replicas"]}
    assert len(by) == 2, list(by)
    for name, server in fleet["servers"].items():
        rep = by[f"127.0.0.1:{server['port']}"]
        logged = _LOGGED.search(server["log"].read_text())
        assert logged, f"{name}: no 'KV cache size' line in its log"
        assert rep["capacity"]["kv_tokens"] == int(logged[1].replace(",", "")), name
    busy = by[f"127.0.0.1:{fleet['servers']['busy']['port']}"]
    idle = by[f"127.0.0.1:{fleet['servers']['idle']['port']}"]
    print(f"\nreal Prometheus: busy {busy['verdict']} (peak {busy['usage']['peak']}, queue peak {busy['queue']['peak']}, "
          f"preemptions {busy['preemptions']}); idle {idle['verdict']} (peak {idle['usage']['peak']})")
    assert busy["capacity"]["kv_tokens"] == 2048 and idle["capacity"]["kv_tokens"] == 4096
    assert busy["verdict"] == "capacity-bound" and busy["preemptions"] > 0 and busy["queue"]["peak"] > 0
    assert idle["verdict"] == "idle" and not idle["queue"]["peak"]
    assert doc["summary"]["kv_bound"] == [busy["name"]]
    # the terminal report says the same in words
    text = subprocess.run([sys.executable, "-m", "kvscope", "fleet", "--prometheus", fleet["prometheus"], "--since", "15m",
                           "--step", "1s"], capture_output=True, text=True, timeout=120)
    assert text.returncode == 0 and "1 of 2 replicas was KV-bound" in text.stdout
