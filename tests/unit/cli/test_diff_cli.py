"""``kvscope diff`` as a user runs it: two logs, one log holding several startups, every format, one-line refusals."""

from __future__ import annotations

import json

import pytest

from kvscope.cli import main
from tests.conftest import FIXTURES

PAIR = FIXTURES / "pairs" / "001-vllm-llama31-8b-3090-maxlen-20k-vs-29k"
TWO_RUNS = FIXTURES / "harvested" / "vllm" / "021-vllm25350-fp8kv-two-runs-ok-then-maxlen-error-bare" / "log.txt"


def _run(args, capsys):
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "internal error" not in out.err, out.err
    return code, out.out, out.err


def test_two_logs_in_json_follow_the_diff_schema(capsys):
    code, out, _ = _run(["diff", str(PAIR / "a.txt"), str(PAIR / "b.txt"), "--format", "json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "kvscope.diff/1"
    (d,) = doc["diffs"]
    assert d["a"]["kv_tokens"] == 31232 and d["b"]["kv_tokens"] == 23648 and d["observed_tokens"] == -7584
    assert sum(t["tokens"] for t in d["terms"]) == d["observed_tokens"]
    assert {"kind": "activation peak"}.items() <= d["terms"][0].items()
    assert d["changes"] == [{"what": "max_model_len", "a": "20,000", "b": "29,000"}]
    assert d["predicted"]["kv_tokens_low"] <= 23648 * 1.02 and abs(d["predicted"]["error"]) <= 0.02


def test_one_log_compares_consecutive_startups(capsys):
    code, out, _ = _run(["diff", str(TWO_RUNS), "--format", "markdown"], capsys)
    assert code == 0 and "230,528 → 122,150 tokens" in out and "The prediction does not hold" in out


@pytest.mark.parametrize("fmt", ["terminal", "markdown", "html"])
def test_every_format_renders(fmt, capsys):
    code, out, _ = _run(["diff", str(PAIR / "a.txt"), str(PAIR / "b.txt"), "--format", fmt], capsys)
    assert code == 0 and "23,648" in out


@pytest.mark.parametrize(("args", "says"), [
    (["diff"], "give two logs"),
    (["diff", str(PAIR / "a.txt")], "fewer than two startups"),
    (["diff", str(PAIR / "a.txt"), str(PAIR / "b.txt"), str(PAIR / "a.txt")], "compares two logs"),
])
def test_refusals_are_one_line(args, says, capsys):
    code, _, err = _run(args, capsys)
    assert code == 2 and says in err and err.count("\n") == 1, err


def test_a_log_without_capacity_is_named(tmp_path, capsys):
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n")
    code, _, err = _run(["diff", str(empty), str(PAIR / "b.txt")], capsys)
    assert code == 2 and "empty.log" in err


def test_vllm_without_a_device_total_names_the_cards_that_fit(capsys):
    """whatif on a vLLM log that prints no device total: the budget bounds it, the catalog names candidates, and
    --assume gpu=… settles it (issue 20)."""
    (case,) = (FIXTURES / "harvested" / "vllm").glob("208-*")
    log = str(case / "log.txt")
    args = ["whatif", log, "--set", "gpu_memory_utilization=0.95", "--assume", "gpu_memory_utilization=0.9"]
    code, _, err = _run(args, capsys)
    assert code == 2 and "need a GPU of at least 7.2 GiB" in err and "NVIDIA L4" in err and "--assume gpu=" in err
    code, out, _ = _run([*args, "--assume", "gpu=L4"], capsys)
    assert code == 0 and "--gpu-memory-utilization 0.95" in out
