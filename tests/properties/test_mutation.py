"""A seeded mutation corpus built from the real logs: thousands of mangled variants, none may crash.

Each variant applies one to three mutations to a real log (numbers replaced by huge, negative, NaN
or infinite values, fields dropped, prefixes garbled, lines cut, wrapped, joined, repeated,
reordered, noise bytes, CRLF, lines from another engine's log, the file cut short). Every variant
must end as ``kvscope explain --format json`` promises: exit 0 or 2 and contract-valid JSON. The
analysis runs in-process (the CLI's own code path minus process start) so thousands fit in seconds;
a few run through the real CLI.

Reproduce a failure: the message names the case and variant; ``variant(case, index)`` rebuilds it.
``KVSCOPE_MUTATIONS=N`` sets the variants per case (default 25).
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import LOGS, all_cases, case_files
from tests.properties.test_contract import assert_valid, explain_json

PER_CASE = int(os.environ.get("KVSCOPE_MUTATIONS", "25"))
HANG_S = 10.0  # no variant may take longer (issue 24's bound for any input)

NUMBER = re.compile(rb"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
WEIRD_NUMBERS = [
    b"nan", b"NaN", b"inf", b"-inf", b"Infinity", b"1e308", b"1e999", b"-1e308", b"-1", b"-0", b"0", b"0.0",
    b"-99999999999", b"9" * 40, b"1" * 400, b"0.0000000001", b"1e-320", b"", b"1,2,3", b"1,000,000",
    "\uff11\uff12".encode(), b"0x10", b"--5", b"5..5", b"+7", b"1e", b".", b"4294967296", b"18446744073709551617",
]
NOISE = [b"\x00", b"\xff\xfe", b"\x1b[31m", b"\x1b[0m", b"[0m", b"\r", b"\t", "\u00e9\u2019".encode(), b"\x1b]0;t\x07",
         b"\xc3", b"%s", b"{", b"}", b"(", b")", b"'", b'"', b"\\", b" " * 100]

Lines = list[bytes]


def _pick(rng: random.Random, lines: Lines) -> int:
    return rng.randrange(len(lines))


def m_number(rng: random.Random, lines: Lines) -> None:
    """One number on a line (or every number on it) becomes huge, negative, NaN, inf or junk."""
    with_numbers = [i for i, x in enumerate(lines) if NUMBER.search(x)]
    if not with_numbers:
        return
    i = rng.choice(with_numbers)
    spans = [m.span() for m in NUMBER.finditer(lines[i])]
    chosen = spans if rng.random() < 0.3 else [rng.choice(spans)]
    line = lines[i]
    for a, b in reversed(chosen):
        line = line[:a] + rng.choice(WEIRD_NUMBERS) + line[b:]
    lines[i] = line


def m_drop_field(rng: random.Random, lines: Lines) -> None:
    i = _pick(rng, lines)
    sep = rng.choice([b", ", b" ", b"="])
    parts = lines[i].split(sep)
    if len(parts) > 1:
        del parts[rng.randrange(len(parts))]
        lines[i] = sep.join(parts)


def m_garble_prefix(rng: random.Random, lines: Lines) -> None:
    i = _pick(rng, lines)
    k = rng.randrange(0, min(len(lines[i]), 60) + 1)
    choice = rng.randrange(4)
    if choice == 0:
        lines[i] = lines[i][k:]
    elif choice == 1:
        lines[i] = rng.randbytes(k) + lines[i][k:]
    elif choice == 2:
        lines[i] = lines[i][:k] + lines[i]
    else:
        lines[i] = b"Feb 28 12:26:11 host python3[1]: " * rng.randrange(1, 4) + lines[i]


def m_cut(rng: random.Random, lines: Lines) -> None:
    i = _pick(rng, lines)
    lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]


def m_wrap(rng: random.Random, lines: Lines) -> None:
    """A terminal hard wrap: one line becomes two (or more) at random columns."""
    i = _pick(rng, lines)
    x = lines[i]
    if len(x) > 2:
        cuts = sorted(rng.sample(range(1, len(x)), min(len(x) - 1, rng.randrange(1, 4))))
        pieces = [x[a:b] for a, b in zip([0, *cuts], [*cuts, len(x)], strict=True)]
        lines[i : i + 1] = pieces


def m_join(rng: random.Random, lines: Lines) -> None:
    if len(lines) > 1:
        i = rng.randrange(len(lines) - 1)
        lines[i : i + 2] = [lines[i] + rng.choice([b"", b" ", b"\r"]) + lines[i + 1]]


def m_repeat(rng: random.Random, lines: Lines) -> None:
    i = _pick(rng, lines)
    j = min(len(lines), i + rng.randrange(1, 20))
    lines[j:j] = lines[i:j] * rng.randrange(1, 5)


def m_reorder(rng: random.Random, lines: Lines) -> None:
    if len(lines) < 2:
        return
    i, j = sorted(rng.sample(range(len(lines)), 2))
    if rng.random() < 0.5:
        lines[i], lines[j] = lines[j], lines[i]
    else:
        window = lines[i : j + 1]
        rng.shuffle(window)
        lines[i : j + 1] = window


def m_noise(rng: random.Random, lines: Lines) -> None:
    i = _pick(rng, lines)
    x = lines[i]
    k = rng.randrange(len(x) + 1)
    lines[i] = x[:k] + rng.choice(NOISE) * rng.randrange(1, 3) + x[k:]


def m_delete(rng: random.Random, lines: Lines) -> None:
    if len(lines) > 1:
        i = _pick(rng, lines)
        del lines[i : i + rng.randrange(1, 6)]


def m_foreign(rng: random.Random, lines: Lines) -> None:
    """Lines of another real log (often another engine) spliced in."""
    other = rng.choice(ALL_LOGS).read_bytes().split(b"\n")
    a = rng.randrange(len(other))
    k = rng.randrange(len(lines) + 1)
    lines[k:k] = other[a : a + rng.randrange(1, 10)]


MUTATIONS: list[Callable[[random.Random, Lines], None]] = [
    m_number, m_number, m_number, m_drop_field, m_garble_prefix, m_cut, m_wrap, m_join, m_repeat, m_reorder,
    m_noise, m_delete, m_foreign,
]
ALL_LOGS = sorted(p for p in LOGS.glob("*/*/*") if p.name != "meta.json" and p.is_file())


def mutate(data: bytes, rng: random.Random) -> tuple[bytes, list[str]]:
    """1-3 mutations of ``data``; returns the bytes and the mutation names applied."""
    lines = data.split(b"\n") or [b""]
    applied = []
    for _ in range(rng.randrange(1, 4)):
        op = rng.choice(MUTATIONS)
        op(rng, lines)
        applied.append(op.__name__)
        if not lines:
            lines = [b""]
    out = b"\n".join(lines)
    r = rng.random()
    if r < 0.05:
        out = out.replace(b"\n", b"\r\n")
        applied.append("crlf")
    elif r < 0.10:
        out = out[: rng.randrange(len(out) + 1)]
        applied.append("truncate-file")
    return out, applied


def case_id(case: Path) -> str:
    return f"{case.parent.name}/{case.name}"


def variant(case: Path, index: int, tmp: Path) -> tuple[list[str], list[str]]:
    """Write variant ``index`` of ``case`` under ``tmp``; (paths, mutations applied). Deterministic."""
    rng = random.Random(f"{case_id(case)}#{index}")
    paths, applied = [], []
    for n, f in enumerate(case_files(case)):
        data, ops = mutate(Path(f).read_bytes(), rng)
        path = tmp / f"v{index}-{n}-{Path(f).name}"
        path.write_bytes(data)
        paths.append(str(path))
        applied += ops
    return paths, applied


CASES = all_cases()


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_mutated_variants_never_crash(case, tmp_path):
    failures = []
    for i in range(PER_CASE):
        paths, applied = variant(case, i, tmp_path)
        try:
            start = time.monotonic()
            text, code = explain_json(paths)
            took = time.monotonic() - start
            assert code in (0, 2)
            assert_valid(text)
            assert took < HANG_S, f"took {took:.1f} s"  # a hang guard: real logs take milliseconds
        except Exception as exc:  # noqa: BLE001 - collect every failure of this case, then report
            failures.append(f"variant {i} {applied}: {type(exc).__name__}: {exc}"[:600])
        for p in paths:
            os.unlink(p)
    assert not failures, f"{case_id(case)}: {len(failures)} of {PER_CASE} variants failed:\n" + "\n".join(failures)


CLI_SAMPLE = [(CASES[k % len(CASES)], k) for k in range(0, 8 * 7, 7)]


@pytest.mark.parametrize("case, index", CLI_SAMPLE, ids=lambda v: case_id(v) if isinstance(v, Path) else str(v))
def test_mutated_variants_through_the_real_cli(case, index, tmp_path):
    paths, applied = variant(case, index, tmp_path)
    out = subprocess.run([sys.executable, "-m", "kvscope", "explain", *paths, "--format", "json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode in (0, 2), (applied, out.stderr[-3000:])
    assert "Traceback" not in out.stderr
    assert_valid(out.stdout)
    if out.returncode == 2:
        assert len(out.stderr.strip().splitlines()) == 1
