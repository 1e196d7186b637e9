"""Inputs an attacker or a careless user gives, each once a crash ("internal error"), a runaway or a silent
absurd answer: now one line and exit 2 where the input is impossible, a report where it is only odd, and never
a traceback or a hang. The cases of issue 24, each reduced to the smallest input that showed it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kvscope.cli import main

EXAMPLE = ["--example", "kimi-k2.5-tp8"]
PLAN = ["plan", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100"]


def run(args: list[str], capsys) -> tuple[int, str, str, float]:
    start = time.monotonic()
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    assert "internal error" not in out.err and "Traceback" not in out.err, out.err
    return code, out.out, out.err, time.monotonic() - start


# (arguments, what the one-line refusal says)
REFUSED = {
    "mfs 1e30": (["whatif", *EXAMPLE, "--set", "mem_fraction_static=1e30"], "must be in (0, 1]"),
    "mfs nan": (["whatif", *EXAMPLE, "--set", "mem_fraction_static=nan"], "not a number"),
    "mfs inf": (["whatif", *EXAMPLE, "--set", "mem_fraction_static=inf"], "not a number"),
    "mfs 1e309": (["whatif", *EXAMPLE, "--set", "mem_fraction_static=1e309"], "not a number"),
    "mfs empty": (["whatif", *EXAMPLE, "--set", "mem_fraction_static="], "not a number"),
    "mfs abc": (["whatif", *EXAMPLE, "--set", "mem_fraction_static=abc"], "not a number"),
    "mfs list": (["whatif", *EXAMPLE, "--set", "mem_fraction_static=[1,2]"], "not a number"),
    "mfs None (found by the settings fuzz)": (["whatif", *EXAMPLE, "--set", "mem_fraction_static=None"],
                                               "give the value to predict for"),
    "kv dtype unknown": (["whatif", *EXAMPLE, "--set", "kv_cache_dtype=fp7_banana"], "not a KV cache dtype"),
    "requests 0": (["whatif", *EXAMPLE, "--set", "max_running_requests=0"], "positive whole number"),
    "context negative": (["whatif", *EXAMPLE, "--context", "-5"], "--context"),
    "plan pp 2^31": ([*PLAN, "--pp", "2147483648"], "at most 65,536"),
    "plan tp huge": ([*PLAN, "--tp", "99999999999"], "at most 65,536"),
    "plan block 0": ([*PLAN, "--set", "block_size=0"], "positive whole number"),
    "plan util 2": ([*PLAN, "--set", "gpu_memory_utilization=2"], "must be in (0, 1]"),
    "plan weights negative": ([*PLAN, "--set", "weights_gib=-5"], "cannot be negative"),
    "plan model name 10k chars": (["plan", "--model", "x" * 10_000, "--gpu", "H100"], "not in the built-in catalog"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_an_impossible_value_is_one_line_and_exit_2(name, capsys):
    args, says = REFUSED[name]
    code, _, err, took = run(args, capsys)
    assert code == 2 and says in err and err.count("\n") == 1, err
    assert took < 10


def _config(tmp_path: Path, **fields) -> str:
    cfg = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32, "hidden_size": 4096,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "intermediate_size": 14336}
    cfg.update(fields)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return str(tmp_path)


@pytest.mark.parametrize(("field", "value"), [("num_hidden_layers", 10**30), ("num_key_value_heads", -8),
                                              ("hidden_size", 1.5), ("num_attention_heads", "32")])
def test_a_config_with_an_impossible_size_is_refused(field, value, tmp_path, capsys):
    code, _, err, took = run(["plan", "--model", _config(tmp_path, **{field: value}), "--gpu", "H100"], capsys)
    assert code == 2 and field in err and "not a size a model can have" in err
    assert took < 10  # 10^30 layers was a loop per layer


def test_a_config_nested_100000_deep_is_refused(tmp_path, capsys):
    (tmp_path / "config.json").write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    code, _, err, _ = run(["plan", "--model", str(tmp_path), "--gpu", "H100"], capsys)
    assert code == 2 and "nests deeper" in err


SGLANG = "[2026-02-28 12:26:11 TP{rank}] "
ODD_LOGS = {
    # a rank label past Python's int-string limit (4,300 digits): read as text, sorted as text
    "rank of 4,301 digits": SGLANG.format(rank="9" * 4301) + "KV Cache is allocated. #tokens: 1000, KV size: 1.00 GB",
    # nothing free anywhere: the budget check had a division by the free memory
    "zero free memory": "\n".join(SGLANG.format(rank=0) + line for line in (
        "Load weight begin. avail mem=0.00 GB",
        "Load weight end. type=X, dtype=torch.bfloat16, avail mem=0.00 GB, mem usage=0.00 GB.",
        "KV Cache is allocated. #tokens: 0, KV size: 0.00 GB", "Memory pool end. avail mem=0.00 GB")),
    "overflowing numbers": SGLANG.format(rank=0) + "Load weight begin. avail mem=1e309 GB\n" + SGLANG.format(rank=0)
    + "KV Cache is allocated. #tokens: 18446744073709551616, KV size: 1e309 GB",
}


@pytest.mark.parametrize("name", sorted(ODD_LOGS))
def test_an_odd_log_gives_a_report(name, tmp_path, capsys):
    log = tmp_path / "log.txt"
    log.write_text(ODD_LOGS[name] + "\n", encoding="utf-8")
    code, out, _, took = run(["explain", str(log), "--format", "json"], capsys)
    assert code in (0, 2) and (code == 2 or json.loads(out)["schema"] == "kvscope.explain/1")
    assert took < 10


def test_a_name_that_looks_like_a_style_tag_is_text(tmp_path, capsys):
    """A model directory "a[/b]" reached rich as markup: a closing tag without its opening one (MarkupError)."""
    model = tmp_path / "a[" / "b]"
    model.mkdir(parents=True)
    _config(model)
    code, out, err, _ = run(["plan", "--model", str(model), "--gpu", "H100"], capsys)
    assert code == 0 and "a[/b]" in out, err
