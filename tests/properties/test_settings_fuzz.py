"""Any KEY=VALUE a user (or a script gone wrong) types after --set or --assume ends in a report or in one line
and exit 2, never an internal error: keys from every engine's settings and the facts kvscope reads, values
from numbers at and past every limit, junk text, lists and empties. ``KVSCOPE_PROPERTY_EXAMPLES`` sets how
many cases each verb tries (the local long mode: 2000)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvscope.analysis.assumptions import known_keys
from kvscope.cli import main

EXAMPLES = int(os.environ.get("KVSCOPE_PROPERTY_EXAMPLES", "100")) // 2 or 1
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

KEYS = st.sampled_from(sorted(known_keys()))
VALUES = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "1e309", "1e30", "-1", "0", "0.0", "", "abc", "[1, 2]", "{}", "None",
                     "True", "'x'", "1" * 5000, "0x10", "1_000", "١٥٠", "９", "fp7_banana", "auto", "fp8_e4m3",
                     "2147483648", "-2147483649", "18446744073709551617", "0.88", "8", "1e-320"]),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=30).filter(lambda s: "\x00" not in s),
)


def _exit(args: list[str], capsys) -> tuple[int, str]:
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0) if isinstance(exc.code, int) or exc.code is None else 2
    err = capsys.readouterr().err
    return code, err


@pytest.mark.parametrize("verb", [
    ["whatif", "--example", "kimi-k2.5-tp8", "--format", "json", "--set"],
    ["plan", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--format", "json", "--set"],
    ["explain", "--example", "kimi-k2.5-tp8", "--format", "json", "--assume"],
])
@SETTINGS
@given(key=KEYS, value=VALUES)
def test_any_setting_value_is_a_report_or_one_line(verb, key, value, capsys):
    code, err = _exit([*verb, f"{key}={value}"], capsys)
    assert code in (0, 2), (key, value, err)
    assert "internal error" not in err and "Traceback" not in err, (key, value, err)
