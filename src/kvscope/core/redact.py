"""Redaction: secrets and user names never leave kvscope unless ``--no-redact`` is given.

Reports are made to be pasted into GitHub issues, so by default every format hides what a
server log often holds next to the memory figures: API keys in ``server_args``, ``--api-key X``
in launch commands, Hugging Face / OpenAI / GitHub tokens, bearer headers, passwords in URLs,
``password=`` / ``token=`` / ``secret=`` values, and the user name in ``/home/alice/...``.

Why the document is redacted *before* rendering (``redact_value``) and not only the finished
text: escaping gets in the way afterwards. HTML turns ``api_key='x'`` into ``api_key=&#39;x&#39;``
and JSON turns quotes into ``\\"``, so patterns would miss secrets or, worse, break the syntax.
Redacting every string of the analysis first keeps JSON valid and HTML escaping intact, and lets
secret *keys* of dictionaries (``settings["api_key"]``) be blanked whatever their value looks like.
``redact_text`` is the second, text-level pass for plain-text formats (and for callers holding
finished text); it never touches ``<script>``/``<style>`` blocks of HTML.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import re
import unicodedata
from typing import Any

MARK = "[REDACTED]"

# Keys whose value is a secret. "token" alone is common in these logs ("#token: 512",
# "max_total_num_tokens"), so only named token kinds or a bare ``token`` key count.
_STRONG = r"[A-Za-z0-9_.-]*?(?:api[_-]?keys?|apikey|secret|passw(?:or)?d|credentials?|private[_-]?key|access[_-]?key)[A-Za-z0-9_-]*"
_TOKEN = (r"(?:[A-Za-z0-9_.-]*?[_-])?(?:hf|hugging[_-]?face|hub|access|auth|api|bearer|refresh|session|github|gh|gitlab"
          r"|wandb|openai|slack|bot|id|oauth|jwt|secret)[_-]?token")
_KEY = rf"(?:{_STRONG}|{_TOKEN}|token)"
_KEY_NAMED = rf"(?:{_STRONG}|{_TOKEN})"  # without bare "token": "per token: 70,272 B" is prose
_KEY_NAME = re.compile(rf"-{{0,2}}{_KEY}", re.IGNORECASE)  # a flag has at most two dashes; "-*" rescans dash runs
MAX_KEY_NAME = 128

_NOT_SECRET = {"", "none", "null", "nil", "false", "true", "undefined", "<none>", "[]", "{}"}
_NOT_MARK = r"(?!\[REDACTED\])"

# key = 'quoted value'  /  'key': 'value'  /  "key": "value"
_KV_QUOTED = re.compile(
    rf"(?<![#/\w.-])(?P<k>{_KEY})(?P<q1>['\"]?)(?P<sep>\s*[:=]\s*)(?P<q>['\"])(?P<v>[^'\"\n]*)(?P=q)", re.IGNORECASE)
# key=value (also in URLs: ?token=…&)  /  key: value (named keys only)
_KV_BARE = re.compile(
    rf"(?<![#/\w.-])(?P<k>{_KEY}(?=['\"]?\s*=)|{_KEY_NAMED})(?P<q1>['\"]?)(?P<sep>\s*=\s*|:[ \t]*){_NOT_MARK}(?!\[)(?P<v>(?:\[REDACTED\]|[^\s'\",;)}}\]&<>]|\](?=[^\s'\",;)}}\]&<>]))+)", re.IGNORECASE)
# 'api_key': ['x', 'y']  /  api_key=["x"]  (vLLM's "non-default args" prints list-valued flags this way)
_KV_LIST = re.compile(
    rf"(?<![#/\w.-])(?P<k>{_KEY})(?P<q1>['\"]?)(?P<sep>\s*[:=]\s*){_NOT_MARK}\[(?P<v>[^\[\]\n]*)\]", re.IGNORECASE)
# --api-key "x y"  /  ['--api-key', 'x']
_FLAG_QUOTED = re.compile(
    rf"(?<![\w-])(?P<k>--?{_KEY})(?P<sep>\s+|['\"]\s*,\s*)(?P<q>['\"])(?P<v>[^'\"\n]*)(?P=q)", re.IGNORECASE)
# --api-key x
_FLAG_BARE = re.compile(rf"(?<![\w-])(?P<k>--?{_KEY})(?P<sep>\s+){_NOT_MARK}(?P<v>(?!-)[^\s'\"<>]+)", re.IGNORECASE)

_AUTH_HEADER = re.compile(
    r"(?P<k>authorization['\"]?\s*[:=]\s*['\"]?(?:(?:bearer|basic|token|digest)\s+|(?!(?:bearer|basic|token|digest)\b)))" + _NOT_MARK + r"(?P<v>[^\s'\",;<>]+)",
    re.IGNORECASE)
_BEARER = re.compile(r"\b(?P<k>bearer\s+)" + _NOT_MARK + r"(?P<v>(?=[A-Za-z0-9._~+/=-]*\d)[A-Za-z0-9._~+/=-]{8,})",
                     re.IGNORECASE)
# Token shapes that are secrets wherever they appear: (pattern, kept prefix).
_SHAPES = [
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}\b"), "hf_"),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), "sk-"),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"), "gh_"),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{30,}"), "github_pat_"),
    (re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"), "glpat-"),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), "xox-"),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), "AKIA"),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), ""),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"), "AIza"),
    (re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), "npm_"),
]
# A PEM private key, to its END line or, cut, to the end of the text (one line with "\n" escapes, or a block)
_PEM = re.compile(r"(?P<k>-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----)(?P<v>.*?)(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|$)",
                  re.DOTALL)
# Cookie: a=b; c=d  /  Set-Cookie: …  (a session is a credential)
_COOKIE = re.compile(r"(?P<k>\b(?:set-)?cookie['\"]?\s*[:=]\s*['\"]?)" + _NOT_MARK + r"(?P<v>[^\n'\"]+)", re.IGNORECASE)
# scheme://user:password@host and scheme://token@host
# (to the authority's last '@': a password may hold one)
_URL_CREDS = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)(?!\[REDACTED\])(?P<creds>[^\s/'\"<>]+)@(?=[^\s/@'\"<>]*(?:[/\s'\"<>?#]|$))",
                        re.IGNORECASE)
# /home/alice/… and /Users/bob/… → ~/… ; C:\Users\bob\… → ~\… . /root names no person and stays.
_HOME = re.compile(r"(?<![\w.~-])/(?:home|Users)/(?!\.\.?/)[^/\s'\"<>:;,|()\[\]{}*?]+")
_WIN_HOME = re.compile(r"\b[A-Za-z]:(?P<sep>\\{1,2})Users(?P=sep)[^\\\s'\"<>:;,|*?]+", re.IGNORECASE)


# The words a secret key's name holds one of (ASCII case-insensitively); _steps gives each pattern
# its own such clues.
_KEY_CLUES = ("key", "secret", "passw", "credential", "token")


def _may_hold(text: str, clues: tuple[str, ...]) -> bool:
    """False only where no pattern can match. Only for ASCII text: IGNORECASE also matches a few
    other letters to ASCII ones (K, ſ, ı, İ), and those strings take the full patterns."""
    if not text.isascii():
        return True
    low = text.lower()
    return any(clue in low for clue in clues)


def _keep(value: str, numeric_ok: bool = False) -> bool:
    """Values that are not secrets: None-likes, an earlier mark, and (after ``key:``) plain numbers."""
    v = value.strip()
    if v.lower() in _NOT_SECRET or MARK in v:
        return True
    return numeric_ok and re.fullmatch(r"[-+]?\d+(?:\.\d+)?%?", v) is not None


def _kv(m: re.Match[str], numeric_ok: bool = False) -> str:
    if _keep(m.group("v"), numeric_ok):
        return m.group(0)
    q = m.groupdict().get("q") or ""
    return m.group(0)[: m.start("v") - m.start(0)] + MARK + q


def _kv_bare(m: re.Match[str]) -> str:
    # "key: 123" and "key = 123" are counts in prose ("#token: 512", "per token = 10.42 GiB");
    # "key=123" (no spaces, as in argv, URLs and server_args) may be a numeric password.
    sep = m.group("sep")
    return _kv(m, numeric_ok=":" in sep or sep != sep.strip())


def _url(m: re.Match[str]) -> str:
    return m.group("scheme") + MARK + "@"


def _pem(m: re.Match[str]) -> str:
    return m.group("k") + MARK


def _list(m: re.Match[str]) -> str:
    inner = m.group("v").strip()
    if not inner or all(_keep(v.strip(" '\"")) for v in inner.split(",")):
        return m.group(0)
    return m.group(0)[: m.start("v") - m.start(0)] + MARK + "]"


def _steps() -> list[tuple[tuple[str, ...], re.Pattern[str], Any]]:
    """The substitutions in order, each with the clues without which its pattern cannot match."""
    shape_clues = {"hf_": ("hf_",), "sk-": ("sk-",), "gh_": ("gh",), "github_pat_": ("github_pat_",),
                   "glpat-": ("glpat-",), "xox-": ("xox",), "AKIA": ("akia",), "": ("eyj",), "AIza": ("aiza",),
                   "npm_": ("npm_",)}
    return [(("private key-----",), _PEM, _pem), (("://",), _URL_CREDS, _url),
            *[(shape_clues[prefix], shape, prefix + MARK) for shape, prefix in _SHAPES],
            (("authorization",), _AUTH_HEADER, _kv), (("bearer",), _BEARER, _kv), (("cookie",), _COOKIE, _kv),
            (_KEY_CLUES, _KV_LIST, _list),
            (_KEY_CLUES, _FLAG_QUOTED, _kv), (_KEY_CLUES, _FLAG_BARE, _kv),
            (_KEY_CLUES, _KV_QUOTED, _kv), (_KEY_CLUES, _KV_BARE, _kv_bare),
            (("/home/", "/users/"), _HOME, "~"), (("\\users",), _WIN_HOME, "~")]


_STEPS = _steps()
# Every pattern matches only text holding one of its clues, so a string holding none of them all is
# returned as it is — most of a report (numbers as text, stamps, rank labels): 17 substitutions saved.
_CLUES = tuple(dict.fromkeys(clue for clues, _, _ in _STEPS for clue in clues))


_CLUE_AT = re.compile("|".join(_KEY_CLUES))
_RUN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_.-")


def _key_sub(pattern: re.Pattern[str], repl: Any, text: str) -> str:
    """``pattern.sub(repl, text)`` for the four key patterns, trying only where a match can start.

    Why: on a long ``server_args=…`` line (kilobytes; every SGLang report holds a few) ``sub`` runs
    each key pattern's lazy key prefix from every word start, 30 ms a report. A key is one run of
    ``[A-Za-z0-9_.-]`` holding a clue word, and a match starts at that run's start (the key
    patterns' look-behind refuses any other word character before it) or, for ``--flag`` forms,
    after a ``.`` inside it. Those few positions are tried with ``match``, in order, as ``sub``
    would meet them. Non-ASCII text takes ``sub`` itself (IGNORECASE folds a few other letters).
    """
    if not text.isascii():
        return pattern.sub(repl, text)
    low = text.lower()
    parts: list[str] = []
    done, tried = 0, -1  # text[:done] is handed on; positions up to ``tried`` have been tried
    for clue in _CLUE_AT.finditer(low):
        at = start = clue.start()
        while start > 0 and low[start - 1] in _RUN_CHARS:
            start -= 1
        for p in (start, *(i + 1 for i in range(start, at) if low[i] == ".")):
            if p < done or p <= tried:
                continue
            tried = p
            m = pattern.match(text, p)
            if m is not None:
                parts += (text[done:p], repl(m))
                done = m.end()
    if not parts:
        return text
    parts.append(text[done:])
    return "".join(parts)


@functools.lru_cache(maxsize=8192)
def _plain(text: str) -> str:
    """Apply every text pattern; idempotent (a redacted text comes back unchanged). Cached: a report
    repeats the same strings (rank labels, settings, stamps) many times over. A pattern whose clue
    the text (as it stands at that step) lacks is skipped: it could not match. Text in compatibility
    forms (fullwidth ``ａｐｉ_ｋｅｙ``, ligatures) is read as its NFKC form, and where that form holds a
    secret the redacted NFKC form is what comes back."""
    if not text.isascii():
        folded = unicodedata.normalize("NFKC", text)
        if folded != text:
            redacted = _plain(folded)
            if redacted != folded:
                return redacted
    if not _may_hold(text, _CLUES):
        return text
    for clues, pattern, repl in _STEPS:
        if _may_hold(text, clues):
            text = _key_sub(pattern, repl, text) if clues is _KEY_CLUES else pattern.sub(repl, text)
    return text


@functools.lru_cache(maxsize=4096)
def is_secret_key(key: str) -> bool:
    """True for dictionary keys such as ``api_key``, ``hf_token``, ``--api-key``, ``DB_PASSWORD``."""
    key = key.strip()
    # no setting's name is longer; a longer "key" (a pasted line parsed as a dict) would cost O(n²) to try
    return len(key) <= MAX_KEY_NAME and _may_hold(key, _KEY_CLUES) and _KEY_NAME.fullmatch(key) is not None


_NUMBERS = {int, float, bool, type(None)}


def redact_value(value: Any, key: str | None = None) -> Any:
    """A redacted copy of any document: dataclasses, dicts, lists and strings, walked recursively.

    Strings go through the text patterns; the value of a secret key is replaced whatever it is
    (a string or a number; ``None``/booleans stay, so ``api_key: null`` still says "not set").
    """
    kind = type(value)
    if kind is int or kind is float or kind is bool or value is None:  # most of a report: its numbers
        return MARK if key is not None and kind is not bool and value is not None and is_secret_key(key) else value
    if key is not None and isinstance(value, (str, int, float)) and not isinstance(value, bool) and is_secret_key(key):
        return value if isinstance(value, str) and _keep(value) else MARK
    if isinstance(value, str):
        return _plain(value)
    if isinstance(value, dict):
        return {(_plain(k) if isinstance(k, str) else k): redact_value(v, k if isinstance(k, str) else None)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if key is None or not is_secret_key(key):  # a series of numbers is handed back as it is
            kinds = {type(v) for v in value}
            if kinds <= _NUMBERS:
                return list(value) if isinstance(value, list) else tuple(value)
        items = [redact_value(v, key) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _redact_dataclass(value)
    if hasattr(value, "as_dict") and callable(value.as_dict):
        return redact_value(value.as_dict(), key)
    return value


def _redact_dataclass(obj: Any) -> Any:
    """Copy a dataclass instance with every field redacted (slots dataclasses included)."""
    out = copy.copy(obj)
    for f in dataclasses.fields(obj):
        try:
            if f.name.startswith("_"):  # a private cache (an index over other fields): empty, rebuilt from the copy
                object.__setattr__(out, f.name, type(getattr(obj, f.name))())
                continue
            object.__setattr__(out, f.name, redact_value(getattr(obj, f.name), f.name))
        except (AttributeError, TypeError):  # a read-only field: keep the copy's value
            continue
    return out


def _redact_html(text: str) -> str:
    """Text pass over HTML outside ``<script>``/``<style>``: the patterns never emit markup characters."""
    parts = re.split(r"(<(script|style)\b.*?</\2\s*>)", text, flags=re.IGNORECASE | re.DOTALL)
    out = []
    i = 0
    while i < len(parts):
        out.append(_plain(parts[i]))
        if i + 1 < len(parts):
            out.append(parts[i + 1])  # the whole script/style block, untouched
        i += 3
    return "".join(out)


def redact_text(text: str, fmt: str = "terminal", dumps: Any = None) -> str:
    """Redact finished output. JSON is parsed, redacted as data and dumped again with ``dumps`` (the report's own
    layout; json.dumps with an indent of 2 by default), so it stays valid."""
    if fmt == "json":
        try:
            doc = json.loads(text)
        except ValueError:
            return _plain(text)
        if dumps is None:
            return json.dumps(redact_value(doc), indent=2, ensure_ascii=False)
        return dumps(redact_value(doc))
    if fmt == "html":
        return _redact_html(text)
    return _plain(text)
