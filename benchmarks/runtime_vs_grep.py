#!/usr/bin/env python3
"""How fast is ``kvscope explain`` on a journal that is mostly serving lines, next to ``grep -c``?

Generates a journald-style journal of ``--size-mb`` MiB (default 1024): real startup lines (the
SGLang 0.5.18 startup of tests/fixtures/runtime and the vLLM 0.32 CPU run of tests/fixtures/logs),
several restarts, and millions of SGLang ``Decode batch`` / ``Prefill batch`` lines (with HTTP
access lines and the odd retraction warning between them) whose load rises into saturation and
falls again. Then, in the same run, times

    kvscope explain FILE --format json        (peak RSS of that process too)
    grep -c 'Decode batch' FILE

each ``--repeat`` times (best of, warm page cache), and prints both and their ratio. With
``--flat`` it also runs kvscope on a quarter-size journal to show the peak memory does not grow
with the input; with ``--pure`` it also times the pure-Python bulk lane (what runs where the C
extension could not be built) and the CPython floor of any per-line Python reader. ``--profile``
prints the top of a cProfile of the parse path instead.

    python benchmarks/runtime_vs_grep.py --size-mb 1024 --flat
"""

from __future__ import annotations

import argparse
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import synth

ROOT = Path(__file__).resolve().parents[1]
SGLANG_STARTUP = ROOT / "tests" / "fixtures" / "runtime" / "sglang-0.5.18-qwen3-4b-saturated-retract.txt"
VLLM_RUN = ROOT / "tests" / "fixtures" / "logs" / "vllm" / "902-cpu-v0.32-tiny-qwen2-4MiB-kv-saturated" / "log.txt"
POOL = 87552
HOST = "gpu-node-7"


def _startup(path: Path, until: str | None) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    if until is None:
        return lines
    return lines[: next(i for i, line in enumerate(lines) if until in line) + 1]


def _jd(t: datetime, pid: int) -> str:
    return f"{t:%b %d %H:%M:%S} {HOST} python3[{pid}]: "


def _serving_block(out: list[str], t: datetime, pid: int, phase: float, rng: random.Random) -> datetime:
    """One second of serving: a few decode lines, sometimes prefill / HTTP / retraction lines."""
    load = 0.5 - 0.5 * math.cos(phase)  # 0 … 1 … 0 over a restart's lifetime
    usage = min(1.0, 0.05 + 1.1 * load)
    running = max(1, int(8 + 60 * load))
    tokens = int(usage * POOL)
    queued = max(0, int((load - 0.8) * 400)) if load > 0.8 else 0
    jd = _jd(t, pid)
    stamp = f"[{t:%Y-%m-%d %H:%M:%S}] "
    for _ in range(4):
        out.append(f"{jd}{stamp}Decode batch, #running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, "
                   f"cuda graph: {running <= 24}, gen throughput (token/s): {30.0 * running + rng.random() * 50:.2f}, "
                   f"#queue-req: {queued}")
        tokens = min(POOL, tokens + running)
    if rng.random() < 0.5:
        out.append(f"{jd}{stamp}Prefill batch, #new-seq: 1, #new-token: 351, #cached-token: 36, token usage: {usage:.2f}, "
                   f"#running-req: {running}, #queue-req: {queued}, #pending-token: 0, cuda graph: True, "
                   f"input throughput (token/s): {rng.random() * 5000:.2f}")
        out.append(f'{jd}{stamp}INFO:     127.0.0.1:{40000 + rng.randrange(20000)} - "POST /generate HTTP/1.1" 200 OK')
    if usage >= 1.0 and rng.random() < 0.1:
        out.append(f"{jd}{stamp}KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 700, "
                   "#new_token_ratio: 0.3000 -> 0.4000")
    return t + timedelta(seconds=1)


def generate(path: Path, size_mb: int, restarts: int = 4, seed: int = 0) -> dict[str, int]:
    """Write the journal; returns counts of what went in."""
    rng = random.Random(seed)
    target = size_mb << 20
    sglang = _startup(SGLANG_STARTUP, "fired up")
    vllm = _startup(VLLM_RUN, None)
    per_restart = target // max(1, restarts - 1)  # the last startup is the (short) vLLM run
    t = datetime(2026, 9, 1, 0, 0, 0)
    written = decode = 0
    with path.open("w", encoding="utf-8") as fh:
        for r in range(restarts):
            pid = 30000 + r
            head = vllm if r == restarts - 1 else sglang  # the last "restart" is a vLLM server
            fh.write("".join(f"{_jd(t, pid)}{line}\n" for line in head))
            if head is vllm:
                written += sum(len(line) + 40 for line in head)
                continue
            end = written + per_restart
            seconds = per_restart // 1500  # ≈ 1.5 kB of serving lines a second
            i = 0
            while written < end:
                out: list[str] = []
                for _ in range(256):
                    t = _serving_block(out, t, pid, 2 * math.pi * i / max(1, seconds), rng)
                    i += 1
                chunk = "\n".join(out) + "\n"
                fh.write(chunk)
                written += len(chunk)
                decode += 4 * 256
            t += timedelta(minutes=5)
    return {"bytes": path.stat().st_size, "decode_lines": decode, "restarts": restarts}


def _timed(cmd: list[str], repeat: int, env: dict[str, str] | None = None) -> tuple[float, int, str]:
    """(best wall seconds, peak RSS KiB of the best run, stdout of the last run)."""
    best, rss, out = float("inf"), 0, ""
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT,
                                env={**os.environ, **(env or {})})
        data = proc.stdout.read() if proc.stdout else b""
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        if wall < best:
            best, rss = wall, usage.ru_maxrss
        out = data.decode("utf-8", "replace")
    return best, rss, out


def python_floor(path: Path) -> tuple[float, float]:
    """What any CPython reader of these lines costs at least: (seconds to run the decode pattern over
    every 4 MiB block with ``findall``, seconds to also touch each match once in a Python loop)."""
    sys.path.insert(0, str(ROOT / "src"))
    from kvscope.engines.serving import _SG_DECODE

    pattern = re.compile(_SG_DECODE.pattern.encode())
    results = []
    for touch in (False, True):
        start = time.perf_counter()
        n = 0
        with path.open("rb") as fh:
            carry = b""
            while True:
                block = fh.read(4 << 20)
                if not block:
                    break
                buf = carry + block
                cut = buf.rfind(b"\n") + 1
                buf, carry = buf[:cut], buf[cut:]
                found = pattern.findall(buf)
                if touch:
                    for r, _tok, u, _gen, q in found:
                        n += int(r) + int(q) + (float(u) >= 0.9)
                else:
                    n += len(found)
        results.append(time.perf_counter() - start)
    return results[0], results[1]


def _lane() -> str:
    """Which bulk lane ``kvscope explain`` runs here: the C extension, or the regex (no compiler at install)."""
    probe = "import kvscope.engines.serving as l; print('C (kvscope._bulk)' if l.NATIVE else 'pure Python')"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT).stdout.strip()


def kvscope_cmd(path: Path) -> list[str]:
    return [sys.executable, "-m", "kvscope", "explain", str(path), "--format", "json"]


def stages(path: Path) -> None:
    """Wall time of each stage of the pipeline on the same file, cumulatively (in-process, warm cache)."""
    sys.path.insert(0, str(ROOT / "src"))
    from kvscope.api import analyze
    from kvscope.engines import ANCHORS, ENGINES, parse_lines
    from kvscope.engines.base import LineContext
    from kvscope.engines.serving import RuntimeLines
    from kvscope.reading import clean_line, iter_candidate_lines
    from kvscope.runtime.accumulate import Accumulator

    def clock(fn) -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    def read() -> None:
        for _ in iter_candidate_lines([str(path)], ANCHORS):
            pass

    texts: list[str] = []

    def read_clean() -> None:
        for line in iter_candidate_lines([str(path)], ANCHORS):
            texts.extend(clean_line(line.text))

    def events() -> None:
        for _ in parse_lines(iter_candidate_lines([str(path)], ANCHORS)):
            pass

    runtime = next(e for e in ENGINES if isinstance(e, RuntimeLines))
    parsed: list = []

    def runtime_parse() -> None:
        ctx = LineContext()
        parsed.extend(p for text in texts for p in runtime.parse(text, ctx))

    def runtime_add() -> None:
        acc = Accumulator()
        for p in parsed:
            acc.add(p.data, p.rank, p.timestamp)

    rows = [("read candidate lines (reading/)", clock(read)), ("  + clean_line", clock(read_clean)),
            ("  + all engines' parse → events", clock(events)), ("  + assemble + finish (= analyze)", clock(lambda: analyze([str(path)]))),
            ("runtime parse alone (lines.py)", clock(runtime_parse)), ("runtime accumulate alone", clock(runtime_add))]
    print(f"{len(texts):,} candidate lines, {len(parsed):,} runtime events")
    for name, secs in rows:
        print(f"  {name:40s} {secs:7.2f} s   {1e6 * secs / max(1, len(texts)):6.2f} µs/line")


def profile(path: Path, top: int) -> None:
    import cProfile
    import pstats

    sys.path.insert(0, str(ROOT / "src"))
    from kvscope.api import analyze

    prof = cProfile.Profile()
    prof.enable()
    analyze([str(path)])
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--restarts", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each command (best of); grep gets at least 3")
    ap.add_argument("--flat", action="store_true", help="also run on a quarter-size journal to compare peak memory")
    ap.add_argument("--keep", metavar="PATH", help="write the journal here and keep it")
    ap.add_argument("--pure", action="store_true",
                    help="also time the pure-Python bulk lane (KVSCOPE_PURE_PYTHON=1) and the CPython floor")
    ap.add_argument("--profile", type=int, metavar="N", help="print the top N functions of a cProfile run instead")
    ap.add_argument("--stages", action="store_true", help="time each pipeline stage instead")
    args = ap.parse_args()
    if shutil.which("grep") is None:
        print("grep not found", file=sys.stderr)
        return 2

    tmp = Path(tempfile.mkdtemp(prefix="kvscope-bench-"))
    try:
        path = Path(args.keep) if args.keep else tmp / "journal.log"
        t0 = time.perf_counter()
        info = generate(path, args.size_mb, args.restarts)
        os.sync()  # the journal's dirty pages written back now, not while grep and kvscope are timed
        print(f"journal: {info['bytes'] / 2**20:,.0f} MiB, {info['decode_lines']:,} Decode lines, "
              f"{info['restarts']} startups, generated in {time.perf_counter() - t0:.1f} s")
        if args.profile:
            profile(path, args.profile)
            return 0
        if args.stages:
            stages(path)
            return 0
        synth.compile_kvscope()
        g_wall, g_rss, g_out = _timed(["grep", "-c", "Decode batch", str(path)], max(3, args.repeat))
        k_wall, k_rss, k_out = _timed(kvscope_cmd(path), args.repeat)
        print(f"grep -c 'Decode batch'         : {g_wall:7.2f} s   peak RSS {g_rss / 1024:7.1f} MiB   ({g_out.strip()} lines)")
        print(f"kvscope explain --format json  : {k_wall:7.2f} s   peak RSS {k_rss / 1024:7.1f} MiB")
        print(f"ratio kvscope / grep           : {k_wall / g_wall:7.1f}x   (target ≤ 3x)")
        print(f"kvscope throughput             : {info['bytes'] / 2**20 / k_wall:7.1f} MiB/s, "
              f"{info['decode_lines'] / k_wall / 1e6:.2f} M decode lines/s   (bulk lane: {_lane()})")
        if args.pure:
            p_wall, p_rss, _ = _timed(kvscope_cmd(path), 1, {"KVSCOPE_PURE_PYTHON": "1"})
            print(f"pure-Python lane (no C)         : {p_wall:7.2f} s   ({p_wall / g_wall:.1f}x grep, peak RSS "
                  f"{p_rss / 1024:.1f} MiB)")
            f_scan, f_touch = python_floor(path)
            print(f"CPython floor: findall only     : {f_scan:7.2f} s   ({f_scan / g_wall:.1f}x grep)")
            print(f"CPython floor: + 1 loop per line: {f_touch:7.2f} s   ({f_touch / g_wall:.1f}x grep)")
        if args.flat:
            small = tmp / "quarter.log"
            generate(small, max(1, args.size_mb // 4), args.restarts)
            os.sync()
            s_wall, s_rss, _ = _timed(kvscope_cmd(small), 1)
            print(f"quarter-size journal           : {s_wall:7.2f} s   peak RSS {s_rss / 1024:7.1f} MiB "
                  f"(full size {k_rss / 1024:.1f} MiB: {'flat' if k_rss <= 1.25 * s_rss else 'GROWS'})")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
