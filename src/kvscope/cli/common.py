"""Options and helpers shared by the verbs."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import click

from kvscope.core.errors import InputError


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


def write_output(text: str, output: str | None) -> None:
    if output:
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot write {output}: {exc.strerror}") from None
    else:
        click.echo(text)


FORMATS = click.Choice(["terminal", "json", "markdown", "html"])


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
