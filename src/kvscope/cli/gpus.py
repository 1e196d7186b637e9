"""``kvscope gpus [WORD]``: the built-in GPU catalog, the names ``--gpu`` and ``--assume gpu=…`` take."""

from __future__ import annotations

import click

from kvscope.cli.common import echo_listing
from kvscope.core.errors import InputError
from kvscope.model.catalog import gpus, torch_total_gib


@click.command("gpus")
@click.argument("word", required=False)
def command(word: str | None) -> None:
    """List the catalog's GPUs with the memory an engine sees (those whose name holds WORD).

    \b
    Examples:
      kvscope gpus
      kvscope gpus h100
    """
    rows = []
    for g in gpus():
        if word and word.lower() not in g["name"].lower() and not any(word.lower() in a.lower()
                                                                    for a in g.get("aliases") or []):
            continue
        total = torch_total_gib(g)
        nominal = g.get("nominal_gb")
        rows.append((g["name"], f"{nominal if nominal is not None else '?'} GB"
                     + (f" ({total:.2f} GiB to torch)" if isinstance(total, (int, float)) else "")))
    echo_listing(rows)
    if not rows:
        raise InputError(f"no catalog GPU's name holds {word!r}; --assume gpu_total_gib=… works for any GPU")
