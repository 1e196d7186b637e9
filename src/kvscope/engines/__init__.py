"""Per-engine knowledge, one package per engine, each behind one :class:`~kvscope.engines.base.Engine`.

The registry below is the only list of engines: the neutral layers (ledger, runtime, findings,
renderers, CLI) look an engine up here by the name its lines gave the startup and use the
capabilities it has, never its name. Adding an engine is a package and one line here. Order
matters for reading: the engine that matched the previous line is tried first, the others in this
order (see ``dispatch``).
"""

from __future__ import annotations

from kvscope.engines import llamacpp, ollama, sglang, trtllm, vllm
from kvscope.engines.base import Engine

# ollama before llama.cpp: in an ollama log its reader takes the llama.cpp runner's lines too
REGISTRY: dict[str, Engine] = {e.name: e for e in (sglang.ENGINE, vllm.ENGINE, ollama.ENGINE, llamacpp.ENGINE,
                                                   trtllm.ENGINE)}
NEUTRAL = Engine(name="unknown", label="the engine")  # a startup no registered engine claimed


def get(name: str | None) -> Engine:
    """The engine of that name, or one with no capabilities (never a KeyError)."""
    return REGISTRY.get(name or "", NEUTRAL)


def with_capability(attr: str) -> list[Engine]:
    """Engines that have a capability (``plan``, ``whatif``, ``watch``…), in registry order."""
    return [e for e in REGISTRY.values() if getattr(e, attr) is not None]


# Reading (lines → events) is re-exported here: kvscope.api and the benchmarks read through it.
from kvscope.engines.dispatch import ANCHORS, BULK, BULK_LANE, ENGINES, parse_lines  # noqa: E402

__all__ = ["ANCHORS", "BULK", "BULK_LANE", "ENGINES", "NEUTRAL", "REGISTRY", "Engine", "get", "parse_lines",
           "with_capability"]
