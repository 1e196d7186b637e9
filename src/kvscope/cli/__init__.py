"""The ``kvscope`` command: one module per verb, this file only wires them and maps errors to exit codes.

Exit codes: 0 read and explained; 2 bad input or usage (one line on stderr); 1 internal error
(a "please report" line; ``--debug`` shows the traceback).
"""

from __future__ import annotations

import importlib
import sys
import traceback

import click

from kvscope import __version__
from kvscope.core.errors import InputError
from kvscope.core.text import visible

VERBS = ("explain", "examples", "whatif", "plan", "diff", "watch", "fleet", "models", "gpus")  # one module each: kvscope.cli.<verb>


class _Verbs(click.Group):
    """Imports a verb's module only when that verb runs (or help lists them): ``kvscope explain``
    need not load the HTTP client and live view of ``watch``. A verb module that fails to import is an
    error that shows, never a verb that silently disappears."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in VERBS if self.get_command(ctx, name) is not None]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in VERBS:
            return None
        module = importlib.import_module(f"kvscope.cli.{cmd_name}")
        return module.command


@click.group(cls=_Verbs, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="kvscope")
def app() -> None:
    """Where did my GPU memory go? Explain and predict KV-cache capacity of LLM inference servers."""


def main(argv: list[str] | None = None) -> None:
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        app.main(args=argv, prog_name="kvscope", standalone_mode=False)
    except InputError as exc:
        click.echo(f"kvscope: {visible(str(exc))}", err=True)  # it may quote a server's answer or a log line
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("kvscope: aborted", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - the promise is: never a traceback unless --debug
        if debug:
            traceback.print_exc()
        click.echo(
            f"kvscope: internal error ({type(exc).__name__}: {visible(str(exc))}). This is a bug in kvscope {__version__}; "
            "please report it with the input that caused it (rerun with --debug for the traceback).",
            err=True,
        )
        sys.exit(1)
