"""No report a person reads (markdown, HTML) prints a contract key: ``queue.usage_while_queued_p95``,
``available_kv_gib``, ``kv_tokens`` are for scripts (``--format json``); the reports say them in words.

A key counts as raw when it is one of kvscope's own names (the contract's fields, every fact an engine
declares, every key of a serving summary, of a whatif or plan prediction) and the input log never printed
that word itself: ``max_total_num_tokens`` quoted from an SGLang log, or an engine flag the operator typed
(``mem_fraction_static``), is the operator's word, not a leak. Log lines shown verbatim (code blocks,
``<pre>``) are the log, not the report, and are left out of the check.
"""

from __future__ import annotations

import dataclasses
import html as html_lib
import json
import re
from pathlib import Path

import pytest

from kvscope import engines
from kvscope.api import analyze
from kvscope.cli import main
from kvscope.core.startup import CAPACITY_FIELDS, Rank
from kvscope.examples import EXAMPLES, example_path
from kvscope.render import render_analysis
from tests.conftest import FIXTURES, case_files

CASES = sorted(p.parent for group in ("logs", "harvested") for p in (FIXTURES / group).glob("*/*/meta.json"))
RUNTIME = sorted((FIXTURES / "runtime").glob("*.txt"))


def _flat_keys(obj, prefix: str = "") -> set[str]:
    out: set[str] = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            name = f"{prefix}{k}"
            out |= {str(k), name} | _flat_keys(v, name + ".")
    elif isinstance(obj, list):
        for v in obj[:5]:
            out |= _flat_keys(v, prefix)
    return out


def _kvscope_keys() -> set[str]:
    keys = set(CAPACITY_FIELDS) | {f.name for f in dataclasses.fields(Rank)}
    for engine in engines.REGISTRY.values():
        keys |= set(engine.rank_facts.declared()) | set(engine.capacity_facts.declared())
    return {k for k in keys if "_" in k}  # a one-word key ("samples") is an English word


# the engines' own names for what kvscope also reports: SGLang's server args and log fields, vLLM's and
# TensorRT-LLM's config fields; an operator reads and types these, so a report may name them
ENGINE_WORDS = frozenset({"max_total_num_tokens", "max_running_requests", "context_len", "num_gpu_blocks",
                          "num_cpu_blocks", "max_model_len", "max_tokens_in_paged_kv_cache", "block_size",
                          "max_req_input_len", "max_num_seqs", "max_seq_len", "max_batch_size", "max_num_tokens"})
ENGINE_WORDS |= {k for e in engines.REGISTRY.values() for k in e.settings}
BASE_KEYS = _kvscope_keys() - ENGINE_WORDS


def _visible_markdown(md: str) -> str:
    md = re.sub(r"(?ms)^(`{3,}).*?^\1\s*$", "", md)  # fenced blocks: the log's own lines
    return md.replace("\\_", "_")


def _visible_html(page: str) -> str:
    page = re.sub(r"(?is)<(script|style|pre)\b.*?</\1>", "", page)
    page = re.sub(r"(?s)<[^>]+>", " ", page)
    return html_lib.unescape(page)


def _raw(text: str, keys: set[str], log_text: str) -> list[str]:
    words = set(re.findall(r"[A-Za-z0-9_.]+", text))
    return sorted(k for k in keys - ENGINE_WORDS if k in words and k not in log_text)


def _check(analysis, log_text: str, extra=None, more_keys: set[str] = frozenset()) -> None:
    keys = set(BASE_KEYS) | set(more_keys)
    for s in analysis.startups:
        if isinstance(s.runtime, dict):
            keys |= {k for k in _flat_keys(s.runtime) if "_" in k or "." in k}
        keys |= {k for k in s.extras if "_" in k} if hasattr(s, "extras") else set()
    md = render_analysis(analysis, "markdown", extra=extra)
    page = render_analysis(analysis, "html", extra=extra)
    bad_md = _raw(_visible_markdown(md), keys, log_text)
    bad_html = _raw(_visible_html(page), keys, log_text)
    assert not bad_md and not bad_html, {"markdown": bad_md, "html": bad_html}


def _log_text(paths: list[str]) -> str:
    return "\n".join(Path(p).read_text(errors="replace") for p in paths)


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.name[:40]}")
def test_explain_reports_say_keys_in_words(case):
    files = case_files(case)
    _check(analyze(files), _log_text(files))


@pytest.mark.parametrize("path", RUNTIME, ids=lambda p: p.name[:50])
def test_serving_reports_say_keys_in_words(path):
    _check(analyze([str(path)]), _log_text([str(path)]))


def _json_of(args: list[str], capsys) -> dict:
    try:
        main([*args, "--format", "json"])
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


WHATIF = [("kimi-k2.5-tp8", "mem_fraction_static=0.92"), ("vllm-max-len-too-large", "gpu_memory_utilization=0.95")]


@pytest.mark.parametrize("example,change", WHATIF)
def test_whatif_reports_say_keys_in_words(example, change, capsys, tmp_path):
    pred_keys = {k for k in _flat_keys(_json_of(["whatif", "--example", example, "--set", change], capsys)["prediction"])
                 if "_" in k}
    _, path = example_path(example)
    log = _log_text([path])
    for fmt in ("markdown", "html"):
        out = tmp_path / f"report.{fmt}"
        main_args = ["whatif", "--example", example, "--set", change, "--format", fmt, "-o", str(out)]
        try:
            main(main_args)
        except SystemExit as exc:
            assert not exc.code
        text = out.read_text()
        visible = _visible_markdown(text) if fmt == "markdown" else _visible_html(text)
        keys = (BASE_KEYS | pred_keys) - set(EXAMPLES[example].assumptions)  # what the user assumed, by name
        assert not _raw(visible, keys, log), (fmt, _raw(visible, keys, log))


PLANS = [["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100"],
         ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--engine", "vllm"],
         ["--model", "moonshotai/Kimi-K2.5", "--gpu", "RTX PRO 6000", "--tp", "8"],
         ["--model", "google/gemma-3-27b-it", "--gpu", "H100", "--engine", "vllm"]]


@pytest.mark.parametrize("args", PLANS, ids=lambda a: " ".join(a[1::2]))
def test_plan_reports_say_keys_in_words(args, capsys, tmp_path):
    pred = _json_of(["plan", *args], capsys)["prediction"]
    keys = BASE_KEYS | {k for k in _flat_keys(pred) if "_" in k or "." in k}
    keys -= set(pred["settings"])  # the engine's flag names are the operator's words
    for fmt in ("markdown", "html"):
        out = tmp_path / f"plan.{fmt}"
        try:
            main(["plan", *args, "--format", fmt, "-o", str(out)])
        except SystemExit as exc:
            assert not exc.code
        text = out.read_text()
        visible = _visible_markdown(text) if fmt == "markdown" else _visible_html(text)
        assert not _raw(visible, keys, ""), (fmt, _raw(visible, keys, ""))
