#!/usr/bin/env python3
"""Does reading grow linearly with the number of ranks? A log of N ranks (a pool line each: a TP/DP/EP
deployment of many workers, or a hostile paste) is read at two sizes; the ratio of the times is printed
against the ratio of the sizes. Rank lookup is a dict, so the ratio stays near the size ratio; a lookup
that scans the ranks of every line makes it the square. Exit 1 when the time ratio exceeds ``--max-ratio``
(default 2 × the size ratio).

    python benchmarks/many_ranks.py
    python benchmarks/many_ranks.py --small 20000 --large 100000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kvscope.api import analyze  # noqa: E402

LINE = "[2026-02-28 12:26:11 TP{i}] KV Cache is allocated. #tokens: 1000, KV size: 1.00 GB\n"


def _seconds(path: Path, n: int) -> float:
    path.write_text("".join(LINE.format(i=i) for i in range(n)))
    start = time.perf_counter()
    analyze([str(path)])
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", type=int, default=5_000)
    ap.add_argument("--large", type=int, default=50_000)
    ap.add_argument("--max-ratio", type=float, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ranks.log"
        small, large = _seconds(path, args.small), _seconds(path, args.large)
    size_ratio = args.large / args.small
    ratio = large / small
    limit = args.max_ratio or 2 * size_ratio
    print(f"{args.small:,} ranks {small:.2f} s, {args.large:,} ranks {large:.2f} s: time ratio {ratio:.1f} "
          f"for a size ratio of {size_ratio:.0f} (limit {limit:.0f})")
    return 0 if ratio <= limit else 1


if __name__ == "__main__":
    sys.exit(main())
