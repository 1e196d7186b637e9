"""``kvscope diff A [B]``: why the KV capacity changed between two startups, term by term."""

from __future__ import annotations

import click

from kvscope.api import analyze
from kvscope.cli.common import COLOR, FORMATS, check_output, gather_inputs, set_terminal, write_output
from kvscope.core.errors import InputError


def _with_capacity(startups):
    from kvscope.analysis.diff import side

    sides = [(s, side(s, i + 1)) for i, s in enumerate(startups)]  # side() reads the ledger once per startup
    return [s for s, x in sides if x.kv_tokens is not None or x.kv_gib is not None]


@click.command("diff")
@click.argument("logs", nargs=-1)
@click.option("--assume", multiple=True, metavar="KEY=VALUE", help="A fact both logs lack (see explain).")
@click.option("--model", metavar="PATH|ID", help="HF config.json or model id, for bytes per token.")
@click.option("--format", "fmt", type=FORMATS, default="terminal", show_default=True)
@click.option("-o", "--output", metavar="FILE", help="Write the report to FILE instead of stdout.")
@click.option("--no-redact", is_flag=True, help="Keep API keys, tokens and user names in the output.")
@COLOR
@click.option("--debug", is_flag=True, help="Show tracebacks of internal errors.")
def command(logs, assume, model, fmt, output, no_redact, color, debug) -> None:
    """Why the KV capacity changed between two startups: a waterfall of terms that sum to the difference.

    Two files: the last startup of A against the last of B. One file (or standard input) holding several
    startups: each against the one before it.

    \b
    Examples:
      kvscope diff before.log after.log
      kvscope diff restarts.log            (consecutive startups in one log)
      kvscope diff a.log b.log --format html -o diff.html
    """
    from kvscope.analysis.diff import consecutive, diff
    from kvscope.render.diff import RENDERERS

    set_terminal(color, fmt)
    paths, assumptions = gather_inputs(logs, None, assume, model)
    check_output(output, paths)
    if not paths:
        raise InputError("give two logs (or one holding several startups) to compare")
    if len(paths) > 2:
        raise InputError(f"diff compares two logs, not {len(paths)} (one log holding several startups is fine)")
    if len(paths) == 2:
        a = _with_capacity(analyze([paths[0]], assumptions, model).startups)
        b = _with_capacity(analyze([paths[1]], assumptions, model).startups)
        if not a or not b:
            missing = paths[0] if not a else paths[1]
            raise InputError(f"{missing}: no startup with a KV capacity (tokens or KV memory) to compare")
        diffs = [diff(a[-1], b[-1], len(a), len(b))]
    else:
        startups = analyze(paths, assumptions, model).startups
        pairs = consecutive(startups)
        if not pairs:
            raise InputError("one log with fewer than two startups that show a KV capacity: give two logs")
        diffs = [diff(startups[i], startups[j], i + 1, j + 1) for i, j in pairs]
    text = RENDERERS[fmt](diffs)
    if not no_redact:
        from kvscope.core.redact import redact_text
        from kvscope.render.json_out import dumps

        text = redact_text(text, fmt, dumps)
    write_output(text, output, fmt)
