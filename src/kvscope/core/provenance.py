"""Where a number came from, in one vocabulary and one type for every layer.

A startup's figures are *read* (the log printed them), *derived* (kvscope computed them from read
ones), *assumed* (the user's ``--assume``) or *estimated* (a model of the engine's arithmetic); a
plan's figures, which no log backs, are *measured* (a dataset measured on that GPU), *reported*
(someone's published figure for that setup), *given* (the user's ``--set``), *estimated* or
*assumed*. The JSON contract spells each as its lower-case word, so ``How`` is a ``str``: it
serialises, compares and hashes as that word.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class How(str, Enum):
    READ = "read"
    DERIVED = "derived"
    ASSUMED = "assumed"
    ESTIMATED = "estimated"
    MEASURED = "measured"
    REPORTED = "reported"
    GIVEN = "given"

    # the word itself wherever a str is expected: in dict keys (tables keyed by the word), f-strings, JSON
    __hash__ = str.__hash__

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


@dataclass(frozen=True)
class SourceRef:
    """Where a figure came from in the log, so reports can quote the line."""

    file: str
    line_no: int
    text: str


@dataclass(frozen=True)
class Figure:
    """One number and where it came from: the log line (``SourceRef``) that printed it, or in words where
    it was borrowed (a published report, a dataset); None where kvscope computed it."""

    value: float
    how: How
    source: SourceRef | str | None = None
