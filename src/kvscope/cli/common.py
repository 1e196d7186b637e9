"""Options and helpers shared by the verbs."""

from __future__ import annotations

import ast
import contextlib
import errno
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

from kvscope.core.errors import InputError
from kvscope.core.text import json_visible, visible


def parse_assignments(items: tuple[str, ...], what: str = "--assume") -> dict[str, Any]:
    """KEY=VALUE pairs; values read as Python literals when they are (0.88, 8, true), else strings."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise InputError(f"{what} expects KEY=VALUE, got {item!r}")
        key, raw = item.split("=", 1)
        key = key.strip().lstrip("-").replace("-", "_")
        raw = raw.strip()
        lowered = raw.lower()
        if lowered in ("true", "false"):
            value: Any = lowered == "true"
        elif lowered in ("none", "null"):
            value = None
        else:
            try:
                value = ast.literal_eval(raw)
            except (ValueError, SyntaxError):
                value = raw.strip("'\"")
        out[key] = value
    return out


def write_output(text: str, output: str | None, fmt: str = "terminal") -> None:
    """Print the report, or write it to ``output``. Text formats show every control, escape and bidi character a
    log or a server supplied as an escape (``core/text.visible``), JSON writes them as ``\\u`` escapes: a report
    shown in a terminal (printed, or a file cat-ed later) never moves the cursor, sets a title or writes the
    clipboard. HTML is for a browser, which acts on none of them."""
    from kvscope.render.console import style, visible_keeping_colour

    if fmt == "json":
        text = json_visible(text)
    elif fmt == "terminal" and style().color and not output:
        text = visible_keeping_colour(text)
    elif fmt != "html":
        text = visible(text)
    if output:
        _write_file(output, text + "\n")
    else:
        click.echo(text, color=style().color or None)  # click strips colour codes from a pipe unless told


def check_output(output: str | None, inputs: list[str]) -> None:
    """Refuse, before any work, an ``-o`` that names one of the logs being read (the report would replace the
    log it came from), whether by the same path, a symlink or a hard link."""
    if not output:
        return
    target = Path(output)
    for given in inputs:
        try:
            if target.exists() and Path(given).exists() and target.samefile(given):
                raise InputError(f"-o {output} is one of the logs being read; write the report somewhere else")
        except OSError:
            continue


def _write_file(output: str, text: str) -> None:
    """The whole report or nothing: written to a temporary file beside ``output`` and renamed over it, so a
    failed write (a full disk) leaves the old file as it was and no partial report. A symlink is replaced, not
    followed. A device or a FIFO (``-o /dev/stdout``, a pipe) is written directly; a FIFO nobody reads is an
    error, not a hang."""
    path = Path(output)
    try:
        special = path.exists() and not path.is_file()
    except OSError:
        special = False
    try:
        if special:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            os.set_blocking(fd, True)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            return
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent if str(path.parent) else ".")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        why = "no process reads that FIFO" if exc.errno == errno.ENXIO else exc.strerror or str(exc)
        raise InputError(f"cannot write {output}: {why}") from None


FORMATS = click.Choice(["terminal", "json", "markdown", "html"])
COLOR = click.option("--color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
                     help="Colour the terminal report: auto = on a terminal, unless NO_COLOR is set.")


def check_context(context: int | None) -> None:
    """--context, where a verb takes one: a positive number of tokens no larger than any server holds."""
    from kvscope.analysis.assumptions import MAX_COUNT

    if context is not None and not 0 < context <= MAX_COUNT:
        raise InputError("--context must be a positive number of tokens")


def set_terminal(color: str, fmt: str) -> None:
    """Fit the terminal report to the real width and colour it as --color says (render/console.py)."""
    from kvscope.render.console import configure

    configure(color if fmt == "terminal" else "never")


def gather_inputs(logs: tuple[str, ...], example: str | None, assume: tuple[str, ...],
                  model: str | None = None) -> tuple[list[str], dict[str, Any]]:
    """Paths to read and the assumptions to apply: a bundled example brings its log and its known flags.
    Every --assume key and value, and --model, is checked first (``kvscope.analysis.assumptions``)."""
    from kvscope.analysis.assumptions import validate
    from kvscope.examples import example_path

    assumptions: dict[str, Any] = {}
    paths = list(logs)
    if example:
        ex, path = example_path(example)
        assumptions.update(ex.assumptions)
        paths.append(path)
    given = parse_assignments(assume)
    validate(given, model)
    assumptions.update(given)
    return paths, assumptions


def echo_listing(rows: list[tuple[str, str]]) -> None:
    """A catalog listing (name, description) that fits the terminal: the description wraps under itself."""
    import textwrap

    from kvscope.render.console import configure

    width = configure("never", sys.stdout).width
    name_width = min(max((len(name) for name, _ in rows), default=0), max(12, width // 2))
    for name, text in rows:
        indent = " " * (name_width + 2)
        if len(name) > name_width:
            click.echo(name)
            first = indent
        else:
            first = name.ljust(name_width) + "  "
        click.echo(textwrap.fill(text, width=width, initial_indent=first, subsequent_indent=indent,
                                 break_on_hyphens=False) if text else first.rstrip())


def complete_example(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Shell completion of ``--example``: the bundled examples' names."""
    from kvscope.examples import EXAMPLES

    return [name for name in EXAMPLES if name.startswith(incomplete)]
