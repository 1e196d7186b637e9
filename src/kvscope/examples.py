"""Bundled examples: real logs with the facts their posters stated, runnable offline."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from kvscope.core.errors import InputError


@dataclass(frozen=True)
class Example:
    name: str
    file: str
    title: str
    assumptions: dict[str, Any] = field(default_factory=dict)


EXAMPLES: dict[str, Example] = {
    "kimi-k2.5-tp8": Example(
        "kimi-k2.5-tp8",
        "kimi-k2.5-tp8.log",
        "Kimi-K2.5 INT4 (MLA) on 8× RTX PRO 6000 96 GB, SGLang TP8, --mem-fraction-static 0.88, EAGLE3 draft",
        {
            "model": "moonshotai/Kimi-K2.5",
            "gpu": "RTX PRO 6000",
            "mem_fraction_static": 0.88,
            "tp_size": 8,
            "speculative_algorithm": "EAGLE3",
            "host_ram_gb": 396,
            # stated by the operator in the same thread (seen after CUDA-graph capture), not in the excerpt
            "avail_at_ready_gib": 7.9,
        },
    ),
}


def example_path(name: str) -> tuple[Example, str]:
    ex = EXAMPLES.get(name)
    if ex is None:
        raise InputError(f"no example named {name!r}; `kvscope examples` lists them")
    path = resources.files("kvscope.data").joinpath("examples").joinpath(ex.file)
    return ex, str(Path(str(path)))
