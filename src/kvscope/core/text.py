"""Log text quoted in what kvscope says."""

from __future__ import annotations


def excerpt(text: str, limit: int) -> str:
    """A log message quoted in a finding: whitespace runs collapsed (terminal padding), and when it is longer
    than ``limit`` cut at a word boundary with an ellipsis, so a cut never reads as a sentence's end."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0] or text[:limit]
    return cut.rstrip(" ,;:") + " …"
