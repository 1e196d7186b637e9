"""kvscope watch against servers that misbehave on purpose, on 127.0.0.1: a redirect to another origin must
not carry the credentials, user:password in the URL works and is never shown, a server that trickles its
answer or never answers is bounded by --timeout as a whole, and what a server tells (a model id with terminal
escapes, a home path, a token-shaped id) reaches the terminal and the recording redacted and inert."""

from __future__ import annotations

import base64
import json
import time

import pytest

from kvscope.core.errors import ClientError, TimedOut
from kvscope.watch.http import Client
from tests.fixtures.watch.replay import Answer, Replay, payload, vllm_routes
from tests.unit.watch.test_faults import FAST, jsonl, watch

METRICS = "vllm/cpu-0.32.0-8MiB-loaded-a-metrics.txt"
TOKEN = "hf_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4"


def _redirecting_to(target: Replay, path: str = "/metrics") -> Replay:
    return Replay({path: [Answer(302, b"", headers=(("Location", target.url + path),))]})


def test_a_redirect_to_another_origin_is_not_followed_with_an_api_key():
    with Replay(vllm_routes(METRICS)) as elsewhere, _redirecting_to(elsewhere) as srv:
        with pytest.raises(ClientError) as err:
            Client(srv.url, api_key="s3cret-key").get("/metrics")
        assert "redirects to" in str(err.value) and "not followed" in str(err.value)
        assert elsewhere.auths == []  # the other origin never saw a request, let alone the key
        assert "s3cret-key" not in str(err.value)


def test_without_credentials_a_cross_origin_redirect_is_followed_bare():
    with Replay(vllm_routes(METRICS)) as elsewhere, _redirecting_to(elsewhere) as srv:
        resp = Client(srv.url).get("/metrics")
        assert resp.status == 200 and elsewhere.auths == [None]


def test_a_redirect_within_the_origin_keeps_the_key():
    routes = vllm_routes(METRICS)
    routes["/old-metrics"] = [Answer(301, b"", headers=(("Location", "/metrics"),))]
    with Replay(routes, api_key="k3y") as srv:
        resp = Client(srv.url, api_key="k3y").get("/old-metrics")
        assert resp.status == 200 and srv.auths == ["Bearer k3y", "Bearer k3y"]


def test_user_and_password_in_the_url_are_sent_as_basic_and_never_shown():
    with Replay(vllm_routes(METRICS)) as srv:
        url = srv.url.replace("http://", "http://alice:p%40ss@")  # a password holding '@', percent-encoded
        client = Client(url)
        assert client.get("/metrics").status == 200
        assert srv.auths == ["Basic " + base64.b64encode(b"alice:p@ss").decode()]
        assert "alice" not in client.shown and "ss" not in client.shown.split("//", 1)[1]


def test_a_trickling_answer_is_bounded_by_the_timeout_as_a_whole():
    with Replay({"/metrics": [Answer(body=payload(METRICS), trickle=0.2)]}) as srv:
        start = time.monotonic()
        with pytest.raises(TimedOut):
            Client(srv.url, timeout=1.0).get("/metrics")
        assert time.monotonic() - start < 2.5  # each byte came well within the per-read timeout


def test_a_server_that_never_answers_is_bounded_too():
    with Replay({"/metrics": [Answer(body=b"x", delay=30)]}) as srv:
        start = time.monotonic()
        with pytest.raises(TimedOut):
            Client(srv.url, timeout=0.5).get("/metrics")
        assert time.monotonic() - start < 2.0


def _hostile_models() -> bytes:
    doc = json.loads(payload("vllm/cpu-0.32.0-8MiB-v1-models.json"))
    doc["data"][0]["id"] = f"/home/alice/models/\x1b]52;c;ZXZpbA==\x07x\u202e\x9b2J-{TOKEN}"
    return json.dumps(doc).encode()


def test_what_the_server_tells_is_redacted_and_inert_in_every_output(capsys, tmp_path):
    routes = vllm_routes(METRICS)
    routes["/v1/models"] = [Answer(body=_hostile_models(), content_type="application/json")]
    rec = tmp_path / "rec.jsonl"
    with Replay(routes) as srv:
        code, out, err = watch([srv.url, *FAST, "--duration", "0.25", "--record", str(rec)], capsys)
        code_j, out_j, _ = watch([srv.url, *FAST, "--duration", "0.25", "--format", "jsonl"], capsys)
    assert code == 0 and code_j == 0, err
    recorded = rec.read_text()
    for text in (out, err, out_j, recorded):
        assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text and "\x9b" not in text
        assert "alice" not in text and TOKEN not in text
    assert "model ~/models/" in out and "<U+202E>" in out  # shown, not acted on
    assert jsonl(recorded)[0]["capacity"]["model"].startswith("~/models/")


def test_no_redact_keeps_the_names_but_still_shows_escapes_inert(capsys):
    routes = vllm_routes(METRICS)
    routes["/v1/models"] = [Answer(body=_hostile_models(), content_type="application/json")]
    with Replay(routes) as srv:
        code, out, err = watch([srv.url, *FAST, "--duration", "0.2", "--no-redact"], capsys)
    assert code == 0, err
    assert "/home/alice/models/" in out and TOKEN in out
    assert "\x1b" not in out and "\\x1b" in out


def _metrics_with(value: str) -> bytes:
    """The real vLLM page with every sample value of the KV-usage gauge replaced."""
    lines = []
    for line in payload(METRICS).decode().splitlines():
        if line.startswith(("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:num_requests_running")):
            line = line.rsplit(" ", 1)[0] + " " + value
        lines.append(line)
    return ("\n".join(lines) + "\n").encode()


HOSTILE_ANSWERS = {
    "deep json server info": {"/get_server_info": [Answer(body=b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
                                                           content_type="application/json")]},
    "gauges at 1e308": {**vllm_routes(METRICS), "/metrics": [Answer(body=_metrics_with("1e308"))]},
    "gauges at NaN": {**vllm_routes(METRICS), "/metrics": [Answer(body=_metrics_with("NaN"))]},
    "gauges at -Inf": {**vllm_routes(METRICS), "/metrics": [Answer(body=_metrics_with("-Inf"))]},
    "a body past the size limit": {"/metrics": [Answer(body=b"# " + b"x" * (65 << 20))]},
    "escapes in labels": {**vllm_routes(METRICS), "/metrics": [Answer(body=payload(METRICS).replace(
        b'model_name="', b'model_name="\x1b]0;pwned\x07'))]},
    "binary garbage": {"/metrics": [Answer(body=bytes(range(256)) * 64)]},
    "empty everything": {},
}


@pytest.mark.parametrize("name", sorted(HOSTILE_ANSWERS))
def test_a_hostile_answer_ends_in_a_message_or_a_watch(name, capsys):
    with Replay(HOSTILE_ANSWERS[name]) as srv:
        start = time.monotonic()
        code, out, err = watch([srv.url, *FAST, "--duration", "0.3", "--format", "jsonl"], capsys)
    assert code in (0, 2, 3), err
    assert time.monotonic() - start < 10
    assert "\x1b" not in out + err and "\x07" not in out + err
    for line in out.splitlines():
        json.loads(line)  # every line of the stream is JSON, whatever the server sent
