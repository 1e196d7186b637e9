"""Every regular expression kvscope defines reads a long hostile line in linear time. One pasted 20–50 KB line
used to stall explain for minutes (a pattern that rescans a run of letters or digits from every position in
it). Each pattern found in the package (module constants, shape rows, tables of patterns) is searched in
strings of repeated letters, digits, dashes, spaces, ``a=`` pairs and ``1.`` runs, bare and after its own
shape's sample, at two lengths; a pattern whose time grows like the square of the length fails.

A hang guard, not a benchmark: it fails only on a ratio far past linear *and* a time no linear search of
these lengths takes (benchmarks/long_lines.py measures the whole reader)."""

from __future__ import annotations

import importlib
import pkgutil
import re
import time
from functools import cache
from pathlib import Path

import pytest

import kvscope
from kvscope.engines.lazy import LazyPattern
from kvscope.engines.shapes import Shapes

SHORT, LONG = 2_000, 8_000  # characters: 4× longer, so linear ≈ 4×, quadratic ≈ 16×
FILLERS = ("a", "9", "-", " ", "a=", "1.", "a ", "9,")


@cache
def _patterns() -> dict[str, tuple[re.Pattern[str], str, bool]]:
    """name → (pattern, a prefix that leads into it: its shape's sample, else empty, and whether the code ever
    scans with it: a pattern its module only ``match``es at a position is tried there, as it is used)."""
    found: dict[str, tuple[re.Pattern[str], str, bool]] = {}
    for info in pkgutil.walk_packages(kvscope.__path__, "kvscope."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        path = str(getattr(module, "__file__", "") or "")
        if not path.endswith(".py"):
            continue  # the C helper: no patterns
        source = Path(path).read_text(encoding="utf-8")
        for name, value in vars(module).items():
            where = f"{info.name}.{name}"
            scans = re.search(rf"\b{re.escape(name)}\.(?:search|findall|finditer|sub|subn|split)\(", source) is not None
            if isinstance(value, (re.Pattern, LazyPattern)):
                found[where] = (value, "", scans)
            elif isinstance(value, Shapes):  # shape rows are searched (engines/shapes.py)
                for row in value.rows:
                    found[f"{where}:{row.name}"] = (row.pattern, row.sample, True)
            elif isinstance(value, (list, tuple)):  # tables of patterns are looped over and searched
                for i, item in enumerate(value):
                    pattern = item[0] if isinstance(item, tuple) and item else item
                    if isinstance(pattern, (re.Pattern, LazyPattern)):
                        found[f"{where}[{i}]"] = (pattern, "", True)
    return {k: v for k, v in found.items() if isinstance(v[0].pattern, str)}


def _seconds(pattern: re.Pattern[str], text: str, scans: bool = True) -> float:
    start = time.perf_counter()
    if scans:
        pattern.search(text)
    else:
        pattern.match(text)
        pattern.fullmatch(text)
    return time.perf_counter() - start


def test_the_package_has_patterns_to_check():
    assert len(_patterns()) > 300


@pytest.mark.parametrize("filler", FILLERS)
def test_every_pattern_is_linear_on_long_runs(filler):
    slow = []
    for name, (pattern, sample, scans) in sorted(_patterns().items()):
        for lead in {"", sample[: len(sample) // 2], sample}:
            short = lead + filler * (SHORT // len(filler))
            long = lead + filler * (LONG // len(filler))
            t_long = _seconds(pattern, long, scans)
            if t_long < 0.02:  # a linear search of 8 KB takes a millisecond or less; a quadratic one, a tenth of a second
                continue
            t_short = max(_seconds(pattern, short, scans), 1e-4)
            if t_long / t_short > 10:
                slow.append(f"{name} after {lead[:30]!r}: {t_short:.3f} s → {t_long:.3f} s")
    assert not slow, slow
