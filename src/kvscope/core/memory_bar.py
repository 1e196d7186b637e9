"""One GPU's memory as the parts a report draws in one bar: what a plan or a what-if predicts it holds.

The explain report draws a bar per rank from the figures a log printed (render.html.memory_segments); a
plan has no log, so each engine's plan says which of its ledger terms is which part. The parts sum to the
device total by construction: whatever the engine's ledger does not itemize (rounding, a term that moved
between releases) is one "other" part, named, instead of a bar that does not add up. GiB = 2^30 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

# a part below this (0.5 MiB) is not drawn: the bar would carry a sliver no one can read
MIN_PART_GIB = 1 / 2048


class Part(str, Enum):
    """The kinds of memory a bar shows, in drawing order; the words are the report's segment keys."""

    CONTEXT = "context"
    WEIGHTS = "weights"
    KV = "kv"
    DRAFT = "draft"
    GRAPHS = "graphs"
    OTHER = "other"
    FREE = "free"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class BarPart:
    part: Part
    label: str  # what this engine's ledger calls it ("activation peak, rope tables, non-torch memory")
    gib: float

    def as_dict(self) -> dict[str, Any]:
        return {"part": self.part.value, "label": self.label, "gib": round(self.gib, 4)}


def fill(total_gib: float, parts: list[BarPart], other_label: str = "not itemized") -> tuple[BarPart, ...]:
    """The parts, with what they leave of ``total_gib`` added to OTHER, in drawing order.

    A negative part (a budget the weights overrun) is drawn as nothing; the plan's warnings say why.
    """
    kept = [p for p in parts if p.gib > 0]
    rest = total_gib - sum(p.gib for p in kept)
    others = [p for p in kept if p.part is Part.OTHER]
    kept = [p for p in kept if p.part is not Part.OTHER]
    other_gib = sum(p.gib for p in others) + rest
    if other_gib > MIN_PART_GIB:
        label = "; ".join(p.label for p in others) if others else other_label
        if others and rest > MIN_PART_GIB:
            label += f"; {other_label}"
        kept.append(BarPart(Part.OTHER, label, other_gib))
    order = list(Part)
    return tuple(sorted((p for p in kept if p.gib > MIN_PART_GIB), key=lambda p: order.index(p.part)))
