"""PyTorch's CUDA caching allocator, as far as it decides how much device memory a load reserves.

Why: SGLang's "Load weight end … mem usage" is the drop in free device memory across loading, read
after ``empty_cache()``, so it counts the allocator's segments, not the tensors. Segments are cut
to fixed sizes (c10/cuda/CUDACachingAllocator.cpp, default settings): a request of ≤ 1 MiB is
served from a 2 MiB segment shared with other small ones, one of 1–10 MiB from a 20 MiB segment
shared likewise, and a larger one gets a segment of its own rounded up to 2 MiB. Blocks are found
best-fit (smallest free block that holds the request; ties go to the older segment here, to the lower
address in PyTorch, which orders the same way for a load that only grows) and split when enough
is left (≥ 512 B in the small pool, > 1 MiB in the large one); a free merges with free neighbours,
and ``empty_cache`` returns only segments with nothing allocated in them. So a model whose matrices
are not multiples of 2 MiB, or that frees load-time tensors between live ones, reserves more than
its parameters: 0.06 GiB for Qwen3-30B-A3B at TP4, 0.4 GiB for Kimi-K2.5 INT4 at TP8.

Checked against the real allocator (torch 2.11, H200) to the byte on eleven recorded sequences:
tests/unit/model/test_allocator.py. That checks the allocator; the order and shapes of an engine's load are
the engine module's claim (engines/sglang/load_memory.py), checked against its logged totals.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MIB = 1 << 20
MIN_BLOCK = 512  # every request is rounded up to a multiple of this
SMALL_SIZE = 1 * MIB  # largest request served from the small pool
SMALL_BUFFER = 2 * MIB  # segment size of the small pool
LARGE_BUFFER = 20 * MIB  # segment size for requests of 1–10 MiB
MIN_LARGE_ALLOC = 10 * MIB  # requests from here get a segment of their own
ROUND_LARGE = 2 * MIB  # … rounded up to this


def round_size(nbytes: int) -> int:
    """A request as the allocator books it."""
    return MIN_BLOCK if nbytes < MIN_BLOCK else -(-nbytes // MIN_BLOCK) * MIN_BLOCK


def segment_size(size: int) -> int:
    """The segment cudaMalloc'd when no cached block holds a request of ``size`` (already rounded)."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


@dataclass
class _Block:
    size: int
    allocated: bool = False


@dataclass
class _Segment:
    small: bool
    blocks: list[_Block] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(b.size for b in self.blocks)


class CachingAllocator:
    """Enough of the allocator to replay allocations and frees and read back what stays reserved."""

    def __init__(self) -> None:
        self.segments: list[_Segment] = []

    def malloc(self, nbytes: int) -> _Block:
        """Book a tensor of ``nbytes``; the returned handle frees it."""
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        found = self._best_fit(size, small)
        if found is None:
            seg = _Segment(small, [_Block(segment_size(size))])
            self.segments.append(seg)
            found = (seg, 0)
        seg, i = found
        block = seg.blocks[i]
        rest = block.size - size
        if (small and rest >= MIN_BLOCK) or (not small and rest > SMALL_SIZE):
            block.size = size
            seg.blocks.insert(i + 1, _Block(rest))
        block.allocated = True
        return block

    def _best_fit(self, size: int, small: bool) -> tuple[_Segment, int] | None:
        best: tuple[int, _Segment, int] | None = None
        for seg in self.segments:
            if seg.small != small:
                continue
            for i, b in enumerate(seg.blocks):
                if not b.allocated and b.size >= size and (best is None or b.size < best[0]):
                    best = (b.size, seg, i)
        return None if best is None else (best[1], best[2])

    def free(self, block: _Block) -> None:
        """Give a tensor back: its block merges with free neighbours in its segment."""
        for seg in self.segments:
            for i, b in enumerate(seg.blocks):
                if b is block:
                    b.allocated = False
                    self._merge(seg, i)
                    return

    @staticmethod
    def _merge(seg: _Segment, i: int) -> None:
        if i + 1 < len(seg.blocks) and not seg.blocks[i + 1].allocated:
            seg.blocks[i].size += seg.blocks.pop(i + 1).size
        if i > 0 and not seg.blocks[i - 1].allocated:
            seg.blocks[i - 1].size += seg.blocks.pop(i).size

    def empty_cache(self) -> None:
        """Return every segment with nothing allocated in it (what ``torch.cuda.empty_cache`` does)."""
        self.segments = [s for s in self.segments if any(b.allocated for b in s.blocks)]

    @property
    def reserved(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def allocated(self) -> int:
        return sum(b.size for s in self.segments for b in s.blocks if b.allocated)


def replay(events: list[tuple[str, int | str, int]]) -> int:
    """Bytes reserved after a load, ``empty_cache`` included.

    ``events``: ("alloc", key, nbytes) books a tensor under ``key``; ("free", key, 0) gives it back.
    """
    alloc = CachingAllocator()
    live: dict[int | str, _Block] = {}
    for op, key, nbytes in events:
        if op == "alloc":
            live[key] = alloc.malloc(nbytes)
        elif op == "free" and key in live:
            alloc.free(live.pop(key))
    alloc.empty_cache()
    return alloc.reserved
