"""The ``mqgather`` command line."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from pydantic import ValidationError

from mqgather import __version__
from mqgather.constants import DEFAULT_MQ, ENV_CONFIG, ENV_MQ
from mqgather.errors import MQGatherError

F = TypeVar("F", bound=Callable[..., Any])


def mq_option(fn: F) -> F:
    """The ``--mq`` option every command that talks to MQ takes."""
    return click.option(
        "--mq",
        "mq",
        envvar=ENV_MQ,
        default=DEFAULT_MQ,
        show_default=True,
        metavar="URL",
        help="Queue manager: local:PATH (embedded) or ibmmq://QMGR@host(port)/CHANNEL "
        f"[env {ENV_MQ}].",
    )(fn)


def config_option(fn: F) -> F:
    """The ``--config`` option: the TOML configuration file."""
    return click.option(
        "--config",
        "config_path",
        envvar=ENV_CONFIG,
        default=None,
        metavar="FILE",
        help=f"Configuration file (TOML) [env {ENV_CONFIG}; default ./mqgather.toml if present, "
        "else the embedded defaults].",
    )(fn)


class _Group(click.Group):
    """Turns mqgather's own errors into one-line messages instead of tracebacks."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MQGatherError as exc:
            raise click.ClickException(str(exc)) from exc
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise click.ClickException(f"{where}: {first['msg']}") from exc


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mqgather")
def cli() -> None:
    """mqgather: the durable fan-in aggregator for IBM MQ.

    Each CorrelId is one Temporal workflow: replies on the reply queue become signals,
    a durable timer bounds the wait, and one merged response is PUT.
    """


def _register() -> None:
    from mqgather.analytics_cli import analyze, export
    from mqgather.queues_cli import queues
    from mqgather.run_cli import COMMANDS

    cli.add_command(queues)
    for command in [*COMMANDS, export, analyze]:
        cli.add_command(command)


def main() -> None:
    """Entry point of the ``mqgather`` command."""
    _register()
    code: int | str | None = 0
    try:
        cli(prog_name="mqgather")
    except SystemExit as exc:
        code = exc.code
    from mqgather import telemetry

    telemetry.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    # Every command has closed its connections by now. Ending here skips interpreter
    # finalisation, during which the Temporal client's native threads can abort the
    # process (SIGABRT) after the command has already succeeded.
    os._exit(code or 0)


if __name__ == "__main__":  # pragma: no cover
    main()
