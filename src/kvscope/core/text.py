"""Log text quoted in what kvscope says."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def excerpt(text: str, limit: int) -> str:
    """A log message quoted in a finding: whitespace runs collapsed (terminal padding), and when it is longer
    than ``limit`` cut at a word boundary with an ellipsis, so a cut never reads as a sentence's end."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0] or text[:limit]
    return cut.rstrip(" ,;:") + " …"


def nearest(word: str, names: Iterable[str], n: int = 3) -> list[str]:
    """The names closest to ``word`` (case-insensitive), best first: what a typo probably meant."""
    lowered = {name.lower(): name for name in names}
    return [lowered[h] for h in difflib.get_close_matches(word.lower(), list(lowered), n=n, cutoff=0.6)]


def did_you_mean(word: str, names: Iterable[str] | dict[str, str]) -> str:
    """'; did you mean 'A' or 'B'?' for the names nearest ``word`` (a dict matches its keys, shows its values), or ''."""
    shown = names if isinstance(names, dict) else {n: n for n in names}
    near = list(dict.fromkeys(shown[n] for n in nearest(word, shown)))
    return f"; did you mean {' or '.join(repr(n) for n in near)}?" if near else ""
