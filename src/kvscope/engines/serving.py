"""Serving-time lines of SGLang and vLLM → RUNTIME events, every release's wording.

These lines are the bulk of a journal (one per 40 decode steps per scheduler, one per 5–10 s per
vLLM engine), so the cost per line matters more than anywhere else in kvscope: each shape is
recognised by a plain substring test first, then read by *one* precompiled regex. The numbers of
a batch line are read as ``key: value`` pairs rather than by a fixed template, which is what keeps
one pattern valid across releases that reorder or add fields (``cuda graph``, ``largest-len``,
``accept len``, ``#full token``/``#swa token``, ``mamba num``, ``#retracted-req``, ``npu graph``…).

Shapes (see tests/fixtures/runtime/sources.json for a real line of each):

* SGLang ``Decode batch[.,] #running-req: R, #token: T, token usage: U, …, #queue-req: Q``
* SGLang ``Prefill batch[.,] #new-seq: …, #new-token: …, #cached-token: …, [cache hit rate: X%,]
  token usage: U, #running-req: R, #queue-req: Q…`` (``Prefil batch`` before mid-2024)
* SGLang ``KV cache pool is full. Retract requests. #retracted_reqs: N…`` and the older
  ``Decode out of memory happened. #retracted_reqs: N…``
* vLLM ``[Engine 000: ]Avg prompt throughput: X tokens/s, Avg generation throughput: Y tokens/s,
  Running: N reqs, (Swapped: S reqs, Pending|Waiting: M reqs, …) GPU KV cache usage: U%…``
* vLLM V0 ``Sequence group … is preempted by PreemptionMode.X … total_num_cumulative_preemption=N``
  and the V0 side line ``Prefix cache hit rate: GPU: X%, CPU: Y%``.

Timestamps become seconds on a private clock (only differences are used): SGLang prints
``[YYYY-MM-DD HH:MM:SS …]`` (``[HH:MM:SS TP0]`` in 2024), vLLM ``INFO MM-DD HH:MM:SS`` with no year.
"""

from __future__ import annotations

import datetime as _dt
import functools
import re
from typing import Any

from kvscope.core import events as ev
from kvscope.engines.base import LineContext, Parsed, to_float, to_int
from kvscope.engines.lazy import lazy_compile
from kvscope.reading.cleanup import JOURNALD_PREFIX
from kvscope.reading.source import BULK_MARK, NATIVE, regex_split

ANCHORS: tuple[bytes, ...] = (b" batch", b"throughput", b"reempt", b"etract", b"hit rate")

# One pattern per shape. Keys of a SGLang batch line start with '#' or a letter and may hold
# spaces, dashes, slashes and parentheses ("gen throughput (token/s)").
_SG_PAIRS = lazy_compile(r"([#A-Za-z][\w#\-/() .]{0,60}?): ([-+\w.%]+)")  # a key is short: unbounded, a run of letters is O(n²)
_VL_PAIRS = lazy_compile(r"([A-Z][\w ]*): ([\d.]+)")  # greedy = lazy here (no ':' in the key), and faster
# Fast paths for the wordings that make up nearly all of a journal (2024 … 2026 releases); any other
# wording falls back to the pairs above. Measured: ~1.5 µs per line against ~6 µs for the pairs.
_SG_DECODE = lazy_compile(
    r"#running-req: (\d+), #token: (\d+), token usage: ([\d.]+), .*?gen throughput \(token/s\): ([\d.]+),.*?#queue-req: (\d+)"
)
_SG_PREFILL = lazy_compile(
    r"#new-token: (\d+), #cached-token: (\d+), (?:cache hit rate: ([\d.]+)%, )?token usage: ([\d.]+), "
    r"#running-req: (\d+), #queue-req: (\d+)"
)
_SG_INPUT_TPS = lazy_compile(r"input throughput \(token/s\): ([\d.]+)")
_SG_STAMP = lazy_compile(r"\[(?:(\d{4})-(\d\d)-(\d\d)[ T])?(\d\d):(\d\d):(\d\d)(?:[.,]\d+)?((?: [A-Z_]+\d+)*)(?: rank=(\d+))?\]")
_VL_STAMP = lazy_compile(r"(?:INFO|WARNING|DEBUG|ERROR|WARN) +(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")
_ISO_STAMP = lazy_compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)")
_RETRACTED = lazy_compile(r"#retracted_reqs: (\d+)")
_CUMULATIVE = lazy_compile(r"cumulative_preemption(?:_cnt)?=(\d+)")
_PREEMPT_MODE = lazy_compile(r"PreemptionMode\.(\w+)")
_HIT_GPU = lazy_compile(r"hit rate: GPU: ([\d.]+)%")

# The bulk lane (``kvscope.reading.source``): the two SGLang shapes that make up nearly all of a
# journal, matched over a whole block at once by ONE bytes pattern, so that their lines never become
# per-line Python objects. It matches only lines on which it provably gives what the per-line path
# gives (``parse_lines`` → ``RuntimeLines.parse`` → ``_sglang_fast``), so any other line (other
# wordings, time-only stamps, ``rank=`` prefixes, ANSI colour, CR, non-ASCII, another shipper's
# prefix, an ending that asks for a join) is left in the block for the per-line path:
# * an optional journald prefix (the one ``clean_line`` strips), then ``[YYYY-MM-DD HH:MM:SS ranks] ``
#   at the start of the cleaned line, so the stamp and rank label are the ones ``_Clock.sglang`` reads;
# * the numbers read by the per-line fast patterns themselves (same sub-patterns, ``.`` narrowed to
#   printable ASCII without ``[``, which is the whole line here, so the same first match is found);
# * a line that ends in a digit, ``,``, ``.``, ``%`` or ``)``, so no engine's ``wants_join`` fires
#   on it (the reader keeps the lane off a stretch holding an overlong line).
# Groups: 1 stamp, 2 ranks; 3-10 decode r, tok, usage, (text before gen), gen, (text before
# queue), queue, (text after queue); 11-17 prefill new, cached, hit %, usage, r, queue, input tps;
# 18 retracted requests of a retraction line (its two wordings, with nothing else on the line: a
# journal at saturation has one every few seconds, and each would otherwise cut the run in two).
# The decode line's free text comes in three short groups because the per-line path asks whether
# the line holds ``graph: `` / ``graph: True``, and no fixed part of the line can hold either.
_T = rb"[\t\x20-\x5a\x5c-\x7e]"  # printable ASCII and tab, no '[': no colour code can hide in it
# Free text between fields is bounded: a line with more (none seen in a real log) is left to the
# per-line path, and a hostile line with thousands of fields cannot make the lazy groups backtrack
# for minutes. _bulk.c applies the same bound (MAX_FREE).
_FREE = rb"{0,1024}"
_END = rb"(?:" + _T + _FREE + rb"[\d,.%)])?"
BULK = lazy_compile(
    rb"\n(?:" + JOURNALD_PREFIX.encode() + rb")?"  # exactly the prefix clean_line strips
    rb"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)?((?: [A-Z_]+\d+)*)\] "
    rb"(?:Decode batch[.,] #running-req: (\d+), #token: (\d+), token usage: ([\d.]+), "
    rb"(" + _T + _FREE + rb"?)gen throughput \(token/s\): ([\d.]+), (" + _T + _FREE + rb"?)#queue-req: (\d+)(" + _END + rb")"
    rb"|Prefill batch[.,] #new-seq: \d+, #new-token: (\d+), #cached-token: (\d+), "
    rb"(?:cache hit rate: ([\d.]+)%, )?token usage: ([\d.]+), #running-req: (\d+), #queue-req: (\d+)"
    rb"(?:" + _T + _FREE + rb"?input throughput \(token/s\): ([\d.]+))?" + _END +
    rb"|(?:KV cache pool is full\. Retract requests\.|Decode out of memory happened\.) #retracted_reqs: (\d+)"
    rb"(?:, #new_tokens_gained: \d+)?(?:, #new_token_ratio: [\d.]+ -> [\d.]+)?"
    rb")[ \t]*\r?(?=\n)"
)


# The vLLM bulk lane: the periodic stats line is a vLLM journal's only serving line that matters
# (one per engine every 5-10 s among ~100 uvicorn access lines), and each cost ~60 µs on the
# per-line path (candidate + context line, cleaning, join check, dispatch, pairs, clock, event,
# assembler). Matched in place, it costs one regex match and one fold. Like BULK it takes only the
# lines it provably reads as the per-line path does (``RuntimeLines.parse`` → ``_vllm_stats``):
# * an optional journald prefix (the one ``clean_line`` strips), then the cleaned line must start
#   as a new record does (``(Proc pid=N) `` or ``INFO``), so no pending join takes it in;
# * the V1 (``loggers.py``, GPU or CPU pool) and V0 (``metrics.py``, swapped/pending) wordings with
#   their numbers as ``\d+(\.\d+)?`` (every one converts), printable ASCII only, no colour code
#   (a ``[`` is never followed by a digit), ending in ``%`` or ``%.`` (no engine's join fires);
# * a stamp whose month and day are a date (checked when split: the per-line path drops the line).
# Group 1 is the cleaned text before "Avg prompt throughput" (the engine label is read from it as
# ``_vllm_stats`` reads it); 2-6 the stamp; then the values, named by ``_vllm_pairs``.
_NUM = r"(\d+(?:\.\d+)?)"
VLLM_BULK = lazy_compile(
    r"(?:" + JOURNALD_PREFIX + r")?"
    r"((?:\(\w+ pid=\d+\) )?INFO (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) \[?[A-Za-z_][\w.]*:\d+\] (?:Engine \d+: )?)"
    r"Avg prompt throughput: " + _NUM + r" tokens/s, Avg generation throughput: " + _NUM + r" tokens/s, "
    r"Running: (\d+) reqs, (?:Waiting: (\d+) reqs|Swapped: (\d+) reqs, Pending: (\d+) reqs), "
    r"(GPU|CPU) KV cache usage: " + _NUM + r"%(?:, CPU KV cache usage: " + _NUM + r"%)?"
    r"(?:, Prefix cache hit rate: " + _NUM + r"%)?(?:, MM cache hit rate: " + _NUM + r"%)?\.?[ \t]*\r?",
    re.ASCII,
)
_VL_WORD = b"Avg prompt throughput"


class VllmRows(list):
    """Match groups of ``VLLM_BULK``, one tuple per stats line: the rows of a vLLM ``Bulk`` run.
    A slice is VllmRows too (the reader cuts runs out of a stretch's rows by slicing)."""

    __slots__ = ()

    def __getitem__(self, key: Any) -> Any:
        got = list.__getitem__(self, key)
        return VllmRows(got) if key.__class__ is slice else got


def _lines_with(buf: bytes, lo: int, hi: int, word: bytes) -> list[int]:
    """Starts of the lines of ``buf[lo:hi]`` (whole lines) holding ``word`` (no newline in it)."""
    if not word or b"\n" in word:
        raise ValueError("lines_with(): the word must be non-empty and hold no newline")
    out = []
    at = buf.find(word, lo, hi)
    while at >= 0:
        out.append(buf.rfind(b"\n", lo, at) + 1 or lo)
        end = buf.find(b"\n", at, hi)
        if end < 0:
            break
        at = buf.find(word, end, hi)
    return out


lines_with = NATIVE.lines_with if NATIVE is not None else _lines_with


def vllm_split(buf: bytes, lo: int, hi: int) -> tuple[bytes, VllmRows] | None:
    """The vLLM lane over ``buf[lo:hi]`` (whole lines): the text after a leading newline with each
    taken stats line replaced by BULK_MARK, and its groups; None when no line was taken. The stats
    lines are found by their words (memmem in C), and each is matched alone."""
    starts = lines_with(buf, lo, hi, _VL_WORD)
    if not starts:
        return None
    view = memoryview(buf)  # the text between taken lines is copied once, by the join
    parts: list[bytes | memoryview] = [b"\n"]  # views of buf between the taken lines, joined once
    rows, done = VllmRows(), lo
    match, find = VLLM_BULK.fullmatch, buf.find
    for start in starts:
        end = find(b"\n", start, hi)
        if end < 0:
            break
        raw = buf[start:end]
        if not raw.isascii():
            continue
        m = match(raw.decode())
        if m is not None and _a_date(m.group(2), m.group(3)):
            parts += (view[done:start], BULK_MARK)
            rows.append(m.groups())
            done = end
    if not rows:
        return None
    parts.append(view[done:hi])
    return b"".join(parts), rows


_DATES: dict[str, bool] = {}


def _a_date(month: str, day: str) -> bool:
    """Whether MM-DD is a date in a leap year (``_Clock.vllm`` reads it as one of the year 2000)."""
    key = month + day
    ok = _DATES.get(key)
    if ok is None:
        try:
            _dt.date(2000, int(month), int(day))
            ok = True
        except ValueError:
            ok = False
        _DATES[key] = ok
    return ok


class BulkLane:
    """``BULK`` over a stretch of whole lines: (the text with each matched line replaced by ``\x01``,
    the rows), or None when no line matched.

    The rows come from the C lane (``kvscope._bulk``: a ``Batch``, folded in C as well) when it was
    built, else from the regex (a list of group tuples, folded by ``Stream.sample_rows``); both give
    the same text, rows and sums (tests/unit/reading/test_bulk_native.py). ``KVSCOPE_PURE_PYTHON=1`` turns the C
    lane off, e.g. to compare the two. A stretch without SGLang serving lines is offered to the
    vLLM lane (``vllm_split``: ``VllmRows``); one holding both leaves its vLLM lines to the per-line path.
    """

    def __init__(self, pattern: re.Pattern[bytes], native: Any = None, vllm: bool = True) -> None:
        self.pattern = pattern
        self.native = native
        self.vllm = vllm

    def split_rows(self, buf: bytes, lo: int, hi: int, anchors: Any = None, clean: bool = False
                   ) -> tuple[Any, ...] | None:
        """``buf[lo:hi]`` holds whole lines; the text returned starts with the newline before them.
        It holds no Python state (the C lane gives up the GIL while it reads), so the reader's
        second thread may run it. ``anchors`` (the C anchor scanner): where the C lane splits, it
        also finds the text's candidate line starts, returned as a third item. ``clean``: buf is
        known to hold no BULK_MARK (no look for it is made)."""
        # the C lane answers a tuple, Ellipsis or False; the regex lane a tuple or None
        out: Any = self.native.split(buf, lo, hi, anchors, clean) if self.native is not None else False  # in place
        if out is Ellipsis:  # the C lane found the mark byte in the stretch: no lane takes it
            return None
        if out is False:  # no C lane, or a number too long for it: the regex reads this stretch
            if not clean and buf.find(BULK_MARK, lo, hi) != -1:
                return None
            out = regex_split(self.pattern, buf, lo, hi)
        if out is None and self.vllm:
            return vllm_split(buf, lo, hi)
        return out

    @functools.cached_property
    def job(self) -> Any:
        """``job(buf, lo, hi, anchors, clean, max_line)``: the C lane's split of a stretch on its own
        thread (``kvscope._bulk.Job``), with the vLLM lane's word to hand such stretches back; None
        where there is no C lane or no such thread (Windows)."""
        job = getattr(self.native, "Job", None)
        if job is None:
            return None
        word = _VL_WORD if self.vllm else None
        return lambda buf, lo, hi, anchors, clean, max_line: job(buf, lo, hi, anchors, clean, word, max_line)


BULK_LANE = BulkLane(BULK, NATIVE)


HALF_YEAR_S = 183 * 86400
HALF_DAY_S = 43200


def _sg_int(pairs: dict[str, str], *keys: str) -> int | None:
    """The general reader's values may be any word (``nan``, ``inf``, ``True``): only finite numbers pass."""
    for k in keys:
        v = pairs.get(k)
        if v is not None:
            return to_int(v)
    return None


def _sg_float(pairs: dict[str, str], *keys: str) -> float | None:
    for k in keys:
        v = pairs.get(k)
        if v is not None:
            return to_float(v.rstrip("%"))
    return None


class _Clock:
    """Timestamps → seconds. Caches the last prefix: consecutive lines share it within a second."""

    def __init__(self) -> None:
        self.days: dict[tuple[int, int, int], int] = {}
        self.last_key: str | None = None
        self.last: tuple[float | None, str | None, str | None] = (None, None, None)
        self.wrap: dict[str, int] = {}  # seconds added per clock kind after a midnight / new-year wrap
        self.prev: dict[str, float] = {}

    def ordinal(self, y: int, m: int, d: int) -> int:
        key = (y, m, d)
        day = self.days.get(key)
        if day is None:
            day = _dt.date(y, m, d).toordinal()
            if len(self.days) < 100_000:
                self.days[key] = day
        return day

    def unwrap(self, t: float, kind: str) -> float:
        """Undo a clock that restarts: time-only stamps at midnight ("day"), yearless ones at new year ("year").

        Each kind keeps its own state so a journal mixing SGLang (dated) and vLLM (yearless) lines
        does not mistake one clock for the other going backwards.
        """
        prev = self.prev.get(kind)
        wrap = self.wrap.get(kind, 0)
        if prev is not None and kind != "full":
            step, add = (HALF_DAY_S, 86400) if kind == "day" else (HALF_YEAR_S, 366 * 86400)
            if t + wrap < prev - step:
                wrap += add
                self.wrap[kind] = wrap
        t += wrap
        self.prev[kind] = t
        return t

    def sglang(self, prefix: str) -> tuple[float | None, str | None, str | None]:
        """(seconds, rank label, stamp text) from the part of a SGLang line before the message."""
        if prefix == self.last_key:
            return self.last
        m = _SG_STAMP.search(prefix)
        if m is None:
            out = self._iso(prefix)
        else:
            y, mo, d, hh, mm, ss, ranks, bare = m.groups()
            secs = int(hh) * 3600 + int(mm) * 60 + int(ss)
            label = ranks.strip() or (f"rank={bare}" if bare else None)
            if y:
                t = self.unwrap(self.ordinal(int(y), int(mo), int(d)) * 86400.0 + secs, "full")
                stamp = f"{y}-{mo}-{d} {hh}:{mm}:{ss}"
            else:
                t = self.unwrap(float(secs), "day")
                stamp = f"{hh}:{mm}:{ss}"
            out = (t, label, stamp)
        self.last_key, self.last = prefix, out
        return out

    def vllm(self, prefix: str) -> tuple[float | None, str | None]:
        if prefix == self.last_key:
            return self.last[0], self.last[2]
        m = _VL_STAMP.search(prefix)
        if m is None:
            t, _, stamp = self._iso(prefix)
        else:
            t, stamp = self.vllm_parts(*m.groups())
        self.last_key, self.last = prefix, (t, None, stamp)
        return t, stamp

    def vllm_parts(self, mo: str, d: str, hh: str, mm: str, ss: str) -> tuple[float, str]:
        """Seconds and stamp text of a yearless ``MM-DD HH:MM:SS`` stamp already split (by
        ``_VL_STAMP`` in ``vllm``, or the bulk lane's groups)."""
        secs = int(hh) * 3600 + int(mm) * 60 + int(ss)
        t = self.unwrap(self.ordinal(2000, int(mo), int(d)) * 86400.0 + secs, "year")
        return t, f"{mo}-{d} {hh}:{mm}:{ss}"

    def _iso(self, prefix: str) -> tuple[float | None, str | None, str | None]:
        m = _ISO_STAMP.search(prefix)
        if m is None:
            return None, None, None
        y, mo, d, hh, mm, ss = (int(g) for g in m.groups())
        t = self.unwrap(self.ordinal(y, mo, d) * 86400.0 + hh * 3600 + mm * 60 + ss, "full")
        return t, None, m.group(0).replace("T", " ")


def _sglang_fast(text: str, at: int, word: str, clock: _Clock) -> list[Parsed] | None:
    """The common wordings, read by one specific pattern; None when the line needs the general reader."""
    if word == "Decode":
        m = _SG_DECODE.search(text, at)
        if m is None:
            return None
        r, tok, u, gen, q = m.groups()
        t, label, stamp = clock.sglang(text[: at - 6])
        graph = None if "graph: " not in text else "graph: True" in text  # cuda / npu / cpu graph
        data = {"src": "decode", "t": t, "usage": float(u), "running": int(r), "queued": int(q), "tokens": int(tok),
                "gen_tps": float(gen), "graph": graph}
        return [Parsed(ev.RUNTIME, data, label, stamp)]
    m = _SG_PREFILL.search(text, at)
    if m is None:
        return None
    new, cached, hit, u, r, q = m.groups()
    t, label, stamp = clock.sglang(text[: at - len(word)])
    tps = _SG_INPUT_TPS.search(text, m.end())
    data = {"src": "prefill", "t": t, "usage": float(u), "running": int(r), "queued": int(q), "new_tokens": int(new),
            "cached_tokens": int(cached), "hit_pct": float(hit) if hit else None,
            "input_tps": float(tps.group(1)) if tps else None}
    return [Parsed(ev.RUNTIME, data, label, stamp)]


def _sglang_batch(text: str, at: int, word: str, clock: _Clock) -> list[Parsed]:
    """A ``Decode batch`` / ``Prefill batch`` line: the pairs after the word, the stamp before it."""
    fast = _sglang_fast(text, at, word, clock)
    if fast is not None:
        return fast
    pairs = dict(_SG_PAIRS.findall(text, at + 6))
    t, label, stamp = clock.sglang(text[: at - len(word)])
    full = _sg_float(pairs, "token usage", "full token usage")
    swa = _sg_float(pairs, "swa token usage")
    data: dict = {
        "src": "decode" if word == "Decode" else "prefill",
        "t": t,
        "usage": full if swa is None or full is None else max(full, swa),
        "running": _sg_int(pairs, "#running-req"),
        "queued": _sg_int(pairs, "#queue-req"),
    }
    if word == "Decode":
        data["tokens"] = _sg_int(pairs, "#token", "#full token")
        data["gen_tps"] = _sg_float(pairs, "gen throughput (token/s)")
        graph = next((v for k, v in pairs.items() if k.endswith(" graph")), None)
        data["graph"] = None if graph is None else graph == "True"
    else:
        data["new_tokens"] = _sg_int(pairs, "#new-token")
        data["cached_tokens"] = _sg_int(pairs, "#cached-token")
        data["input_tps"] = _sg_float(pairs, "input throughput (token/s)")
        data["hit_pct"] = _sg_float(pairs, "cache hit rate")
    if swa is not None:
        data["swa_usage"] = swa
    mamba = _sg_float(pairs, "mamba usage")
    if mamba is not None:
        data["mamba_usage"] = mamba
    if data["usage"] is None and data["running"] is None:
        return []
    return [Parsed(ev.RUNTIME, data, label, stamp)]


def _vllm_stats(text: str, at: int, clock: _Clock) -> list[Parsed]:
    """A vLLM periodic stats line (V0 ``metrics.py`` or V1 ``loggers.py``)."""
    pairs = dict(_VL_PAIRS.findall(text, at))
    usage, cpu = _pool_usage(pairs)
    if usage is None and "Running" not in pairs:
        return []
    label = _engine_label(text, at)
    t, stamp = clock.vllm(text[:at])  # before the numbers convert: a mangled line still moves the clock
    return [Parsed(ev.RUNTIME, _stats_data(pairs, t, usage, cpu), label, stamp)]


def _engine_label(text: str, at: int) -> str | None:
    """``Engine 000`` of a V1 stats line (the last one before the numbers), else None."""
    engine = text.rfind("Engine ", 0, at)
    return text[engine:engine + 10].rstrip(": ") if engine >= 0 else None


def _pool_usage(pairs: dict[str, str]) -> tuple[str | None, str | None]:
    """(the KV pool's usage %, V0's CPU swap-space usage %) as printed."""
    usage = pairs.get("GPU KV cache usage") or pairs.get("KV cache usage")
    cpu = pairs.get("CPU KV cache usage")
    if usage is None and cpu is not None and "Swapped" not in pairs:
        usage, cpu = cpu, None  # the CPU backend's only pool is called "CPU KV cache"
    return usage, cpu


def _stats_data(pairs: dict[str, str], t: float | None, usage: str | None, cpu: str | None) -> dict:
    """The sample of a stats line from its ``key: value`` pairs. Shared by both lanes."""
    running = pairs.get("Running")
    waiting = pairs.get("Waiting", pairs.get("Pending"))
    data: dict = {
        "src": "stats",
        "t": t,
        "usage": float(usage) / 100 if usage is not None else None,
        "running": int(running) if running is not None else None,
        "queued": int(waiting) if waiting is not None else None,
        "prompt_tps": float(pairs["Avg prompt throughput"]) if "Avg prompt throughput" in pairs else None,
        "gen_tps": float(pairs["Avg generation throughput"]) if "Avg generation throughput" in pairs else None,
    }
    for key, name in (("Swapped", "swapped"), ("Preemptions", "preempted")):
        if key in pairs:
            data[name] = int(pairs[key])
    for key, name in (("Prefix cache hit rate", "hit_pct"), ("External prefix cache hit rate", "external_hit_pct")):
        if key in pairs:
            data[name] = float(pairs[key])
    if cpu is not None:
        data["cpu_usage_pct"] = float(cpu)  # V0 swap space
    return data


def _vllm_pairs(row: tuple) -> dict[str, str]:
    """The pairs ``_VL_PAIRS`` finds on a line ``VLLM_BULK`` took, from its groups, in line order."""
    _, _, _, _, _, _, prompt, gen, running, waiting, swapped, pending, pool, usage, cpu, hit, mm = row
    pairs = {"Avg prompt throughput": prompt, "Avg generation throughput": gen, "Running": running}
    if waiting is not None:
        pairs["Waiting"] = waiting
    else:
        pairs["Swapped"], pairs["Pending"] = swapped, pending
    pairs[pool + " KV cache usage"] = usage
    if cpu is not None:
        pairs["CPU KV cache usage"] = cpu
    if hit is not None:
        pairs["Prefix cache hit rate"] = hit
    if mm is not None:
        pairs["MM cache hit rate"] = mm
    return pairs


class RuntimeLines:
    """EngineLines for serving-time lines of SGLang and vLLM (see module docstring).

    One parser speaks for two engines, so ``engine`` is set to the engine whose line was just
    parsed; the dispatcher reads it after ``parse`` returns and stamps the event with it, which is
    what lets a journal of serving lines alone still open a startup of the right engine.
    """

    anchors = ANCHORS
    joins = True  # EngineLines: wants_join can say yes

    def __init__(self) -> None:
        self.engine = "sglang"
        self._ctx: LineContext | None = None
        self._clock = _Clock()

    def wants_join(self, text: str) -> bool:
        """A batch/stats line cut right after a key (``#queue-req:`` at the end) waits for its value."""
        return ("batch" in text or "throughput" in text) and text.endswith((":", "#", "-req"))

    def parse(self, text: str, ctx: LineContext) -> list[Parsed]:
        if ctx is not self._ctx:
            self._ctx, self._clock = ctx, _Clock()
        at = text.find(" batch")
        if at > 0:
            for word in ("Decode", "Prefill", "Prefil"):
                if text.startswith(word, at - len(word)):
                    self.engine = "sglang"
                    return _sglang_batch(text, at, word, self._clock)
        at = text.find("Avg prompt throughput")
        if at >= 0:
            self.engine = "vllm"
            return _vllm_stats(text, at, self._clock)
        if "etract" in text or "out of memory happened" in text:
            return self._retract(text)
        if "reempt" in text:
            return self._preempt(text)
        if "hit rate: GPU:" in text:
            return self._v0_hit_rate(text)
        return []

    def stats_rows(self, rows: VllmRows, ctx: LineContext) -> list[tuple[dict, str | None, str]]:
        """(sample, engine label, stamp) of each row of the vLLM lane: what ``parse`` makes of
        those lines, on the same clock (the rows' stamps advance its year-wrap state in order)."""
        if ctx is not self._ctx:
            self._ctx, self._clock = ctx, _Clock()
        clock = self._clock
        out = []
        for row in rows:
            pairs = _vllm_pairs(row)
            prefix = row[0]
            t, stamp = clock.vllm_parts(row[1], row[2], row[3], row[4], row[5])
            out.append((_stats_data(pairs, t, *_pool_usage(pairs)), _engine_label(prefix, len(prefix)), stamp))
        clock.last_key = None  # its cached prefix is no longer the last line's
        self.engine = "vllm"
        return out

    def _retract(self, text: str) -> list[Parsed]:
        m = _RETRACTED.search(text)
        if m is None:
            return []
        self.engine = "sglang"
        t, label, stamp = self._clock.sglang(text[: m.start()])
        return [Parsed(ev.RUNTIME, {"src": "retract", "t": t, "retracted": int(m.group(1))}, label, stamp)]

    def _preempt(self, text: str) -> list[Parsed]:
        if "is preempted by" in text:
            cum = _CUMULATIVE.search(text)
            mode = _PREEMPT_MODE.search(text)
            data = {"src": "preempt", "preempted": 1, "cumulative": int(cum.group(1)) if cum else None,
                    "mode": mode.group(1).lower() if mode else None}
        elif "Preempting request" in text:
            data = {"src": "preempt", "preempted": 1, "cumulative": None, "mode": None}
        else:
            return []
        self.engine = "vllm"
        at = text.find("Sequence group")
        data["t"], stamp = self._clock.vllm(text[: at if at >= 0 else len(text)])
        return [Parsed(ev.RUNTIME, data, None, stamp)]

    def _v0_hit_rate(self, text: str) -> list[Parsed]:
        m = _HIT_GPU.search(text)
        if m is None:
            return []
        self.engine = "vllm"
        t, stamp = self._clock.vllm(text[: m.start()])
        return [Parsed(ev.RUNTIME, {"src": "hit", "t": t, "hit_pct": float(m.group(1))}, None, stamp)]


# The bulk lane's row readers (the C lane's and the regex lane's rows alike).
_UNSET = object()
_LABELS: dict[bytes, str | None] = {}
_DAYS: dict[bytes, float] = {}


def bulk_label(ranks: bytes) -> str | None:
    """``b" DP0 TP0"`` → ``"DP0 TP0"``, as ``_Clock.sglang`` makes it (cached: a journal has few)."""
    label = _LABELS.get(ranks, _UNSET)
    if label is _UNSET:
        label = ranks.strip().decode() or None
        if len(_LABELS) < 4096:
            _LABELS[ranks] = label
    return label  # type: ignore[return-value]


def bulk_times(stamp: bytes) -> tuple[float, str]:
    """``b"2026-09-01 12:00:05"`` → (seconds on ``_Clock``'s scale for dated stamps, stamp text).

    A dated SGLang stamp needs no clock state (only time-only and yearless stamps wrap), so the
    bulk lane computes exactly what ``_Clock.sglang`` would. ValueError for an impossible date.
    """
    day = _DAYS.get(stamp[:10])
    if day is None:
        day = _dt.date(int(stamp[:4]), int(stamp[5:7]), int(stamp[8:10])).toordinal() * 86400.0
        if len(_DAYS) < 100_000:
            _DAYS[stamp[:10]] = day
    return day + (int(stamp[11:13]) * 3600 + int(stamp[14:16]) * 60 + int(stamp[17:19])), stamp.decode()


def bulk_valid(row: tuple) -> bool:
    """Whether the per-line path would have made an event of this row (its numbers convert)."""
    try:
        bulk_times(row[0])
        if row[17] is not None:
            return True
        if row[2] is not None:
            int(row[2]), int(row[3]), float(row[4]), float(row[6]), int(row[8])
        else:
            int(row[14]), int(row[15]), float(row[13]), int(row[10]), int(row[11])
            row[12] and float(row[12]), row[16] is not None and float(row[16])
    except ValueError:
        return False
    return True
