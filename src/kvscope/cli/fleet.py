"""``kvscope fleet --prometheus URL``: which replicas of a fleet were KV-bound over a range, from the Prometheus
that already scrapes them.

Exit codes: 0 reported; 2 bad usage, refused credentials, no matching replica; 3 Prometheus could not be
reached or answered wrongly (one line, as ``watch`` says it).
"""

from __future__ import annotations

import sys
import time

import click

from kvscope.cli.common import COLOR, FORMATS, set_terminal, write_output
from kvscope.core.errors import InputError, WatchError

EXIT_UNREACHABLE = 3


@click.command("fleet")
@click.option("--prometheus", "url", required=True, metavar="URL", envvar="KVSCOPE_PROMETHEUS",
              help="The Prometheus (or compatible API: Thanos, Mimir, VictoriaMetrics) that scrapes the servers.")
@click.option("--selector", metavar="'{LABEL=\"…\"}'", help="Label matchers that pick the fleet, e.g. '{job=\"vllm\"}'.")
@click.option("--since", default="7d", show_default=True, metavar="DURATION", help="How far back: 30m, 6h, 7d, 2w.")
@click.option("--until", metavar="UNIX_TIME", type=float, help="End of the range (default: now).")
@click.option("--step", default="30s", show_default=True, metavar="DURATION",
              help="Resolution of the range queries (at least the scrape interval).")
@click.option("--bearer-token", envvar="KVSCOPE_PROMETHEUS_TOKEN", metavar="TOKEN",
              help="Authorization: Bearer TOKEN (or set KVSCOPE_PROMETHEUS_TOKEN). Never printed.")
@click.option("--basic-auth", envvar="KVSCOPE_PROMETHEUS_BASIC_AUTH", metavar="USER:PASSWORD",
              help="HTTP basic auth (or user:password@ in the URL, or KVSCOPE_PROMETHEUS_BASIC_AUTH). Never printed.")
@click.option("--ca-cert", metavar="FILE", type=click.Path(dir_okay=False), help="CA bundle that signed the server's certificate.")
@click.option("--insecure", is_flag=True, help="Do not verify the server's TLS certificate.")
@click.option("--timeout", type=float, default=60.0, show_default=True, metavar="S", help="Seconds to wait for one answer.")
@click.option("--max-points", type=int, default=None, metavar="N",
              help="Most samples one answer may hold (replicas are paged to stay under it; default 2,000,000).")
@click.option("--top", type=int, default=None, metavar="N", help="Rows in the terminal / markdown table (default 40).")
@click.option("--format", "fmt", type=FORMATS, default="terminal", show_default=True)
@click.option("-o", "--output", metavar="FILE", help="Write the report to FILE instead of stdout.")
@COLOR
@click.option("--debug", is_flag=True, help="Show tracebacks of internal errors.")
def command(url, selector, since, until, step, bearer_token, basic_auth, ca_cert, insecure, timeout, max_points, top,
            fmt, output, color, debug) -> None:
    """Capacity and KV pressure of every replica, over days, from Prometheus.

    One range query per metric family (vLLM's and SGLang's names of every release), paged by replica and
    windowed by time; per replica the capacity, usage peak / p95 / time ≥ 90 %, queueing episodes,
    evictions, prefix hit rate and the verdict watch gives (capacity-bound / queue-bound / not bound / idle)
    with its cheapest fix; then the fleet: how many replicas are KV-bound, memory left idle, and what a
    fleet-wide change would add.

    \b
    Examples:
      kvscope fleet --prometheus http://prometheus:9090 --selector '{job="vllm"}' --since 7d
      kvscope fleet --prometheus https://prom.example.com --bearer-token "$TOKEN" --format html -o fleet.html
    """
    from kvscope.fleet.prometheus import API, DEFAULT_MAX_POINTS, duration_s
    from kvscope.fleet.scan import Query, scan
    from kvscope.render.fleet import DEFAULT_TOP, RENDERERS
    from kvscope.watch.http import Client

    set_terminal(color, fmt)
    since_s, step_s = duration_s(since, "--since"), duration_s(step, "--step")
    if timeout <= 0:
        raise InputError("--timeout must be more than zero")
    if max_points is not None and max_points < 1000:
        raise InputError("--max-points must be at least 1,000")
    if top is not None and top < 1:
        raise InputError("--top must be at least 1")
    end = until if until is not None else time.time()
    end = end - end % step_s  # on the step grid, so that the same range gives the same steps
    if since_s < step_s:
        raise InputError(f"--since {since} is shorter than --step {step}")
    auth = None
    if basic_auth:
        if ":" not in basic_auth:
            raise InputError("--basic-auth expects USER:PASSWORD")
        user, password = basic_auth.split(":", 1)
        auth = (user, password)
    client = Client(url, api_key=bearer_token or None, timeout=timeout, insecure=insecure,
                    max_bytes=1 << 30, basic_auth=auth, ca_file=ca_cert,
                    key_option="--bearer-token TOKEN (or KVSCOPE_PROMETHEUS_TOKEN), or --basic-auth USER:PASSWORD",
                    key_name="bearer token")
    api = API(client)
    query = Query(selector=selector, start=end - since_s, end=end, step_s=step_s,
                  max_points=max_points or DEFAULT_MAX_POINTS)
    progress = _progress() if fmt == "terminal" and not output and sys.stderr.isatty() else None
    try:
        report = scan(api, query, progress)
    except WatchError as exc:
        click.echo(f"kvscope: {exc.message}", err=True)
        sys.exit(2 if not exc.retry else EXIT_UNREACHABLE)
    finally:
        if progress:
            click.echo("\r\033[K", err=True, nl=False)
    render = RENDERERS[fmt]
    text = render(report, top or DEFAULT_TOP) if fmt in ("terminal", "markdown") else render(report)
    write_output(text, output, fmt)


def _progress():
    def say(text: str) -> None:
        click.echo(f"\rkvscope fleet: {text}\033[K", err=True, nl=False)

    return say
