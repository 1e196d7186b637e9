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
    """Every harvested log shows an ollama record or journald's ollama prefix: all its startups are ollama's."""
    engines = {c.name: {s["engine"] for s in _explain(c / "log.txt")["startups"]} for c in CASES}
    wrong = {name: e for name, e in engines.items() if e and e != {"ollama"}}
    assert not wrong, wrong


def test_a_gpu_left_out_at_discovery_is_named_with_its_architecture():
    """025 (ollama/ollama#17766): the 2026 build skips the Quadro P4000 (cc 6.1) because its CUDA library was
    compiled from 7.5 up; the answer says so, not memory, and the other four GPUs' memory is read from the
    llama-server device table."""
    doc = _explain(next(OLLAMA.glob("025-*")) / "log.txt")
    (s,) = doc["startups"]
    assert s["answer"]["situation"].startswith("ollama left out Quadro P4000: compute capability 6.1")
    assert "oldest compiled is 7.5" in s["answer"]["cause"]
    totals = {r["rank"]: r["total_gib"] for r in s["ranks"]}
    assert totals["CUDA0"] == 22903 / 1024 and totals["CUDA3"] == 8107 / 1024


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


# --- every printed figure comes back (tests/fixtures/ollama/GROUND_TRUTH.md) -------------------------------------

_SET, _RANK, _EXTRA, _POOL, _WARN, _CAP = "settings", "rank", "extra", "pool", "warning", "capacity"
# ground-truth key → where kvscope's JSON holds it: (scope, key); a list value is read at the figure's index
WHERE: dict[str, list[tuple[str, str]]] = {
    "layers.requested": [(_SET, "ollama_layers_requested")],
    "layers.model": [(_SET, "n_layers_offloadable")],
    "layers.offload": [(_SET, "n_gpu_layers_offloaded")],
    "layers.split": [(_SET, "ollama_layers_split")],
    "memory.available": [(_SET, "ollama_memory_available_list_gib")],
    "memory.required.allocations": [(_SET, "ollama_memory_required_allocations_list_gib")],
    **{k: [(_SET, f"ollama_{k.replace('.', '_')}_gib")] for k in (
        "memory.gpu_overhead", "memory.required.full", "memory.required.partial", "memory.required.kv",
        "memory.weights.total", "memory.weights.repeating", "memory.weights.nonrepeating", "memory.graph.full",
        "memory.graph.partial", "projector.weights", "projector.graph")},
    "model weights": [(_RANK, "weights_gib")],
    "kv cache": [(_POOL, "gib")],
    "compute graph": [(_EXTRA, "compute_gib")],
    "total memory": [(_SET, "ollama_total_memory_gib")],
    "inference compute total": [(_RANK, "total_gib"), (_SET, "ollama_system_total_gib")],
    "inference compute available": [(_RANK, "pre_load_free_gib")],
    "gpu memory available": [(_EXTRA, "scheduler_available_gib")],
    "gpu memory free": [(_RANK, "pre_load_free_gib")],
    "gpu memory minimum": [(_EXTRA, "scheduler_minimum_gib")],
    "gpu memory overhead": [(_EXTRA, "gpu_overhead_gib")],
    "updated vram total": [(_RANK, "total_gib")],
    "updated vram available": [(_RANK, "pre_load_free_gib")],
    "os vram overhead": [(_EXTRA, "os_vram_overhead_gib")],
    "system memory total": [(_SET, "ollama_system_total_gib")],
    "system memory free": [(_SET, "ollama_system_free_gib")],
    "system memory free_swap": [(_SET, "ollama_system_free_swap_gib")],
    "fit required": [(_SET, "ollama_fit_required_gib")],
    "fit available": [(_SET, "ollama_fit_available_gib")],
    "fit parallel": [(_SET, "ollama_parallel")],
    "model layers": [(_SET, "n_layers_offloadable")],
    "model layers requested": [(_SET, "ollama_layers_requested")],
    "KvSize": [(_SET, "ollama_kv_size")],
    "BatchSize": [(_SET, "n_batch")],
    "Parallel": [(_SET, "n_slots")],
    "GPULayers": [(_SET, "n_gpu_layers")],
    "NumThreads": [(_SET, "n_threads")],
    "--ctx-size": [(_SET, "ctx_size")],
    "--batch-size": [(_SET, "n_batch")],
    "--n-gpu-layers": [(_SET, "n_gpu_layers")],
    "--parallel": [(_SET, "n_slots")],
    "--threads": [(_SET, "n_threads")],
    **{k: [(_SET, k.lower())] for k in ("OLLAMA_CONTEXT_LENGTH", "OLLAMA_NUM_PARALLEL", "OLLAMA_GPU_OVERHEAD",
                                        "OLLAMA_MAX_LOADED_MODELS", "OLLAMA_FLASH_ATTENTION", "OLLAMA_KV_CACHE_TYPE",
                                        "OLLAMA_SCHED_SPREAD")},
    "version": [("version", "engine_version")],
    "predicted": [(_WARN, "predicted_gib")],
    "predicted_num_ctx": [(_WARN, "predicted_num_ctx")],
    "predicted available": [(_WARN, "available_gib")],
    "offloaded": [(_SET, "n_gpu_layers_offloaded")],
    "offloadable": [(_SET, "n_layers_offloadable")],
    "n_ctx": [(_SET, "n_ctx"), (_CAP, "kv_tokens")],
    "n_ctx_per_seq": [(_SET, "n_ctx_seq"), (_CAP, "context_len")],
    "n_seq_max": [(_SET, "n_seq_max")],
    "n_batch": [(_SET, "n_batch")],
    "n_ubatch": [(_SET, "n_ubatch")],
    "KV buffer": [(_POOL, "gib")],
    "KV self size": [(_POOL, "gib")],
    "model buffer": [(_EXTRA, "model_buffers_mib"), (_EXTRA, "model_buffer_lines_mib"), (_RANK, "weights_gib")],
    "compute buffer": [(_EXTRA, "compute_buffers_mib"), (_EXTRA, "compute_buffer_lines_mib"), (_EXTRA, "compute_gib")],
}
_UNIT = {"B": 1 / (1 << 30), "KiB": 1 / (1 << 20), "MiB": 1 / 1024, "MB": 1 / 1024, "GiB": 1.0}
_PRINTED = re.compile(r"^(-?[\d.]+)\s*(B|KiB|MiB|MB|GiB)?$")


def _values(startup: dict, scope: str, key: str, device: str | None) -> list:
    ranks = startup.get("ranks") or []
    if device is not None and any(r["rank"] == device for r in ranks):
        ranks = [r for r in ranks if r["rank"] == device]
    if scope == _SET:
        return [startup["settings"].get(key)]
    if scope == _CAP:
        return [startup["capacity"].get(key)]
    if scope == "version":
        return [startup.get("engine_version")]
    if scope == _WARN:
        return [w.get(key) for w in startup.get("warnings") or []]
    if scope == _RANK:
        return [r.get(key) for r in ranks]
    if scope == _EXTRA:
        out = []
        for r in ranks:
            value = (r.get("extras") or {}).get(key)
            values = list(value.values()) if isinstance(value, dict) else [value]
            out += [x for v in values for x in (v if isinstance(v, list) else [v])]
        return out
    return [p.get(key) for r in ranks for p in r.get("kv_pools") or []]


def _matches(got, printed: str, key: str, in_mib: bool) -> bool:
    if isinstance(got, bool) or printed in ("true", "false"):
        return got is (printed == "true")
    if isinstance(got, str):
        return got == printed or got.endswith(printed)
    m = _PRINTED.match(printed)
    if not m or not isinstance(got, (int, float)):
        return False
    number, unit = float(m.group(1)), m.group(2)
    decimals = len(m.group(1).split(".")[1]) if "." in m.group(1) else 0
    half = 0.5 * 10 ** -decimals + 1e-9
    if unit is None and key == "fit available":  # bytes
        return abs(got - number / (1 << 30)) < 1e-6
    if unit is None:
        return abs(got - number) <= half if decimals else got == number
    scale = 1.0 if in_mib else _UNIT[unit]  # a *_mib figure is already in the printed MiB
    return abs(got - number * scale) <= half * scale


def _found(doc: dict, figure: dict) -> bool:
    load = figure.get("load")
    startups = doc["startups"]
    chosen = [startups[load - 1]] if load and load <= len(startups) else startups
    for s in chosen:
        for scope, key in WHERE[figure["key"]]:
            for got in _values(s, scope, key, figure.get("device")):
                if isinstance(got, list):
                    got = got[figure.get("index", 0)] if figure.get("index", 0) < len(got) else None
                if got is not None and _matches(got, figure["printed"], figure["key"], key.endswith("_mib")):
                    return True
    return False


@pytest.mark.parametrize("case", [c for c in CASES if "ground_truth" in json.loads((c / "meta.json").read_text())],
                         ids=lambda p: p.name)
def test_every_printed_figure_comes_back(case: Path):
    truth = json.loads((case / "meta.json").read_text())["ground_truth"]
    doc = _explain(case / "log.txt")
    missed = [f"{f['key']}={f['printed']}" + (f"@{f['device']}" if f.get("device") else "") + f" (load {f.get('load')})"
              for f in truth["figures"] if not _found(doc, f)]
    assert not missed, missed
    if truth.get("startup_fails"):
        assert any(s.get("failure") for s in doc["startups"])
