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


# What a terminal acts on rather than shows: C0 controls but tab and newline, DEL, the C1 block (U+0080–U+009F:
# U+009B is CSI on 8-bit terminals), and the bidi embeddings, overrides and isolates that reorder what follows
# (a model id holding U+202E reads backwards). Logs and servers supply such text; a report never passes it on.
_UNSAFE = "".join(map(chr, [*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0), 0x061C, 0x200E,
                            0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]))
_UNSAFE_TABLE = {ord(c): (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"<U+{ord(c):04X}>") for c in _UNSAFE}
_UNSAFE_SET = frozenset(_UNSAFE)


def visible(text: str) -> str:
    """``text`` with every control, escape and bidi character shown as an escape (``\\x1b``, ``<U+202E>``) instead
    of acted on: what may reach a terminal from a log line or a server's answer. ASCII text without a control
    character (nearly all of it) comes back as it is, at the cost of one scan."""
    if text.isascii() and text.isprintable():
        return text
    if _UNSAFE_SET.isdisjoint(text):
        return text
    return text.translate(_UNSAFE_TABLE)



_JSON_TABLE = {ord(c): f"\\u{ord(c):04x}" for c in _UNSAFE if ord(c) >= 0x7F}


def json_visible(text: str) -> str:
    """A JSON document's text with DEL, the C1 block and the bidi characters written as ``\\uXXXX`` escapes (the
    encoder already escapes C0): the same parsed data, nothing a terminal acts on when the file is shown. JSON's
    structure is ASCII, so these characters only ever occur inside strings, where the escape means the same."""
    if text.isascii():
        return text.replace("\x7f", "\\u007f") if "\x7f" in text else text
    return text.translate(_JSON_TABLE)
