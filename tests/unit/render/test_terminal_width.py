"""Terminal reports fit the terminal and colour only where asked: every terminal verb on the bundled example
(and plan on models of each attention kind) drawn at 80 and at 200 columns has no line wider than that, and the
escape codes follow --color and NO_COLOR."""

from __future__ import annotations

import io
import re

import pytest
from rich.cells import cell_len

from kvscope.cli import main
from kvscope.examples import EXAMPLES
from kvscope.render import console as term
from tests.conftest import FIXTURES

PAIRS = FIXTURES / "pairs"

# every bundled example through explain; whatif on each one it calibrates on (a failed startup too)
VIEWS = {f"explain {name}": ["explain", "--example", name] for name in EXAMPLES}
VIEWS |= {
    "explain": ["explain", "--example", "kimi-k2.5-tp8"],
    "whatif": ["whatif", "--example", "kimi-k2.5-tp8", "--set", "mem_fraction_static=0.9"],
    "whatif failed vllm": ["whatif", "--example", "vllm-max-len-too-large", "--set", "max_model_len=16384"],
    "whatif vllm util": ["whatif", "--example", "vllm-max-len-too-large", "--set", "gpu_memory_utilization=0.95"],
    "examples": ["examples"],
    "diff two logs": ["diff", str(PAIRS / "001-vllm-llama31-8b-3090-maxlen-20k-vs-29k" / "a.txt"),
                      str(PAIRS / "001-vllm-llama31-8b-3090-maxlen-20k-vs-29k" / "b.txt")],
    "diff llama.cpp memory only": ["diff", str(PAIRS / "003-llamacpp-vulkan-ctk-q8_0-vs-f16" / "a.txt"),
                                   str(PAIRS / "003-llamacpp-vulkan-ctk-q8_0-vs-f16" / "b.txt")],
    "models": ["models", "qwen"],
    "gpus": ["gpus"],
    "plan sglang dense": ["plan", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100"],
    "plan sglang mla tp8": ["plan", "--model", "moonshotai/Kimi-K2.5", "--gpu", "RTX PRO 6000", "--tp", "8"],
    "plan vllm dense": ["plan", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--engine", "vllm"],
    "plan vllm sliding": ["plan", "--model", "google/gemma-3-27b-it", "--gpu", "H100", "--engine", "vllm"],
}


def _run(args: list[str], capsys) -> str:
    try:
        main(args)
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr().err
    return capsys.readouterr().out


@pytest.fixture(autouse=True)
def _restore_style():
    yield
    term.configure("never", io.StringIO())  # back to the fixed layout other tests expect
    term._style = term.TerminalStyle()


@pytest.mark.parametrize("columns", [80, 200])
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_no_line_is_wider_than_the_terminal(view, columns, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(columns))
    out = _run(VIEWS[view], capsys)
    wide = [line for line in out.splitlines() if cell_len(line) > columns]
    assert out.strip() and not wide, wide[:3]


def test_colour_follows_the_flag(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    assert "\x1b[" in _run([*VIEWS["explain"], "--color", "always"], capsys)
    assert "\x1b[" not in _run([*VIEWS["explain"], "--color", "never"], capsys)
    assert "\x1b[" not in _run(VIEWS["explain"], capsys)  # auto, and stdout is not a terminal here


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_auto_colours_a_terminal_unless_no_color(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert term.configure("auto", _Tty()).color
    monkeypatch.setenv("NO_COLOR", "1")
    assert not term.configure("auto", _Tty()).color
    assert term.configure("always", _Tty()).color  # the flag, said outright, wins
    assert not term.configure("auto", io.StringIO()).color  # piped


def test_colour_keeps_its_own_codes_and_shows_a_logs():
    text = "\x1b[1mbold\x1b[0m model \x1b]52;c;eA==\x07 \x1b[2J"
    shown = term.visible_keeping_colour(text)
    assert shown.startswith("\x1b[1mbold\x1b[0m") and "\\x1b]52" in shown and "\\x1b[2J" in shown


def test_identical_ranks_collapse_and_empty_columns_go(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    out = _run(VIEWS["explain"], capsys)
    assert "TP1–TP6 ×6" in out and "TP3 " not in out  # six ranks that read the same are one row
    table = out.split("Per-rank memory", 1)[1].split("└", 1)[0]
    assert "graphs" not in table  # no rank has a CUDA-graph figure: no column
    assert "■ weights" not in out and "█" not in out  # no colour: no bar and no colour legend
    coloured = _run([*VIEWS["explain"], "--color", "always"], capsys)
    assert "█" in coloured and "■" in coloured


def test_a_small_figure_is_shown_in_the_unit_that_shows_it():
    from kvscope.render.html import fmt_gib

    assert fmt_gib(4 / 1024) == "4.0 MiB" and fmt_gib(144 / 1024) == "144 MiB"  # not "0.00" and "0.14"
    assert fmt_gib(10.42) == "10.42" and fmt_gib(0.0) == "0.00" and fmt_gib(None) == "—"
    assert fmt_gib(-0.2) == "-205 MiB"


@pytest.mark.parametrize("columns", [80, 200])
def test_watch_fits_the_terminal(columns, capsys, monkeypatch):
    """watch's live lines against a local server replaying a real vLLM's answers."""
    from tests.fixtures.watch.replay import Replay, vllm_routes

    monkeypatch.setenv("COLUMNS", str(columns))
    with Replay(vllm_routes("vllm/cpu-0.32.0-8MiB-loaded-a-metrics.txt", "vllm/cpu-0.32.0-8MiB-loaded-b-metrics.txt")) as srv:
        out = _run(["watch", srv.url, "--interval", "0.1", "--timeout", "1", "--duration", "0.35"], capsys)
    wide = [line for line in out.splitlines() if cell_len(line) > columns]
    assert "KV capacity" in out and not wide, wide[:3]


CHANGE_TABLES = {"whatif": VIEWS["whatif"], "plan sglang mla tp8": VIEWS["plan sglang mla tp8"],
                 "whatif failed vllm": VIEWS["whatif failed vllm"]}


def _row_ends(view: str, columns: int, capsys, monkeypatch) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(columns))
    out = _run(CHANGE_TABLES[view], capsys)
    table = re.split(r"\n(?:└|Memory |  · )", out.split("at once →", 1)[1], maxsplit=1)[0]
    return re.findall(r"(?m)(low|tight|high|unknown|—|\d\.\d\d|MiB)\*? *[│┃]? *$", table)


@pytest.mark.parametrize("columns", [80, 100, 120])
@pytest.mark.parametrize("view", sorted(CHANGE_TABLES))
def test_the_change_table_is_never_cropped(view, columns, capsys, monkeypatch):
    """rich crops a table that cannot fit rather than widening the line: the last cell of every row (the risk
    rating, or the reserve) must be there whole at every width, as it is at 300 columns."""
    wide = _row_ends(view, 300, capsys, monkeypatch)
    assert len(wide) >= 3
    assert _row_ends(view, columns, capsys, monkeypatch) == wide
