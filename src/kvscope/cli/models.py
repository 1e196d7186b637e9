"""``kvscope models [WORD]``: the built-in model catalog, the ids ``--model`` and ``plan --model`` take."""

from __future__ import annotations

import click

from kvscope.cli.common import echo_listing
from kvscope.core.errors import InputError
from kvscope.model.catalog import load_architecture, model_ids


def _kind(hf_id: str) -> str:
    """The attention kind the catalog's config gives (what sizes its KV cache), in a word."""
    arch, _ = load_architecture(hf_id)
    if arch is None:
        return ""
    kind = "MLA" if arch.attention == "mla" else "MHA/GQA"
    if arch.sliding_layers:
        kind += " + sliding window"
    if arch.linear_layers:
        kind += " + linear attention"
    return f"{kind}, {arch.num_layers} layers"


@click.command("models")
@click.argument("word", required=False)
def command(word: str | None) -> None:
    """List the catalog's models (those whose id holds WORD, case-insensitively).

    \b
    Examples:
      kvscope models
      kvscope models qwen3
    """
    ids = sorted(i for i in model_ids() if not word or word.lower() in i.lower())
    echo_listing([(hf_id, _kind(hf_id)) for hf_id in ids])
    if not ids:
        raise InputError(f"no catalog model's id holds {word!r}; a local checkpoint directory works too")
