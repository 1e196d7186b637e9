"""``kvscope whatif``: predict the KV pool for changed settings, calibrated on the run you already have."""

from __future__ import annotations

import math
import sys
import textwrap
from typing import Any

import click

from kvscope import engines
from kvscope.analysis.assumptions import MAX_SIZE_GIB, check_settings
from kvscope.api import analyze
from kvscope.cli.common import (
    COLOR,
    FORMATS,
    check_context,
    check_output,
    gather_inputs,
    parse_assignments,
    set_terminal,
    write_output,
)
from kvscope.core.errors import InputError
from kvscope.engines.whatif_base import PredictionError, Scenario


def build_prediction(startup, changes: dict[str, Any], context: int | None, host_ram_gb: float | None) -> dict[str, Any]:
    """Calibrate on the startup and predict, with the startup's engine's whatif."""
    whatif = engines.get(startup.engine).whatif
    if whatif is None:
        raise InputError(f"whatif does not model {engines.get(startup.engine).label} startups yet")
    return whatif.build_prediction(startup, changes, context, host_ram_gb)


def _row(sc: dict[str, Any]) -> list[str]:
    tokens = f"{sc['kv_tokens_low']:,}" if sc["kv_tokens_low"] == sc["kv_tokens_high"] else \
        f"{sc['kv_tokens_low']:,} – {sc['kv_tokens_high']:,}"
    node = "" if sc["node_kv_tokens_low"] == sc["kv_tokens_low"] else f" (node {sc['node_kv_tokens_low']:,})"
    conc = "—" if sc["concurrency_at_context"] is None else f"{sc['concurrency_at_context']:.2f} @ {sc['context_tokens']:,}"
    reserve = "—" if sc["reserve_left_gib"] is None else f"{sc['reserve_left_gib']:.2f}"
    flags = " ".join(sc["flags"]) or "(as logged)"
    return [flags, tokens + node, conc, reserve, sc["risk"] + ("*" if sc["approximate"] else "")]


def render_terminal(pred: dict[str, Any]) -> str:
    from io import StringIO

    from rich.table import Table

    from kvscope.render.console import terminal_console

    buf = StringIO()
    console = terminal_console(buf)
    cal = pred["calibration"]
    console.print(engines.get(pred["engine"]).whatif.calibration_line(pred))
    for note in cal["notes"]:
        console.print(f"  · {note}")
    t = Table(title="flag → KV tokens per GPU → concurrent requests → reserve left (GiB) → OOM risk", header_style="bold")
    for col in ("flags", "KV tokens", "requests at context", "reserve left", "risk"):
        t.add_column(col)
    rows = [pred["baseline"]] + ([pred["requested"]] if pred["requested"] else []) + pred["table"]
    for sc in rows:
        t.add_row(*_row(sc), style="bold" if sc is pred["requested"] else None)
    console.print(t)
    console.print("* approximate: the change moves memory the log does not show")
    req = pred["requested"]
    if req:
        console.print(f"\nRequested: {' '.join(req['flags'])}")
        console.print(f"  KV tokens: {req['kv_tokens_low']:,} – {req['kv_tokens_high']:,} per GPU"
                      + (f" ({req['node_kv_tokens_low']:,} across the node)" if req["node_kv_tokens_low"] != req["kv_tokens_low"] else ""))
        console.print(f"  OOM risk: {req['risk']} — {req['risk_words']}")
        for note in req["notes"]:
            console.print(f"  · {note}")
        if req["host"]:
            h = req["host"]
            line = (f"  host tier: {h['host_tokens_per_rank']:,} tokens per rank = {h['per_rank_gb']} GB pinned × "
                    f"{h['ranks_on_host']} ranks = {h['total_gb']} GB")
            if "fits" in h:
                line += f"; host RAM {h['host_ram_gb']} GB → {'fits' if h['fits'] else 'DOES NOT fit'}, margin {h['margin_gb']} GB"
            console.print(line)
            if h.get("note"):
                console.print(f"  · {h['note']}")
    return buf.getvalue().rstrip()


class _WithSettableKeys(click.Command):
    """Lists the --set keys in ``--help`` only: building the list imports every engine's whatif module, which a
    run (or ``kvscope --help``, which builds every verb) need not pay for."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self.epilog = _settable()
        super().format_epilog(ctx, formatter)


def _settable() -> str:
    """The --set keys each engine's whatif models, for the help (they are its SUPPORTED set, so never stale)."""
    lines = ["\b", "--set keys:"]
    for engine in engines.with_capability("whatif"):
        lines += textwrap.wrap(f"{engine.label}: {', '.join(sorted(engine.whatif.SUPPORTED))}", width=76,
                               initial_indent="  ", subsequent_indent="    ")
    return "\n".join(lines)


@click.command("whatif", cls=_WithSettableKeys)
@click.argument("logs", nargs=-1)
@click.option("--example", metavar="NAME", help="Calibrate on a bundled example.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="A changed setting (repeatable, combined).")
@click.option("--assume", multiple=True, metavar="KEY=VALUE", help="A fact the log lacks (see explain).")
@click.option("--model", metavar="PATH|ID", help="HF config.json or model id.")
@click.option("--host-ram", "host_ram", type=float, metavar="GB", help="Free host RAM (decimal GB) for the host KV tier.")
@click.option("--context", type=int, metavar="TOKENS", help="Context length per request for the concurrency column.")
@click.option("--format", "fmt", type=FORMATS, default="terminal", show_default=True)
@click.option("-o", "--output", metavar="FILE")
@click.option("--no-redact", is_flag=True)
@COLOR
@click.option("--debug", is_flag=True)
def command(logs, example, sets, assume, model, host_ram, context, fmt, output, no_redact, color, debug) -> None:
    """Predict KV tokens, concurrency and OOM risk for changed settings, calibrated on a logged startup.

    \b
    Examples:
      kvscope whatif server.log --set mem_fraction_static=0.92
      kvscope whatif server.log --set gpu_memory_utilization=0.95 --context 32768
      kvscope whatif --example kimi-k2.5-tp8 --set kv_cache_dtype=fp8_e4m3
    """
    set_terminal(color, fmt)
    paths, assumptions = gather_inputs(logs, example, assume, model)
    check_output(output, paths)
    if host_ram is None and isinstance(assumptions.get("host_ram_gb"), (int, float)) and any(
            k.startswith("hicache") for k in parse_assignments(sets, "--set")):
        host_ram = float(assumptions["host_ram_gb"])
    if not paths:
        raise InputError("give a log file (or --example NAME) to calibrate on")
    changes = parse_assignments(sets, "--set")
    check_settings(changes)
    check_context(context)
    if host_ram is not None and not (math.isfinite(host_ram) and 0 <= host_ram <= MAX_SIZE_GIB):
        raise InputError("--host-ram must be a size in GB, from 0")
    analysis = analyze(paths, assumptions, model)
    candidates = [s for s in analysis.startups if s.reconciliation is not None
                  or (engines.get(s.engine).whatif is not None and engines.get(s.engine).whatif.can_calibrate(s))]
    if not candidates:
        raise InputError("no startup with a KV pool line to calibrate on" if analysis.startups else "no engine startup found")
    startup = candidates[-1]
    try:
        pred = build_prediction(startup, changes, context, host_ram)
    except PredictionError as exc:
        raise InputError(str(exc)) from None
    pred["startup_index"] = analysis.startups.index(startup)
    if fmt == "json":
        from kvscope.render.json_out import dumps, to_dict

        text = dumps(to_dict(analysis, {"prediction": pred}))
        if not no_redact:
            from kvscope.core.redact import redact_text

            text = redact_text(text, "json", dumps)
    elif fmt == "terminal":
        text = render_terminal(pred)
    else:
        from kvscope.render import render_analysis

        text = render_analysis(analysis, fmt, redact=not no_redact, extra={"prediction": pred})
    write_output(text, output, fmt)
    if not analysis.startups:
        sys.exit(2)


__all__ = ["Scenario", "build_prediction", "command"]
