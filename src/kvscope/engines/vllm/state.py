"""What vLLM's finish step works out about a startup that is no log figure: the release era it settled on,
the ranks it dropped for having no figures, whether graph capture had begun. A typed record on
``Startup.engine_state`` (never serialised), read by vLLM's own rules, findings, whatif and plan."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvscope.core.startup import Startup


@dataclass
class VllmState:
    era: str | None = None  # the name of the newest era the log's wordings allow (eras.ERAS)
    graphs_inside: bool | None = None  # whether every allowed era subtracts the CUDA-graph estimate; None: they differ
    version_clues: list[str] = field(default_factory=list)  # the wordings that dated the release
    # counted before ranks without figures were dropped (finish._drop_empty_ranks)
    workers: int | None = None  # pid-labelled workers, each one TP rank
    tp_labels: list[str] = field(default_factory=list)
    pp_labels: list[str] = field(default_factory=list)
    graph_capture_started: bool = False  # a dropped rank had announced graph capture


def state(s: Startup) -> VllmState:
    """The startup's vLLM record, made on first use."""
    if not isinstance(s.engine_state, VllmState):
        s.engine_state = VllmState()
    return s.engine_state
