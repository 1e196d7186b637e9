"""Ranks that read the same, as one row; ranks that differ, with the difference named.

Eight TP ranks of one model usually print the same pool: sixteen rows of the same figures hide the one
rank that differs (the one holding the draft model, the one whose lines show the weights). Every report's
rank table groups consecutive ranks whose cells are equal and, under the table, says in words how each
group that is not the common one differs from it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

EMPTY = ("—", "")


@dataclass(frozen=True)
class RankGroup:
    ranks: tuple[Any, ...]  # core.startup.Rank, consecutive
    cells: tuple[str, ...]

    @property
    def label(self) -> str:
        first, last = self.ranks[0].rank, self.ranks[-1].rank
        return first if len(self.ranks) == 1 else f"{first}–{last} ×{len(self.ranks)}"


def groups(ranks: Sequence[Any], cells: Callable[[Any], Sequence[str]]) -> list[RankGroup]:
    """Consecutive ranks with equal cells, one group each, in rank order."""
    out: list[RankGroup] = []
    for r in ranks:
        row = tuple(cells(r))
        if out and out[-1].cells == row:
            out[-1] = RankGroup(out[-1].ranks + (r,), row)
        else:
            out.append(RankGroup((r,), row))
    return out


def differences(found: list[RankGroup], headers: Sequence[str]) -> list[str]:
    """How each group differs from the most common one, in words ("TP7: KV pools also draft 614 MiB; free after
    pool 11.22 (others 11.18)"); nothing when every rank reads the same."""
    if len(found) < 2:
        return []
    common = max(found, key=lambda g: len(g.ranks))
    if len(common.ranks) == 1:
        return []  # no majority to compare with: every rank is its own row already
    out = []
    for g in found:
        if g is common:
            continue
        extra, changed, missing = [], [], []
        for head, mine, theirs in zip(headers, g.cells, common.cells, strict=False):
            if mine == theirs:
                continue
            if theirs in EMPTY:
                extra.append(f"{head} {mine}")
            elif mine in EMPTY:
                missing.append(head)
            elif mine.startswith(theirs + ", "):
                changed.append(f"{head} also {mine[len(theirs) + 2:]}")
            else:
                changed.append(f"{head} {mine} (others {theirs})")
        parts = ([f"its lines also show {', '.join(extra)}"] if extra else []) + changed \
            + ([f"no {', '.join(missing)}"] if missing else [])
        if parts:
            out.append(f"{g.label}: " + "; ".join(parts))
    return out
