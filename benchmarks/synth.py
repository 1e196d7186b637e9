"""Synthetic SGLang journals for the reader benchmarks: real startup lines, millions of serving lines.

Why synthetic: the real logs in tests/fixtures/logs are startup excerpts of a few KiB, while the
question the benchmarks answer is "what does a week of ``journalctl -u sglang`` cost?". So each
restart here replays the startup lines of a real SGLang log (verbatim wording, journald prefix
added), then a long run of ``Decode batch`` / ``Prefill batch`` lines in SGLang's own wording.
Generation is seeded, so two runs of one size give the same bytes.
"""

from __future__ import annotations

import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A real SGLang 0.5.18 startup (server_args line to the ready line), replayed at each restart.
STARTUP = ROOT / "tests" / "fixtures" / "runtime" / "sglang-0.5.18-qwen3-4b-saturated-retract.txt"
HOST = "gpu-node-3"
CHUNK_LINES = 4096


def _journald(second: int, pid: int) -> str:
    """A journald short-format prefix for a second offset from Feb 28 12:00:00."""
    hh, rest = divmod(second, 3600)
    mm, ss = divmod(rest, 60)
    return f"Feb 28 {12 + hh % 12:02d}:{mm:02d}:{ss:02d} {HOST} python3[{pid}]: "


def _engine_ts(second: int) -> str:
    hh, rest = divmod(second, 3600)
    mm, ss = divmod(rest, 60)
    return f"2026-02-28 {12 + hh % 12:02d}:{mm:02d}:{ss:02d}"


def startup_lines(index: int) -> list[str]:
    """One restart's startup: the real log's lines up to and including its ready line."""
    lines = STARTUP.read_text(encoding="utf-8").splitlines()
    ready = next(i for i, line in enumerate(lines) if "max_total_num_tokens=" in line)
    return lines[: ready + 1]


def _serving_chunk(rng: random.Random, second: int, pid: int, ranks: int) -> str:
    """CHUNK_LINES serving lines: mostly Decode batch, some Prefill batch, as SGLang prints them."""
    prefix = _journald(second, pid)
    ts = _engine_ts(second)
    out = []
    for i in range(CHUNK_LINES):
        rank = f"TP{i % ranks}"
        running = rng.randrange(1, 64)
        tokens = rng.randrange(1000, 87552)
        usage = tokens / 87552
        if i % 16 == 0:
            out.append(
                f"{prefix}[{ts} {rank}] Prefill batch, #new-seq: {rng.randrange(1, 4)}, "
                f"#new-token: {rng.randrange(1, 8192)}, #cached-token: {rng.randrange(0, 4096)}, "
                f"token usage: {usage:.2f}, #running-req: {running}, #queue-req: {rng.randrange(0, 8)},\n"
            )
        else:
            out.append(
                f"{prefix}[{ts} {rank}] Decode batch, #running-req: {running}, #token: {tokens}, "
                f"token usage: {usage:.2f}, cuda graph: True, gen throughput (token/s): "
                f"{rng.uniform(50, 2000):.2f}, #queue-req: {rng.randrange(0, 8)},\n"
            )
    return "".join(out)


def generate(path: str | Path, size_bytes: int, restarts: int = 4, seed: int = 0) -> dict[str, int]:
    """Write a journal of about ``size_bytes`` with ``restarts`` startups; return what was written."""
    rng = random.Random(seed)
    per_restart = max(1, size_bytes // restarts)
    written = lines = 0
    second = 0
    with open(path, "w", encoding="utf-8") as fh:
        for r in range(restarts):
            pid = 40000 + 17 * r
            startup = "".join(f"{_journald(second, pid)}{line}\n" for line in startup_lines(r))
            fh.write(startup)
            written += len(startup.encode())
            lines += startup.count("\n")
            goal = per_restart * (r + 1) if r < restarts - 1 else size_bytes
            # A few distinct chunks, re-stamped with the current second (fast: two C-level replaces).
            chunks = [_serving_chunk(rng, 0, pid, 8) for _ in range(8)]
            old_prefix, old_ts = _journald(0, pid), _engine_ts(0)
            while written < goal:
                second += 1
                chunk = chunks[second % len(chunks)]
                chunk = chunk.replace(old_prefix, _journald(second, pid)).replace(old_ts, _engine_ts(second))
                fh.write(chunk)
                written += len(chunk)
                lines += CHUNK_LINES
    return {"bytes": written, "lines": lines, "restarts": restarts}
