#!/usr/bin/env python3
"""How fast does kvscope read a big journal, next to ``grep -E`` for the same memory-line words?

Generates a synthetic journal of ``--size-mb`` MiB (default 1024; see synth.py: journald prefixes,
several restarts replaying real startup lines from tests/fixtures/logs, millions of serving lines:
SGLang ``Decode batch`` / ``Prefill batch`` lines, or with ``--engine vllm`` uvicorn access lines
around vLLM V1/V0 stats lines and V0 preemption warnings), then in the same run times, best of
``--repeat`` on a warm page cache:

    kvscope explain FILE --format json           the whole tool, as shipped (peak RSS too)
    grep -E '<memory-line anchors>' FILE         what an operator would run by hand
    grep -c 'Decode batch' FILE                  the runtime-pressure benchmark's yardstick
                                                 ('Avg prompt throughput' for --engine vllm)
    reader, memory anchors                       kvscope's reading stage alone, in process
    reader, all anchors                          the same with the serving-line (runtime) anchors
    reader, +N extra anchors                     the cost of one more anchor word, per GiB

The target (issue #2): ``explain`` on 1 GB within 2x grep's time, peak memory flat in input size.
Serving lines are candidates once the runtime-pressure feature anchors on them; the reader rows
separate what reading costs from what parsing those lines costs.

    python benchmarks/reader_vs_grep.py --size-mb 1024
    python benchmarks/reader_vs_grep.py --size-mb 256 --engine vllm --repeat 2
    python benchmarks/reader_vs_grep.py --file /var/log/sglang.journal --repeat 1
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import synth  # noqa: E402

ROOT = synth.ROOT
EXTRA_ANCHORS = 16
# The serving line counted by ``grep -c``, per engine (the keys keep their SGLang-era names).
SERVING_WORDS = {"sglang": "Decode batch", "vllm": "Avg prompt throughput"}


def memory_anchors() -> tuple[bytes, ...]:
    """The anchor words of the startup-memory parsers (every engine but the serving-time one)."""
    from kvscope.engines import ENGINES

    return tuple(dict.fromkeys(a for e in ENGINES if type(e).__name__ != "RuntimeLines" for a in e.anchors))


def grep_pattern(anchors: tuple[bytes, ...]) -> str:
    return "|".join(re.escape(a.decode("utf-8", "replace")) for a in anchors)


def run_child(cmd: list[str], out_path: str) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, peak RSS KiB) of one child process writing stdout to out_path.

    CPU time (user + system) is reported beside wall time because a shared machine's wall clock
    says more about its other tenants than about the program.
    """
    with open(out_path, "wb") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, env={**os.environ, "LC_ALL": "C"})
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def best(fn, repeat: int) -> tuple[float, float, int]:
    """Best wall and CPU time over ``repeat`` runs, and the largest peak RSS seen."""
    runs = [fn() for _ in range(repeat)]
    return min(r[0] for r in runs), min(r[1] for r in runs), max(r[2] for r in runs)


def reader_seconds(path: str, anchors: tuple[bytes, ...]) -> tuple[float, float, int]:
    """(wall, CPU seconds, lines handed on) of the reading stage alone: candidates decoded, not parsed."""
    from kvscope.reading import ReadStats, iter_candidate_lines

    t0, c0 = time.perf_counter(), time.process_time()
    n = sum(1 for _ in iter_candidate_lines([path], anchors, ReadStats()))
    return time.perf_counter() - t0, time.process_time() - c0, n


def measure(path: str, repeat: int, serving_word: str = SERVING_WORDS["sglang"]) -> dict:
    from kvscope.engines import ANCHORS

    size = os.path.getsize(path)
    mem = memory_anchors()
    out = tempfile.mktemp(prefix="kvscope-bench-")
    subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
    try:
        explain = [sys.executable, "-m", "kvscope", "explain", path, "--format", "json"]
        kv = best(lambda: run_child(explain, out), repeat)
        doc = json.loads(Path(out).read_text())
        grep_e = best(lambda: run_child(["grep", "-E", grep_pattern(mem), path], out), repeat)
        grep_c = best(lambda: run_child(["grep", "-c", serving_word, path], out), repeat)
    finally:
        Path(out).unlink(missing_ok=True)
    r_mem = min((reader_seconds(path, mem) for _ in range(repeat)), key=lambda r: r[1])
    r_all = min((reader_seconds(path, ANCHORS) for _ in range(repeat)), key=lambda r: r[1])
    extra = tuple(f"zq{i}xv{i}w".encode() for i in range(EXTRA_ANCHORS))  # never in the data
    r_extra = min((reader_seconds(path, mem + extra) for _ in range(repeat)), key=lambda r: r[1])
    gib = size / (1 << 30)
    return {
        "bytes": size,
        "startups": len(doc["startups"]),
        "kvscope_wall_s": kv[0], "kvscope_cpu_s": kv[1], "kvscope_peak_rss_mib": kv[2] / 1024,
        "grep_E_wall_s": grep_e[0], "grep_E_cpu_s": grep_e[1],
        "grep_c_decode_wall_s": grep_c[0], "grep_c_decode_cpu_s": grep_c[1], "grep_c_word": serving_word,
        "ratio_kvscope_vs_grep_E_wall": kv[0] / grep_e[0], "ratio_kvscope_vs_grep_E_cpu": kv[1] / grep_e[1],
        "reader_memory_anchors_wall_s": r_mem[0], "reader_memory_anchors_cpu_s": r_mem[1],
        "reader_memory_candidates": r_mem[2], "memory_anchors": len(mem),
        "ratio_reader_vs_grep_E_cpu": r_mem[1] / grep_e[1],
        "reader_all_anchors_cpu_s": r_all[1], "reader_all_candidates": r_all[2], "all_anchors": len(ANCHORS),
        "extra_anchor_cpu_ms_per_gib": max(0.0, (r_extra[1] - r_mem[1]) / EXTRA_ANCHORS / gib * 1000),
    }


def report(m: dict) -> None:
    mib = m["bytes"] / (1 << 20)
    print(f"input: {mib:,.0f} MiB, {m['startups']} startups found            wall s     CPU s")
    print(f"  kvscope explain --format json      {m['kvscope_wall_s']:8.2f}  {m['kvscope_cpu_s']:8.2f}"
          f"   peak RSS {m['kvscope_peak_rss_mib']:.0f} MiB")
    print(f"  grep -E <{m['memory_anchors']} memory anchors>      {m['grep_E_wall_s']:8.2f}  {m['grep_E_cpu_s']:8.2f}")
    word = f"grep -c '{m.get('grep_c_word', 'Decode batch')}'"
    print(f"  {word:<35s}{m['grep_c_decode_wall_s']:8.2f}  {m['grep_c_decode_cpu_s']:8.2f}")
    print(f"  explain / grep -E                  {m['ratio_kvscope_vs_grep_E_wall']:7.2f}x  "
          f"{m['ratio_kvscope_vs_grep_E_cpu']:7.2f}x   (target <= 2x)")
    print(f"  reader, memory anchors             {m['reader_memory_anchors_wall_s']:8.2f}  "
          f"{m['reader_memory_anchors_cpu_s']:8.2f}   {m['ratio_reader_vs_grep_E_cpu']:.2f}x grep -E CPU; "
          f"{m['reader_memory_candidates']:,} lines handed on")
    print(f"  reader, all {m['all_anchors']} anchors              {'':8s}  {m['reader_all_anchors_cpu_s']:8.2f}   "
          f"{m['reader_all_candidates']:,} lines handed on")
    print(f"  one more anchor word costs {m['extra_anchor_cpu_ms_per_gib']:.1f} ms CPU per GiB")
    print(json.dumps(m))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024, help="size of the generated journal in MiB")
    ap.add_argument("--file", help="time this existing file instead of generating one")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best is kept")
    ap.add_argument("--restarts", type=int, default=4)
    ap.add_argument("--engine", choices=sorted(SERVING_WORDS), default="sglang",
                    help="which engine's journal to generate (and whose serving line grep -c counts)")
    ap.add_argument("--dir", default=None, help="where to write the generated journal (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the generated journal")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    synth.compile_kvscope()
    if args.file:
        report(measure(args.file, args.repeat, SERVING_WORDS[args.engine]))
        return 0
    path = Path(tempfile.mkdtemp(dir=args.dir, prefix="kvscope-journal-")) / f"{args.engine}.journal"
    try:
        t0 = time.perf_counter()
        info = synth.generate(path, args.size_mb << 20, restarts=args.restarts, engine=args.engine)
        os.sync()  # the journal's dirty pages written back now, not while grep and kvscope are timed
        print(f"generated {info['lines']:,} lines in {time.perf_counter() - t0:.1f} s: {path}", file=sys.stderr)
        report(measure(str(path), args.repeat, SERVING_WORDS[args.engine]))
    finally:
        if not args.keep:
            path.unlink(missing_ok=True)
            path.parent.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
