"""``kvscope examples``: list the bundled example logs."""

from __future__ import annotations

import click

from kvscope.cli.common import echo_listing
from kvscope.examples import EXAMPLES


@click.command("examples")
def command() -> None:
    """List the bundled examples: real logs people posted, with where they were posted.

    \b
    Examples:
      kvscope explain --example vllm-max-len-too-large
      kvscope whatif --example kimi-k2.5-tp8 --set mem_fraction_static=0.92
    """
    echo_listing([(ex.name, ex.title + (f" (source: {ex.source})" if ex.source else "")) for ex in EXAMPLES.values()])
