"""How terminal reports are drawn: the width they fit and whether they colour, decided once per run by the CLI.

Why module state: every terminal renderer (explain's, whatif's, plan's) makes its own rich Console, and the
choice belongs to where the output goes, not to what is rendered. ``configure`` is called by the verbs with
``--color`` and the real stdout; a library caller who never calls it gets the old fixed layout (150 columns,
no colour), so rendering stays deterministic in tests and in the Python API.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass
from typing import IO, Any

from rich.console import Console

from kvscope.core.text import visible

PIPED_WIDTH = 150  # a report piped to a file or a pager has no terminal to fit: wide enough for the tables
MIN_WIDTH = 40


@dataclass(frozen=True)
class TerminalStyle:
    width: int = PIPED_WIDTH
    color: bool = False


_style = TerminalStyle()


def configure(color: str = "auto", stream: IO[str] | None = None) -> TerminalStyle:
    """Fit the real terminal (or ``COLUMNS``), and colour when ``color`` is "always", or "auto" on a terminal
    without ``NO_COLOR`` set (https://no-color.org)."""
    global _style
    out = stream if stream is not None else sys.stdout
    tty = bool(getattr(out, "isatty", lambda: False)())
    width = _columns_env()
    if width is None:
        width = shutil.get_terminal_size((PIPED_WIDTH, 24)).columns if tty else PIPED_WIDTH
    on = color == "always" or (color == "auto" and tty and not os.environ.get("NO_COLOR"))
    _style = TerminalStyle(max(MIN_WIDTH, width), on)
    return _style


def _columns_env() -> int | None:
    raw = os.environ.get("COLUMNS", "")
    return int(raw) if raw.isdigit() and 0 < int(raw) < 10_000 else None


def style() -> TerminalStyle:
    return _style


def terminal_console(file: Any, width: int | None = None) -> Console:
    """A rich Console drawing into ``file`` at the configured width and colour (``width`` overrides)."""
    # markup off: a string is shown as it is, so a model path like "a[/b]" (or a log's "[red]") is text, never a
    # style tag or a MarkupError; kvscope's own styles are Text styles
    return Console(file=file, width=width or _style.width, force_terminal=_style.color,
                   color_system="standard" if _style.color else None, highlight=False, record=False,
                   legacy_windows=False, emoji=False, markup=False)


_SGR = re.compile(r"(\x1b\[[0-9;]*m)")


def visible_keeping_colour(text: str) -> str:
    """``visible`` for a coloured report: its own colour codes (SGR, ``ESC[…m``) stay, anything else a terminal
    would act on (an OSC title or clipboard write, a cursor move, a bidi override) is shown as an escape."""
    return "".join(part if _SGR.fullmatch(part) else visible(part) for part in _SGR.split(text))
