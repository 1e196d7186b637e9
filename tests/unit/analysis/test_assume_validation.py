"""`--assume` and `--model` are checked before anything is read: a key kvscope does not read, an impossible
value, a GPU or a model it cannot resolve ends in one line (with the nearest known names) and exit 2,
never a silently unchanged answer. And every setting a rule reads is a key `--assume` accepts."""

from __future__ import annotations

import re

import pytest

from kvscope.analysis.assumptions import known_keys
from tests.conftest import REPO
from tests.unit.cli.test_bad_input import REAL, assert_user_error, run_cli

SRC = REPO / "src" / "kvscope"


@pytest.mark.parametrize(("assume", "words"), [
    ("mem_fration_static=0.8", ["mem_fration_static", "did you mean 'mem_fraction_static'"]),
    ("nonsense_key=1", ["nonsense_key", "reads no such"]),
    ("mem_fraction_static=1.5", ["(0, 1]"]),
    ("gpu_memory_utilization=0", ["(0, 1]"]),
    ("gpu_memory_utilization=high", ["not a number"]),
    ("tp_size=0", ["positive whole number"]),
    ("tp_size=2.5", ["positive whole number"]),
    ("host_ram_gb=-4", ["cannot be negative"]),
    ("gpu=H2000", ["not in the catalog", "did you mean 'H200"]),
    ("gpu=RTX 409", ["did you mean 'RTX 4090'"]),
    ("gpu=A100", ["ambiguous", "A100 40GB", "A100 80GB"]),
    ("engine=vlm", ["one of", "did you mean 'vllm'"]),
])
def test_a_bad_assumption_is_one_line_and_exit_2(assume, words):
    assert_user_error(run_cli(str(REAL), "--assume", assume), *words)


def test_an_unknown_model_names_the_nearest_catalog_ids():
    line = assert_user_error(run_cli(str(REAL), "--model", "Llama-3.1-8B-Instrct"), "nor in the built-in catalog")
    assert "meta-llama/Llama-3.1-8B-Instruct" in line


def test_good_assumptions_still_run():
    out = run_cli(str(REAL), "--assume", "gpu=DGX Spark", "--assume", "chunked_prefill_size=-1",
                  "--assume", "mem_fraction_static=0.88", "--model", "moonshotai/Kimi-K2.5", "--format", "json")
    assert out.returncode == 0, out.stderr


# A rule reading a setting by name: s.setting("x"), s.setting_number("x"), a helper(s, "x"), a knob's setting="x".
_READ = re.compile(r'''(?:\bsetting|setting_number|settings\.get)\(\s*"([a-z_0-9]+)"|setting="([a-z_0-9]+)"|'''
                   r'''\((?:s|startup), "([a-z_0-9]+)"''')


def test_every_setting_a_rule_reads_can_be_assumed():
    """Engine.settings (and the neutral facts) must name what the code reads, or a real --assume is refused."""
    read = {next(g for g in m.groups() if g) for p in SRC.rglob("*.py") for m in _READ.finditer(p.read_text())}
    scratch = {k for k in read if k.startswith("_")}  # engine-internal scratch values, never a user's fact
    missing = sorted(read - scratch - known_keys())
    assert not missing, f"read by a rule but not accepted by --assume (add to the engine's SETTINGS): {missing}"
