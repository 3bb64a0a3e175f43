"""Operator commands: ``mqgather scatter | status | release | extend | cancel |
rerequest | salvage``."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import string
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table
from temporalio.client import Client, WorkflowHandle

from bridge.mq.connect import open_transport
from bridge.mq.models import ID_LENGTH, format_id, parse_id
from mqgather.ccsid import CCSID_UTF8
from mqgather.cli.options import (
    connector,
    fanout_options,
    finite,
    mq_option,
    run,
    salvage_options,
    salvage_summary,
    show_fields,
    utf8_text,
    with_progress,
)
from mqgather.config import load_config
from mqgather.constants import DEFAULT_LEDGER_HOURS, MAX_LEDGER_HOURS, MAX_WAIT_SECONDS
from mqgather.errors import ConfigError, MQGatherError
from mqgather.names import (
    CORREL_ID,
    GATHER_ID_PREFIX,
    GATHER_STATE,
    LEGS_PENDING,
    LEGS_RECEIVED,
    UPDATE_CANCEL,
    UPDATE_EXTEND,
    UPDATE_RELEASE,
    UPDATE_REREQUEST,
)
from mqgather.runtime.temporal import connect
from workflows.models import (
    CancelInput,
    ExtendInput,
    GatherResult,
    LegStatus,
    ReleaseInput,
    RerequestInput,
    UpdateResult,
    gather_id,
)


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
        try:
            leg_bodies[leg] = text.encode()
        except UnicodeEncodeError:  # bytes the terminal gave that are not UTF-8
            raise click.BadParameter(
                f"{leg}'s text is not UTF-8, which the request's CCSID ({CCSID_UTF8}) says it is",
                param_hint="--body",
            ) from None

    async def main(_: asyncio.Event) -> None:
        client = await connect()
        with open_transport(mq) as qm:
            done = await do_scatter(
                client, qm, spec, bodies=leg_bodies, reply_to_q=reply_to_q,
                correl_id=parse_id(correl_id) if correl_id else None, task_queue=task_queue,
            )  # fmt: skip
        click.echo(f"hex:{done.correl_id.hex()}  {done.gather_id}")

    run(main)


F = TypeVar("F", bound=Callable[..., Any])

#: How long ``status`` waits for a worker to answer for a gather that is not running.
QUERY_SECONDS = 10.0


def operator_id(text: str) -> tuple[bytes, str | None]:
    """The CorrelId an operator typed, in any form an MQ or Temporal tool shows it, and
    the aggregate when the form names one.

    Forms: ``hex:<hex>``, 48 bare hex digits (either case), ``X'<hex>'`` (MQSC), a
    workflow id ``gather:<aggregate>:<48 hex>``, or the text itself (``ORDER-42``).

    Raises:
        ConfigError: the id does not fit in 24 bytes or its hex is invalid.
    """
    stripped = text.strip()
    if stripped.startswith(GATHER_ID_PREFIX) and stripped.count(":") >= 2:
        aggregate, _, digits = stripped[len(GATHER_ID_PREFIX) :].rpartition(":")
        return parse_id("hex:" + digits), aggregate
    if stripped[:2] in ("X'", "x'") and stripped.endswith("'"):
        return parse_id("hex:" + stripped[2:-1]), None
    if len(stripped) == 2 * ID_LENGTH and all(c in string.hexdigits for c in stripped):
        return parse_id("hex:" + stripped), None
    return parse_id(stripped), None


def _checked_correl_id(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A click callback refusing a CORRELID :func:`operator_id` cannot read, before
    Temporal is reached."""
    try:
        operator_id(value)
    except ConfigError as exc:
        raise click.BadParameter(exc.reason) from None
    return value


async def find_gather(
    client: Client, correl_text: str, name: str | None
) -> WorkflowHandle[Any, GatherResult]:
    """The gather an operator means: by aggregate and CorrelId, or, without an aggregate,
    the one gather of any aggregate with that CorrelId (found through visibility).

    Raises:
        MQGatherError: none or several match; the message says what to do.
    """
    correl, named = operator_id(correl_text)
    aggregate = name or named
    if aggregate is None:
        query = f'{CORREL_ID.name} = "{correl.hex()}"'
        ids = sorted({w.id async for w in client.list_workflows(query)})
        if not ids:
            raise MQGatherError(
                f"no gather has CorrelId {format_id(correl)} ({correl_text!r}); check the id, "
                "or name the aggregate with --aggregate if it has just started"
            )
        if len(ids) > 1:
            raise MQGatherError(
                f"{len(ids)} gathers have CorrelId {format_id(correl)}: {', '.join(ids)}; "
                "choose one with --aggregate"
            )
        return client.get_workflow_handle(ids[0], result_type=GatherResult)
    return client.get_workflow_handle(gather_id(aggregate, correl), result_type=GatherResult)


def find_aggregate_option(fn: F) -> F:
    """``--aggregate`` for commands that find a gather (default: search every aggregate)."""
    return click.option(
        "--aggregate",
        "name",
        default=None,
        help="The gather's aggregate (default: find the CorrelId in any aggregate).",
    )(fn)


CORRELID_HELP = (
    "CORRELID is the gather's CorrelId as text (ORDER-42), hex:<hex>, 48 hex digits, "
    "X'<hex>' or the gather's workflow id."
)


@click.command(help=f"Show a gather: state, legs received and missing, deadline, the MQ "
               f"error it is retrying, if any. {CORRELID_HELP}")  # fmt: skip
@click.argument("correl_id", callback=_checked_correl_id)
@find_aggregate_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of a table.")
def status(correl_id: str, name: str | None, as_json: bool) -> None:
    from temporalio.client import WorkflowExecutionStatus, WorkflowQueryFailedError
    from temporalio.service import RPCError

    from workflows.gather import GatherWorkflow

    async def main(_: asyncio.Event) -> dict[str, Any]:
        client = await connect()
        handle = await find_gather(client, correl_id, name)
        try:
            desc = await handle.describe()
        except RPCError as exc:
            raise MQGatherError(f"no gather {handle.id}: {exc.message}") from exc
        running = desc.status == WorkflowExecutionStatus.RUNNING
        shown = {"running": running, "workflow_status": desc.status.name if desc.status else ""}
        if desc.status == WorkflowExecutionStatus.COMPLETED:
            result = await handle.result()
            return dict(result.model_dump(mode="json", exclude={"consumed_msg_ids"}), **shown)
        try:
            # A terminated or failed gather has no result; its last state still replays.
            current = await asyncio.wait_for(handle.query(GatherWorkflow.status), QUERY_SECONDS)
            return dict(current.model_dump(mode="json"), **shown)
        except (RPCError, WorkflowQueryFailedError, TimeoutError) as exc:
            if running:
                raise MQGatherError(
                    f"gather {handle.id} is running but did not answer ({exc}); is a worker "
                    "polling its task queue? Start one with `mqgather worker`"
                ) from exc
        attrs = desc.typed_search_attributes
        return dict(
            gather_id=handle.id,
            state=attrs.get(GATHER_STATE) or "",
            legs_received=attrs.get(LEGS_RECEIVED),
            legs_pending=attrs.get(LEGS_PENDING),
            note="no worker answered; the state is the last one the gather published",
            **shown,
        )

    shown = run(main)
    if not as_json and "legs" in shown:
        # A line each: a leg's line may hold commas (the reason it was asked again).
        shown["legs"] = "\n".join(LegStatus.model_validate(leg).line() for leg in shown["legs"])
    show_fields(shown, as_json)


def _operate(correl_id: str, name: str | None, as_json: bool, update: str, arg: Any) -> None:
    """Find the gather, apply one operator update (by its name), print what it did."""
    from temporalio.service import RPCError

    async def main(_: asyncio.Event) -> tuple[str, UpdateResult]:
        client = await connect()
        handle = await find_gather(client, correl_id, name)
        try:
            return handle.id, await handle.execute_update(update, arg, result_type=UpdateResult)
        except RPCError as exc:
            raise MQGatherError(
                f"{handle.id} did not take the change: {exc.message} (a closed gather takes "
                "none; `mqgather status` shows how it ended)"
            ) from exc

    gid, done = run(main)
    if as_json:
        click.echo(json.dumps(dict(done.model_dump(mode="json"), gather_id=gid)))
        return
    if not done.accepted:
        raise MQGatherError(f"{gid} refused: {done.message} (state {done.state})")
    deadline = f"; deadline {done.deadline:%Y-%m-%d %H:%M:%S} UTC" if done.deadline else ""
    reason = f"; reason: {done.message}" if done.message else ""
    click.echo(f"{gid}: now {done.state}{deadline}{reason}")


def _operator_command(help_text: str, option: Callable[[F], F]) -> Callable[[F], click.Command]:
    """An operator command: CORRELID, --aggregate, its own ``option`` and --json."""

    def make(fn: F) -> click.Command:
        for decorate in (
            click.option("--json", "as_json", is_flag=True, help="Print the result as JSON."),
            option,
            find_aggregate_option,
            click.argument("correl_id", callback=_checked_correl_id),
        ):
            fn = decorate(fn)
        return click.command(help=f"{help_text} {CORRELID_HELP}")(fn)

    return make


def _reason_option(
    default: str,
    help_text: str = "Recorded in the response (mqgather_reason) and the gather's result.",
) -> Callable[[F], F]:
    return click.option(
        "--reason", default=default, show_default=True, callback=utf8_text, help=help_text
    )


@_operator_command("PUT what a gather has now, as a RELEASED response.",
                   _reason_option("released by an operator"))  # fmt: skip
def release(correl_id: str, name: str | None, reason: str, as_json: bool) -> None:
    _operate(correl_id, name, as_json, UPDATE_RELEASE, ReleaseInput(reason=reason))


@_operator_command(
    "Move a gather's deadline to --seconds from now.",
    click.option(
        "--seconds",
        default=60.0,
        show_default=True,
        type=click.FloatRange(0, MAX_WAIT_SECONDS, min_open=True),
        callback=finite,
        help="The new deadline, from now (at most 366 days).",
    ),
)
def extend(correl_id: str, name: str | None, seconds: float, as_json: bool) -> None:
    _operate(correl_id, name, as_json, UPDATE_EXTEND, ExtendInput(seconds=seconds))


@_operator_command("End a gather; what arrived goes to the timeout queue as CANCELLED. A "
                   "cancel from the Temporal UI does the same.",
                   _reason_option("cancelled by an operator"))  # fmt: skip
def cancel(correl_id: str, name: str | None, reason: str, as_json: bool) -> None:
    _operate(correl_id, name, as_json, UPDATE_CANCEL, CancelInput(reason=reason))


def _leg_and_reason(fn: F) -> F:
    fn = _reason_option("re-requested by an operator", "Carried by the request (mqgather_reason).")(
        fn
    )
    return click.argument("leg", callback=utf8_text)(fn)


@_operator_command(
    "PUT a leg's request again now: the request scatter sent, with a new MsgId and the "
    "same CorrelId. The leg's request must have been kept (retries on the leg, or "
    "keep_requests on the aggregate); it counts as one of the leg's attempts.",
    _leg_and_reason,
)
def rerequest(correl_id: str, name: str | None, leg: str, reason: str, as_json: bool) -> None:
    _operate(correl_id, name, as_json, UPDATE_REREQUEST, RerequestInput(leg=leg, reason=reason))


@click.command(
    help="Send where they belong the replies a gather took and placed nowhere, when it "
    "ended without answering: terminated by hand (the Temporal UI's Terminate), or its "
    "workflow failed or timed out. Those it was forwarding go where it was sending them, "
    "those of its legs to the late queue, those waiting for a registration to the unknown "
    "queue: intact, each once (a second run sends nothing). Earlier runs an operator's "
    "reset ended count too: what they held and the final did not carry is sent, once the "
    "latest run has ended. The gather's history is replayed here to say what it held, the "
    "replies signalled after its last task included (a worker of the release that ran it "
    "is asked when it does not replay), so no worker need run. Name one gather by its "
    "CORRELID, or take --all that ended so (after an outage, say). One salvage of a gather "
    "runs at a time, wherever it runs: it holds a lease in Temporal (salvage:<workflow "
    "id>), which stays as a record of what it sent; Ctrl-C stops it between two replies. "
    f"{CORRELID_HELP}"
)
@click.argument("correl_id", required=False)
@find_aggregate_option
@mq_option
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="Every gather (of --aggregate, else of every aggregate) with a run that ended "
    "without answering in the last --within hours; one that cannot be salvaged is listed "
    "with the reason and the others go on.",
)
@click.option(
    "--within",
    type=click.FloatRange(0, MAX_LEDGER_HOURS, min_open=True),
    callback=finite,
    default=DEFAULT_LEDGER_HOURS,
    show_default=True,
    help="With --all: how many hours back to look (at most the longest ledger_hours). A "
    "run that ended longer ago than its aggregate's ledger_hours is left: the ledger no "
    "longer tells what was sent of it.",
)
@salvage_options(
    "Salvage the gather though it ended longer ago than its ledger_hours: a reply sent by "
    "an earlier salvage would be sent again.",
    "sent",
    "reply",
)
def salvage(
    correl_id: str | None,
    name: str | None,
    mq: str,
    every: bool,
    within: float,
    force: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    from workers.lease import leased
    from workers.salvage import ended_gathers, unplaced_runs
    from workers.salvage import salvage as send_unplaced

    if (correl_id is None) != every:
        raise click.UsageError("name one gather by its CORRELID, or salvage --all; not both")
    if every and force:
        raise click.UsageError("--force salvages one gather at a time: name its CORRELID")

    async def main(stop: asyncio.Event) -> tuple[list[str], list[tuple[str, Any]], list[str]]:
        client = await connect()
        if correl_id is not None:
            handles = [await find_gather(client, correl_id, name)]
        else:
            handles = await ended_gathers(client, name, timedelta(hours=within))
        done: list[tuple[str, Any]] = []
        left: list[str] = []
        for n, handle in enumerate(handles, start=1):
            if stop.is_set():
                left.append(f"{handle.id}: not salvaged: stopped as asked")
                continue
            try:
                async with leased(client, handle.id, take=not dry_run) as lease:
                    runs = await unplaced_runs(client, handle, force=force)
                    check = with_progress(lease.checker(stop.is_set), handle.id)
                    rows = []
                    for ended in runs:
                        rows += await asyncio.to_thread(
                            send_unplaced, ended.found, connector(mq), send=not dry_run,
                            run_id=ended.run_id, before_each=check,
                        )  # fmt: skip
                    lease.sent = sum(r.verdict == "sent" for r in rows)
            except MQGatherError as exc:
                if not every:
                    raise
                left.append(str(exc))
                continue
            done += [(handle.id, row) for row in rows]
            if lease.stopped:
                left.append(f"{handle.id}: salvage {lease.stopped}")
            if every:
                click.echo(f"[{n}/{len(handles)}] {handle.id}: {len(rows)} reply(ies)", err=True)
        return [handle.id for handle in handles], done, left

    gathers, done, left = run(main)
    if as_json:
        for gid, item in done:
            click.echo(json.dumps(dict(dataclasses.asdict(item), gather_id=gid)))
    elif done:
        runs = len({r.run_id for _, r in done}) > 1  # runs ended by a reset, and the latest
        table = Table(*(["gather"] * every), "MsgId", "leg", "bytes", "held", "to", "verdict",
                      *(["run"] * runs))  # fmt: skip
        for gid, r in done:
            table.add_row(*([gid] * every), r.msg_id, r.leg, f"{r.size:,}",
                          "yes" if r.held else "", r.queue, r.verdict,
                          *([r.run_id] * runs))  # fmt: skip
        Console().print(table)
    for reason in left:
        click.echo(f"left: {reason}", err=True)
    if every:
        head = (f"{len(gathers)} gather(s) ended without answering in the last {within:g} h, "
                f"{len(left)} left; {len(done)} reply(ies) held in no place")  # fmt: skip
    else:
        head = f"{gathers[0]}: {len(done)} reply(ies) held in no place by the gather"
    if not as_json:
        salvage_summary(head, [r.verdict for _, r in done], dry_run, "sent")


COMMANDS = [scatter, status, release, extend, cancel, rerequest, salvage]
