"""ollama as its own engine, on real ollama logs (tests/fixtures/ollama, the ollama question cases and the
harvested ollama logs): each load a startup of the ``ollama`` engine, advice in ollama's knobs and never the
llama.cpp runner's flags, every figure the log prints read back (each case's meta.json ``ground_truth``, keys
in tests/fixtures/ollama/GROUND_TRUTH.md)."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from kvscope.cli import main
from tests.conftest import FIXTURES

OLLAMA = FIXTURES / "ollama"
CASES = sorted(p.parent for p in OLLAMA.glob("*/meta.json"))
QUESTIONS = sorted(p.parent for p in (FIXTURES / "questions").glob("*ollama*/log.txt"))
HARVESTED = sorted(p.parent for p in (FIXTURES / "harvested" / "llamacpp").glob("*ollama*/log.txt"))
# the runner's own flags: an ollama user sets num_ctx, num_gpu, num_batch and OLLAMA_* instead
LLAMA_FLAGS = re.compile(r"^(?:-c|-ngl|-ub|-b|-np|-ctk|-ctv|-fa|--ctx-size|--n-gpu-layers|--parallel|--cache-type-\w+|"
                         r"--cache-type-k/--cache-type-v|--flash-attn|--no-kv-offload|--tensor-split)$")


def _explain(path: Path) -> dict:
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(["explain", str(path), "--format", "json"])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    assert code in (0, 2) and "Traceback" not in err.getvalue(), err.getvalue()
    return json.loads(out.getvalue())


def _suggestions(doc: dict) -> list[dict]:
    out = []
    for s in doc["startups"]:
        for f in s.get("findings") or []:
            sug = f.get("suggestion")
            if sug:
                out += [sug, *(sug.get("alternatives") or [])]
    return out


@pytest.mark.parametrize("case", CASES + QUESTIONS + HARVESTED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_ollama_startups_advise_in_ollama_knobs(case: Path):
    doc = _explain(case / "log.txt")
    ollama = [s for s in doc["startups"] if s["engine"] == "ollama"]
    flags = [sug["flag"] for s in ollama for sug in _suggestions({"startups": [s]})]
    assert not [f for f in flags if LLAMA_FLAGS.match(f)], flags
    for s in ollama:
        text = " ".join(f"{f['title']} {f['detail']}" for f in s.get("findings") or [])
        assert not re.search(r"(?<![\w-])(-ngl|-ub|-np|-ctk)(?![\w-])", text), text


def test_every_ollama_fixture_is_read_as_ollama():
    """The harvested logs show at least one ollama server line each (those that show only the runner's
    llama.cpp lines with no ollama mark are named here, and stay llama.cpp's)."""
    runner_only = {"025-2026-llama-server-5-quadro-pascal-skipped-cuda13-archs"}
    engines = {c.name: {s["engine"] for s in _explain(c / "log.txt")["startups"]} for c in CASES}
    wrong = {name: e for name, e in engines.items() if name not in runner_only and e and e != {"ollama"}}
    assert not wrong, wrong


@pytest.mark.parametrize("case", [c for c in CASES if "ground_truth" in json.loads((c / "meta.json").read_text())],
                         ids=lambda p: p.name)
def test_each_load_is_a_startup(case: Path):
    truth = json.loads((case / "meta.json").read_text())["ground_truth"]
    if not truth.get("loads"):
        pytest.skip("the excerpt shows no model load")  # server config or discovery only: nothing to count
    startups = _explain(case / "log.txt")["startups"]
    assert len(startups) == truth["loads"], [s["source"] for s in startups]


def test_two_loads_in_one_log_are_two_startups_with_their_own_layers():
    """021 (ollama/ollama#10823): the same model loaded twice, 49/63 layers with 17.8 GiB free, then 62/63 with
    21.7 GiB: two startups, each with its own split."""
    doc = _explain(next(OLLAMA.glob("021-*")) / "log.txt")
    split = [(s["settings"].get("n_gpu_layers_offloaded"), s["settings"].get("ollama_memory_available_gib"))
             for s in doc["startups"]]
    assert split == [(49, 17.8), (62, 21.7)]


def test_whatif_num_ctx_scales_the_kv_estimate_and_places_more_layers():
    """questions_shared/16 (ollama/ollama#9181): 64,000 tokens of context take 19.5 GiB of KV and leave 44/81
    layers on four GPUs; a quarter of the context frees ≈ 14.6 GiB, room for more layers (not all 81: 87.3 GiB
    of weights do not fit in 88 GiB)."""
    from kvscope.api import read_logs
    from kvscope.engines.ollama import whatif

    log = next((FIXTURES / "questions_shared").glob("16-*")) / "log.txt"
    cal = whatif.calibrate(read_logs([str(log)])[0])
    assert cal.estimate is not None
    assert (cal.num_ctx, cal.parallel, cal.estimate.layers, cal.estimate.offloaded) == (64000, 1, 81, 44)
    now, quarter = whatif.predict(cal, {}), whatif.predict(cal, {"num_ctx": 16000})
    assert (now.kv_tokens, quarter.kv_tokens) == (64000, 16000)
    layers = [int(m.group(1)) for n in quarter.notes if (m := re.search(r"≈ (\d+)/81 layers", n))]
    assert layers and 44 < layers[0] < 81
    assert quarter.flags == ["num_ctx 16000"]
    assert "19.50" in now.risk_words or any("19.50" in n for n in now.notes)
