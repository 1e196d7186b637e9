#!/usr/bin/env python3
"""Is reading one long line linear in its length? A line pattern that rescans a run of letters or digits
from every position in it turns one pasted 20 KB line into minutes.

For every anchor word any engine's reader wakes on, a line "ANCHOR <filler> ANCHOR 1.00 GB" is read at two
lengths (``--short`` and ``--long`` filler characters; letters, digits, ``a=`` pairs, ``1.`` runs), in process
(kvscope.api.analyze), and the ratio long/short of the time is printed. Linear reading gives a ratio near
long/short (10 by default); a quadratic pattern gives its square. The worst lines are listed; exit 1 when the
worst ratio exceeds ``--max-ratio`` (default 3 × long/short).

    python benchmarks/long_lines.py
    python benchmarks/long_lines.py --short 2000 --long 40000 --top 5
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kvscope.api import analyze  # noqa: E402
from kvscope.engines.dispatch import ANCHORS  # noqa: E402

FILLERS = {"letters": "a", "digits": "9", "pairs": "a=", "dotted": "1."}


def _seconds(path: Path, word: str, filler: str, n: int) -> float:
    path.write_text(f"[2025-01-01 00:00:00 TP0] {word} {filler * (n // len(filler))} {word} 1.00 GB\n")
    start = time.perf_counter()
    analyze([str(path)])
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--short", type=int, default=2000)
    ap.add_argument("--long", type=int, default=20000)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--max-ratio", type=float, default=None)
    args = ap.parse_args()
    scale = args.long / args.short
    limit = args.max_ratio or 3 * scale
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "line.log"
        for anchor in sorted(set(ANCHORS)):
            word = anchor.decode(errors="ignore")
            for name, filler in FILLERS.items():
                short = max(_seconds(path, word, filler, args.short), 1e-4)
                long = _seconds(path, word, filler, args.long)
                rows.append((long / short, long, word, name))
    rows.sort(reverse=True)
    print(f"{len(rows)} lines ({len(set(ANCHORS))} anchors × {len(FILLERS)} fillers), {args.short:,} vs {args.long:,} "
          f"filler characters (linear ≈ {scale:.0f}×)")
    for ratio, long, word, name in rows[: args.top]:
        print(f"  {ratio:6.1f}×  {long * 1000:8.1f} ms  {word!r} + {name}")
    worst = rows[0][0] if rows else 0.0
    print(f"worst ratio {worst:.1f}× (limit {limit:.0f}×): {'ok' if worst <= limit else 'SUPER-LINEAR'}")
    return 0 if worst <= limit else 1


if __name__ == "__main__":
    sys.exit(main())
