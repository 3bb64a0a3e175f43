"""The ``mqgather`` command group and its entry point."""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

import click
from pydantic import ValidationError
from temporalio.service import RPCError

from mqgather import __version__
from mqgather.cli import (
    analytics,
    collector,
    deploy,
    devdemo,
    hold,
    keys,
    operators,
    processes,
    queues,
    stack,
)
from mqgather.errors import MQGatherError, first_problem
from mqgather.runtime import telemetry
from mqgather.runtime.temporal import refusal


class _Group(click.Group):
    """Turns mqgather's own errors into one-line messages instead of tracebacks."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MQGatherError as exc:
            raise click.ClickException(str(exc)) from exc
        except ValidationError as exc:
            raise click.ClickException(first_problem(exc, "")) from exc
        except RPCError as exc:
            # A call the server refused that no command expected (a query on a namespace
            # without mqgather's search attributes): the refusal, not a traceback.
            raise click.ClickException(refusal(exc)) from exc
        except UnicodeEncodeError as exc:
            given = _given_not_utf8(exc)
            if given is None:
                raise
            raise click.ClickException(f"{given} is not UTF-8 text; give it in UTF-8") from exc


def _given_not_utf8(exc: UnicodeEncodeError) -> str | None:
    """The command-line argument holding what ``exc`` could not encode: Python reads
    bytes there that are not UTF-8 into lone surrogates, which no request carries. None
    when none holds it (then it came from elsewhere)."""
    bad = exc.object[exc.start : exc.end]
    arg = next((a for a in sys.argv[1:] if bad in a), None)
    return None if arg is None else f"the argument {arg!r}"


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mqgather")
def cli() -> None:
    """mqgather: the durable fan-in aggregator for IBM MQ.

    Each CorrelId is one Temporal workflow: replies on the reply queue become signals,
    a durable timer bounds the wait, and one merged response is PUT.

    Every command reaches Temporal through its own settings (TEMPORAL_ADDRESS,
    TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS*, TEMPORAL_CONFIG_FILE; by default
    localhost:7233), without gRPC compression unless MQGATHER_GRPC_COMPRESSION=gzip.
    """


for _module in (processes, operators, collector, devdemo, analytics, deploy, keys, hold, stack):
    for _command in _module.COMMANDS:
        cli.add_command(_command)
cli.add_command(queues.queues)
cli.add_command(deploy.deploy)


def main() -> None:
    """Entry point of the ``mqgather`` command."""
    code: int | str | None = 0
    try:
        cli(prog_name="mqgather")
    except SystemExit as exc:
        code = exc.code
    except BaseException:  # noqa: BLE001 - anything else still ends the process below
        traceback.print_exc()
        code = 1
    telemetry.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    # Every command has closed its connections by now. Ending here skips interpreter
    # finalisation, during which the Temporal client's native threads can abort the
    # process (SIGABRT) after the command has already succeeded, or deadlock with it when
    # they log while the client is released (a worker whose server had gone hung so).
    os._exit(code or 0)


if __name__ == "__main__":  # pragma: no cover
    main()
