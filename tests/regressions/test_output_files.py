"""Reports are written safely: ``-o`` never replaces a log being read (same path, symlink or hard link), writes
the whole report or nothing (a temporary file renamed over the target; a symlink is replaced, not followed),
fails in one line on a FIFO nobody reads instead of hanging, and ``watch --record`` stops loudly when its file
cannot be written (a full disk) instead of exiting 0 with a cut recording."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kvscope.cli import main
from tests.conftest import FIXTURES
from tests.fixtures.watch.replay import Replay, vllm_routes
from tests.unit.watch.test_faults import FAST, watch

LOG = FIXTURES / "logs/vllm/900-cpu-v0.32-tiny-llama-auto-kv-util05/log.txt"


def run(args: list[str], capsys) -> tuple[int, str, str]:
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "internal error" not in out.err
    return code, out.out, out.err


@pytest.fixture()
def log(tmp_path: Path) -> Path:
    path = tmp_path / "server.log"
    path.write_bytes(LOG.read_bytes())
    return path


@pytest.mark.parametrize("verb", [["explain"], ["whatif", "--set", "gpu_memory_utilization=0.6"]])
def test_the_report_never_replaces_the_log_it_reads(verb, log, tmp_path, capsys):
    before = log.read_bytes()
    link = tmp_path / "link.log"
    link.symlink_to(log)
    hard = tmp_path / "hard.log"
    os.link(log, hard)
    for target in (log, link, hard):
        code, _, err = run([verb[0], str(log), *verb[1:], "-o", str(target)], capsys)
        assert code == 2 and "is one of the logs being read" in err, err
    assert log.read_bytes() == before


def test_a_symlink_target_is_replaced_not_followed(log, tmp_path, capsys):
    elsewhere = tmp_path / "precious.txt"
    elsewhere.write_text("keep me")
    out = tmp_path / "report.json"
    out.symlink_to(elsewhere)
    code, _, err = run(["explain", str(log), "--format", "json", "-o", str(out)], capsys)
    assert code == 0, err
    assert elsewhere.read_text() == "keep me" and not out.is_symlink() and out.read_text().startswith("{")
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temporary file left behind


def test_a_write_that_cannot_happen_is_one_line_and_leaves_nothing(log, tmp_path, capsys):
    code, _, err = run(["explain", str(log), "-o", str(tmp_path / "missing-dir" / "r.txt")], capsys)
    assert code == 2 and err.startswith("kvscope: cannot write") and err.count("\n") == 1


def test_a_fifo_nobody_reads_is_an_error_not_a_hang(log, tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    start = time.monotonic()
    code, _, err = run(["explain", str(log), "-o", str(fifo)], capsys)
    assert code == 2 and "no process reads that FIFO" in err
    assert time.monotonic() - start < 5


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_a_recording_that_cannot_be_written_stops_the_watch_loudly(capsys):
    with Replay(vllm_routes("vllm/cpu-0.32.0-8MiB-loaded-a-metrics.txt")) as srv:
        code, _, err = watch([srv.url, *FAST, "--duration", "0.3", "--record", "/dev/full"], capsys)
    assert code == 2 and "cannot write the recording /dev/full" in err
