"""Synthetic SGLang and vLLM journals for the reader benchmarks: real startup lines, millions of serving lines.

Why synthetic: the real logs in tests/fixtures/logs are startup excerpts of a few KiB, while the
question the benchmarks answer is "what does a week of ``journalctl -u sglang`` cost?". So each
restart here replays the startup lines of a real log (verbatim wording, journald prefix added),
then a long run of serving lines in the engine's own wording: SGLang ``Decode batch`` /
``Prefill batch`` lines, or vLLM uvicorn access lines around periodic stats lines (and V0's
preemption warnings), each restart in the wording of the release whose startup it replays.
Generation is seeded, so two runs of one size give the same bytes.
"""

from __future__ import annotations

import datetime as _dt
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


def generate(
    path: str | Path, size_bytes: int, restarts: int = 4, seed: int = 0, engine: str = "sglang"
) -> dict[str, int]:
    """Write a journal of about ``size_bytes`` with ``restarts`` startups; return what was written."""
    if engine == "vllm":
        return generate_vllm(path, size_bytes, restarts, seed)
    if engine != "sglang":
        raise ValueError(f"unknown engine {engine!r}: sglang or vllm")
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


# --- vLLM ------------------------------------------------------------------------------------------
# Restarts replay these real startups in turn: (fixture directory, last line to replay or None for the
# whole excerpt, serving wording after it or None when the startup fails and the next one follows).
VLLM_LOGS = ROOT / "tests" / "fixtures" / "logs" / "vllm"
VLLM_STARTUPS: tuple[tuple[str, str | None, str | None], ...] = (
    ("900-cpu-v0.32-tiny-llama-auto-kv-util05", "Application startup complete.", "v1-cpu"),  # APIServer/EngineCore/Worker
    ("060-pp-worker-pp0-available-9gib-engine-fail", None, None),  # (EngineCore_DP0 …), fails
    ("008-club3090-qwen36-27b-autoround-2x3090-cgprof", None, "v1"),  # (Worker_TP0 …), TP=2
    ("013-mlcommons-llama31-8b-v0-8workers", None, "v0"),  # V0, (VllmWorkerProcess pid=…)
)
VLLM_START = _dt.datetime(2026, 2, 28, 12, 0, 0)
VLLM_STATS_S = 10  # V1's default stats interval; a block of serving lines is one interval
VLLM_INTERVALS = 256  # distinct intervals generated per restart, then re-stamped in turn
_PROMPTS = ("/v1/chat/completions",) * 8 + ("/v1/completions",) * 2


def _vllm_clock(second: int) -> tuple[str, str]:
    """(journald prefix time, vLLM's own ``MM-DD HH:MM:SS``) of a second after VLLM_START; days roll over."""
    t = VLLM_START + _dt.timedelta(seconds=second)
    return t.strftime("%b %d %H:%M:%S"), t.strftime("%m-%d %H:%M:%S")


def _vllm_prefix(second: int, pid: int) -> str:
    return f"{_vllm_clock(second)[0]} {HOST} vllm[{pid}]: "


def vllm_startup_lines(index: int) -> tuple[list[str], str | None]:
    """Restart ``index``'s replayed startup lines and the serving wording that follows them."""
    name, last, wording = VLLM_STARTUPS[index % len(VLLM_STARTUPS)]
    lines = (VLLM_LOGS / name / "log.txt").read_text(encoding="utf-8").splitlines()
    if last is not None:
        lines = lines[: next(i for i, line in enumerate(lines) if line.endswith(last)) + 1]
    return lines, wording


def _vllm_stats(wording: str, ts: str, rng: random.Random, state: dict[str, float]) -> list[str]:
    """One stats interval's engine lines: the stats line (and, in V0, a rare preemption warning)."""
    if rng.random() < 1 / 30:  # load changes every few minutes: idle, busy or saturated
        state["target"] = rng.choice((0.1, 0.4, 0.7, 0.99))
    usage = min(1.0, max(0.01, state["usage"] + (state["target"] - state["usage"]) / 4 + rng.uniform(-0.03, 0.03)))
    state["usage"] = usage
    running = max(1, int(usage * 48 + rng.randrange(0, 4)))
    waiting = rng.randrange(1, 40) if usage > 0.95 else 0
    prompt, gen = rng.uniform(0, 24000), rng.uniform(20, 2000)
    if wording == "v0":
        out = [f"INFO {ts} metrics.py:351] Avg prompt throughput: {prompt:.1f} tokens/s, Avg generation throughput: "
               f"{gen:.1f} tokens/s, Running: {running} reqs, Swapped: 0 reqs, Pending: {waiting} reqs, GPU KV cache "
               f"usage: {usage * 100:.1f}%, CPU KV cache usage: 0.0%."]
        if waiting and rng.random() < 0.05:  # V0 warns at the first preemption and every 500th after it
            state["preempted"] += 500
            out.append(f"WARNING {ts} scheduler.py:1089] Sequence group chat-{rng.getrandbits(128):032x} is preempted "
                       "by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect "
                       "the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide "
                       f"more KV cache memory. total_num_cumulative_preemption={int(state['preempted']) + 1}")
        return out
    api, line, pool = (13873, 335, "CPU") if wording == "v1-cpu" else (1, 271, "GPU")
    return [f"(APIServer pid={api}) INFO {ts} [loggers.py:{line}] Engine 000: Avg prompt throughput: {prompt:.1f} "
            f"tokens/s, Avg generation throughput: {gen:.1f} tokens/s, Running: {running} reqs, Waiting: {waiting} "
            f"reqs, {pool} KV cache usage: {usage * 100:.1f}%, Prefix cache hit rate: {rng.uniform(0, 60):.1f}%"]


def _vllm_interval(wording: str, rng: random.Random, pid: int, state: dict[str, float]) -> str:
    """One stats interval at second 0: uvicorn access lines for the requests finished, a metrics
    scrape, a health probe, then the engine's stats lines (the caller re-stamps it)."""
    prefix = _vllm_prefix(0, pid)
    access = [f'INFO:     127.0.0.1:{rng.randrange(32768, 61000)} - "POST {rng.choice(_PROMPTS)} HTTP/1.1" 200 OK'
              for _ in range(rng.randrange(20, 200))]
    access.insert(rng.randrange(len(access)), f'INFO:     10.0.0.7:{rng.randrange(32768, 61000)} - "GET /metrics HTTP/1.1" 200 OK')
    access.append(f'INFO:     127.0.0.1:{rng.randrange(32768, 61000)} - "GET /health HTTP/1.1" 200 OK')
    lines = access + _vllm_stats(wording, _vllm_clock(0)[1], rng, state)
    return "".join(f"{prefix}{line}\n" for line in lines)


def generate_vllm(path: str | Path, size_bytes: int, restarts: int = 4, seed: int = 0) -> dict[str, int]:
    """Write a vLLM journal of about ``size_bytes``: ``restarts`` startups of VLLM_STARTUPS in turn.

    A failing startup gets no serving lines (the next restart follows it at once), so the serving
    bytes are shared among the startups that came up.
    """
    rng = random.Random(seed)
    plan = [vllm_startup_lines(r) for r in range(restarts)]
    serving = sum(1 for _, wording in plan if wording) or 1
    per_restart = max(1, size_bytes // serving)
    written = lines = 0
    second = served = 0
    with open(path, "w", encoding="utf-8") as fh:
        for r, (startup, wording) in enumerate(plan):
            pid = 40000 + 17 * r
            text = "".join(f"{_vllm_prefix(second, pid)}{line}\n" for line in startup)
            fh.write(text)
            written += len(text.encode())
            lines += len(startup)
            if wording is None:
                second += 30
                continue
            served += 1
            goal = per_restart * served if served < serving else size_bytes
            state = {"usage": 0.3, "target": 0.4, "preempted": 0.0}
            intervals = [_vllm_interval(wording, rng, pid, state) for _ in range(VLLM_INTERVALS)]
            old_prefix, old_ts = _vllm_prefix(0, pid), _vllm_clock(0)[1]
            i = 0
            while written < goal:
                second += VLLM_STATS_S
                new_stamp, new_ts = _vllm_clock(second)
                chunk = intervals[i % VLLM_INTERVALS]
                chunk = chunk.replace(old_prefix, f"{new_stamp} {HOST} vllm[{pid}]: ").replace(old_ts, new_ts)
                fh.write(chunk)
                written += len(chunk)
                lines += chunk.count("\n")
                i += 1
    return {"bytes": written, "lines": lines, "restarts": restarts}


def compile_kvscope() -> None:
    """Compile kvscope's modules to bytecode before timing it, as ``pip install`` does: from a source
    checkout with PYTHONDONTWRITEBYTECODE set (some CI images set it), every run would otherwise
    compile ~60 modules again (about 0.1 s) — a cost no installed kvscope pays."""
    import compileall

    compileall.compile_dir(str(Path(__file__).resolve().parents[1] / "src" / "kvscope"), quiet=1)
