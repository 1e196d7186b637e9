"""A startup's KV budget as its engine's rule builds it: basis × fraction − deductions = the KV memory.

Each engine with a memory-fraction rule says, from one startup's figures, which of them its rule reads:
SGLang's is the free memory before weights × ``mem_fraction_static`` less the weights (and, from 0.5.14, the
draft's); vLLM's the device total × ``gpu_memory_utilization`` less the weights, the profile's activation
peak, non-torch memory and (in the releases that count it) the CUDA-graph estimate. ``kvscope diff``
compares two of these term by term, so the difference between two pools is the sum of named terms
instead of two ledgers to compare by eye. GiB = 2^30 bytes; a figure the log does not give is None.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class TermKind(str, Enum):
    """What moved a KV pool between two startups, in waterfall order."""

    BASIS = "budget basis"  # free memory before weights / device total
    FRACTION = "fraction"  # mem_fraction_static / gpu_memory_utilization
    WEIGHTS = "weights"
    DRAFT = "draft"
    ACTIVATION = "activation peak"
    NON_TORCH = "non-torch memory"
    GRAPHS = "CUDA graphs"
    NOT_ITEMIZED = "not itemized"  # the rest of the budget the logs do not itemize
    BYTES_PER_TOKEN = "bytes per token"
    ROUNDING = "rounding and caps"
    CELLS = "cache size setting"  # engines that size the cache in tokens (llama.cpp's -c)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Deduction:
    kind: TermKind
    label: str
    gib: float | None


@dataclass(frozen=True)
class KvBudget:
    basis_label: str  # "free before weights", "device total"
    basis_gib: float | None
    fraction_setting: str  # "mem_fraction_static"
    fraction: float | None
    deductions: tuple[Deduction, ...]

    @property
    def budget_gib(self) -> float | None:
        if self.basis_gib is None or self.fraction is None:
            return None
        return self.basis_gib * self.fraction

    def deduction(self, kind: TermKind) -> float | None:
        found = [d.gib for d in self.deductions if d.kind is kind]
        return sum(g for g in found if g is not None) if found and all(g is not None for g in found) else None


@dataclass(frozen=True)
class RuleFact:
    """One rule of the release a startup ran, as a diff shows it when two startups' rules differ."""

    name: str
    value: str
