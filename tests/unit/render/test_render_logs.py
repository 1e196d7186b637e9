"""Logs for the render tests: the bundled example, and a hostile log built on a real one.

The hostile log is the real SGLang log of fixture 033 (Llama-8B on an L40S) with two lines a
real server could print around it: a ``server_args=ServerArgs(...)`` line and a scheduler
exception. Their values carry realistic secrets (API keys, HF/OpenAI tokens, a bearer header, a
proxy password, home directories) and HTML / script / template injection in every field a log
controls: model path, server_args values, the model class, the failure message.
"""

from __future__ import annotations

from pathlib import Path

from kvscope.api import Analysis, analyze
from kvscope.examples import example_path
from tests.conftest import case_dir

SECRETS = (
    "s3cr3t-plain-key-value",
    "hf_abcdefghijklmnopqrstuvwxyz123456",
    "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ012345",
    "sk-live-abcdefghijklmnop1234",
    "abcdef1234567890bearer",
    "pa55w0rd-in-url",
    "hunter2-db-password",
    "alice",
    "/Users/bob",
)

SERVER_ARGS = (
    "[2025-11-11 04:05:37] server_args=ServerArgs("
    "model_path='/home/alice/models/<script>window.__pwned=1</script>{{7*7}}', "
    "tokenizer_path='/home/alice/tok</style><img src=x onerror=\"window.__pwned=2\">', "
    "api_key='s3cr3t-plain-key-value', hf_token='hf_abcdefghijklmnopqrstuvwxyz123456', "
    "admin_api_key=None, mem_fraction_static=0.85, tp_size=1, "
    "served_model_name='javascript:alert(1)//{% raw %}<svg onload=alert(2)>', kv_cache_dtype='auto', "
    "download_dir='/Users/bob/cache', "
    "json_model_override_args='{\"db\": \"postgres://app:hunter2-db-password@db.internal/x\"}')"
)
EXCEPTION = (
    "[2025-11-11 04:05:44] Scheduler hit an exception: RuntimeError: <img src=x onerror=alert(1)> "
    "```` </details> {{ config }} {% for x in y %} launched as: python -m sglang.launch_server "
    "--api-key sk-live-abcdefghijklmnop1234 --model-path /Users/bob/m "
    "--hf-token hf_abcdefghijklmnopqrstuvwxyz123456 "
    "OPENAI_API_KEY=sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ012345 "
    "Authorization: Bearer abcdef1234567890bearer https://carol:pa55w0rd-in-url@proxy.example.com:3128"
)


def example_analysis() -> Analysis:
    ex, path = example_path("kimi-k2.5-tp8")
    return analyze([path], ex.assumptions)


def hostile_log(tmp: Path) -> Path:
    """The real 033 log framed by a hostile server_args line and a hostile exception line."""
    real = (case_dir("sglang", "033") / "log.txt").read_text(encoding="utf-8").splitlines()
    body = [line for line in real if line.startswith("[2025-")]
    path = tmp / "hostile.log"
    path.write_text("\n".join([SERVER_ARGS, *body, EXCEPTION]) + "\n", encoding="utf-8")
    return path


def hostile_analysis(tmp: Path) -> Analysis:
    return analyze([str(hostile_log(tmp))])


def test_hostile_log_reaches_every_field(tmp_path):
    """The injection payloads land in the fields reports show, so the other tests test something."""
    s = hostile_analysis(tmp_path).startups[0]
    assert s.engine == "sglang"
    assert "<script>window.__pwned=1</script>" in s.model
    assert s.settings["api_key"] == "s3cr3t-plain-key-value"
    assert "</style>" in s.settings["tokenizer_path"]
    assert s.failure is not None and "<img src=x onerror=alert(1)>" in s.failure.message
    assert s.capacity.kv_tokens == 183133  # the real figures of 033 are still read
    assert any(SERVER_ARGS[22:60] in e.text for e in s.evidence)
