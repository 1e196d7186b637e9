#!/usr/bin/env python3
"""Is kvscope's peak memory flat in the size of its input? Peak RSS at several generated sizes.

For each size in ``--sizes`` (MiB; default 100,1024; 5120 is supported, mind the disk: the file is
written, measured and deleted one size at a time) a synthetic SGLang journal (synth.py; a vLLM one
with ``--engine vllm``) is generated and measured in a child process, peak RSS from ``wait4``:

    reader    every candidate line of the memory-line anchors read and decoded (the streaming stage)
    explain   ``kvscope explain FILE --format json``, the whole tool, serving-line parsing included

Flat means the largest peak is within ``--tolerance`` (default 20%) of the smallest.

    python benchmarks/memory_flat.py --sizes 100,1024,5120 --stages reader
    python benchmarks/memory_flat.py --sizes 100,1024 --stages reader,explain
    python benchmarks/memory_flat.py --sizes 64,256 --engine vllm
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import synth  # noqa: E402

READER = """
import sys
from kvscope.engines import ENGINES
from kvscope.reading import ReadStats, iter_candidate_lines
anchors = tuple(dict.fromkeys(a for e in ENGINES if type(e).__name__ != "RuntimeLines" for a in e.anchors))
stats = ReadStats()
n = sum(1 for _ in iter_candidate_lines([sys.argv[1]], anchors, stats))
print(n, stats.lines, stats.bytes_read)
"""


def child(cmd: list[str]) -> tuple[float, float, int]:
    """(wall s, CPU s, peak RSS KiB) of a child whose output is thrown away."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 2):
        raise SystemExit(f"{cmd[:4]} exited {proc.returncode}")
    return time.perf_counter() - t0, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,1024", help="comma-separated sizes in MiB")
    ap.add_argument("--stages", default="reader,explain", help="reader, explain or both")
    ap.add_argument("--tolerance", type=float, default=0.20)
    ap.add_argument("--dir", default=None, help="where to write the journals (default: a temp dir)")
    ap.add_argument("--engine", choices=("sglang", "vllm"), default="sglang", help="which engine's journal")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    stages = [s for s in args.stages.split(",") if s]
    work = Path(tempfile.mkdtemp(dir=args.dir, prefix="kvscope-flat-"))
    need = max(sizes) << 20
    if shutil.disk_usage(work).free < need * 1.2:
        raise SystemExit(f"not enough free disk in {work} for {max(sizes)} MiB")
    rows: dict[str, list[tuple[int, float, float, int]]] = {s: [] for s in stages}
    try:
        for size in sizes:
            path = work / f"journal-{size}.log"
            synth.generate(path, size << 20, engine=args.engine)
            for stage in stages:
                cmd = ([sys.executable, "-c", READER, str(path)] if stage == "reader"
                       else [sys.executable, "-m", "kvscope", "explain", str(path), "--format", "json"])
                wall, cpu, rss = child(cmd)
                rows[stage].append((size, wall, cpu, rss))
                print(f"{stage:8s} {size:6d} MiB  wall {wall:8.1f} s  CPU {cpu:8.1f} s  peak RSS {rss / 1024:7.1f} MiB",
                      flush=True)
            path.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ok = True
    for stage, r in rows.items():
        peaks = [x[3] for x in r]
        growth = max(peaks) / min(peaks) - 1
        flat = growth <= args.tolerance
        ok &= flat
        print(f"{stage}: peak RSS {min(peaks) / 1024:.1f}–{max(peaks) / 1024:.1f} MiB over "
              f"{r[0][0]}–{r[-1][0]} MiB of input: {growth:+.0%} → {'flat' if flat else 'NOT flat'}")
    print(json.dumps({s: [{"mib": a, "wall_s": b, "cpu_s": c, "peak_rss_kib": d} for a, b, c, d in r]
                      for s, r in rows.items()}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
