"""Strip what log shippers and terminals add around an engine's own line.

journald (``Mar 01 12:26:11 host python3[1234]: ``), docker compose (``svc-1  | ``), kubectl
(``--timestamps`` and ``--prefix``), ANSI colour codes (also when the ESC byte was lost in a
copy-paste), CR progress bars and CRLF endings. The engine's own prefix (``[2026-… TP0]``,
``(VllmWorker TP0 pid=…)``) is left for the engine parsers, which know what it means.
"""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\[\d{1,3}(?:;\d{1,3})*m")
# journald's prefix, also the one the bulk lane accepts (kvscope.runtime.lines.BULK): the same text.
JOURNALD_PREFIX = (
    r"(?:[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d(?:\.\d+)?|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[\d.,:+\-]*)"
    r" [\w.\-]+ [\w.@/\-]+(?:\[\d+\])?: "
)
_JOURNALD = re.compile("^" + JOURNALD_PREFIX)
_KUBECTL_TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z ")
_KUBECTL_PREFIX = re.compile(r"^\[pod/[^\]\s]+(?:/[^\]\s]+)?\] ")
_COMPOSE = re.compile(r"^[A-Za-z0-9][\w.\-]*\s+\| ?")
_SMART = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u00a0": " "})


def strip_prefixes(text: str) -> str:
    """Remove shipper prefixes, outermost first; each at most once."""
    for pattern in (_KUBECTL_PREFIX, _KUBECTL_TS, _JOURNALD, _COMPOSE):
        m = pattern.match(text)
        if m:
            text = text[m.end() :]
    return text


def clean_line(text: str) -> list[str]:
    """One physical line → the logical lines in it (CR-separated progress bars split apart)."""
    if "\x1b" in text or ("m" in text and "[" in text):  # every colour code has ESC, or '[' and 'm'
        text = _ANSI.sub("", text)
    if not text.isascii():
        text = text.translate(_SMART)
    parts = text.split("\r") if "\r" in text else [text]
    return [strip_prefixes(p).rstrip() for p in parts if p.strip()]
