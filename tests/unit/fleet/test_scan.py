"""kvscope fleet against a Prometheus API over a known fleet (tests/fixtures/fleet/scenario.py): every number
counted by hand, the same answer however the range is paged and windowed, credentials never shown, and every
fault one line and a clean exit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from kvscope.fleet import prometheus, scan
from kvscope.fleet.prometheus import API
from kvscope.fleet.report import Verdict
from kvscope.watch.http import Client
from tests.fixtures.fleet import scenario
from tests.fixtures.fleet.fakeprom import FakePrometheus


def _scan(url: str, **kw) -> scan.FleetReport:
    q = scan.Query(selector=kw.pop("selector", None), start=scenario.END - scenario.SPAN_S, end=scenario.END,
                   step_s=scenario.STEP_S, **kw)
    return scan.scan(API(Client(url)), q)


@pytest.fixture(scope="module")
def prom():
    with FakePrometheus(scenario.build()) as p:
        yield p


@pytest.fixture(scope="module")
def report(prom):
    return _scan(prom.url)


def _by(report, instance):
    return next(r for r in report.replicas if r.labels.get("instance") == instance)


def test_saturated_replica(report):
    r = _by(report, "10.0.0.1:8000")
    assert r.verdict is Verdict.CAPACITY_BOUND and r.engine == "vllm"
    assert r.capacity.kv_tokens == 16_000 and r.capacity.block_size == 16 and r.capacity.num_gpu_blocks == 1000
    assert r.capacity.kv_cache_dtype == "auto" and r.capacity.memory_fraction == 0.9 and r.capacity.prefix_caching
    assert r.usage.peak == 0.95 and r.usage.above_90_s == 2400  # 160 scrapes at 15 s
    assert r.queue.peak == 12 and r.queue.episodes == 1 and r.queue.longest_s == 2400
    assert r.queue.running_peak_while_queued == 32 and r.queue.waiting_while_90_s == 2400
    assert r.preemptions == 50 and r.restarts == 1  # 0→30, restart, 0→20
    assert r.prefix_hit_rate == pytest.approx(0.25)
    assert r.extra_kv_tokens == 5_700  # 12 waiting × 16,000 × 0.95 / 32 running
    assert r.fix is not None and r.fix.flag == "--kv-cache-dtype" and r.fix.tokens_added == 16_000 and r.fix.covers


def test_v0_names_and_hit_rate_gauge(report):
    r = _by(report, "10.0.0.2:8000")
    assert r.verdict is Verdict.NOT_BOUND and r.usage.peak == 0.4 and r.capacity.kv_tokens == 32_000
    assert r.prefix_hit_rate == pytest.approx(0.6) and r.fix is None and r.preemptions is None


def test_idle_replica(report):
    r = _by(report, "10.0.0.3:8000")
    assert r.verdict is Verdict.IDLE and r.capacity.kv_tokens == 8_000 and r.preemptions == 0


def test_sglang_dp_ranks_are_pools_and_tp_ranks_repeat(report):
    r = _by(report, "10.0.0.4:30000")
    assert r.engine == "sglang" and r.verdict is Verdict.QUEUE_BOUND
    assert r.capacity.kv_tokens == 400_000 and r.capacity.schedulers == 2
    assert r.usage.peak == 0.6  # the fuller DP rank
    assert r.queue.peak == 6  # 3 on each DP rank, TP ranks not counted twice
    assert r.queue.waiting_s == pytest.approx(3600 + 15, abs=15)


def test_vllm_dp_engines(report):
    r = _by(report, "10.0.0.5:8000")
    assert r.capacity.kv_tokens == 16_000 and r.capacity.schedulers == 2 and r.usage.peak == 0.8


def test_fleet_summary(report):
    s = report.summary
    assert s.replicas == 5 and s.kv_bound == ("10.0.0.1:8000",)
    assert s.by_verdict == {"capacity-bound": 1, "queue-bound": 1, "not-capacity-bound": 2, "idle": 1}
    # never used at each non-KV-bound replica's peak: 400,000×0.4 + 16,000×0.2 + 32,000×0.6 + 8,000×1
    assert s.idle_kv_tokens == 190_400
    (fp8,) = s.changes
    assert (fp8.replicas, fp8.tokens_added, fp8.kv_bound_replicas, fp8.kv_bound_tokens_added) == (3, 40_000, 1, 16_000)


def _essence(report):
    return [(r.name, r.verdict, r.capacity, r.usage, r.queue, r.preemptions, r.restarts, r.prefix_hit_rate, r.spark)
            for r in report.replicas]


def test_paging_and_windows_change_nothing(prom, report, monkeypatch):
    paged = _scan(prom.url, max_points=1000)  # one replica per page
    assert paged.requests > report.requests
    monkeypatch.setattr(prometheus, "MAX_STEPS", 7)
    monkeypatch.setattr(scan, "windows", lambda start, steps, step: prometheus.windows(start, steps, step, 7))
    windowed = _scan(prom.url)
    assert windowed.requests > 60
    assert _essence(paged) == _essence(report) == _essence(windowed)


def test_selector_narrows_the_fleet(prom):
    r = _scan(prom.url, selector='{job="sglang"}')
    assert [x.engine for x in r.replicas] == ["sglang"]


def test_no_matching_replica_is_one_line(prom):
    code, out, err = _cli(prom.url, "--selector", '{job="nope"}')
    assert code == 2 and "no series of" in err and "Traceback" not in err and err.count("\n") == 1


def _cli(url: str, *args: str, env: dict | None = None) -> tuple[int, str, str]:
    run = subprocess.run([sys.executable, "-m", "kvscope", "fleet", "--prometheus", url, "--since", "2h", "--step", "15s",
                          "--until", str(scenario.END), *args], capture_output=True, text=True, timeout=120, env=env)
    return run.returncode, run.stdout, run.stderr


def test_json_contract(prom):
    code, out, err = _cli(prom.url, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "kvscope.fleet/1" and doc["range"]["steps"] == scenario.N
    assert {r["verdict"] for r in doc["replicas"]} == {"capacity-bound", "queue-bound", "not-capacity-bound", "idle"}
    first = next(r for r in doc["replicas"] if r["verdict"] == "capacity-bound")
    assert first["capacity"]["kv_tokens"] == 16000 and len(first["spark"]) == scan.SPARK_BUCKETS
    assert doc["summary"]["kv_bound"] == ["10.0.0.1:8000"] and doc["headline"][0].startswith("1 of 5 replicas")


def test_reports_render(prom, tmp_path):
    code, out, err = _cli(prom.url, "--format", "markdown")
    assert code == 0 and "| `10.0.0.1:8000` |" in out and "### KV-bound replicas" in out
    html = tmp_path / "fleet.html"
    code, _, err = _cli(prom.url, "--format", "html", "-o", str(html))
    text = html.read_text()
    assert code == 0 and text.count("<svg") == 5 and 'data-replica="10.0.0.1:8000"' in text and "<script" not in text
    code, out, _ = _cli(prom.url, "--top", "2", "--color", "never", env={**os.environ, "COLUMNS": "200"})
    assert code == 0 and "3 more replicas" in out and out.index("10.0.0.1:8000") < out.index("10.0.0.4:30000")


@pytest.mark.parametrize("how", ["bearer", "basic", "url"])
def test_credentials_are_sent_and_never_shown(how):
    kw = {"bearer": "t0ps3cret"} if how == "bearer" else {"basic": ("alice", "pa55word")}
    with FakePrometheus(scenario.build(), **kw) as p:
        url, args = p.url, []
        if how == "bearer":
            args = ["--bearer-token", "t0ps3cret"]
        elif how == "basic":
            args = ["--basic-auth", "alice:pa55word"]
        else:
            url = p.url.replace("http://", "http://alice:pa55word@")
        for fmt in ("json", "markdown", "terminal"):
            code, out, err = _cli(url, *args, "--format", fmt)
            assert code == 0, err
            assert "t0ps3cret" not in out + err and "pa55word" not in out + err and "alice" not in out
        code, out, err = _cli(p.url, "--format", "json")
    assert code == 2 and "HTTP 401" in err and ("--bearer-token" in err)


@pytest.mark.parametrize("fault,code,words", [("500", 3, "HTTP 500"), ("html", 3, "not JSON"),
                                               ("drop", 3, "closed the connection")])
def test_faults_are_one_line(fault, code, words):
    with FakePrometheus(scenario.build(), fault=fault) as p:
        got, out, err = _cli(p.url, "--timeout", "5")
    assert got == code and words in err and "Traceback" not in err and out == ""


def test_nothing_listening_is_one_line():
    from tests.fixtures.watch.replay import free_port

    code, out, err = _cli(f"http://127.0.0.1:{free_port()}")
    assert code == 3 and "connection refused" in err and err.count("\n") == 1


@pytest.mark.parametrize("args,words", [(["--since", "soon"], "give a duration"), (["--step", "0s"], "more than zero"),
                                        (["--selector", 'up{job="x"}'], "label matchers only"),
                                        (["--since", "10s", "--step", "30s"], "shorter than --step")])
def test_bad_usage(args, words):
    code, out, err = _cli("http://127.0.0.1:9", *args)
    assert code == 2 and words in err


@pytest.fixture(scope="module")
def cert(tmp_path_factory) -> tuple[str, str]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: cannot make a self-signed certificate for the TLS tests")
    d = tmp_path_factory.mktemp("tls")
    key, crt = d / "key.pem", d / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(crt)],
                   check=True, capture_output=True)
    return str(crt), str(key)


def test_tls(cert):
    with FakePrometheus(scenario.build(), tls=cert) as p:
        code, out, err = _cli(p.url)
        assert code == 2 and "TLS certificate not trusted" in err and "--insecure" in err
        code, out, err = _cli(p.url, "--ca-cert", cert[0], "--format", "json")
        assert code == 0 and json.loads(out)["summary"]["replicas"] == 5
        code, out, err = _cli(p.url, "--insecure", "--format", "json")
        assert code == 0
        code, out, err = _cli(p.url, "--ca-cert", "/nonexistent.pem")
    assert code == 2 and "not a readable CA certificate" in err
