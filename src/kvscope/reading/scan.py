"""Find the lines of a buffer that contain any of a set of anchor words, in a few C-speed passes.

Why not ``buf.find(anchor)`` once per anchor: CPython's substring search runs at roughly
1-2 GB/s for short needles, so each anchor costs about a third of all of ``grep``, and every
engine adds anchors. A single-byte search is ``memchr`` (10+ GB/s). So each anchor is given a
*key byte* (one of its own bytes that is rare in the data being read), the buffer is searched for
each key byte, and each hit is checked against the few anchors sharing that key. Anchors share
keys where they can (``mem`` and ``OutOfMemory`` both contain ``m``), so adding an anchor usually
costs nothing more than checking its (rare) key hits.

Some logs leave an anchor no rare byte at all: in a vLLM journal every line is a uvicorn access
line (``"POST /v1/chat/completions HTTP/1.1" 200 OK``) under a journald prefix, so ``build``,
``sglang`` or ``loading model`` hold only bytes found on every line, and a Python-level look at
each hit costs more than ``grep`` does. Such anchors go to a *regex lane*: one compiled pattern
per key byte, ``key(?:rest1(?<=anchor1)|rest2(?<=anchor2)|…)``, whose hits ``re`` checks in C
(its literal-prefix scan runs at ~1.3 GB/s and a failed hit costs a few ns), so one pass serves
dozens of anchors however common the key. An anchor is searched for directly only where neither
is cheaper. The lines a log repeats most that do hold an anchor (vLLM's stats line holds ``KV
cache``) are full of other keys' bytes; once found, they are masked for the rest of the search.

Which bytes are rare depends on the log (a vLLM journal is full of ``KV``), so the plan is made from
a sample of the data and remade when the hits run higher than planned.

All of that is the pure-Python scanner. Where the C helpers were built (``kvscope.reading.native``)
``line_starts`` is ``kvscope._bulk.Anchors.line_starts`` instead: one pass that looks every second
position's next four bytes up in a hashed set of the anchors' four-byte windows, and compares the
few three- and four-byte anchors 16 positions at a time. There a hit costs nanoseconds, so no plan
is needed (2-3x faster than the planned search on a vLLM journal; the same lines, tested).
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable

from kvscope.reading.native import NATIVE

# Rough costs in nanoseconds, measured on CPython 3.11 (x86-64); only their ratios matter.
SCAN_NS_PER_BYTE = 0.1  # bytes.find of one byte (memchr)
FIND_NS_PER_BYTE = 0.6  # bytes.find of a short multi-byte anchor (0.4-0.8 measured)
HIT_NS = 400.0  # one Python-level look at a key hit
CHECK_NS = 100.0  # one anchor compared at a hit
RE_SCAN_NS_PER_BYTE = 0.75  # a regex lane's pass: re's literal-prefix loop, ~4 MiB in 3 ms
RE_HIT_NS = 20.0  # a key hit checked in C by the lane's pattern ...
RE_BRANCH_NS = 3.0  # ... plus a byte compare or two per anchor of the lane
RE_BEHIND_NS = 25.0  # ... plus a lookbehind at every hit for each anchor that ends with its key
PRIOR_BYTES = 128  # weight of the prior against the counted bytes: it decides only while the sample is small
FREQ_SAMPLE_BYTES = 16 << 10  # byte frequencies are counted on this much of a sample's end (one pass per byte)
MAX_LANE_CACHE = 256  # compiled lane patterns kept across plans
LANE_MIN_BYTES = 16 << 10  # a smaller region searches a lane's anchors directly unless it is compiled
MASK_MIN_LINES = 32  # found lines past which the rest of a region's search skips them (see _scan)
# A plan made from less data than RESAMPLE_BYTES (the first bytes of a file, often startup lines only)
# is remade from the first region that large, and so is a plan under which one key was hit more
# than OVERSHOOT times as often as planned: the caller's own check sums all keys, which hides one key
# turning common while another planned as common turned rare (a journal's month going Feb -> Mar).
RESAMPLE_BYTES = 32 << 10
REPLAN_GAP_BYTES = 2 << 20
OVERSHOOT = 4
OVERSHOOT_SLACK = 256

_UPPER = frozenset(range(ord("A"), ord("Z") + 1))
_LOWER = frozenset(range(ord("a"), ord("z") + 1))
_DIGIT = frozenset(range(ord("0"), ord("9") + 1))


def _prior(byte: int) -> float:
    """A guess at a byte's frequency in log text before any sample has been seen."""
    if byte in (0x20, 0x0A):
        return 0.12
    if byte in _DIGIT:
        return 0.04
    if byte in _LOWER:
        return 0.03
    if byte in _UPPER:
        return 0.004
    if byte < 0x20 or byte >= 0x7F:
        return 0.0005
    return 0.01


def python_cost(freq: float, covers: int) -> float:
    """ns per byte read of keying ``covers`` anchors on a byte of frequency ``freq``, hits looked at in Python."""
    return SCAN_NS_PER_BYTE + freq * (HIT_NS + CHECK_NS * (1 + covers / 8))


def lane_cost(freq: float, covers: list[bytes], key: int) -> float:
    """ns per byte read of a regex lane for ``covers`` on ``key``: dearer per byte, far cheaper per hit."""
    behind = sum(1 for a in covers if a.index(key) == len(a) - 1)
    return RE_SCAN_NS_PER_BYTE + freq * (RE_HIT_NS + RE_BRANCH_NS * len(covers) + RE_BEHIND_NS * behind)


class AnchorScanner:
    """Line starts of the lines holding any anchor; see the module docstring for the method."""

    def __init__(self, anchors: Iterable[bytes], native: bool = True):
        """``native=False`` keeps the pure-Python search even where the C one was built (tests)."""
        uniq = tuple(dict.fromkeys(bytes(a) for a in anchors))
        bad = [a for a in uniq if not a or b"\n" in a]
        if bad:
            raise ValueError(f"anchors must be non-empty and hold no newline: {bad!r}")
        self.anchors = uniq
        self.native = NATIVE.Anchors(uniq) if native and NATIVE is not None else None
        self._bytes = sorted({b for a in uniq for b in a})
        self._having = {b: frozenset(a for a in uniq if b in a) for b in self._bytes}
        self._patterns: dict[tuple[int, tuple[bytes, ...]], re.Pattern[bytes]] = {}
        self.keys: list[tuple[bytes, list[tuple[tuple[bytes, int], ...]]]] = []
        self.lanes: list[tuple[int, tuple[bytes, ...]]] = []  # (key byte, its anchors), compiled on first use
        self.direct: list[bytes] = []
        self.planned_hits_per_byte = 0.0
        self.sample_bytes = 0  # of the data the plan was made from
        self._key_freq: dict[bytes, float] = {}
        self._found: dict[bytes, int] = {}  # lines each key found in the last region scanned
        self._scanned = 0  # bytes scanned by line_starts, and that count at its last own replan
        self._replanned_at = -REPLAN_GAP_BYTES
        fill = next((b for b in range(256) if b != 10 and b not in self._having), None)
        self._fill = None if fill is None else bytes([fill])  # None: no byte to mask with
        if self.native is None:  # the C scan needs no plan (making one costs ~2 ms per run)
            self.plan(b"")

    def plan(self, sample: bytes) -> None:
        """Choose key bytes and their lanes from byte frequencies in the end of ``sample``.

        First the memchr keys, by greedy weighted set cover, while a key costs less per anchor than
        searching for each anchor directly. A regex lane costs about the same however many anchors
        it serves, so it would win that greedy race too early; the anchors left over are instead
        gathered into as few lanes as beat searching for them one by one.
        """
        tail = sample[-FREQ_SAMPLE_BYTES:]
        n = len(tail)
        freq = {b: (tail.count(b) + _prior(b) * PRIOR_BYTES) / (n + PRIOR_BYTES) for b in self._bytes}
        uncovered = set(self.anchors)
        keys = self._memchr_keys(freq, uncovered)
        lanes: set[int] = set()
        while uncovered:
            best_saving, best_key = 0.0, None
            for b in self._bytes:
                covers = sorted(self._having[b] & uncovered)
                saving = FIND_NS_PER_BYTE * len(covers) - lane_cost(freq[b], covers, b) if covers else 0.0
                if saving > best_saving:
                    best_saving, best_key = saving, b
            if best_key is None:  # every remaining anchor is cheaper to search for directly
                break
            keys[best_key] = sorted(self._having[best_key] & uncovered)
            lanes.add(best_key)
            uncovered.difference_update(keys[best_key])
        self.install({a: k for k, group in keys.items() for a in group} | dict.fromkeys(uncovered), lanes)
        self._key_freq = {bytes([k]): freq[k] for k in keys if k not in lanes}
        self.planned_hits_per_byte = sum(self._key_freq.values())
        self.sample_bytes = len(sample)

    def _memchr_keys(self, freq: dict[int, float], uncovered: set[bytes]) -> dict[int, list[bytes]]:
        """Greedy set cover by memchr keys, lazily: a key's cost per anchor only grows as others
        cover its anchors, so a key still best after recomputing is taken without looking further.

        A byte common enough that a regex lane on it would be cheaper is no memchr key at all,
        however many anchors it would serve: its hits cost the same per byte read either way.
        """
        heap = [(python_cost(freq[b], len(self._having[b])) / len(self._having[b]), b) for b in self._bytes]
        heapq.heapify(heap)
        keys: dict[int, list[bytes]] = {}
        while heap and uncovered:
            _, b = heapq.heappop(heap)
            covers = sorted(self._having[b] & uncovered)
            if not covers:
                continue
            cost = python_cost(freq[b], len(covers))
            if heap and cost / len(covers) > heap[0][0]:
                heapq.heappush(heap, (cost / len(covers), b))
                continue
            if cost / len(covers) >= FIND_NS_PER_BYTE:
                break
            if cost > lane_cost(freq[b], covers, b):
                continue  # dropped: a common byte, left to the regex lanes
            keys[b] = covers
            uncovered.difference_update(covers)
        return keys

    def install(self, assignment: dict[bytes, int | None], lanes: Iterable[int] = ()) -> None:
        """Use the given key byte for each anchor (None: search for it directly); keys in ``lanes``
        are checked by a regex lane, the others by a memchr loop.

        ``plan`` calls this; tests call it with arbitrary plans, since every plan must find the same lines.
        """
        groups: dict[int, list[bytes]] = {}
        direct: list[bytes] = []
        for anchor in self.anchors:
            key = assignment.get(anchor)
            if key is None or key not in anchor:
                direct.append(anchor)
            else:
                groups.setdefault(key, []).append(anchor)
        lanes = set(lanes)
        self.keys = [(bytes([k]), _by_next_byte(k, g)) for k, g in groups.items() if k not in lanes]
        self.lanes = [(k, tuple(sorted(g))) for k, g in groups.items() if k in lanes]
        self.direct = direct
        self.planned_hits_per_byte = 0.0
        self.sample_bytes = RESAMPLE_BYTES  # a plan given from outside is kept until the caller replans
        self._key_freq = {}

    def _pattern(self, key: int, group: tuple[bytes, ...], size: int) -> re.Pattern[bytes] | None:
        """The regex lane of one key, compiled once per group (plans repeat as the data does); None
        for a region under LANE_MIN_BYTES when not compiled yet (a big lane takes milliseconds)."""
        pattern = self._patterns.get((key, group))
        if pattern is None and size >= LANE_MIN_BYTES:
            if len(self._patterns) >= MAX_LANE_CACHE:
                self._patterns.clear()
            pattern = self._patterns[(key, group)] = _lane_pattern(key, group)
        return pattern

    def line_starts(self, buf: bytes, lo: int, hi: int) -> tuple[list[int], int]:
        """(sorted start offsets of the candidate lines in ``buf[lo:hi]``, key hits checked in Python).

        ``buf[lo:hi]`` must be whole lines: ``lo`` at a line start, ``buf[hi - 1]`` a newline. May
        remake the plan (see RESAMPLE_BYTES) from a region of RESAMPLE_BYTES or more, at most once
        per REPLAN_GAP_BYTES scanned (data that changes shape every region is not replanned each time).
        """
        if self.native is not None:
            return self.native.line_starts(buf, lo, hi), 0
        big = hi - lo >= RESAMPLE_BYTES
        if big and self.sample_bytes < RESAMPLE_BYTES:
            self.plan(buf[hi - RESAMPLE_BYTES : hi])
        may_replan = big and self._scanned - self._replanned_at >= REPLAN_GAP_BYTES
        self._scanned += hi - lo
        found = self._scan(buf, lo, hi, bail=may_replan)
        if isinstance(found, int):  # a key ran far over plan at offset ``found``: replan from there
            at = min(max(lo, found - RESAMPLE_BYTES // 2), hi - RESAMPLE_BYTES)
            self._replan(buf[at : at + RESAMPLE_BYTES])
            found = self._scan(buf, lo, hi, bail=False)
        starts, hits, stale = found  # type: ignore[misc]
        if stale and may_replan:
            self._replan(buf[hi - RESAMPLE_BYTES : hi])
        return starts, hits

    def _replan(self, sample: bytes) -> None:
        self.plan(sample)
        self._replanned_at = self._scanned

    def _scan(self, buf: bytes, lo: int, hi: int, bail: bool) -> tuple[list[int], int, bool] | int:
        """(line starts, key hits, whether a key ran over plan), or with ``bail`` the offset at which
        a key's hits passed OVERSHOOT times the plan for the whole region (the scan is abandoned).

        Keys go in the order of the lines they found last time. Once MASK_MIN_LINES lines are found,
        the rest of the search runs on a copy with those lines blanked: the lines a log repeats
        most that hold an anchor (vLLM's stats line holds ``KV cache``) are full of other keys'
        bytes, and each of those hits would cost a Python-level look at a line already taken.
        """
        starts: set[int] = set()
        hits = 0
        stale = False
        view: bytes | bytearray = buf
        find, rfind, startswith = buf.find, buf.rfind, buf.startswith
        for key, by_next in sorted(self.keys, key=lambda k: -self._found.get(k[0], 0)):
            if view is buf and len(starts) >= MASK_MIN_LINES and self._fill:
                view = self._masked(buf, hi, starts)
                find, rfind, startswith = view.find, view.rfind, view.startswith
            limit = OVERSHOOT * self._key_freq.get(key, 1.0) * (hi - lo) + OVERSHOOT_SLACK
            n = 0
            before = len(starts)
            i = find(key, lo, hi)
            while i != -1:  # view[i + 1] exists: the key is no newline and view[hi - 1] is one
                n += 1
                for anchor, off in by_next[view[i + 1]]:
                    p = i - off
                    if p >= lo and startswith(anchor, p) and p + len(anchor) <= hi:
                        nl = rfind(b"\n", lo, p)
                        starts.add(nl + 1 if nl != -1 else lo)
                        i = find(b"\n", i, hi)  # the rest of this line is decided
                        break
                if n > limit:
                    if bail:
                        return i
                    stale = True
                i = find(key, i + 1, hi)
            hits += n
            self._found[key] = len(starts) - before
        if view is buf and len(starts) >= MASK_MIN_LINES and self._fill and (self.lanes or self.direct):
            view = self._masked(buf, hi, starts)
            find, rfind = view.find, view.rfind
        direct = self.direct
        for key, group in self.lanes:
            pattern = self._pattern(key, group, hi - lo)
            if pattern is None:
                direct = direct + list(group)
                continue
            # A match is an anchor (its lookbehind may reach before lo only across the newline
            # that ends the line before, which no anchor holds); endpos=hi keeps it inside.
            m = pattern.search(view, lo, hi)
            while m is not None:
                i = m.start()
                nl = rfind(b"\n", lo, i)
                starts.add(nl + 1 if nl != -1 else lo)
                m = pattern.search(view, find(b"\n", i, hi), hi)
        for anchor in direct:
            i = find(anchor, lo, hi)
            while i != -1:
                nl = rfind(b"\n", lo, i)
                starts.add(nl + 1 if nl != -1 else lo)
                end = find(b"\n", i, hi)
                i = find(anchor, end, hi)
        return sorted(starts), hits, stale

    def _masked(self, buf: bytes, hi: int, starts: set[int]) -> bytearray:
        """A copy of ``buf[:hi]`` with the lines at ``starts`` overwritten by a byte no anchor holds
        (newlines kept, so offsets and line boundaries stay those of ``buf``)."""
        assert self._fill is not None
        view = bytearray(memoryview(buf)[:hi])
        find, fill = buf.find, self._fill
        for start in starts:
            end = find(b"\n", start, hi)
            view[start:end] = fill * (end - start)
        return view


def _lane_pattern(key: int, group: tuple[bytes, ...]) -> re.Pattern[bytes]:
    """``key(?:rest(?<=anchor)|…)`` for the anchors of one key: the match starts at the key of an anchor.

    The bytes after the key are matched first, as a trie (one branch per distinct next byte), so
    ``re`` rejects a hit after a byte compare or two per branch; the bytes before the key are then
    checked by a lookbehind. Anchors that end with their key (only a lookbehind to try) come last.
    """
    items = []
    for anchor in group:
        off = anchor.index(key)
        items.append((anchor[off + 1 :], b"(?<=" + re.escape(anchor) + b")" if off else b""))
    return re.compile(re.escape(bytes([key])) + _trie(items))


def _trie(items: list[tuple[bytes, bytes]]) -> bytes:
    """A regex of (rest, lookbehind) pairs that shares the common leading bytes of the rests."""
    by_first: dict[int, list[tuple[bytes, bytes]]] = {}
    ends = []
    for rest, behind in items:
        if rest:
            by_first.setdefault(rest[0], []).append((rest[1:], behind))
        else:
            ends.append(behind)
    alts = []
    for first, sub in sorted(by_first.items()):
        head = re.escape(bytes([first]))
        alts.append(head + re.escape(sub[0][0]) + sub[0][1] if len(sub) == 1 else head + _trie(sub))
    alts += ends
    return alts[0] if len(alts) == 1 else b"(?:" + b"|".join(alts) + b")"


def _by_next_byte(key: int, group: list[bytes]) -> list[tuple[tuple[bytes, int], ...]]:
    """For each value of the byte after a key hit, the (anchor, key offset) pairs worth comparing.

    Indexing by the next byte keeps a hit's cost flat however many anchors share the key; an
    anchor that ends with its key is compared at every hit.
    """
    buckets: dict[int, list[tuple[bytes, int]]] = {}
    always: list[tuple[bytes, int]] = []
    for anchor in group:
        off = anchor.index(key)
        if off + 1 < len(anchor):
            buckets.setdefault(anchor[off + 1], []).append((anchor, off))
        else:
            always.append((anchor, off))
    table = [tuple(always)] * 256
    for nxt, pairs in buckets.items():
        table[nxt] = tuple(pairs + always)
    return table
