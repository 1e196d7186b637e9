"""``kvscope watch URL``: a running vLLM / SGLang server's KV capacity, then its usage, live.

Exit codes: 0 watched until --duration or Ctrl-C; 2 could not start (bad URL, refused key, not an
engine, nothing listening, no usage metrics); 3 the server went away or refused us mid-watch
(the summary of what was seen is still printed); 130 interrupted before the first sample.
"""

from __future__ import annotations

import os
import sys

import click
from rich.console import Console

from kvscope.cli.common import COLOR
from kvscope.core.errors import InputError
from kvscope.watch.loop import EXIT_OK, Options, Watch
from kvscope.watch.recorder import Recorder
from kvscope.watch.view import LiveView, PlainView, QuietView, render_summary


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush into the closed pipe stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _positive(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and value <= 0:
        raise click.BadParameter("must be greater than 0")
    return value


def _non_negative(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if value < 0:
        raise click.BadParameter("must be 0 or more")
    return value


@click.command("watch")
@click.argument("url")
@click.option("--interval", type=float, default=2.0, show_default=True, callback=_positive, metavar="S",
              help="Seconds between samples.")
@click.option("--duration", type=float, default=None, callback=_positive, metavar="S",
              help="Stop after S seconds (default: until Ctrl-C).")
@click.option("--api-key", envvar="KVSCOPE_API_KEY", metavar="KEY",
              help="Bearer token for servers started with --api-key (or set KVSCOPE_API_KEY).")
@click.option("--format", "fmt", type=click.Choice(["terminal", "jsonl"]), default="terminal", show_default=True,
              help="jsonl: one JSON object per line on stdout (capacity, samples, events, summary).")
@click.option("--record", metavar="FILE", help="Also append the JSON lines to FILE (kvscope explain FILE reads it).")
@click.option("--wait", type=float, default=0.0, show_default=True, callback=_non_negative, metavar="S",
              help="Keep retrying a server that is not up yet for S seconds.")
@click.option("--give-up", type=float, default=30.0, show_default=True, callback=_positive, metavar="S",
              help="Stop when the server has not answered for S seconds mid-watch.")
@click.option("--timeout", type=float, default=10.0, show_default=True, callback=_positive, metavar="S",
              help="Seconds to wait for one answer.")
@click.option("--insecure", is_flag=True, help="Do not verify the server's TLS certificate.")
@click.option("--gpus/--no-gpus", default=None,
              help="Per-GPU memory from NVML (default: when the server is on this machine and nvidia-ml-py is installed).")
@click.option("--no-redact", is_flag=True, help="Show and record what the server tells as it is (model paths, ids).")
@COLOR
@click.option("--debug", is_flag=True, help="Show tracebacks of internal errors.")
def command(url, interval, duration, api_key, fmt, record, wait, give_up, timeout, insecure, gpus, no_redact,
            color, debug) -> None:
    """Watch a running vLLM or SGLang server: KV capacity once, then usage, queueing and preemptions.

    \b
    Examples:
      kvscope watch http://127.0.0.1:8000 --duration 600
      kvscope watch http://gpu-node:30000 --record run.jsonl   (then: kvscope explain run.jsonl)
    """
    opts = Options(url=url, interval=interval, duration=duration, api_key=api_key or None, timeout=timeout,
                   wait=wait, give_up=give_up, insecure=insecure, gpus=gpus, redact=not no_redact)
    from kvscope.render.console import configure

    look = configure(color if fmt == "terminal" else "never", sys.stdout)
    tty = bool(getattr(sys.stdout, "isatty", lambda: False)())
    # the width and colour explain's reports use; a terminal still gets the live panel (rich sees it as one)
    out = Console(highlight=False, width=look.width, force_terminal=tty or None, no_color=not look.color,
                  color_system="standard" if look.color else None)
    err = Console(stderr=True, highlight=False, width=look.width, no_color=not look.color)
    recorder = Recorder(redact=not no_redact)
    if record:
        recorder.open_file(record)
    if fmt == "jsonl":
        recorder.add_stream(sys.stdout, essential=True)
        view = QuietView(out, err)
    elif out.is_terminal:
        view = LiveView(out, interval)
    else:
        view = PlainView(out, err)
    try:
        watch = Watch(opts, view, recorder)
        result = watch.run()
    except BrokenPipeError:
        recorder.close()
        _silence_stdout()
        return  # `kvscope watch --format jsonl | head`: the reader has what it wanted
    except InputError:
        recorder.close()
        raise
    recorder.close()
    if result.summary.samples:
        if fmt == "jsonl":
            code, sentence = result.summary.verdict()
            err.print(f"kvscope: {sentence}", markup=False, soft_wrap=True)
        else:
            render_summary(out, result.capacity, result.summary, result.ended)
    if result.error and isinstance(view, LiveView):
        err.print(f"kvscope: {result.error}", markup=False, soft_wrap=True)
    if result.exit_code != EXIT_OK:
        sys.exit(result.exit_code)
