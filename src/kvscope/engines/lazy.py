"""Regular expressions compiled the first time they are used.

Why: the engines' line modules hold about 220 patterns, and compiling them all costs ~0.09 s on
every run (a quarter of explaining a small log, 5 % of a gigabyte journal), while a log of one
engine uses a tenth of them: each engine's ``parse`` looks for its own words before it tries its
patterns. A ``LazyPattern`` behaves as the compiled pattern for everything these modules do with
one (``search``, ``match``, ``.pattern``…); after the first use its methods are the compiled
pattern's own, bound, so the per-line cost is that of a plain pattern.
"""

from __future__ import annotations

import re
from typing import Any, AnyStr, cast

_ATTRS = ("search", "match", "fullmatch", "finditer", "findall", "sub", "subn", "split", "scanner", "pattern",
          "flags", "groups", "groupindex")


class LazyPattern:
    def __init__(self, pattern: str | bytes, flags: int = 0) -> None:
        self._args = (pattern, flags)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_args":  # copy / pickle probes, and no recursion
            raise AttributeError(name)
        pattern, flags = self._args
        # re.compile's overloads take a str or a bytes pattern, never the union: one call for each
        compiled: re.Pattern[Any] = (re.compile(pattern, flags) if isinstance(pattern, str)
                                     else re.compile(pattern, flags))
        for attr in _ATTRS:
            setattr(self, attr, getattr(compiled, attr))
        self.compiled = compiled
        return compiled if name == "compiled" else getattr(compiled, name)

    def __repr__(self) -> str:
        return f"LazyPattern({self._args[0]!r})"


def lazy_compile(pattern: AnyStr, flags: int = 0) -> re.Pattern[AnyStr]:
    """``re.compile``, deferred to the first use (typed as the pattern it stands for)."""
    return cast("re.Pattern[AnyStr]", LazyPattern(pattern, flags))
