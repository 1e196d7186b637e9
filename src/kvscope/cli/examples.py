"""``kvscope examples``: list the bundled example logs."""

from __future__ import annotations

import click

from kvscope.examples import EXAMPLES


@click.command("examples")
def command() -> None:
    """List bundled examples (use with `kvscope explain --example NAME`)."""
    for ex in EXAMPLES.values():
        click.echo(f"{ex.name:16s} {ex.title}")
