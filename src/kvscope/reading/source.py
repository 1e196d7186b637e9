"""Stream input files in large blocks and hand on only the lines that can matter.

Why blocks and anchors instead of ``for line in file``: a week of journal is gigabytes of serving
lines; a Python-level loop over every line costs more than the whole rest of kvscope. Each block
is searched at C speed for the anchor words (see ``scan.AnchorScanner``) and only the lines that
hold one are decoded. Every candidate line is followed by its next physical line, marked as
context, so a line hard-wrapped by a terminal can be joined again.

Memory is bounded by the block size plus ``MAX_LINE_BYTES``: a longer line is skipped and counted,
never buffered whole. A ``.gz`` input is decompressed as a stream and cut off when it expands far
beyond what any log compresses to (a decompression bomb). stdin and FIFOs are read as streams, so
``journalctl -f | kvscope explain -`` works in constant memory.
"""

from __future__ import annotations

import collections
import contextlib
import gzip
import os
import re
import stat
import sys
import zlib
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout  # not the builtin before Python 3.11
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol

from kvscope.core.errors import InputError
from kvscope.reading.native import NATIVE
from kvscope.reading.scan import AnchorScanner

BLOCK_BYTES = 4 << 20
MAX_LINE_BYTES = 1 << 20
TEXT_SAMPLE_BYTES = 64 << 10
# Bytes that no text log holds (tab, LF, FF, CR and ESC are text; ESC starts colour codes).
_CONTROL = bytes(b for b in range(32) if b not in (9, 10, 12, 13, 27)) + b"\x7f"
# Text logs compress 5-50x, a file of one repeated line a few hundred x; deflate's ceiling is
# about 1032x. Past this ratio (and the allowance) the input is treated as a decompression bomb.
MAX_GZIP_RATIO = 256
MIN_GZIP_ALLOWANCE = 64 << 20
# Anchor-key plan: sample size, and how often it is remade even when hits stay as planned.
PLAN_SAMPLE_BYTES = 64 << 10
REPLAN_BYTES = 64 << 20
DIRECT_REPLAN_BYTES = 8 << 20
# Bulk lane: a stretch of at most this many bytes is split by the bulk pattern at once (its rows are
# transient Python objects, so this bounds their memory), and the byte that marks a removed line.
BULK_BYTES = 1 << 20
BULK_MARK = b"\x01"
# Prepare the next stretches on a second thread (C scanner only; see _FileScan._start); KVSCOPE_THREADS=0
# keeps everything on one thread (to compare, or where a second thread is unwelcome).
PREFETCH_SPLITS = os.environ.get("KVSCOPE_THREADS", "1") != "0"
NOT_PREPARED: Any = object()  # a stretch not prepared ahead (see _FileScan._prepare), or not yet
# How many regions (blocks) the reader reads, and starts splitting, before handing on the current one.
REGIONS_AHEAD = 4
# While the second thread splits, the interpreter's GIL switch interval is this short (the default
# is 5 ms): the splitting thread needs the GIL briefly after each stretch, and waited up to the whole
# interval for the folding thread to let go of it (measured: a third of its time).
SWITCH_S = 0.0002
# How long the folding thread waits for its next stretch from the Python thread before it prepares
# a queued one itself (preparing one takes ~1 ms; the one it waits for is often a fraction of that
# from done). A stretch on the C lane's thread is not waited for: that thread needs no GIL to finish.
STEAL_AFTER_S = 0.0003
SKIP_LINE, OVERLONG = "skip-line", "overlong-started"  # run()'s marks between regions


# ``count_lines(buf, lo, hi)`` = ``buf.count(b"\n", lo, hi)``; the C one is 4-6x faster, and line
# numbering touches every byte of the input.
count_lines = NATIVE.count_lines if NATIVE is not None else (lambda buf, lo, hi: buf.count(b"\n", lo, hi))
# ``low_bytes(buf)`` = ``(buf.count(b"\0"), BULK_MARK in buf)``: the C one looks at each byte once
# (text has neither), so a block's stretches need no look for the mark when they are split.
low_bytes = NATIVE.low_bytes if NATIVE is not None else (lambda buf: (buf.count(b"\0"), BULK_MARK in buf))


@dataclass(slots=True)
class Line:
    file: str
    line_no: int
    text: str
    context: bool = False  # True: only the line after a candidate, offered for re-joining wraps


class BulkSplitter(Protocol):
    """A bulk lane that splits a stretch itself: (text with matched lines marked, rows) or None.
    It must return None for a stretch that holds BULK_MARK itself (the per-line path reads those)."""

    def split_rows(self, buf: bytes, lo: int, hi: int, anchors: Any = None, clean: bool = False
                   ) -> tuple[Any, ...] | None: ...


@dataclass(slots=True)
class Bulk:
    """Consecutive matches of the bulk pattern (no candidate line between them): one tuple of groups each.

    Why: the serving lines of one dominant shape are most of a journal; handing them on as one item
    per run instead of one ``Line`` per line is what keeps their cost near that of the regex alone.
    """

    file: str
    line_no: int  # of the first matched line
    last_line: int
    rows: Any  # list of group tuples (the regex lane) or the C lane's Batch: a sequence either way


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
    sampled_bytes: int = 0  # the head of each input, looked at closely for binary content
    nontext_bytes: int = 0  # control bytes and invalid UTF-8 in that head

    def looks_binary(self) -> bool:
        """NUL bytes, or a head that is mostly not text (random data has few NULs but no UTF-8)."""
        if self.bytes_read == 0:
            return False
        many_nuls = self.nul_bytes > max(16, self.bytes_read // 100)
        return many_nuls or (self.sampled_bytes > 0 and self.nontext_bytes > self.sampled_bytes // 10)


def _open(path: str) -> BinaryIO:
    """Open a path (or '-' for stdin) for binary streaming; refuse what cannot be a log."""
    if path == "-":
        if sys.stdin is None or not hasattr(sys.stdin, "buffer"):
            raise InputError("-: there is no standard input to read")
        return sys.stdin.buffer
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    except ValueError:  # e.g. a NUL byte in the path
        raise InputError(f"{path!r}: not a usable path") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{path}: is a directory, give the log files inside it")
    try:
        return open(path, "rb")  # noqa: SIM115 - closed by the caller
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None


def _is_gzip(fh: BinaryIO) -> bool:
    """gzip's magic and its one compression method (deflate): a text log never starts so."""
    try:
        return fh.peek(3)[:3] == b"\x1f\x8b\x08" if hasattr(fh, "peek") else False
    except OSError:
        return False


class _Counting:
    """A read-only file object that counts the bytes read through it (compressed bytes, here)."""

    def __init__(self, raw: BinaryIO):
        self.raw = raw
        self.count = 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.count += len(data)
        return data


class _BoundedGzip:
    """A gzip stream that stops past MAX_GZIP_RATIO × the compressed bytes read (bomb guard).

    The ratio is taken against what was actually read, not the file size, so it also holds for
    stdin and FIFOs.
    """

    def __init__(self, raw: BinaryIO, path: str, stats: ReadStats):
        self._raw = _Counting(raw)
        self._gz = gzip.GzipFile(fileobj=self._raw, mode="rb")  # type: ignore[arg-type]
        self._seen = 0
        self._path = path
        self._stats = stats
        self._done = False

    def read1(self, n: int) -> bytes:
        if self._done:
            return b""
        if self._seen > max(MIN_GZIP_ALLOWANCE, self._raw.count * MAX_GZIP_RATIO):
            self._done = True
            self._stats.warnings.append(
                f"{self._path}: stopped after {self._seen >> 20} MiB of decompressed data "
                f"(more than {MAX_GZIP_RATIO}x the compressed size; a decompression bomb?)"
            )
            return b""
        try:
            data = self._gz.read1(n)
        except (EOFError, OSError, zlib.error) as exc:
            self._done = True
            self._stats.truncated_gzip.append(self._path)
            why = "ends early (truncated?)" if isinstance(exc, EOFError) else f"is damaged ({exc})"
            self._stats.warnings.append(f"{self._path}: compressed data {why}; read what came before")
            return b""
        self._seen += len(data)
        return data


def _blocks(fh: BinaryIO | _BoundedGzip, name: str, stats: ReadStats) -> Iterator[bytes]:
    """Blocks of BLOCK_BYTES (the last one shorter). A pipe's read1 returns what it holds now (64 KiB
    at most); its pieces are gathered into whole blocks, because each block costs the same to hand
    on whatever its size, and explain reports at the end of its input anyway. Measured: a journal
    through a pipe took twice as long as the same file when every 64 KiB piece was a block."""
    read = getattr(fh, "read1", None) or fh.read
    while True:
        parts: list[bytes] = []
        size = 0
        failed = False
        while size < BLOCK_BYTES:
            try:
                data = read(BLOCK_BYTES - size)
            except OSError as exc:
                stats.warnings.append(f"{name}: read error ({exc.strerror or exc}); read what came before")
                failed = True
                break
            if not data:
                break
            parts.append(data)
            size += len(data)
        if parts:
            yield parts[0] if len(parts) == 1 else b"".join(parts)
        if size < BLOCK_BYTES or failed:
            return


def iter_candidate_lines(
    paths: Iterable[str],
    anchors: tuple[bytes, ...],
    stats: ReadStats | None = None,
    bulk: re.Pattern[bytes] | BulkSplitter | None = None,
) -> Iterator[Line | Bulk]:
    """Yield the lines of all inputs that contain an anchor, each followed by its successor as context.

    Line numbers are 1-based physical lines (split on ``\\n``). A line longer than MAX_LINE_BYTES is
    never yielded, as candidate or context; it is counted in ``stats.overlong_lines``.

    With ``bulk`` (a bytes pattern whose match starts with the newline before a line and ends
    before the newline after it), the lines it matches are not yielded as lines: each run of them
    between two candidate lines comes as one ``Bulk`` of ``findall``-style tuples, in input order.
    ``bulk`` may also be an object whose ``split_rows(buf, lo, hi)`` does that split itself (an engine's
    faster lane; its rows are then whatever sequence it returns). A matched line is never a
    candidate nor offered as context.
    """
    stats = stats if stats is not None else ReadStats()
    scanner = AnchorScanner(anchors)
    for path in paths:
        fh = _open(path)
        name = "<stdin>" if path == "-" else path
        stats.files.append(name)
        stream: BinaryIO | _BoundedGzip = _BoundedGzip(fh, name, stats) if _is_gzip(fh) else fh
        try:
            blocks = _blocks(stream, name, stats)
            ahead = PREFETCH_SPLITS and _regular(fh)  # a pipe's read may wait for ever: not on a thread
            counted = _read_ahead(blocks) if ahead else ((block, *low_bytes(block)) for block in blocks)
            yield from _FileScan(name, scanner, stats, bulk).run(counted)
        finally:
            if fh is not sys.stdin.buffer:
                fh.close()


class _FileScan:
    """The per-file state of one streaming scan: line number, the partial last line, context."""

    def __init__(
        self, name: str, scanner: AnchorScanner, stats: ReadStats, bulk: re.Pattern[bytes] | BulkSplitter | None = None
    ):
        self.name = name
        self.bulk = bulk
        self.scanner = scanner
        self.stats = stats
        self.line_no = 0  # lines completed so far
        self.want_context = False  # the last completed line was a candidate
        self.next_plan = 0  # bytes_read at which the key plan is remade
        self.last_plan = 0
        self.file_bytes = 0
        self.queued: collections.deque[_Ahead | _Job] = collections.deque()  # stretches handed to the second thread
        self.python_thread = False  # the vLLM lane reads this file's stretches: a Python thread prepares them

    def run(self, blocks: Iterator[tuple[bytes, int, bool]]) -> Iterator[Line | Bulk]:
        """The candidate lines (and bulk rows) of the file, in order.

        Up to REGIONS_AHEAD regions are started (their stretches prepared on a second thread where
        the C scanner runs, see ``_start``) before the oldest is handed on, so preparing what comes
        next overlaps the folding of what came before.
        """
        ahead: collections.deque[tuple[Any, Any]] = collections.deque()
        switch = sys.getswitchinterval()
        if PREFETCH_SPLITS and self.scanner.native is not None:  # see SWITCH_S; given back when the file is done
            sys.setswitchinterval(min(switch, SWITCH_S))
        try:
            for piece in self._pieces(blocks):
                ahead.append((piece, self._start(piece)))
                if len(ahead) > REGIONS_AHEAD:
                    yield from self._finish(*ahead.popleft())
            while ahead:
                yield from self._finish(*ahead.popleft())
        finally:
            sys.setswitchinterval(switch)

    def _pieces(self, blocks: Iterator[tuple[bytes, int, bool]]) -> Iterator[tuple[bytes, int, int, bool] | str]:
        """The file as regions of whole lines ``(buf, lo, hi, clean)``, with SKIP_LINE / OVERLONG where
        a line too long to keep ends or begins (their effect on line numbers is applied in order).
        ``clean``: buf is known to hold no BULK_MARK (its block's ``low_bytes`` said so)."""
        carry = b""  # the start of a line whose newline has not been read yet
        skipping = False  # inside an overlong line: drop bytes until its newline
        for block, nuls, marked in blocks:  # each block with its count of NUL bytes, and whether it holds BULK_MARK
            if self.file_bytes < TEXT_SAMPLE_BYTES:
                self._sample_text(block[: TEXT_SAMPLE_BYTES - self.file_bytes])
            self.file_bytes += len(block)
            self.stats.bytes_read += len(block)
            self.stats.nul_bytes += nuls
            pos = 0
            if skipping:
                nl = block.find(b"\n")
                if nl == -1:
                    continue
                pos, skipping = nl + 1, False
                yield SKIP_LINE
            first = block.find(b"\n", pos)
            if first == -1:
                carry = carry + block[pos:] if carry else block[pos:]
                if len(carry) > MAX_LINE_BYTES:
                    yield OVERLONG
                    carry, skipping = b"", True
                continue
            if carry:
                head, carry = carry + block[pos : first + 1], b""
                if len(head) - 1 > MAX_LINE_BYTES:
                    self.stats.overlong_lines += 1
                    yield SKIP_LINE
                else:
                    yield head, 0, len(head), False
                pos = first + 1
            end = block.rfind(b"\n", pos) + 1
            if end > pos:
                yield block, pos, end, not marked
            carry = block[max(end, pos) :]
            if len(carry) > MAX_LINE_BYTES:
                yield OVERLONG
                carry, skipping = b"", True
        if skipping:
            yield SKIP_LINE
        elif carry:
            yield carry + b"\n", 0, len(carry) + 1, False

    def _sample_text(self, head: bytes) -> None:
        """Count what in the head of the input cannot be text: control bytes and invalid UTF-8."""
        text = head.decode("utf-8", "replace")
        self.stats.sampled_bytes += len(head)
        self.stats.nontext_bytes += len(head) - len(head.translate(None, _CONTROL)) + text.count("\ufffd")

    def _skip_line(self) -> None:
        self.line_no += 1
        self.stats.lines += 1
        self.want_context = False

    def _overlong_started(self) -> None:
        """An unfinished line passed the bound: count it now; its bytes are dropped until its newline."""
        self.stats.overlong_lines += 1
        self.want_context = False

    def _plan(self, buf: bytes, lo: int, hi: int, hits: int) -> None:
        """Remake the anchor-key plan from the newest data when it may be off.

        When: at a file's start, when key hits run well above plan, while some anchor is searched
        for directly (the plan may have been made from startup lines, where capitals abound), and
        every REPLAN_BYTES anyway. A plan costs well under a millisecond.
        """
        if self.scanner.native is not None:  # the C scan needs no plan
            return
        expected = self.scanner.planned_hits_per_byte * (hi - lo)
        due = self.stats.bytes_read >= self.next_plan
        direct_due = self.scanner.direct and self.stats.bytes_read >= self.last_plan + DIRECT_REPLAN_BYTES
        if due or direct_due or hits > 4 * expected + 256:
            self.scanner.plan(buf[max(lo, hi - PLAN_SAMPLE_BYTES) : hi])
            self.last_plan = self.stats.bytes_read
            self.next_plan = self.stats.bytes_read + REPLAN_BYTES

    def _start(self, piece: tuple[bytes, int, int, bool] | str) -> list[tuple[int, int, Any]] | None:
        """A region's stretches ``(lo, hi, prepared)``: ``prepared`` is a ``_Job`` the C lane's thread
        prepares or an ``_Ahead`` the Python thread prepares (see ``_prepare``), else NOT_PREPARED
        (prepared when finished). None: a SKIP_LINE / OVERLONG mark.

        The region is cut into stretches of about BULK_BYTES. Where the C scanner runs, every
        stretch is prepared on the second thread while this one hands on and folds what came
        before: the C split and the anchor scan give up the GIL, and they are half of the work on
        a serving journal and most of it on any other. The results are taken in order, so nothing
        but the timing changes.
        """
        if isinstance(piece, str):
            return None
        buf, lo, hi, clean = piece
        cuts = []
        while lo < hi:  # stretches of about BULK_BYTES, cut at line ends
            cut = buf.find(b"\n", lo + BULK_BYTES, hi) + 1 if hi - lo > 2 * BULK_BYTES else hi
            cut = cut or hi
            cuts.append((lo, cut))
            lo = cut
        if not (PREFETCH_SPLITS and self.scanner.native is not None):
            return [(a, b, NOT_PREPARED) for a, b in cuts]
        job = None if self.python_thread else getattr(self.bulk, "job", None)
        started = [(a, b, _Job(self, buf, a, b, clean, job) if job is not None else _Ahead(self, buf, a, b, clean))
                   for a, b in cuts]
        self.queued.extend(slot for _, _, slot in started)
        return started

    def _finish(self, piece: tuple[bytes, int, int, bool] | str, stretches: list[tuple[int, int, Any]] | None
                ) -> Iterator[Line | Bulk]:
        """Hand on the candidate lines and bulk rows of a region started by ``_start``."""
        if stretches is None:
            self._skip_line() if piece == SKIP_LINE else self._overlong_started()
            return
        buf, clean = piece[0], piece[3]
        for a, b, ahead in stretches:
            prepared = self._prepare(buf, a, b, clean) if ahead is NOT_PREPARED else self._take(ahead)
            yield from self._lines(*prepared)

    def _prepare(self, buf: bytes, lo: int, hi: int, clean: bool = False
                 ) -> tuple[bytes, int, int, Any, list[int] | None]:
        """What a stretch needs before its lines can be handed on: the bulk split where a lane
        applies, then the C anchor scan of what is left — ``(text, lo, hi, rows or None, starts or
        None)`` for ``_lines``. It reads no state that changes (the C scanner has no plan), so the
        second thread may do it."""
        split = self._bulk_split(buf, lo, hi, clean) if self.bulk is not None else None
        rows = starts = None
        if split is not None:
            buf, lo, hi, rows = split[0], 1, len(split[0]), split[1]
            starts = split[2] if len(split) > 2 else None  # the C lane scanned its text already
        if starts is None and self.scanner.native is not None:
            starts = self.scanner.line_starts(buf, lo, hi)[0]
        return buf, lo, hi, rows, starts

    def _take(self, slot: _Ahead | _Job) -> Any:
        """A stretch, prepared. While the second thread is still on it, this thread takes the newest
        stretch not yet begun back and prepares it itself: both threads stay busy whichever is faster.
        A stretch not begun is prepared here at once."""
        while not slot.take_back() and not slot.done():
            if slot.wait(STEAL_AFTER_S) or not self._steal():
                break
        if self.queued and self.queued[0] is slot:
            self.queued.popleft()
        return slot.get()

    def _steal(self) -> bool:
        """Prepare the newest queued stretch here if the second thread has not begun it."""
        while self.queued:
            last = self.queued.pop()
            if last.done():
                continue
            return last.take_back()  # False: begun, and so is every older one (they are taken in order)
        return False

    def _bulk_split(self, buf: bytes, lo: int, hi: int, clean: bool = False) -> tuple[Any, ...] | None:
        """(``buf[lo:hi]`` with each bulk-matched line replaced by BULK_MARK, after a leading newline;
        the match groups, in order; where the C lane split it, the text's candidate line starts),
        or None where the lane does not apply.

        The lane stays off a stretch that holds an overlong line (the per-line path skips those) or
        the mark byte itself. One ``split`` call gives both the text between matches and the groups.
        """
        assert self.bulk is not None
        if hi - lo > MAX_LINE_BYTES + 1 and _overlong_lines(buf, lo, hi):
            return None
        lane = getattr(self.bulk, "split_rows", None)
        if lane is not None:  # an engine's lane object (kvscope.engines.serving.BulkLane): it refuses the mark itself
            return lane(buf, lo, hi, self.scanner.native, clean)
        if not clean and buf.find(BULK_MARK, lo, hi) != -1:
            return None
        return regex_split(self.bulk, buf, lo, hi)  # type: ignore[arg-type]

    def _lines(self, buf: bytes, lo: int, hi: int, rows: Any = None, starts: list[int] | None = None
               ) -> Iterator[Line | Bulk]:
        """Candidate lines of ``buf[lo:hi]`` (whole lines); with ``rows``, ``buf`` is a bulk-split
        stretch whose marked lines stand for those rows, yielded as ``Bulk`` runs in their place.
        ``starts``: the candidate lines' starts when the C scan found them already."""
        if starts is None:
            big = hi - lo >= PLAN_SAMPLE_BYTES or self.stats.bytes_read < PLAN_SAMPLE_BYTES
            if big and self.stats.bytes_read >= self.next_plan:
                self._plan(buf, lo, hi, 0)
            starts, hits = self.scanner.line_starts(buf, lo, hi)
            if big:
                self._plan(buf, lo, hi, hits)
        overlong = _overlong_lines(buf, lo, hi) if hi - lo > MAX_LINE_BYTES + 1 else set()
        self.stats.overlong_lines += len(overlong)
        name, find, count = self.name, buf.find, buf.count
        start_set = set(starts)
        if rows is not None:  # a marked line is no context: the per-line path saw it as a candidate
            start_set.update([i + 1 for i in _marks(buf, lo, starts)])
        if self.want_context and lo not in start_set and lo not in overlong:
            yield Line(name, self.line_no + 1, _decode(buf[lo : find(b"\n", lo, hi)]), context=True)
        line_no, counted_to = self.line_no, lo  # line_no: newlines in buf[lo:counted_to], plus before
        last_end = -1
        done, taken = lo, 0  # rows before offset ``done`` have been yielded: ``taken`` of them
        for start in starts:
            if rows is not None and taken < len(rows):
                n = count(BULK_MARK, done, start)
                if n:
                    yield self._bulk(buf, done, start, line_no, counted_to, rows[taken : taken + n])
                    taken += n
            line_no += count_lines(buf, counted_to, start)
            counted_to = start
            if start in overlong:
                continue
            end = find(b"\n", start, hi)
            last_end = done = end
            yield Line(name, line_no + 1, _decode(buf[start:end]))
            nxt = end + 1
            if nxt < hi and nxt not in start_set and nxt not in overlong:
                yield Line(name, line_no + 2, _decode(buf[nxt : find(b"\n", nxt, hi)]), context=True)
        if rows is not None and taken < len(rows):
            yield self._bulk(buf, done, hi, line_no, counted_to, rows[taken:])
        line_no += count_lines(buf, counted_to, hi)
        self.stats.lines += line_no - self.line_no
        self.line_no = line_no
        self.want_context = last_end == hi - 1

    def _bulk(self, buf: bytes, lo: int, hi: int, line_no: int, counted_to: int, rows: list[tuple]) -> Bulk:
        """The rows whose marks lie in ``buf[lo:hi]``, with the line numbers of the first and last."""
        first, last = buf.find(BULK_MARK, lo, hi), buf.rfind(BULK_MARK, lo, hi)
        first_no = line_no + count_lines(buf, counted_to, first) + 1
        return Bulk(self.name, first_no, first_no + count_lines(buf, first, last), rows)


class _Ahead:
    """A stretch handed to the second (Python) thread to prepare; ``value`` is set once this thread has it."""

    __slots__ = ("args", "future", "scan", "value")

    def __init__(self, scan: _FileScan, buf: bytes, lo: int, hi: int, clean: bool) -> None:
        self.scan, self.args = scan, (buf, lo, hi, clean)
        self.value: Any = NOT_PREPARED
        self.future = _thread("prepare").submit(scan._prepare, buf, lo, hi, clean)

    def done(self) -> bool:
        return self.value is not NOT_PREPARED or self.future.done()

    def take_back(self) -> bool:
        """Prepare it on this thread if the second one has not begun it (True)."""
        if self.value is NOT_PREPARED and self.future.cancel():
            self.value = self.scan._prepare(*self.args)
            return True
        return False

    def wait(self, seconds: float) -> bool:
        with contextlib.suppress(FutureTimeout):
            self.value = self.future.result(timeout=seconds)
            return True
        return False

    def get(self) -> Any:
        if self.value is NOT_PREPARED:
            self.value = self.future.result()
        return self.value


JOB_VLLM_LANE, JOB_CALLERS_PATH = 1, 2  # what kvscope._bulk.Job.result() says of a stretch it hands back


class _Job:
    """A stretch the C lane's own thread splits and anchor-scans (``kvscope._bulk.Job``): that thread
    never waits for the GIL, which the folding thread holds through every fold. Where the C lane
    cannot read the stretch (the vLLM lane's words, the mark byte, a long number…) it is prepared
    by ``_prepare`` when taken, and once the vLLM lane was needed the file's later stretches go to
    the Python thread instead (``_Ahead``), which runs that lane too."""

    __slots__ = ("args", "job", "scan")

    def __init__(self, scan: _FileScan, buf: bytes, lo: int, hi: int, clean: bool, job: Any) -> None:
        self.scan, self.args = scan, (buf, lo, hi, clean)
        self.job = job(buf, lo, hi, scan.scanner.native, clean, MAX_LINE_BYTES)

    def done(self) -> bool:
        return bool(self.job.done())

    def take_back(self) -> bool:
        return bool(self.job.run_here())

    def wait(self, seconds: float) -> bool:
        return False  # the C thread needs no GIL to finish: this one steals work meanwhile

    def get(self) -> Any:
        found = self.job.result()
        buf, lo, hi, clean = self.args
        if isinstance(found, tuple):
            return found[0], 1, len(found[0]), found[1], found[2]
        if isinstance(found, list):
            return buf, lo, hi, None, found
        if found == JOB_VLLM_LANE:
            self.scan.python_thread = True
        return self.scan._prepare(buf, lo, hi, clean)  # JOB_VLLM_LANE or JOB_CALLERS_PATH


def _read_ahead(blocks: Iterator[bytes]) -> Iterator[tuple[bytes, int, bool]]:
    """(block, its NUL bytes, whether it holds BULK_MARK), each next block read and looked at on a
    thread of its own while this one is handed on: reading (the kernel's copy, or zlib for a .gz)
    and ``low_bytes`` give up the GIL, and were a quarter of the scanning thread's work on a serving
    journal. One block ahead; the
    read under way is waited for before the file is closed."""

    def read() -> tuple[bytes, int, bool] | None:
        block = next(blocks, None)
        return None if block is None else (block, *low_bytes(block))

    pending = _thread("read").submit(read)
    try:
        while True:
            got = pending.result()
            if got is None:
                return
            pending = _thread("read").submit(read)
            yield got
    finally:
        with contextlib.suppress(Exception):
            pending.result()


def _regular(fh: BinaryIO) -> bool:
    try:
        return stat.S_ISREG(os.fstat(fh.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):
        return False


_THREADS: dict[str, ThreadPoolExecutor] = {}


def _thread(name: str) -> ThreadPoolExecutor:
    """The one thread of this name ("read": blocks ahead of the scan; "prepare": stretches ahead of
    the fold), made on first use."""
    pool = _THREADS.get(name)
    if pool is None:
        pool = _THREADS[name] = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"kvscope-{name}")
    return pool


def regex_split(pattern: re.Pattern[bytes], buf: bytes, lo: int, hi: int) -> tuple[bytes, list[tuple]] | None:
    """The bulk split by a bytes pattern over ``buf[lo:hi]`` (whole lines): the text, after a leading
    newline, with each matched line replaced by BULK_MARK, and the match groups in order; None
    when nothing matched."""
    view = buf[lo - 1 : hi] if lo and buf[lo - 1] == 10 else b"\n" + buf[lo:hi]
    parts = pattern.split(view)
    if len(parts) == 1:
        return None
    k = pattern.groups + 1
    rows = list(zip(*[parts[i::k] for i in range(1, k)], strict=True))
    return (b"\n" + BULK_MARK).join(parts[::k]), rows


def _marks(buf: bytes, lo: int, starts: list[int]) -> Iterator[int]:
    """Offsets of the newlines before marked lines that directly follow a candidate line (or begin
    the stretch), so the caller can keep them from being offered as context."""
    if buf.startswith(BULK_MARK, lo):
        yield lo - 1
    for start in starts:
        end = buf.find(b"\n", start)
        if end != -1 and buf.startswith(BULK_MARK, end + 1):
            yield end


def _overlong_lines(buf: bytes, lo: int, hi: int) -> set[int]:
    """Start offsets of the lines in ``buf[lo:hi]`` longer than MAX_LINE_BYTES.

    A line longer than 2h contains a whole newline-free window [p, p + h) of any grid of step h that
    begins at or before it, so only windows without a newline need a closer look: a few memchr
    calls per block instead of a look at every line.
    """
    h = max(1, MAX_LINE_BYTES // 2)
    found: set[int] = set()
    find, rfind = buf.find, buf.rfind
    p = lo
    while p + h <= hi:
        if find(b"\n", p, p + h) != -1:
            p += h
            continue
        nl = rfind(b"\n", lo, p)
        start = nl + 1 if nl != -1 else lo
        end = find(b"\n", p + h, hi)
        if end - start > MAX_LINE_BYTES:
            found.add(start)
        p = end + 1
    return found


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")
