"""Golden outputs: the JSON kvscope gives for every fixture log and a set of whatif / plan runs.

Run in-process (the CLI's own entry point through click's runner) so the whole set takes seconds.
``python -m tests.golden.capture`` rewrites ``golden.json.gz``; ``tests/golden/test_golden.py``
checks every output against it. Rewrite only for a change meant to alter output, and say so in
the commit: the point of the file is that a refactor shows zero differences.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import sys
from pathlib import Path

import kvscope

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
REPO = ROOT.parent
GOLDEN = Path(__file__).with_name("golden.json.gz")

PLANS = [
    ["plan", "--model", "moonshotai/Kimi-K2.5", "--gpu", "RTX PRO 6000", "--tp", "8"],
    ["plan", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--engine", "vllm"],
    ["plan", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H200", "--engine", "vllm",
     "--set", "gpu_memory_utilization=0.5", "--set", "kv_cache_dtype=fp8"],
    ["plan", "--model", "deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--tp", "8"],
    ["plan", "--model", "Qwen/Qwen3-30B-A3B", "--gpu", "H100", "--engine", "sglang", "--context", "32768"],
    ["plan", "--model", "google/gemma-3-27b-it", "--gpu", "H100", "--engine", "vllm"],
]
WHATIF_SETS = {
    "sglang": [["--set", "mem_fraction_static=0.8"], ["--set", "kv_cache_dtype=fp8_e4m3"]],
    "vllm": [["--set", "gpu_memory_utilization=0.8"], ["--set", "max_model_len=8192"]],
}


def fixture_logs() -> list[Path]:
    """Every log fixture: one entry per case folder (all its files) or per loose log file."""
    cases: list[Path] = []
    for sub in ("logs", "harvested"):
        for meta in sorted((FIXTURES / sub).glob("*/*/meta.json")):
            cases.append(meta.parent)
    for p in sorted((FIXTURES / "runtime").glob("*.txt")):
        cases.append(p)
    for p in sorted((FIXTURES / "dsv4").glob("*.log")) + sorted((FIXTURES / "dsv4").glob("*.txt")):
        cases.append(p)
    return cases


def _files(case: Path) -> list[str]:
    if case.is_file():
        return [str(case)]
    meta = json.loads((case / "meta.json").read_text())
    names = meta.get("files") or ["log.txt"]
    return [str(case / n) for n in names if (case / n).exists()]


def runs() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for case in fixture_logs():
        key = str(case.relative_to(FIXTURES))
        files = _files(case)
        out[f"explain {key}"] = ["explain", *files]
        engine = key.split("/")[1] if key.startswith(("logs/", "harvested/")) else ""
        if key.startswith("logs/"):
            for extra in WHATIF_SETS.get(engine, []):
                out[f"whatif {key} {' '.join(extra)}"] = ["whatif", *files, *extra]
    out["explain --example kimi-k2.5-tp8"] = ["explain", "--example", "kimi-k2.5-tp8"]
    for argv in PLANS:
        out[" ".join(argv)] = argv
    return out


def run_one(argv: list[str]) -> str:
    from kvscope.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([*argv, "--format", "json"])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    # Paths differ between checkouts and installs: fixtures relative to their folder, the bundled examples
    # as the source tree names them (an installed, non-editable kvscope lives in site-packages).
    text = f"exit={code}\n{out.getvalue()}{err.getvalue()}".replace(str(FIXTURES) + "/", "")
    return text.replace(str(Path(kvscope.__file__).resolve().parent) + "/", "src/kvscope/").replace(str(REPO) + "/", "")


def capture() -> dict[str, str]:
    return {name: run_one(argv) for name, argv in runs().items()}


if __name__ == "__main__":
    outputs = capture()
    GOLDEN.write_bytes(gzip.compress(json.dumps(outputs, sort_keys=True, indent=0).encode(), mtime=0))
    print(f"{len(outputs)} outputs written to {GOLDEN}", file=sys.stderr)
