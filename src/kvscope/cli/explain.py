"""``kvscope explain LOG…``: startup logs → per-rank memory ledger, reconciled and explained."""

from __future__ import annotations

import sys

import click

from kvscope.api import analyze, no_cycle_collection
from kvscope.cli.common import (
    COLOR,
    FORMATS,
    check_output,
    complete_example,
    gather_inputs,
    set_terminal,
    write_output,
)
from kvscope.core.errors import InputError

EXIT_FAILED_STARTUP = 3  # --check: the log shows a startup that failed


def render(analysis, fmt: str, redact: bool, extra=None) -> str:
    from kvscope.render import render_analysis

    return render_analysis(analysis, fmt, redact=redact, extra=extra)


@click.command("explain")
@click.argument("logs", nargs=-1)
@click.option("--example", "example", metavar="NAME", shell_complete=complete_example, help="Explain a bundled example (see `kvscope examples`).")
@click.option("--format", "fmt", type=click.Choice([*FORMATS.choices, "prometheus"]), default="terminal", show_default=True,
              help="prometheus: the ledger as Prometheus text, for node_exporter's textfile collector.")
@click.option("-o", "--output", metavar="FILE", help="Write the report to FILE instead of stdout.")
@click.option("--assume", "assume", multiple=True, metavar="KEY=VALUE",
              help="A fact the log lacks: mem_fraction_static=0.88, gpu='RTX PRO 6000', model=…, tp_size=8, "
                   "engine=vllm (a pasted out-of-memory error names no engine).")
@click.option("--model", metavar="PATH|ID", help="HF config.json (file or directory) or model id, for bytes per token.")
@click.option("--no-redact", is_flag=True, help="Keep API keys, tokens and user names in the output.")
@click.option("--check", is_flag=True, help="Exit 3 when a startup failed (for scripts: the report is printed as usual).")
@COLOR
@click.option("--debug", is_flag=True, help="Show tracebacks of internal errors.")
def command(logs, example, fmt, output, assume, model, no_redact, check, color, debug) -> None:
    """Explain where each GPU's memory went at startup, from SGLang / vLLM / llama.cpp / TensorRT-LLM logs.

    \b
    Examples:
      kvscope explain server.log
      kubectl logs pod/vllm-0 | kvscope explain
      kvscope explain --example kimi-k2.5-tp8 --format html -o report.html
      kvscope explain server.log --assume mem_fraction_static=0.88 --check
    """
    set_terminal(color, fmt)
    with no_cycle_collection():  # the report too makes no cycles worth collecting (1-2 % of a run)
        _explain(logs, example, fmt, output, assume, model, no_redact, check)


def _explain(logs, example, fmt, output, assume, model, no_redact, check=False) -> None:
    if not logs and not example and not sys.stdin.isatty():
        logs = ("-",)  # `cat server.log | kvscope explain`: the piped log is the input
    paths, assumptions = gather_inputs(logs, example, assume, model)
    check_output(output, paths)
    if not paths:
        raise InputError("give one or more log files (or - for stdin), or --example NAME")
    analysis = analyze(paths, assumptions, model)
    write_output(render(analysis, fmt, not no_redact), output, fmt)
    if check and any(s.failure is not None for s in analysis.startups):
        sys.exit(EXIT_FAILED_STARTUP)
    if not analysis.startups:
        why = "it looks like binary data" if analysis.stats.looks_binary() else "no engine startup lines found"
        if analysis.stats.overlong_lines:
            why += f"; {analysis.stats.overlong_lines} over-long line(s) skipped"
        for warning in analysis.stats.warnings[:2]:  # e.g. a truncated .gz, a decompression bomb
            why += f"; {warning}"
        click.echo(f"kvscope: nothing to explain in {', '.join(analysis.stats.files) or 'the input'} ({why})", err=True)
        sys.exit(2)
