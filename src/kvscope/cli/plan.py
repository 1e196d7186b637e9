"""``kvscope plan``: KV capacity of a deployment before it runs — model + GPU + parallelism + engine, no log."""

from __future__ import annotations

from typing import Any

import click

from kvscope import __version__, engines
from kvscope.analysis.assumptions import check_settings
from kvscope.analysis.plan import PlanRequest, plan
from kvscope.cli.common import COLOR, FORMATS, check_context, parse_assignments, set_terminal, write_output

SCHEMA = "kvscope.plan/1"


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
    """terminal / markdown / html: the plan's report view (render.prediction), drawn by each renderer."""
    from kvscope.render.prediction import from_plan

    report = from_plan(pred)
    if fmt == "terminal":
        from kvscope.render.prediction_terminal import render

        return render(report)
    from kvscope.render import render_analysis

    return render_analysis(_empty_analysis(), fmt, redact=False, extra={"report": report})


def render_terminal(pred: dict[str, Any]) -> str:
    return render_report(pred, "terminal")


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
    text = render_json(pred) if fmt == "json" else render_report(pred, fmt)
    write_output(text, output, fmt)
