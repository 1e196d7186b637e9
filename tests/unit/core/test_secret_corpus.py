"""Realistic secrets, in the shapes real logs and launch commands carry them, planted in a real vLLM log: no
output format (terminal, JSON, markdown, HTML) of explain lets one through, and the report still reads the
log's memory figures. Each entry is (what the line says, the secret that must not appear)."""

from __future__ import annotations

import pytest

from kvscope.api import analyze
from kvscope.core.redact import redact_text
from kvscope.render import render_analysis
from tests.conftest import FIXTURES

REAL = FIXTURES / "logs/vllm/900-cpu-v0.32-tiny-llama-auto-kv-util05/log.txt"
STAMP = "(APIServer pid=13873) INFO 11-30 05:59:57 [api_utils.py:286] "

SECRETS = [
    # vLLM's non-default args print list-valued flags as lists (a real shape: --api-key given twice)
    ("non-default args: {'model': '/models/tiny-llama', 'api_key': ['k3y-one-Alpha9', 'k3y-two-Beta7']}",
     "k3y-one-Alpha9"),
    ("non-default args: {'api_key': ['k3y-one-Alpha9', 'k3y-two-Beta7']}", "k3y-two-Beta7"),
    ("export HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"),
    ("OPENAI_API_KEY=sk-proj-AbCdEfGhIjKlMnOpQrSt1234", "sk-proj-AbCdEfGhIjKlMnOpQrSt1234"),
    ("GOOGLE_KEY=AIzaSyD4-8zUeQ1a2b3c4d5e6f7g8h9i0jKlMnO", "AIzaSyD4-8zUeQ1a2b3c4d5e6f7g8h9i0jKlMnO"),
    ("//registry.npmjs.org/:_authToken npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"),
    ("GITHUB_TOKEN=ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"),
    ('TLS_KEY="-----BEGIN RSA PRIVATE KEY-----\\nMIIEpAIBAAKCAQEAq7Bn\\n-----END RSA PRIVATE KEY-----"', "MIIEpAIBAAKCAQEAq7Bn"),
    ("request headers: Cookie: sessionid=Zx9Yw8Vu7Ts6; csrftoken=Qq1Ww2", "sessionid=Zx9Yw8Vu7Ts6"),
    ("request headers: Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlMTIz",
     "eyJhbGciOiJIUzI1NiJ9"),
    ("loading from https://svc:p@ssw0rd@minio.internal:9000/models", "p@ssw0rd"),
    ("loading from https://svc:p@ssw0rd@minio.internal:9000/models", "svc:"),
    ("ａｐｉ＿ｋｅｙ＝ｗｉｄｅｓｅｃｒｅｔ", "ｗｉｄｅｓｅｃｒｅｔ"),
    ("AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("model loaded from /home/alice/models/tiny-llama", "alice"),
]
# a secret inside the error that ends the startup: it becomes the failure's message, in every format
FAILURE = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. (loading with "
           "HF_TOKEN=hf_ZyXwVuTsRqPoNmLkJiHgFeDcBa987654 from /home/bob/cache)")
FAILURE_SECRETS = ("hf_ZyXwVuTsRqPoNmLkJiHgFeDcBa987654", "bob")


@pytest.mark.parametrize(("line", "secret"), SECRETS, ids=[s for _, s in SECRETS])
def test_the_text_pass_hides_it(line, secret):
    assert secret not in redact_text(line)


def test_no_format_lets_a_secret_through(tmp_path):
    lines = REAL.read_text(encoding="utf-8").splitlines()
    planted = [STAMP + line for line, _ in SECRETS]
    log = tmp_path / "log.txt"
    log.write_text("\n".join(lines[:8] + planted + lines[8:]) + "\n", encoding="utf-8")
    analysis = analyze([str(log)])
    assert analysis.startups and analysis.startups[0].capacity.kv_tokens  # still read as the real log
    for fmt in ("terminal", "json", "markdown", "html"):
        text = render_analysis(analysis, fmt)
        leaked = [secret for _, secret in SECRETS if secret in text]
        assert not leaked, (fmt, leaked)


def test_a_secret_in_the_failure_message_stays_hidden(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text(REAL.read_text(encoding="utf-8") + STAMP.replace("INFO", "ERROR") + FAILURE + "\n", encoding="utf-8")
    analysis = analyze([str(log)])
    assert any(s.failure is not None and "out of memory" in s.failure.message.lower() for s in analysis.startups)
    for fmt in ("terminal", "json", "markdown", "html"):
        text = render_analysis(analysis, fmt)
        assert not [s for s in FAILURE_SECRETS if s in text], fmt


def test_a_none_like_list_stays_readable():
    assert redact_text("non-default args: {'api_key': [], 'tp': 2}") == "non-default args: {'api_key': [], 'tp': 2}"
    assert redact_text("api_key=[REDACTED]") == "api_key=[REDACTED]"  # idempotent
