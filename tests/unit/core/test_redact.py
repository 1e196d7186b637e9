"""Redaction: secrets and user names are hidden in every format by default, and only what is secret."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.core import redact
from kvscope.core.redact import MARK, is_secret_key, redact_text, redact_value
from kvscope.render import render_analysis
from tests.unit.render.test_render_logs import SECRETS, example_analysis, hostile_analysis, hostile_log

FORMATS = ("terminal", "json", "markdown", "html")

HIDDEN = [  # (text, secret that must go, what must stay)
    ("server_args=ServerArgs(api_key='abc123', port=30000)", "abc123", "api_key='[REDACTED]'"),
    ("server_args={'api_key': 'abc123', 'tp_size': 8}", "abc123", "'api_key': '[REDACTED]'"),
    ('{"hf_token": "hf_abcdefghijklmnopqrstuvwx12"}', "abcdefghij", '"hf_token": "hf_[REDACTED]"'),
    ("python -m sglang.launch_server --api-key mykey123 --tp 8", "mykey123", "--api-key [REDACTED] --tp 8"),
    ("vllm serve m --api-key=mykey123", "mykey123", "--api-key=[REDACTED]"),
    ('--api-key "two words"', "two words", '--api-key "[REDACTED]"'),
    ("argv: ['vllm', '--api-key', 'mykey123', '--port', '8000']", "mykey123", "'--api-key', '[REDACTED]'"),
    ("HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123", "abcdefghijk", "HF_TOKEN="),
    ("using hf_abcdefghijklmnopqrstuvwxyz0123 to download", "abcdefghijk", "using hf_[REDACTED] to download"),
    ("OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstu", "abcdefghij", "OPENAI_API_KEY="),
    ("key sk-ant-api03-abcdefghijklmnopqrstuv in env", "abcdefghij", "key sk-[REDACTED] in env"),
    ("Authorization: Bearer eyJhbGciOiJI.eyJzdWIiOiIx.c2lnbmF0dXJl", "eyJhbGci", "Authorization: Bearer [REDACTED]"),
    ("-H 'Authorization: Basic dXNlcjpwYXNz'", "dXNlcjpwYXNz", "Authorization: Basic [REDACTED]"),
    ("proxy https://user:hunter2@proxy.corp:3128/x", "hunter2", "https://[REDACTED]@proxy.corp:3128/x"),
    ("redis://:hunter2@127.0.0.1:6379/0", "hunter2", "redis://[REDACTED]@127.0.0.1"),
    ("GET /v1/models?token=abc999&page=2", "abc999", "token=[REDACTED]&page=2"),
    ("password=hunter2 user=x", "hunter2", "password=[REDACTED] user=x"),
    ("DB_PASSWORD='correct horse'", "correct horse", "DB_PASSWORD='[REDACTED]'"),
    ("client_secret: abcXYZ", "abcXYZ", "client_secret: [REDACTED]"),
    ("token=12345678", "12345678", "token=[REDACTED]"),
    ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", "abcdefghij", "gh_[REDACTED]"),
    ("AKIAABCDEFGHIJKLMNOP", "ABCDEFGHIJKLMNOP", "AKIA[REDACTED]"),
    ("model_path='/home/alice/models/Kimi-K2.5'", "alice", "model_path='~/models/Kimi-K2.5'"),
    ("loading /Users/bob/Library/cache", "bob", "loading ~/Library/cache"),
    ("C:\\Users\\carol\\models\\x", "carol", "~\\models\\x"),
    ("cwd is /home/dave", "dave", "cwd is ~"),
]

KEPT = [  # figures and words that look close to secrets but are not
    "Decode batch. #running-req: 1, #token: 5000, token usage: 0.05, #new-token: 8192",
    "max_total_num_tokens=159277, max_prefill_tokens=16384, tokenizer_path=/models/x",
    "ServerArgs(api_key=None, admin_api_key=None, hf_token=None, ssl_keyfile_password=None)",
    "KV pool: 159,277 tokens × 70,272 B/token = 10.42 GiB per GPU",
    "Why this many bytes per token: architecture from built-in catalog",
    "eos_token_id=2, pad_token_id=None, --max-num-batched-tokens 8192 --tokenizer-mode auto",
    "/root/models/Kimi stays: it names no person",
    "the bearer of bad news; basic information",
    "task-abcdefghijklmnopqrstuvwxyz is not an OpenAI key",
]


@pytest.mark.parametrize(("text", "secret", "kept"), HIDDEN)
def test_secret_is_hidden(text, secret, kept):
    out = redact_text(text)
    assert secret not in out
    assert kept in out
    assert redact_text(out) == out  # idempotent: a second pass changes nothing


@pytest.mark.parametrize("text", KEPT)
def test_lookalikes_are_kept(text):
    assert redact_text(text) == text


def test_secret_keys_blank_any_value():
    doc = {"api_key": "plain-words", "hf_token": None, "password": 1234, "tokens": 159277,
           "settings": {"admin_api_key": "x", "tokenizer_path": "/home/eve/tok", "ssl_keyfile_password": False}}
    out = redact_value(doc)
    assert out["api_key"] == MARK and out["password"] == MARK
    assert out["hf_token"] is None and out["tokens"] == 159277
    assert out["settings"] == {"admin_api_key": MARK, "tokenizer_path": "~/tok", "ssl_keyfile_password": False}
    assert doc["api_key"] == "plain-words"  # the original is untouched
    assert [is_secret_key(k) for k in ("--api-key", "DB_PASSWORD", "max_total_num_tokens", "tokenizer_mode")] == [
        True, True, False, False]


def test_redacted_json_text_stays_valid():
    text = json.dumps({"cmd": "--api-key k3y \"quoted\" \\ back", "nested": {"token": "t0k"}})
    out = redact_text(text, "json")
    assert json.loads(out) == {"cmd": "--api-key [REDACTED] \"quoted\" \\ back", "nested": {"token": MARK}}


def test_analysis_is_copied_not_mutated(tmp_path):
    analysis = hostile_analysis(tmp_path)
    redacted = redact_value(analysis)
    s, r = analysis.startups[0], redacted.startups[0]
    assert s.settings["api_key"] == "s3cr3t-plain-key-value" and r.settings["api_key"] == MARK
    assert r.capacity.kv_tokens == s.capacity.kv_tokens == 183133
    assert r.reference_rank.pool("target").tokens == 183133
    assert "/home/alice" in s.model and r.model.startswith("~/models/")


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_is_redacted_by_default(tmp_path, fmt):
    text = render_analysis(hostile_analysis(tmp_path), fmt)
    leaked = [secret for secret in SECRETS if secret in text]
    assert leaked == []
    assert MARK in text or fmt == "terminal"  # terminal shows no settings, but its failure line is redacted
    if fmt == "json":
        doc = json.loads(text)
        assert doc["startups"][0]["settings"]["api_key"] == MARK
        assert doc["startups"][0]["capacity"]["kv_tokens"] == 183133


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_redact_keeps_everything(tmp_path, fmt):
    text = render_analysis(hostile_analysis(tmp_path), fmt, redact=False)
    assert "s3cr3t-plain-key-value" in text or fmt == "terminal"
    assert "sk-live-abcdefghijklmnop1234" in text


@pytest.mark.parametrize("fmt", FORMATS)
def test_example_figures_survive_redaction(fmt):
    """Redaction must not eat figures: the bundled example renders the same with and without it."""
    analysis = example_analysis()
    redacted, plain = render_analysis(analysis, fmt), render_analysis(analysis, fmt, redact=False)
    assert MARK not in redacted
    path = analysis.startups[0].file  # under /home/<user> when the checkout is: that part goes
    assert redacted == plain.replace(path, redact_text(path))


def test_cli_redacts_and_no_redact_opts_out(tmp_path):
    log = hostile_log(tmp_path)
    cmd = [sys.executable, "-m", "kvscope", "explain", str(log), "--format", "json"]
    redacted = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    plain = subprocess.run([*cmd, "--no-redact"], capture_output=True, text=True, timeout=120)
    assert redacted.returncode == plain.returncode == 0
    assert "s3cr3t-plain-key-value" not in redacted.stdout
    assert json.loads(redacted.stdout)["startups"][0]["settings"]["hf_token"] == MARK
    assert json.loads(plain.stdout)["startups"][0]["settings"]["api_key"] == "s3cr3t-plain-key-value"


def test_html_text_pass_leaves_scripts_alone():
    html = ("<p>--api-key abc123 at /home/alice/x</p><script>var token=getToken();</script>"
            "<style>.a{}</style><td>password=hunter2</td>")
    out = redact_text(html, "html")
    assert "abc123" not in out and "hunter2" not in out and "alice" not in out
    assert "<script>var token=getToken();</script>" in out  # code is not text: never rewritten


# --- the clue shortcut: a string with no clue skips the patterns, and that never changes a result ---

_WORDS = ["api_key", "API-KEY", "token", "hf_token", "Bearer", "authorization", "password", "secret", "://", "@",
          "hf_abcdefghijklmnopqrstuvwx", "sk-abcdefghijklmnopqrst", "ghp_" + "a" * 30, "github_pat_" + "b" * 30,
          "glpat-" + "c" * 20, "xoxb-1234567890", "AKIA" + "A" * 16, "eyJabcdefghi.abcdefghi.abcdefghi", "/home/alice/x",
          "/Users/bob", "C:\\Users\\eve\\x", "=", ": ", "'", '"', " ", "--", "x", "7", ".", "-", "#", "/", "_", "KEY",
          "pass", "wd", "id_", "access-", "'token'", "\u212a", "\u017f", "\u0131", "\u0130"]


def _full(text: str) -> str:
    """Every pattern, without the shortcut (what _plain did before it)."""
    redact._plain.cache_clear()
    original, key_sub = redact._may_hold, redact._key_sub
    redact._may_hold = lambda text, clues: True
    redact._key_sub = lambda pattern, repl, text: pattern.sub(repl, text)
    try:
        return redact._plain.__wrapped__(text)
    finally:
        redact._may_hold, redact._key_sub = original, key_sub


@given(st.lists(st.sampled_from(_WORDS) | st.text(max_size=6), max_size=10).map("".join))
@settings(max_examples=400, deadline=None)
def test_the_shortcuts_never_change_a_redaction(text: str):
    """Neither the clue test nor the key patterns' start positions (``_key_sub``) change a result."""
    assert redact._plain.__wrapped__(text) == _full(text)
    key = text.strip()
    # a "key" longer than any setting's name is never one, on purpose (trying it would cost O(n²)): not a shortcut
    expected = len(key) <= redact.MAX_KEY_NAME and redact._KEY_NAME.fullmatch(key) is not None
    assert redact.is_secret_key(key) == expected
