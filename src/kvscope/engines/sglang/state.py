"""What SGLang's finish step works out about a startup that is no log figure: the releases its wordings allow
and a page size SGLang picks by itself. A typed record on ``Startup.engine_state`` (never serialised)."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvscope.core.startup import Startup


@dataclass
class SGLangState:
    version_clues: list[str] = field(default_factory=list)  # the wordings and date that bound the release
    page_size_default: int | None = None  # SGLang's own choice when the log sets none ("page size to 64 for DSA")


def state(s: Startup) -> SGLangState:
    """The startup's SGLang record, made on first use."""
    if not isinstance(s.engine_state, SGLangState):
        s.engine_state = SGLangState()
    return s.engine_state
