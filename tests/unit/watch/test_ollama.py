"""kvscope watch against ollama, replaying real /api/ps and /api/version answers (tests/fixtures/ollama/api,
each with its source in the .meta.json beside it): ollama serves no /metrics and no KV usage, so a sample
is its loaded models and their share in VRAM."""

from __future__ import annotations

from tests.conftest import FIXTURES
from tests.fixtures.watch.replay import Answer, Replay
from tests.unit.watch.test_faults import FAST, jsonl, watch

API = FIXTURES / "ollama" / "api"


def _json(name: str) -> Answer:
    return Answer(body=(API / name).read_bytes(), content_type="application/json")


VERSION = _json("005-version-0.20.0-user.json")  # microsoft/vscode#310912


def test_partial_offload_shows_the_share_on_the_cpu(capsys):
    """docs.ollama.com/api/ps: gemma4 takes 6,591,830,464 B, 5,333,539,264 of them in VRAM: 81 % on the GPU,
    19 % of it on the CPU, at context 4,096."""
    with Replay({"/api/version": [VERSION], "/api/ps": [_json("003-ps-docs-gemma4-partial-vram-context-length.json")]}) as srv:
        code, out, err = watch([srv.url, *FAST, "--duration", "0.25"], capsys)
    assert code == 0, err
    assert "ollama 0.20.0" in out
    assert "gemma4 · 6.14 GiB · 81% in VRAM, 19% on the CPU · context 4,096" in out
    assert "ollama reports no KV usage" in out


def test_jsonl_carries_each_loaded_model(capsys):
    """A user's /api/ps (nirmato/nirmato-ollama#13): a release that does not report context_length."""
    with Replay({"/api/version": [VERSION], "/api/ps": [_json("001-ps-user-gemma3-no-context-length.json")]}) as srv:
        code, out, err = watch([srv.url, *FAST, "--duration", "0.25", "--format", "jsonl"], capsys)
    assert code == 0, err
    lines = jsonl(out)
    assert lines[0]["engine"] == "ollama" and lines[0]["capacity"]["sources"] == ["/api/version", "/api/ps"]
    sample = next(o for o in lines if o["type"] == "sample")
    models = sample["extras"]["loaded_models"]
    assert models and all(m["context_length"] is None for m in models)
    assert all(0 <= m["vram_share"] <= 1 for m in models if m["vram_share"] is not None)


def test_a_model_entirely_in_vram(capsys):
    """ollama's API docs (2024): size equals size_vram: every layer on the GPU."""
    with Replay({"/api/version": [VERSION], "/api/ps": [_json("002-ps-docs-2024-mistral-size-equals-vram.json")]}) as srv:
        code, out, err = watch([srv.url, *FAST, "--duration", "0.25"], capsys)
    assert code == 0, err
    assert "all in VRAM" in out and "on the CPU" not in out


def test_not_ollama_either_says_so_in_one_line(capsys):
    with Replay({}) as srv:
        code, out, err = watch([srv.url, *FAST], capsys)
    assert code == 2
    assert "not a vLLM, SGLang or ollama server" in err and "Traceback" not in err
