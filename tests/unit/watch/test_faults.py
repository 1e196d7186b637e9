"""kvscope watch against a local server replaying real vLLM answers, with every network fault the
issue lists: not up yet, connection refused, 401/403, 500, slow answers, malformed metrics, a
restart mid-watch (counters reset), TLS, a server that vanishes. Each must end in a clear message
and a retry with backoff or a clean exit: never a hang, never a traceback.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kvscope.cli import main
from tests.conftest import FIXTURES, REPO
from tests.fixtures.watch.replay import Answer, Replay, free_port, vllm_routes

LOADED_A = "vllm/cpu-0.32.0-8MiB-loaded-a-metrics.txt"
LOADED_B = "vllm/cpu-0.32.0-8MiB-loaded-b-metrics.txt"
IDLE_1GIB = "vllm/cpu-0.32.0-idle-1GiB-metrics.txt"
FAST = ["--interval", "0.1", "--timeout", "1"]


def watch(args: list[str], capsys) -> tuple[int, str, str]:
    try:
        main(["watch", *args])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    return code, out.out, out.err


def explain_json(path: Path, capsys) -> dict:
    """``kvscope explain PATH --format json`` in-process; it must exit 0."""
    try:
        main(["explain", str(path), "--format", "json"])
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


# -- the happy path on real payloads ---------------------------------------------------------------

def test_watch_reports_capacity_usage_and_preemptions(capsys, tmp_path):
    rec = tmp_path / "rec.jsonl"
    with Replay(vllm_routes(LOADED_A, LOADED_B)) as srv:
        code, out, err = watch([srv.url, *FAST, "--duration", "0.35", "--record", str(rec)], capsys)
    assert code == 0, err
    assert "KV capacity 2,048 tokens (16 blocks × 128)" in out and "max concurrency 2.00× at 1,024" in out
    assert "kv 86.7 %" in out and "kv 93.3 %" in out and "preempted +5" in out
    assert "capacity-bound" in out
    lines = jsonl(rec.read_text())
    assert all(obj["kvscope_watch"] == 1 for obj in lines)
    assert lines[0]["type"] == "capacity" and lines[0]["capacity"]["kv_tokens"] == 2048
    samples = [o for o in lines if o["type"] == "sample"]
    assert samples[0]["waiting"] == 4 and samples[1]["preemptions"] == 5
    assert "prefix_hit_rate" not in samples[1]  # no prefix-cache queries between the two scrapes
    assert lines[-1]["type"] == "summary" and lines[-1]["verdict"] == "capacity-bound"


def test_jsonl_stdout_is_pure_json(capsys):
    with Replay(vllm_routes(LOADED_B)) as srv:
        code, out, err = watch([srv.url, *FAST, "--duration", "0.25", "--format", "jsonl"], capsys)
    assert code == 0
    objs = jsonl(out)
    assert len(objs) == len(out.splitlines())  # nothing but JSON on stdout
    assert [o["type"] for o in objs][0] == "capacity" and objs[-1]["type"] == "summary"
    assert "kvscope:" in err  # the verdict sentence goes to stderr


def test_explain_reads_a_recording(capsys, tmp_path):
    rec = tmp_path / "rec.jsonl"
    with Replay(vllm_routes(LOADED_A, LOADED_B)) as srv:
        watch([srv.url, *FAST, "--duration", "0.35", "--record", str(rec)], capsys)
    report = explain_json(rec, capsys)
    (s,) = report["startups"]
    assert s["engine"] == "vllm" and s["engine_version"] == "0.32.0"
    assert s["capacity"]["kv_tokens"] == 2048 and s["capacity"]["num_gpu_blocks"] == 16
    assert s["runtime"]["samples"] >= 3 and s["runtime"]["usage"]["peak"] == pytest.approx(0.9333, abs=1e-3)


# -- server not up, gone, refusing -----------------------------------------------------------------

def test_nothing_listening_exits_with_a_hint(capsys):
    port = free_port()
    t0 = time.monotonic()
    code, out, err = watch([f"http://127.0.0.1:{port}", *FAST], capsys)
    assert code == 2 and time.monotonic() - t0 < 5
    assert "connection refused" in err and "--wait" in err


def test_waits_for_a_server_that_comes_up(capsys):
    port = free_port()
    srv = Replay(vllm_routes(LOADED_B))
    srv.server.server_close()
    holder: dict = {}

    def later() -> None:
        time.sleep(0.8)
        s = Replay(vllm_routes(LOADED_B))
        s.server.server_close()
        import http.server

        s.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), s.server.RequestHandlerClass)
        s.thread = threading.Thread(target=s.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        s.thread.start()
        holder["srv"] = s

    threading.Thread(target=later, daemon=True).start()
    try:
        code, out, err = watch([f"http://127.0.0.1:{port}", *FAST, "--wait", "10", "--duration", "0.2"], capsys)
    finally:
        if "srv" in holder:
            holder["srv"].stop()
    assert code == 0, err
    assert "connection refused" in err and "retrying in" in err
    assert "KV capacity 2,048 tokens" in out


def test_server_killed_mid_watch_ends_cleanly_with_summary(capsys, tmp_path):
    rec = tmp_path / "rec.jsonl"
    srv = Replay(vllm_routes(LOADED_A, LOADED_B)).__enter__()
    threading.Timer(0.5, srv.stop).start()
    t0 = time.monotonic()
    code, out, err = watch([srv.url, *FAST, "--give-up", "1", "--record", str(rec)], capsys)
    assert code == 3 and time.monotonic() - t0 < 10
    assert "connection refused" in err and "no answer for" in err and "--give-up 1" in err
    assert "retrying in" in err  # backoff before giving up
    assert "kvscope watch · summary" in out  # what was seen is still summarised
    events = [o for o in jsonl(rec.read_text()) if o["type"] == "event"]
    assert events[0]["event"] == "unreachable" and events[-1]["event"] == "end"


def test_server_that_drops_connections(capsys):
    routes = vllm_routes(LOADED_B)
    routes["/metrics"] = [Answer.file(LOADED_B), Answer(drop=True)]
    with Replay(routes) as srv:
        code, out, err = watch([srv.url, *FAST, "--give-up", "0.6"], capsys)
    assert code == 3 and "closed the connection without an HTTP answer" in err


@pytest.mark.parametrize("status", [401, 403])
def test_auth_refused_without_key(capsys, status):
    routes = vllm_routes(LOADED_B)
    routes["/metrics"] = [Answer(status, b'{"error":"Unauthorized"}', "application/json")]
    with Replay(routes) as srv:
        code, out, err = watch([srv.url, *FAST], capsys)
    assert code == 2 and f"HTTP {status}" in err and "--api-key" in err


def test_api_key_wrong_then_right(capsys, monkeypatch):
    with Replay(vllm_routes(LOADED_B), api_key="s3cret") as srv:
        code, out, err = watch([srv.url, *FAST, "--api-key", "nope"], capsys)
        assert code == 2 and "refused the API key" in err
        monkeypatch.setenv("KVSCOPE_API_KEY", "s3cret")
        code, out, err = watch([srv.url, *FAST, "--duration", "0.15", "--format", "jsonl"], capsys)
    assert code == 0 and "s3cret" not in out
    assert jsonl(out)[0]["capacity"]["kv_tokens"] == 2048


def test_api_key_needed_only_for_v1(capsys):
    """vLLM's --api-key guards /v1/* but not /metrics: watch still runs, without max_model_len."""
    routes = vllm_routes(LOADED_B)
    routes["/v1/models"] = [Answer(401, b'{"error":"Unauthorized"}', "application/json")]
    with Replay(routes) as srv:
        code, out, err = watch([srv.url, *FAST, "--duration", "0.15", "--format", "jsonl"], capsys)
    assert code == 0
    cap = jsonl(out)[0]["capacity"]
    assert cap["kv_tokens"] == 2048 and "max_model_len" not in cap and "HTTP 401" in str(cap["extras"])


# -- server errors, slowness, garbage --------------------------------------------------------------

def test_http_500_mid_watch_is_retried(capsys, tmp_path):
    rec = tmp_path / "rec.jsonl"
    routes = vllm_routes(LOADED_A)
    err500 = Answer(500, b"Internal Server Error")
    routes["/metrics"] = [Answer.file(LOADED_A), err500, err500, Answer.file(LOADED_B)]
    with Replay(routes) as srv:
        code, out, err = watch([srv.url, *FAST, "--duration", "3", "--record", str(rec)], capsys)
    assert code == 0, err
    assert "HTTP 500" in err and "retrying in" in err and "answering again" in err
    kinds = [(o["type"], o.get("event")) for o in jsonl(rec.read_text())]
    assert ("event", "server-error") in kinds and ("event", "recovered") in kinds
    assert "preempted +5" in out  # the sample after the outage still diffs the counters


def test_http_500_at_start(capsys):
    routes = {"/metrics": [Answer(503, b"Service Unavailable")]}
    with Replay(routes) as srv:
        code, out, err = watch([srv.url, *FAST], capsys)
    assert code == 2 and "HTTP 503" in err


def test_slow_server_times_out_and_gives_up(capsys):
    routes = vllm_routes(LOADED_B)
    routes["/metrics"] = [Answer.file(LOADED_B), Answer.file(LOADED_B, delay=3.0)]
    with Replay(routes) as srv:
        t0 = time.monotonic()
        code, out, err = watch([srv.url, "--interval", "0.1", "--timeout", "0.3", "--give-up", "0.8"], capsys)
    assert code == 3 and time.monotonic() - t0 < 8
    assert "no answer within 0.3 s" in err


def test_slow_but_answering_server_is_sampled(capsys):
    routes = vllm_routes(LOADED_B)
    routes["/metrics"] = [Answer.file(LOADED_B), Answer.file(LOADED_B, delay=0.35)]
    with Replay(routes) as srv:
        code, out, err = watch([srv.url, "--interval", "0.1", "--timeout", "2", "--duration", "1"], capsys)
    assert code == 0 and "longer than the 0.1 s interval" in err
    assert out.count("kv 93.3 %") >= 2


def test_malformed_metrics_page_is_retried_then_given_up(capsys):
    routes = vllm_routes(LOADED_B)
    routes["/metrics"] = [Answer.file(LOADED_B), Answer(200, b"<html><body>502 Bad Gateway</body></html>", "text/html")]
    with Replay(routes) as srv:
        code, out, err = watch([srv.url, *FAST, "--give-up", "0.5"], capsys)
    assert code == 3 and "not Prometheus text" in err


def test_page_with_some_mangled_lines_is_still_sampled(capsys):
    body = (FIXTURES / "watch" / LOADED_B).read_text().replace(
        'vllm:num_requests_running{engine="0"', 'vllm:num_requests_running{engine="0', 1)
    routes = vllm_routes(LOADED_B)
    routes["/metrics"] = [Answer(200, body.encode())]
    with Replay(routes) as srv:
        code, out, err = watch([srv.url, *FAST, "--duration", "0.15", "--format", "jsonl"], capsys)
    sample = next(o for o in jsonl(out) if o["type"] == "sample")
    assert code == 0 and sample["kv_usage"] == pytest.approx(0.9333, abs=1e-3)
    assert "running" not in sample and sample["extras"]["malformed_lines"] == 1


def test_not_an_engine(capsys):
    routes = {"/metrics": [Answer(200, b"# HELP up x\nup 1\nprocess_open_fds 12\n")]}
    with Replay(routes) as srv:
        code, out, err = watch([srv.url, *FAST], capsys)
    assert code == 2 and "not a vLLM, SGLang or ollama server" in err


def test_bad_url(capsys):
    code, out, err = watch(["ftp://example.org", *FAST], capsys)
    assert code == 2 and "only http:// and https://" in err
    code, out, err = watch(["http://127.0.0.1:99999", *FAST], capsys)
    assert code == 2 and "port" in err


# -- restart mid-watch -----------------------------------------------------------------------------

def test_restart_mid_watch_rereads_capacity(capsys, tmp_path):
    """The 8 MiB server is replaced by a 1 GiB one: counters reset, start time changes."""
    rec = tmp_path / "rec.jsonl"
    routes = vllm_routes(LOADED_A, LOADED_B, IDLE_1GIB)
    with Replay(routes) as srv:
        code, out, err = watch([srv.url, *FAST, "--duration", "0.5", "--record", str(rec)], capsys)
    assert code == 0, err
    assert "restarted" in err + out
    lines = jsonl(rec.read_text())
    caps = [o["capacity"]["kv_tokens"] for o in lines if o["type"] == "capacity"]
    assert caps == [2048, 262144]
    samples = [o for o in lines if o["type"] == "sample"]
    assert [s.get("restarted", False) for s in samples[:3]] == [False, False, True]
    assert all(s["preemptions"] >= 0 for s in samples) and samples[-1]["preemptions_total"] == 5
    assert lines[-1]["restarts"] == 1
    # explain sees two startups: before and after the restart
    report = explain_json(rec, capsys)
    assert [s["capacity"]["kv_tokens"] for s in report["startups"]] == [2048, 262144]


# -- TLS -------------------------------------------------------------------------------------------

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


def test_tls_untrusted_certificate(capsys, cert):
    with Replay(vllm_routes(LOADED_B), tls=cert) as srv:
        code, out, err = watch([srv.url, *FAST], capsys)
        assert code == 2 and "TLS certificate not trusted" in err and "--insecure" in err
        code, out, err = watch([srv.url, *FAST, "--insecure", "--duration", "0.15"], capsys)
        assert code == 0 and "KV capacity 2,048 tokens" in out


def test_tls_scheme_mismatch(capsys, cert):
    with Replay(vllm_routes(LOADED_B), tls=cert) as srv:
        code, out, err = watch([srv.url.replace("https://", "http://"), *FAST], capsys)
    assert code == 2 and "use https://" in err
    with Replay(vllm_routes(LOADED_B)) as srv:
        code, out, err = watch([srv.url.replace("http://", "https://"), *FAST], capsys)
    assert code == 2 and "does not speak TLS" in err and "use http://" in err


# -- signals ---------------------------------------------------------------------------------------

def test_sigterm_ends_with_a_summary():
    with Replay(vllm_routes(LOADED_A, LOADED_B)) as srv:
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        proc = subprocess.Popen([sys.executable, "-m", "kvscope", "watch", srv.url, "--interval", "0.1"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        seen = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # wait for two samples, however slow the import is
            text = proc.stdout.readline()
            seen.append(text)
            if sum(" kv " in t for t in seen) >= 2 or not text:
                break
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    out = "".join(seen) + out
    assert proc.returncode == 0, err
    assert "kvscope watch · summary" in out and "stopped by the user" in out and "Traceback" not in err


def test_jsonl_reader_going_away_ends_the_watch():
    """`kvscope watch URL --format jsonl | head -n 3` must end when head does, quietly."""
    with Replay(vllm_routes(LOADED_A, LOADED_B)) as srv:
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        t0 = time.monotonic()
        r = subprocess.run(f"{sys.executable} -m kvscope watch {srv.url} --interval 0.1 --format jsonl | head -n 3",
                           shell=True, capture_output=True, text=True, env=env, timeout=60)
    assert time.monotonic() - t0 < 30
    assert len(r.stdout.splitlines()) == 3 and json.loads(r.stdout.splitlines()[0])["type"] == "capacity"
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr


def test_gpu_numbers_reach_samples_and_summary():
    """NVML (a stand-in with the real API's shape) on a local server: per-GPU memory in every sample."""

    from rich.console import Console

    from kvscope.watch.loop import Options, Watch
    from kvscope.watch.nvml import GPUMemory
    from kvscope.watch.recorder import Recorder
    from kvscope.watch.view import QuietView
    from tests.unit.watch.test_units import _FakeNVML

    buf = io.StringIO()
    rec = Recorder()
    rec.add_stream(buf)
    console = Console(file=io.StringIO())
    with Replay(vllm_routes(LOADED_A, LOADED_B)) as srv:
        result = Watch(Options(srv.url, interval=0.1, duration=0.25), QuietView(console, console), rec,
                       gpu_factory=lambda: GPUMemory(_FakeNVML())).run()
    samples = [o for o in jsonl(buf.getvalue()) if o["type"] == "sample"]
    assert result.exit_code == 0 and samples
    assert all([g["used_bytes"] for g in s["gpus"]] == [1 << 30, 2 << 30] for s in samples)
    assert jsonl(buf.getvalue())[-1]["gpu_peak_used_bytes"] == {"0": 1 << 30, "1": 2 << 30}


def test_a_stop_request_whose_exception_was_swallowed_still_ends_the_watch():
    """SIGTERM sets stop_requested before raising; if some handler below the loop ate the exception, the loop's next
    turn ends the watch as the signal asked (once, in CI, a watch ignored SIGTERM for 120 s)."""
    from rich.console import Console

    from kvscope.watch.loop import Options, Watch
    from kvscope.watch.recorder import Recorder
    from kvscope.watch.view import QuietView

    console = Console(file=io.StringIO())
    with Replay(vllm_routes(LOADED_A, LOADED_B)) as srv:
        watch = Watch(Options(srv.url, interval=0.05, duration=30, gpus=False), QuietView(console, console), Recorder())
        naps = []

        def sleep(seconds: float) -> None:
            naps.append(seconds)
            if len(naps) == 2:
                watch.stop_requested = True  # as the handler does, with its exception lost
            time.sleep(min(seconds, 0.05))

        watch.sleep = sleep
        t0 = time.monotonic()
        result = watch.run()
    assert time.monotonic() - t0 < 10 and result.ended == "stopped by the user" and result.exit_code == 0
