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
    complete_example,
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


def report_of(pred: dict[str, Any], startup: Any) -> Any:
    """The report view (render.prediction) of a prediction and the startup it was calibrated on."""
    from kvscope.render.prediction import from_whatif

    return from_whatif(pred, startup, engines.get(pred["engine"]).whatif.calibration_line(pred))


def render_terminal(pred: dict[str, Any], startup: Any = None) -> str:
    from kvscope.render.prediction_terminal import render

    return render(report_of(pred, startup))


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
@click.option("--example", metavar="NAME", shell_complete=complete_example, help="Calibrate on a bundled example.")
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
    unset = [key for key, value in changes.items() if value is None]
    if unset:  # "none" unsets a fact for --assume; a what-if needs the value the setting would change to
        raise InputError(f"--set {unset[0]}=…: give the value to predict for (a number, a dtype, true or false)")
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
        text = render_terminal(pred, startup)
        if not no_redact:
            from kvscope.core.redact import redact_text

            text = redact_text(text, "terminal")
    else:
        from kvscope.render import render_analysis

        text = render_analysis(analysis, fmt, redact=not no_redact,
                               extra={"prediction": pred, "report": report_of(pred, startup)})
    write_output(text, output, fmt)
    if not analysis.startups:
        sys.exit(2)


__all__ = ["Scenario", "build_prediction", "command"]
