"""``kvscope plan``: KV capacity of a deployment before it runs — model + GPU + parallelism + engine, no log."""

from __future__ import annotations

from io import StringIO
from typing import Any

import click

from kvscope import __version__, engines
from kvscope.analysis.assumptions import check_settings
from kvscope.analysis.plan import PlanRequest, plan, summary_line
from kvscope.cli.common import COLOR, FORMATS, check_context, parse_assignments, set_terminal, write_output

SCHEMA = "kvscope.plan/1"
_MD_REPLACEMENTS = (
    ("GPU memory at startup, read from the server log.", "A plan: predicted from the model and GPU, no log read."),
    ("No engine startup found in the input.\n", ""),
    ("## What-if prediction", "## Plan (predicted, no log read)"),
)


def _empty_analysis():
    from kvscope.api import Analysis
    from kvscope.reading import ReadStats

    return Analysis([], ReadStats())


def render_json(pred: dict[str, Any]) -> str:
    """The explain contract's envelope (no startups) with the prediction beside it."""
    from kvscope.render.json_out import dumps, to_dict

    doc = to_dict(_empty_analysis(), extra={"schema": SCHEMA, "kvscope_version": __version__, "prediction": pred})
    return dumps(doc)


def render_report(pred: dict[str, Any], fmt: str) -> str:
    """markdown / html through the shared renderer (prediction summary, flag table, ledger as sections)."""
    from kvscope.render import render_analysis

    summary = {"summary": summary_line(pred), "model": pred["model"]["name"], "gpu": pred["gpu"]["gpu"],
               "parallel": pred["parallel"], "engine": f"{pred['engine']} {pred['engine_version']} ({pred['era']})",
               "kv": pred["kv"], "capacity": pred["capacity"],
               "settings": {k: f"{v['value']} ({v['from']})" for k, v in pred["settings"].items()},
               "warnings": pred["warnings"], "measured_vs_estimated": pred["measured_vs_estimated"]}
    extra = {"prediction": summary, "flag → KV tokens → concurrency → reserve left": pred["table"],
             "memory ledger (GiB per GPU)": pred["ledger"]}
    text = render_analysis(_empty_analysis(), fmt, redact=False, extra=extra)
    if fmt == "markdown":
        for old, new in _MD_REPLACEMENTS:
            text = text.replace(old, new)
    return text


def _fmt_conc(value: Any) -> str:
    if value is None:
        return "—"
    return f"{value:.2f}" if isinstance(value, float) else f"{value:,}"


def render_terminal(pred: dict[str, Any]) -> str:
    from rich.table import Table
    from rich.text import Text

    from kvscope.render.console import terminal_console

    buf = StringIO()
    console = terminal_console(buf)
    par = pred["parallel"]
    console.print(Text("kvscope plan", style="bold") + Text(f" — {pred['model']['name']} on {pred['gpu']['gpu']}, TP{par['tp']}"
                  + (f" DP{par['dp']}" if par["dp"] > 1 else "") + (f" PP{par['pp']}" if par["pp"] > 1 else "")
                  + f", {pred['engine']} {pred['engine_version']} ({pred['era']})"))
    console.print(Text(summary_line(pred), style="bold") + Text("  (predicted; no log read)"))
    kv = pred["kv"]
    console.print(f"KV bytes per token per GPU: {kv.get('formula', '')}")
    settings = Table(title="Engine settings as the release would resolve them", header_style="bold")
    for col in ("setting", "value", "from"):
        settings.add_column(col)
    for key, v in pred["settings"].items():
        settings.add_row(key, str(v["value"]), v["from"])
    console.print(settings)
    ledger = Table(title="Memory per GPU (GiB = 2^30 B)", header_style="bold")
    for col, justify in (("item", "left"), ("GiB", "right"), ("how", "left")):
        ledger.add_column(col, justify=justify)
    for row in pred["ledger"]:
        ledger.add_row(row["item"], f"{row['gib']:+.2f}" if row["gib"] < 0 else f"{row['gib']:.2f}", row["how"])
    console.print(ledger)
    table = Table(title="flag → KV tokens per GPU → concurrent requests at context → reserve left (GiB)",
                  header_style="bold")
    with_risk = any("oom_risk" in row for row in pred["table"])  # an engine whose plan rates the reserve
    for col in ("flag", "KV tokens", "requests", "reserve left") + (("OOM risk",) if with_risk else ()):
        table.add_column(col)
    for row in pred["table"]:
        cells = [row["flag"], f"{row['kv_tokens']:,}", _fmt_conc(row["concurrency_at_context"]),
                 f"{row['reserve_left_gib']:.2f}"]
        if with_risk:
            cells.append(row.get("oom_risk", "—"))
        table.add_row(*cells, style="bold" if row["flag"] == "(as planned)" else None)
    console.print(table)
    prov = pred["measured_vs_estimated"]
    console.print(Text("What is measured and what is estimated", style="bold"))
    for label in ("measured_or_reported", "assumed", "estimated", "computed"):
        if prov.get(label):
            console.print(f"  {label.replace('_', ' ')}: " + "; ".join(prov[label]))
    for w in pred["warnings"]:
        console.print(f"  ! {w}")
    return buf.getvalue().rstrip() + "\n"


@click.command("plan")
@click.option("--model", required=True, metavar="PATH|ID",
              help="Local checkpoint directory (config.json, model.safetensors.index.json) or a catalog model id.")
@click.option("--gpu", required=True, metavar="NAME|SIZE", help="GPU kind ('H200', 'RTX PRO 6000') or size ('97887MiB').")
@click.option("--tp", type=int, default=1, show_default=True, help="Tensor-parallel size.")
@click.option("--dp", type=int, default=1, show_default=True, help="Data-parallel size (DP attention with --set enable_dp_attention=true).")
@click.option("--pp", type=int, default=1, show_default=True, help="Pipeline-parallel size.")
@click.option("--ep", type=int, default=1, show_default=True, help="Expert-parallel size.")
@click.option("--engine", type=click.Choice([e.name for e in engines.with_capability("plan")]), default="sglang",
              show_default=True)
@click.option("--engine-version", metavar="V", help="Release to replay (default: the newest documented).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="An engine flag (mem_fraction_static=0.88, kv_cache_dtype=fp8_e4m3, gpu_memory_utilization=0.95, "
                   "speculative_algorithm=EAGLE3 …) or a known figure (weights_gib=…, torch_total_gib=…).")
@click.option("--context", type=int, metavar="N", help="Context length per request (default: the model's maximum).")
@click.option("--format", "fmt", type=FORMATS, default="terminal", show_default=True)
@click.option("-o", "--output", metavar="FILE", help="Write the report to FILE instead of stdout.")
@COLOR
@click.option("--debug", is_flag=True, help="Show tracebacks of internal errors.")
def command(model, gpu, tp, dp, pp, ep, engine, engine_version, sets, context, fmt, output, color, debug) -> None:
    """Predict KV-cache tokens and concurrency for a model on a GPU, before running it (no log needed).

    \b
    Examples:
      kvscope plan --model meta-llama/Llama-3.1-8B-Instruct --gpu H100
      kvscope plan --model ./my-model --gpu "RTX PRO 6000" --tp 2 --engine vllm --set gpu_memory_utilization=0.9
    """
    set_terminal(color, fmt)
    check_context(context)
    settings = parse_assignments(sets, "--set")
    check_settings(settings)
    req = PlanRequest(model=model, gpu=gpu, engine=engine, engine_version=engine_version, tp=tp, dp=dp, pp=pp, ep=ep,
                      settings=settings, context=context)
    pred = plan(req)
    if fmt == "json":
        text = render_json(pred)
    elif fmt == "terminal":
        text = render_terminal(pred)
    else:
        text = render_report(pred, fmt)
    write_output(text, output, fmt)
