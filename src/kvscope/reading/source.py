"""Stream input files in large blocks and hand on only the lines that can matter.

Why blocks and anchors instead of ``for line in file``: a week of journal is gigabytes of serving
lines; a Python-level loop over every line costs more than the whole rest of kvscope. Scanning each
4 MiB block with ``bytes.find`` for a few anchor words (C speed) and only decoding the lines that hold
one keeps kvscope within a small factor of ``grep``. Every candidate line is followed by its next
physical line, marked as context, so a line hard-wrapped by a terminal can be joined again.

Memory is bounded by the block size plus ``max_line_bytes``: a longer line is skipped and counted.
"""

from __future__ import annotations

import gzip
import os
import stat
import sys
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from kvscope.errors import InputError

BLOCK_BYTES = 4 << 20
MAX_LINE_BYTES = 1 << 20
# A gzip member expanding more than this factor is treated as a decompression bomb and cut off.
MAX_GZIP_RATIO = 2000
MIN_GZIP_ALLOWANCE = 64 << 20


@dataclass(slots=True)
class Line:
    file: str
    line_no: int
    text: str
    context: bool = False  # True: only the line after a candidate, offered for re-joining wraps


@dataclass
class ReadStats:
    """What the reader saw, for the "could not read" part of a report."""

    files: list[str] = field(default_factory=list)
    bytes_read: int = 0
    lines: int = 0
    overlong_lines: int = 0
    nul_bytes: int = 0
    truncated_gzip: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def looks_binary(self) -> bool:
        return self.bytes_read > 0 and self.nul_bytes > max(16, self.bytes_read // 100)


def _open(path: str, stats: ReadStats) -> tuple[BinaryIO, bool]:
    """Open a path (or '-' for stdin) for binary streaming; refuse what cannot be a log."""
    if path == "-":
        return sys.stdin.buffer, False
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{path}: is a directory, give the log files inside it")
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed by the caller
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    head = fh.peek(2)[:2] if hasattr(fh, "peek") else b""
    if head == b"\x1f\x8b":
        return fh, True
    return fh, False


class _BoundedGzip:
    """A gzip stream that stops after MAX_GZIP_RATIO × the compressed size (bomb guard)."""

    def __init__(self, raw: BinaryIO, path: str, stats: ReadStats):
        self._gz = gzip.GzipFile(fileobj=raw, mode="rb")
        size = os.fstat(raw.fileno()).st_size if hasattr(raw, "fileno") else 0
        self._limit = max(MIN_GZIP_ALLOWANCE, size * MAX_GZIP_RATIO)
        self._seen = 0
        self._path = path
        self._stats = stats

    def read1(self, n: int) -> bytes:
        if self._seen >= self._limit:
            self._stats.warnings.append(
                f"{self._path}: stopped after {self._seen >> 20} MiB of decompressed data "
                f"(more than {MAX_GZIP_RATIO}x the file; a decompression bomb?)"
            )
            return b""
        try:
            data = self._gz.read1(n)
        except (EOFError, OSError, zlib.error):
            self._stats.truncated_gzip.append(self._path)
            return b""
        self._seen += len(data)
        return data


def _blocks(fh: BinaryIO | _BoundedGzip) -> Iterator[bytes]:
    read = getattr(fh, "read1", None) or fh.read
    while True:
        try:
            data = read(BLOCK_BYTES)
        except OSError:
            return
        if not data:
            return
        yield data


def _line_starts(buf: bytes, anchors: tuple[bytes, ...]) -> list[int]:
    """Start offsets of the lines in ``buf`` that contain any anchor."""
    starts: set[int] = set()
    find, rfind = buf.find, buf.rfind
    for anchor in anchors:
        i = find(anchor)
        while i != -1:
            start = rfind(b"\n", 0, i) + 1
            starts.add(start)
            end = find(b"\n", i)
            if end == -1:
                break
            i = find(anchor, end)
    return sorted(starts)


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def iter_candidate_lines(
    paths: Iterable[str], anchors: tuple[bytes, ...], stats: ReadStats | None = None
) -> Iterator[Line]:
    """Yield the lines of all inputs that contain an anchor, each followed by its successor as context."""
    stats = stats if stats is not None else ReadStats()
    for path in paths:
        fh, is_gzip = _open(path, stats)
        name = "<stdin>" if path == "-" else path
        stats.files.append(name)
        stream: BinaryIO | _BoundedGzip = _BoundedGzip(fh, name, stats) if is_gzip else fh
        try:
            yield from _scan_stream(stream, name, anchors, stats)
        finally:
            if fh is not sys.stdin.buffer:
                fh.close()


def _scan_stream(
    stream: BinaryIO | _BoundedGzip, name: str, anchors: tuple[bytes, ...], stats: ReadStats
) -> Iterator[Line]:
    carry = b""
    line_no = 0  # number of newlines consumed before the current buffer
    skipping = False  # inside an overlong line: drop bytes until its newline
    want_context = False  # the previous buffer ended right after a candidate line
    for block in _blocks(stream):
        stats.bytes_read += len(block)
        stats.nul_bytes += block.count(b"\0")
        if skipping:
            nl = block.find(b"\n")
            if nl == -1:
                continue
            block = block[nl + 1 :]
            line_no += 1
            skipping = False
        buf = carry + block if carry else block
        cut = buf.rfind(b"\n") + 1
        if cut == 0:
            if len(buf) > MAX_LINE_BYTES:
                stats.overlong_lines += 1
                skipping, carry = True, b""
            else:
                carry = buf
            continue
        body, carry = buf[:cut], buf[cut:]
        if len(carry) > MAX_LINE_BYTES:
            stats.overlong_lines += 1
            skipping, carry = True, b""
        yield from _emit(body, name, anchors, stats, line_no, want_context)
        want_context = bool(body) and _ends_with_candidate(body, anchors)
        n = body.count(b"\n")
        stats.lines += n
        line_no += n
    if carry and not skipping:
        stats.lines += 1
        yield from _emit(carry + b"\n", name, anchors, stats, line_no, want_context)


def _ends_with_candidate(body: bytes, anchors: tuple[bytes, ...]) -> bool:
    last = body[body.rfind(b"\n", 0, len(body) - 1) + 1 :]
    return any(a in last for a in anchors)


def _emit(
    body: bytes, name: str, anchors: tuple[bytes, ...], stats: ReadStats, base_line: int, want_context: bool
) -> Iterator[Line]:
    """Yield candidate lines of a newline-terminated body, each with the following line as context."""
    starts = _line_starts(body, anchors)
    start_set = set(starts)
    if want_context and 0 not in start_set:
        yield Line(name, base_line + 1, _decode(body[: body.find(b"\n")]), context=True)
    counted_to, counted_lines = 0, base_line
    for start in starts:
        counted_lines += body.count(b"\n", counted_to, start)
        counted_to = start
        end = body.find(b"\n", start)
        if end - start > MAX_LINE_BYTES:
            stats.overlong_lines += 1
            continue
        yield Line(name, counted_lines + 1, _decode(body[start:end]))
        nxt_end = body.find(b"\n", end + 1)
        if nxt_end != -1 and (end + 1) not in start_set:
            yield Line(name, counted_lines + 2, _decode(body[end + 1 : nxt_end]), context=True)
