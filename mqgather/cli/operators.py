"""Operator commands: ``mqgather scatter | status | release | extend | cancel``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from temporalio.client import Client, WorkflowHandle

from bridge.mq.connect import open_transport
from bridge.mq.models import parse_id
from mqgather.cli.options import aggregate_option, fanout_options, run
from mqgather.config import load_config
from mqgather.errors import MQGatherError
from mqgather.names import UPDATE_CANCEL, UPDATE_EXTEND, UPDATE_RELEASE
from mqgather.runtime.temporal import connect
from workflows.models import GatherResult, UpdateResult, gather_id


@click.command()
@fanout_options
@click.option("--correl-id", default=None, help="The gather's CorrelId (default: new).")
@click.option("--reply-to-q", default="", help="Requester's ReplyToQ (replyToQueue mode).")
@click.option("--body", "bodies", multiple=True, metavar="LEG=TEXT", help="A leg request body.")
def scatter(
    mq: str,
    config_path: str | None,
    task_queue: str,
    name: str,
    correl_id: str | None,
    reply_to_q: str,
    bodies: tuple[str, ...],
) -> None:
    """Register one gather and PUT its leg requests; prints the CorrelId."""
    from bridge.fanout import scatter as do_scatter

    spec = load_config(config_path).aggregate(name)
    leg_bodies = {}
    for item in bodies:
        leg, eq, text = item.partition("=")
        if not eq:
            raise click.BadParameter(f"{item!r} is not LEG=TEXT", param_hint="--body")
        leg_bodies[leg] = text.encode()

    async def main(_: asyncio.Event) -> None:
        client = await connect()
        with open_transport(mq) as qm:
            done = await do_scatter(
                client, qm, spec, bodies=leg_bodies, reply_to_q=reply_to_q,
                correl_id=parse_id(correl_id) if correl_id else None, task_queue=task_queue,
            )  # fmt: skip
        click.echo(f"hex:{done.correl_id.hex()}  {done.gather_id}")

    run(main)


def _gather_handle(client: Client, name: str, correl: str) -> WorkflowHandle[Any, GatherResult]:
    return client.get_workflow_handle(gather_id(name, parse_id(correl)), result_type=GatherResult)


@click.command()
@click.argument("correl_id")
@aggregate_option
@click.option("--json", "as_json", is_flag=True)
def status(correl_id: str, name: str, as_json: bool) -> None:
    """Show a gather: state, legs received and missing, deadline (CORRELID as hex:… or text)."""
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.service import RPCError

    from workflows.gather import GatherWorkflow

    async def main(_: asyncio.Event) -> dict[str, Any]:
        client = await connect()
        handle = _gather_handle(client, name, correl_id)
        try:
            desc = await handle.describe()
        except RPCError as exc:
            raise MQGatherError(f"no gather {handle.id}: {exc.message}") from exc
        if desc.status == WorkflowExecutionStatus.RUNNING:
            current = await handle.query(GatherWorkflow.status)
            return dict(current.model_dump(mode="json"), running=True)
        result = await handle.result()
        return dict(result.model_dump(mode="json", exclude={"consumed_msg_ids"}), running=False)

    data = run(main)
    if as_json:
        click.echo(json.dumps(data))
        return
    table = Table(show_header=False)
    for key, value in data.items():
        table.add_row(key, ", ".join(value) if isinstance(value, list) else str(value))
    Console().print(table)


def _update_command(update: str, doc: str) -> click.Command:
    @click.command(name=update, help=doc)
    @click.argument("correl_id")
    @aggregate_option
    @click.option("--seconds", default=60.0, show_default=True, help="(extend) from now.")
    @click.option("--reason", default="", help="(release, cancel) recorded with the outcome.")
    def command(correl_id: str, name: str, seconds: float, reason: str) -> None:
        from temporalio.service import RPCError

        from workflows.gather import GatherWorkflow
        from workflows.models import CancelInput, ExtendInput, ReleaseInput

        async def main(_: asyncio.Event) -> UpdateResult:
            client = await connect()
            handle = _gather_handle(client, name, correl_id)
            try:
                if update == UPDATE_EXTEND:
                    return await handle.execute_update(
                        GatherWorkflow.extend, ExtendInput(seconds=seconds)
                    )
                if update == UPDATE_RELEASE:
                    return await handle.execute_update(
                        GatherWorkflow.release,
                        ReleaseInput(reason=reason or "released by an operator"),
                    )
                return await handle.execute_update(
                    GatherWorkflow.cancel, CancelInput(reason=reason or "cancelled by an operator")
                )
            except RPCError as exc:
                raise MQGatherError(f"{update} {handle.id}: {exc.message}") from exc

        click.echo(run(main).model_dump_json())

    return command


release = _update_command(UPDATE_RELEASE, "PUT what a gather has now, as a RELEASED response.")
extend = _update_command(UPDATE_EXTEND, "Move a gather's deadline to --seconds from now.")
cancel = _update_command(UPDATE_CANCEL, "End a gather; what arrived goes to the timeout queue.")

COMMANDS = [scatter, status, release, extend, cancel]
