"""Find the lines of a buffer that contain any of a set of anchor words, in a few C-speed passes.

Why not ``buf.find(anchor)`` once per anchor: CPython's substring search runs at roughly
0.5-1 GB/s for short needles, so each anchor costs about as much as all of ``grep``, and every
engine adds anchors. A single-byte search is ``memchr`` (10+ GB/s). So each anchor is given a
*key byte* (one of its own bytes that is rare in the data being read), the buffer is searched for
each key byte, and each hit is checked against the few anchors sharing that key. Anchors share
keys where they can (``mem`` and ``OutOfMemory`` both contain ``m``), so adding an anchor usually
costs nothing more than checking its (rare) key hits. An anchor made only of common bytes is
searched for directly, which is never slower than before.

Which bytes are rare depends on the log (a vLLM journal is full of ``KV``), so the plan is made from
a sample of the data and remade when the hits run higher than planned.
"""

from __future__ import annotations

from collections.abc import Iterable

# Rough costs in nanoseconds, measured on CPython 3.11 (x86-64); only their ratios matter.
SCAN_NS_PER_BYTE = 0.1  # bytes.find of one byte (memchr)
FIND_NS_PER_BYTE = 1.2  # bytes.find of a short multi-byte anchor
HIT_NS = 400.0  # one Python-level look at a key hit
CHECK_NS = 100.0  # one anchor compared at a hit
PRIOR_BYTES = 512  # weight of the prior: it decides only while the sample is small

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


class AnchorScanner:
    """Line starts of the lines holding any anchor; see the module docstring for the method."""

    def __init__(self, anchors: Iterable[bytes]):
        uniq = tuple(dict.fromkeys(bytes(a) for a in anchors))
        bad = [a for a in uniq if not a or b"\n" in a]
        if bad:
            raise ValueError(f"anchors must be non-empty and hold no newline: {bad!r}")
        self.anchors = uniq
        self._bytes = sorted({b for a in uniq for b in a})
        self.keys: list[tuple[bytes, list[tuple[tuple[bytes, int], ...]]]] = []
        self.direct: list[bytes] = []
        self.planned_hits_per_byte = 0.0
        self.plan(b"")

    def plan(self, sample: bytes) -> None:
        """Choose key bytes (greedy weighted set cover) from byte frequencies in ``sample``."""
        n = len(sample)
        freq = {b: (sample.count(b) + _prior(b) * PRIOR_BYTES) / (n + PRIOR_BYTES) for b in self._bytes}
        uncovered = set(self.anchors)
        keys: dict[int, list[bytes]] = {}
        direct: list[bytes] = []
        while uncovered:
            best_ratio, best_key = FIND_NS_PER_BYTE, None
            for b in self._bytes:
                covers = [a for a in uncovered if b in a]
                if not covers:
                    continue
                cost = SCAN_NS_PER_BYTE + freq[b] * (HIT_NS + CHECK_NS * (1 + len(covers) / 8))
                if cost / len(covers) < best_ratio:
                    best_ratio, best_key = cost / len(covers), b
            if best_key is None:  # every remaining anchor is cheaper to search for directly
                direct.extend(sorted(uncovered))
                break
            covered = sorted(a for a in uncovered if best_key in a)
            keys[best_key] = covered
            uncovered.difference_update(covered)
        self.install({a: k for k, group in keys.items() for a in group} | dict.fromkeys(direct))
        self.planned_hits_per_byte = sum(freq[k] for k in keys)

    def install(self, assignment: dict[bytes, int | None]) -> None:
        """Use the given key byte for each anchor (None: search for it directly).

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
        self.keys = [(bytes([k]), _by_next_byte(k, group)) for k, group in groups.items()]
        self.direct = direct
        self.planned_hits_per_byte = 0.0

    def line_starts(self, buf: bytes, lo: int, hi: int) -> tuple[list[int], int]:
        """(sorted start offsets of the candidate lines in ``buf[lo:hi]``, key hits checked).

        ``buf[lo:hi]`` must be whole lines: ``lo`` at a line start, ``buf[hi - 1]`` a newline.
        """
        starts: set[int] = set()
        hits = 0
        find, rfind, startswith = buf.find, buf.rfind, buf.startswith
        for key, by_next in self.keys:
            i = find(key, lo, hi)
            while i != -1:  # buf[i + 1] exists: the key is no newline and buf[hi - 1] is one
                hits += 1
                for anchor, off in by_next[buf[i + 1]]:
                    p = i - off
                    if p >= lo and startswith(anchor, p) and p + len(anchor) <= hi:
                        nl = rfind(b"\n", lo, p)
                        starts.add(nl + 1 if nl != -1 else lo)
                        i = find(b"\n", i, hi)  # the rest of this line is decided
                        break
                i = find(key, i + 1, hi)
        for anchor in self.direct:
            i = find(anchor, lo, hi)
            while i != -1:
                nl = rfind(b"\n", lo, i)
                starts.add(nl + 1 if nl != -1 else lo)
                end = find(b"\n", i, hi)
                i = find(anchor, end, hi)
        return sorted(starts), hits


def _by_next_byte(key: int, group: list[bytes]) -> list[tuple[tuple[bytes, int], ...]]:
    """For each value of the byte after a key hit, the (anchor, key offset) pairs worth comparing.

    Indexing by the next byte keeps a hit's cost flat however many anchors share the key; an
    anchor that ends with its key is compared at every hit.
    """
    buckets: list[list[tuple[bytes, int]]] = [[] for _ in range(256)]
    always: list[tuple[bytes, int]] = []
    for anchor in group:
        off = anchor.index(key)
        if off + 1 < len(anchor):
            buckets[anchor[off + 1]].append((anchor, off))
        else:
            always.append((anchor, off))
    return [tuple(b + always) for b in buckets]
