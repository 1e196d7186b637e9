"""Whatever a user points kvscope at, the real CLI answers with one clear stderr line and exit 2 (or
reads it), never a traceback; streams are read as streams; ``--debug`` alone shows tracebacks."""

from __future__ import annotations

import gzip
import os
import random
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import kvscope.cli
from tests.conftest import case_dir, case_files
from tests.properties.test_contract import assert_valid

KVSCOPE = [sys.executable, "-m", "kvscope", "explain"]
REAL = Path(case_files(case_dir("sglang", "000"))[0])


def run_cli(*args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*KVSCOPE, *args], capture_output=True, text=True, timeout=timeout, **kw)


def assert_user_error(out: subprocess.CompletedProcess, *words: str) -> str:
    """Exit 2, exactly one line on stderr that starts with ``kvscope:`` and says ``words``; no traceback."""
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr and "Traceback" not in out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvscope: "), out.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def test_directory(tmp_path):
    assert_user_error(run_cli(str(tmp_path)), "is a directory")


def test_missing_path(tmp_path):
    assert_user_error(run_cli(str(tmp_path / "nope.log")), "no such file")


def test_no_paths_and_nothing_piped():
    """No file named and stdin not a terminal: stdin is the input; empty, it is one line and exit 2."""
    assert_user_error(run_cli(stdin=subprocess.DEVNULL), "nothing to explain in <stdin>")


def test_a_piped_log_needs_no_dash():
    """`cat server.log | kvscope explain` reads the pipe."""
    out = run_cli("--format", "json", input=REAL.read_text(encoding="utf-8"))
    assert out.returncode == 0, out.stderr
    assert_valid(out.stdout)


def _can_run_as_nobody() -> bool:
    try:
        probe = subprocess.run([sys.executable, "-c", "import kvscope"], user=65534, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def test_unreadable_path(tmp_path):
    path = tmp_path / "secret.log"
    path.write_bytes(REAL.read_bytes())
    path.chmod(0)
    kw = {}
    if os.geteuid() == 0:  # root reads anything: drop to nobody if this Python allows it, else skip
        if not _can_run_as_nobody():
            pytest.skip("running as root and this interpreter cannot run as nobody")
        os.chmod(tmp_path, 0o755)
        for parent in tmp_path.parents:
            if not os.access(parent, os.X_OK, effective_ids=False) or (parent.stat().st_mode & 0o001) == 0:
                pytest.skip("running as root and the temp directory is closed to other users")
        kw["user"] = 65534
    assert_user_error(run_cli(str(path), **kw), "cannot read", "ermission denied")


def test_binary_file(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(random.Random(0).randbytes(3 << 20))
    out = run_cli(str(path), "--format", "json")
    assert_user_error(out, "nothing to explain", "looks like binary data")
    assert assert_valid(out.stdout)["startups"] == []


def test_empty_file(tmp_path):
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    assert_user_error(run_cli(str(path)), "nothing to explain")


NGINX = (
    '10.0.3.7 - - [28/Feb/2026:12:30:{s:02d} +0000] "POST /v1/chat/completions HTTP/1.1" {code} {size} "-" '
    '"python-httpx/0.27.0" rt={rt:.3f} uct="0.000" uht="{rt:.3f}" urt="{rt:.3f}"\n'
)


def test_nginx_access_log(tmp_path):
    rng = random.Random(1)
    path = tmp_path / "access.log"
    path.write_text("".join(NGINX.format(s=i % 60, code=rng.choice([200, 200, 499, 502]), size=rng.randrange(99999),
                                         rt=rng.random() * 30) for i in range(5000)))
    out = run_cli(str(path), "--format", "json")
    assert_user_error(out, "nothing to explain", "no engine startup lines")
    assert_valid(out.stdout)


def test_50mb_single_line(tmp_path):
    path = tmp_path / "one-line.log"
    chunk = REAL.read_bytes().replace(b"\n", b" ")
    with open(path, "wb") as fh:
        for _ in range((50 << 20) // len(chunk) + 1):
            fh.write(chunk)
    out = run_cli(str(path), "--format", "json")
    assert_user_error(out, "nothing to explain", "over-long line")
    assert assert_valid(out.stdout)["input"]["overlong_lines_skipped"] == 1


def test_truncated_gz_with_nothing_left(tmp_path):
    path = tmp_path / "cut.log.gz"
    path.write_bytes(gzip.compress(REAL.read_bytes())[:12])
    assert_user_error(run_cli(str(path)), "nothing to explain", "truncated")


def test_truncated_gz_with_a_startup_left_is_read_with_a_warning(tmp_path):
    path = tmp_path / "cut.log.gz"
    whole = gzip.compress(REAL.read_bytes() * 3)
    path.write_bytes(whole[: len(whole) * 3 // 4])
    out = run_cli(str(path), "--format", "json")
    assert out.returncode == 0 and "Traceback" not in out.stderr
    doc = assert_valid(out.stdout)
    assert doc["startups"] and any("truncated" in w for w in doc["input"]["warnings"])


def test_log_cut_mid_line_is_read(tmp_path):
    data = REAL.read_bytes()
    path = tmp_path / "cut.log"
    path.write_bytes(data[: data.index(b"Memory pool end") + 9])
    out = run_cli(str(path), "--format", "json")
    assert out.returncode == 0 and "Traceback" not in out.stderr
    assert assert_valid(out.stdout)["startups"]


def test_gzip_bomb(tmp_path):
    path = tmp_path / "bomb.log.gz"
    block = b"\0" * (1 << 20)
    with gzip.open(path, "wb", compresslevel=9) as fh:
        for _ in range(96):
            fh.write(block)
    t0 = time.monotonic()
    out = run_cli(str(path), "--format", "json")
    assert_user_error(out, "nothing to explain", "decompression bomb")
    doc = assert_valid(out.stdout)
    assert any("decompression bomb" in w for w in doc["input"]["warnings"])
    assert doc["input"]["bytes"] < 96 << 20
    assert time.monotonic() - t0 < 60


# kvscope explain, reporting its own peak RSS (VmHWM: since its exec) on stderr at exit. The child's
# ru_maxrss would not do: Linux keeps it across exec, so it can hold the forking test process's size.
_EXPLAIN_WITH_PEAK = [sys.executable, "-c", (
    "import atexit, runpy, sys\n"
    "def peak():\n"
    "    hwm = [line for line in open('/proc/self/status') if line.startswith('VmHWM')]\n"
    "    sys.stderr.write('VmHWM ' + (hwm[0].split()[1] if hwm else '0') + '\\n')\n"
    "atexit.register(peak)\n"
    "sys.argv = ['kvscope', 'explain', *sys.argv[1:]]\n"
    "runpy.run_module('kvscope', run_name='__main__')\n")]


def _peak_kib(stderr: str) -> int:
    return int(re.search(r"VmHWM (\d+)", stderr).group(1))


def test_stdin_pipe_is_a_stream_in_constant_memory():
    """128 MiB through a pipe (a real startup, then serving noise): read as it comes, RSS stays flat."""
    proc = subprocess.Popen([*_EXPLAIN_WITH_PEAK, "-", "--format", "json"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out: dict[str, bytes] = {}
    readers = [threading.Thread(target=lambda k=k, f=f: out.__setitem__(k, f.read()))
               for k, f in (("stdout", proc.stdout), ("stderr", proc.stderr))]
    for t in readers:
        t.start()
    noise = (b"-" * 127 + b"\n") * 8192  # 1 MiB of lines no engine anchors on
    proc.stdin.write(REAL.read_bytes())
    for _ in range(128):
        proc.stdin.write(noise)
    proc.stdin.close()
    proc.wait(120)
    for t in readers:
        t.join(60)
    assert "Traceback" not in out["stderr"].decode()
    rss_kib = _peak_kib(out["stderr"].decode())
    doc = assert_valid(out["stdout"].decode())
    assert doc["startups"] and doc["input"]["bytes"] > 128 << 20
    assert rss_kib < 120 << 10, f"peak RSS {rss_kib >> 10} MiB for a 128 MiB stream"


def test_slow_fifo_is_read_as_it_comes_and_ends_with_it(tmp_path):
    """A writer trickles a real log into a FIFO; kvscope finishes right after the writer closes."""
    fifo = tmp_path / "journal.fifo"
    os.mkfifo(fifo)
    closed_at: list[float] = []

    def writer() -> None:
        with open(fifo, "wb") as fh:
            for line in REAL.read_bytes().splitlines(keepends=True):
                fh.write(line)
                fh.flush()
                time.sleep(0.02)
        closed_at.append(time.monotonic())

    t = threading.Thread(target=writer)
    t.start()
    out = run_cli(str(fifo), "--format", "json", timeout=120)
    done = time.monotonic()
    t.join(10)
    assert out.returncode == 0, out.stderr
    assert assert_valid(out.stdout)["startups"]
    assert closed_at and done - closed_at[0] < 30


def test_stdin_that_ends_at_once():
    out = run_cli("-", input="")
    assert_user_error(out, "nothing to explain", "<stdin>")


# ---- --debug: tracebacks only for internal errors, only when asked ------------------------------


def _boom(*_a, **_k):
    raise RuntimeError("synthetic internal failure")


def _main(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        kvscope.cli.main(argv)
    return exc.value.code


def test_internal_error_without_debug_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr("kvscope.cli.explain.analyze", _boom)
    assert _main(["explain", str(REAL)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("\n") == 1 and "internal error (RuntimeError: synthetic internal failure)" in err


def test_internal_error_with_debug_shows_the_traceback(monkeypatch, capsys):
    monkeypatch.setattr("kvscope.cli.explain.analyze", _boom)
    assert _main(["explain", str(REAL), "--debug"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "_boom" in err
    assert err.strip().splitlines()[-1].startswith("kvscope: internal error")


def test_internal_error_deep_in_the_parser_with_debug(monkeypatch, capsys):
    """Raised inside the reader's scan loop, far from the CLI: still caught, traceback only with --debug."""
    monkeypatch.setattr("kvscope.reading.source._decode", _boom)
    assert _main(["explain", str(REAL)]) == 1
    assert "Traceback" not in capsys.readouterr().err
    assert _main(["explain", str(REAL), "--debug"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "_boom" in err, err


def test_user_errors_show_no_traceback_even_with_debug(tmp_path, capsys):
    assert _main(["explain", str(tmp_path / "missing.log"), "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("kvscope: ")
