"""Strip what log shippers and terminals add around an engine's own line.

journald (``Mar 01 12:26:11 host python3[1234]: ``), docker compose (``svc-1  | ``), kubectl
(``--timestamps`` and ``--prefix``), ANSI colour codes (also when the ESC byte was lost in a
copy-paste), CR progress bars and CRLF endings, and the margin a copy keeps in front of every line
(a quote bar ``▎ `` or ``> ``, a terminal pane's border ``│ … │``, a Buildkite log cell ``  | ``): it is
stripped from a wrapped line's continuation too, so the two join again. The engine's own prefix (``[2026-… TP0]``,
``(VllmWorker TP0 pid=…)``) is left for the engine parsers, which know what it means.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\[\d{1,3}(?:;\d{1,3})*m")
# journald's prefix, also the one the bulk lane accepts (kvscope.engines.serving.BULK): the same text.
JOURNALD_PREFIX = (
    r"(?:[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d(?:\.\d+)?|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[\d.,:+\-]*)"
    r" [\w.\-]+ [\w.@/\-]+(?:\[\d+\])?: "
)
_JOURNALD = re.compile("^" + JOURNALD_PREFIX)
_KUBECTL_TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z ")
_KUBECTL_PREFIX = re.compile(r"^\[pod/[^\]\s]+(?:/[^\]\s]+)?\] ")
_COMPOSE = re.compile(r"^[A-Za-z0-9][\w.\-]*\s+\| ?")
# The margin: outermost of all, so it goes first. Quote bars and box borders (``▎ ``, ``│ ``, ``┃ ``),
# a markdown quote (``> ``, never ``>>>``), a Buildkite cell (``  | ``: indented, so a markdown table's
# ``| a | b |`` is left alone); nested ones (``> > ``) too. Looked for only where a line starts with
# one of MARGIN_START (one string test per line).
MARGIN_START = frozenset(" \t>\u258e\u258f\u258d\u258c\u2502\u2503")
_MARGIN = re.compile(r"(?:[ \t]{0,8}(?:[\u258c-\u258f\u2502\u2503]|>(?=[ \t]|$))|[ \t]{1,8}\|(?=[ \t]|$))[ \t]?")
_BOX = ("\u2502", "\u2503")  # a pane's right border, after its padding
MAX_MARGINS = 4
_SMART = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u00a0": " "})


# JSON: looked at only where a line starts with '{' or '"' and holds an escaped newline. A line cut inside
# the JSON (an excerpt) is read from its string tokens, the last one unterminated.
_JSON_STRING = re.compile(r'"((?:[^"\\]|\\.)*)(?:"|$)')
_PARTIAL_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{0,3})?$")
_HTML_BREAK = re.compile(r"<br\s*/?>|</?(?:p|pre|div|code|blockquote|li|ul|ol|h\d|tr|table)\b[^>]*>", re.IGNORECASE)
_HTML_TAG = re.compile(r"</?[A-Za-z][^<>]{0,200}>")
MAX_JSON_LINES = 20000  # logical lines read out of one JSON line (the line itself is at most MAX_LINE_BYTES)


# A structured logger's own message fields: kept even without a newline (``{"message": "EngineCore failed to
# start.", "exc_info": "Traceback …\n…"}`` keeps both, in field order). Other one-line values (level, stream,
# logger name) are no log lines.
_MESSAGE_KEYS = frozenset({"message", "msg", "log", "text", "content", "body", "error", "err", "event", "exception"})


def _json_strings(text: str) -> Iterator[tuple[str | None, str]]:
    """The string values of a JSON document with the key that holds each (None inside a list or at the top);
    of a cut one, every string token that holds an escaped newline or follows a message key."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        doc = None
    if doc is not None:
        stack: list[tuple[str | None, object]] = [(None, doc)]
        while stack:
            key, item = stack.pop()
            if isinstance(item, str):
                yield key, item
            elif isinstance(item, dict):
                stack.extend(reversed([(str(k), v) for k, v in item.items()]))
            elif isinstance(item, list):
                stack.extend(reversed([(key, v) for v in item]))
        return
    key: str | None = None
    for m in _JSON_STRING.finditer(text):
        body = m.group(1)
        after = text[m.end() : m.end() + 8].lstrip()
        if after.startswith(":"):  # a key: remember it for the value that follows
            key = body
            continue
        holder, key = key, None
        if "\\n" not in body and (holder is None or holder.lower() not in _MESSAGE_KEYS):
            continue
        try:
            yield holder, json.loads('"' + _PARTIAL_ESCAPE.sub("", body) + '"')
        except ValueError:
            continue


def json_lines(text: str) -> list[str] | None:
    """The log lines held in a JSON line's string values, or None when it holds none (no value with a newline)."""
    out: list[str] = []
    multi = False
    for key, value in _json_strings(text):
        if "\n" not in value:
            if key is None or key.lower() not in _MESSAGE_KEYS or not value.strip():
                continue
        else:
            multi = True
        if "</" in value or "<br" in value:
            value = html.unescape(_HTML_TAG.sub("", _HTML_BREAK.sub("\n", value)))
        out.extend(value.split("\n"))
        if len(out) >= MAX_JSON_LINES:
            return out[:MAX_JSON_LINES]
    return out if multi else None


def strip_margin(text: str) -> str:
    """Remove a copy's quote or box margin (and a box's right border) from the start of a line."""
    if text[:1] not in MARGIN_START:
        return text
    boxed = False
    for _ in range(MAX_MARGINS):
        m = _MARGIN.match(text)
        if m is None or m.end() == 0:
            break
        boxed = boxed or any(c in m.group() for c in _BOX)
        text = text[m.end() :]
    if boxed:
        text = text.rstrip()
        if text.endswith(_BOX):
            text = text[:-1]
    return text


def strip_prefixes(text: str) -> str:
    """Remove a copy's margin, then shipper prefixes, outermost first; each at most once."""
    text = strip_margin(text)
    for pattern in (_KUBECTL_PREFIX, _KUBECTL_TS, _JOURNALD, _COMPOSE):
        m = pattern.match(text)
        if m:
            text = text[m.end() :]
    return text


def clean_line(text: str) -> list[str]:
    """One physical line → the logical lines in it (CR-separated progress bars split apart, a JSON
    line's embedded log read out)."""
    if text[:1] in ("{", '"') and "\\n" in text:
        inner = json_lines(text)
        if inner is not None:
            return [part for line in inner for part in _clean(line)]
    return _clean(text)


# A poster quoting several log lines inline, each in its own code span: "`[gpu_worker.py:298] Available KV cache
# memory: 57.18 GiB`, `[kv_cache_utils.py:1091] Maximum concurrency for …`". Spans this long are log lines, not
# flag names; each is read as a line of its own, when the line is only the spans (and a list marker or commas
# between them): a log line that itself quotes a flag in backticks stays one line.
_SPAN = re.compile(r"`([^`]{24,})`")


def _clean(text: str) -> list[str]:
    if "\x1b" in text or ("m" in text and "[" in text):  # every colour code has ESC, or '[' and 'm'
        text = _ANSI.sub("", text)
    if not text.isascii():
        text = text.translate(_SMART)
    if text.count("`") >= 4:
        spans = _SPAN.findall(text)
        if len(spans) >= 2 and len(_SPAN.sub("", text).strip(" \t,.;:[]()0123456789-*")) <= 8:
            return [line for span in spans for line in _clean(span)]
    parts = text.split("\r") if "\r" in text else [text]
    out = [strip_prefixes(p).rstrip() for p in parts if p.strip()]
    return out if all(out) else [p for p in out if p]  # a line that was only a margin or a prefix says nothing
