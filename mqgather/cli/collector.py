"""``mqgather collector``: run a collector's bridge, manage its rules, and look at or
release a destination's open batch."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from mqgather.cli.options import (
    backout_threshold_option,
    config_option,
    connector,
    fail_fast_option,
    mq_option,
    run,
    salvage_options,
    salvage_summary,
    show_fields,
    task_queue_option,
    with_progress,
)
from mqgather.cli.processes import metrics_port_option, serve_bridge
from mqgather.collector_config import FORMATS, CollectorSpec
from mqgather.config import load_config
from mqgather.constants import COLLECT_BATCH_SIZE
from mqgather.errors import MQGatherError
from mqgather.runtime.rules import BadRule, RuleStore, check_rule

log = logging.getLogger("mqgather")


def _spec(config_path: str | None, name: str) -> CollectorSpec:
    return load_config(config_path).collector(name)


@click.group()
def collector() -> None:
    """Batch messages by destination (rules in a database), durably on Temporal.

    Each destination's batch under construction is workflow state: no restart of any
    part strands a message. A batch closes on its count, bytes or delay, whichever comes
    first, and is PUT once, in one unit of work.
    """


@collector.command("run")
@click.argument("name")
@mq_option
@config_option
@task_queue_option
@click.option(
    "--batch-size",
    default=COLLECT_BATCH_SIZE,
    show_default=True,
    help="Messages per MQ unit of work (at most; fewer when fewer are waiting, and at "
    "most a quarter of the queue manager's MAXUMSGS: each may be got and put, and ask "
    "for a COD and a COA).",
)
@backout_threshold_option
@fail_fast_option
@metrics_port_option
def run_(
    name: str,
    mq: str,
    config_path: str | None,
    task_queue: str,
    batch_size: int,
    backout_threshold: int,
    fail_fast: bool,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Feed collector NAME's destinations from its input queue until Ctrl-C.

    Workflows and the PUT run in `mqgather worker`, on the same task queue.
    """
    from bridge.collect import CollectorBridge

    spec = _spec(config_path, name)
    click.echo(
        f"collector {name}: rules in {spec.rules_db}, read again every "
        f"{spec.rule_refresh_seconds:g} s",
        err=True,
    )
    serve_bridge(
        f"mqgather-collector-{name}", mq, fail_fast, (metrics_host, metrics_port),
        lambda client: CollectorBridge(
            client, connector(mq), spec, task_queue=task_queue, batch_size=batch_size,
            backout_threshold=backout_threshold,
        ),
    )  # fmt: skip


@collector.group()
def rules() -> None:
    """List, set or delete the per-destination rules of a collector."""


@rules.command("list")
@click.argument("name")
@config_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per rule.")
def rules_list(name: str, config_path: str | None, as_json: bool) -> None:
    """Show collector NAME's rules, and the default for destinations without one."""
    spec = _spec(config_path, name)
    rows = RuleStore(spec.rules_db).rows(name)
    if as_json:
        for row in rows:
            shown = row.model_dump() if not isinstance(row, BadRule) else vars(row)
            click.echo(json.dumps(shown))
        return
    table = Table(title=f"collector {name} rules ({spec.rules_db})")
    for column in ("destination", "target queue", "messages", "delay s", "bytes", "format"):
        table.add_column(column)
    for row in rows:
        if isinstance(row, BadRule):
            table.add_row(row.destination, f"[red]invalid: {row.problem}[/red]", "", "", "", "")
            continue
        table.add_row(
            row.destination, row.target_queue, str(row.max_messages),
            f"{row.max_delay_seconds:g}", str(row.max_bytes), row.format,
        )  # fmt: skip
    d = spec.default_rule(spec.default_destination)
    table.add_row(
        "(any other)", d.target_queue, str(d.max_messages), f"{d.max_delay_seconds:g}",
        str(d.max_bytes), d.format, style="dim",
    )  # fmt: skip
    Console().print(table)


@rules.command("set")
@click.argument("name")
@click.argument("destination")
@click.option("--queue", "target_queue", required=True, help="Target queue of the batches.")
@click.option("--max-messages", type=int, default=10, show_default=True,
              help="A batch closes at this many messages.")  # fmt: skip
@click.option("--max-delay", "max_delay_seconds", type=float, default=60.0, show_default=True,
              help="Seconds from a batch's first message.")  # fmt: skip
@click.option("--max-bytes", type=int, default=1024 * 1024, show_default=True,
              help="Bodies per batch; a message that would pass it opens the next batch. "
              "Up to the target queue's MAXMSGL.")  # fmt: skip
@click.option("--format", "fmt", default="xml", show_default=True,
              help=f"One of {', '.join(FORMATS)}.")  # fmt: skip
@click.option("--separator", default="", help="Between bodies (blob).")
@config_option
def rules_set(
    name: str,
    destination: str,
    target_queue: str,
    max_messages: int,
    max_delay_seconds: float,
    max_bytes: int,
    fmt: str,
    separator: str,
    config_path: str | None,
) -> None:
    """Insert or replace DESTINATION's rule; new batches follow it within a few seconds."""
    spec = _spec(config_path, name)
    if target_queue == spec.input_queue:
        raise MQGatherError(
            f"--queue {target_queue} is collector {name}'s input_queue: its batches would "
            "come straight back to be batched again; name another queue"
        )
    rule = check_rule(
        {
            "destination": destination,
            "target_queue": target_queue,
            "max_messages": max_messages,
            "max_delay_seconds": max_delay_seconds,
            "max_bytes": max_bytes,
            "format": fmt,
            "separator": separator,
        }
    )
    RuleStore(spec.rules_db).set(name, rule)
    click.echo(
        f"{destination}: {max_messages} messages or {max_delay_seconds:g} s or {max_bytes} bytes "
        f"-> {target_queue} ({fmt}); new batches follow within {spec.rule_refresh_seconds:g} s"
    )


@rules.command("delete")
@click.argument("name")
@click.argument("destination")
@config_option
def rules_delete(name: str, destination: str, config_path: str | None) -> None:
    """Remove DESTINATION's rule: its new batches follow the default rule."""
    spec = _spec(config_path, name)
    if not RuleStore(spec.rules_db).delete(name, destination):
        raise MQGatherError(f"collector {name} has no rule for {destination!r}")
    click.echo(f"{destination}: rule deleted; new batches follow the default rule")


async def _handle(name: str, destination: str) -> Any:
    from mqgather.runtime.temporal import connect
    from workflows.collect_models import collector_id

    client = await connect()
    return client.get_workflow_handle(collector_id(name, destination))


@collector.command()
@click.argument("name")
@click.argument("destination")
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of a table.")
def status(name: str, destination: str, as_json: bool) -> None:
    """Show DESTINATION's open batch (size, bytes, closes at, rule) and counters."""
    from temporalio.service import RPCError

    from workflows.collector import CollectorWorkflow

    async def main(_: asyncio.Event) -> dict[str, Any]:
        handle = await _handle(name, destination)
        try:
            current = await asyncio.wait_for(handle.query(CollectorWorkflow.status), 10)
        except RPCError as exc:
            raise MQGatherError(
                f"no collector for {destination!r} of {name} ({exc.message}); it starts with "
                "the destination's first message"
            ) from exc
        return current.model_dump(mode="json")

    show_fields(run(main), as_json)


@collector.command()
@click.argument("name")
@click.argument("destination")
@click.option("--reason", default="released by an operator", show_default=True,
              help="Why; kept with the release in the collector's history.")  # fmt: skip
def release(name: str, destination: str, reason: str) -> None:
    """Close DESTINATION's open batch now and PUT it."""
    from workflows.collect_models import ReleaseBatchInput
    from workflows.collector import CollectorWorkflow

    async def main(_: asyncio.Event) -> str:
        handle = await _handle(name, destination)
        done = await handle.execute_update(
            CollectorWorkflow.release, ReleaseBatchInput(reason=reason)
        )
        if not done.released:
            raise MQGatherError(f"{destination}: {done.message}")
        return f"{destination}: released the open batch of {done.messages} messages"

    click.echo(run(main))


@collector.command()
@click.argument("name")
@click.argument("destination")
@mq_option
@salvage_options(
    "Also runs that ended longer ago than the collector's ledger_hours: a message an "
    "earlier salvage put back would be put back again.",
    "put back",
    "message",
)
def salvage(
    name: str, destination: str, mq: str, force: bool, dry_run: bool, as_json: bool
) -> None:
    """Put back on the input queue what DESTINATION's collector had taken and not PUT when
    a run of it ended by hand (the Temporal UI's Terminate) or its workflow failed: its
    batch under construction and those waiting for their PUT. Each message goes back as
    it came, once (a second run puts nothing), and the destination's collector batches it
    anew; one a batch PUT stays where it went. Each ended run's history is replayed here to
    say what it held, what came after its last task included (a worker of the release
    that ran it is asked when it does not replay), so no worker need run. One salvage of
    a destination runs at a time, wherever it runs (a lease in Temporal, as for gathers);
    Ctrl-C stops it between two messages."""
    import dataclasses

    from mqgather.runtime.temporal import connect
    from workers.lease import leased
    from workers.salvage import collector_unplaced, salvage_items
    from workflows.collect_models import collector_id

    async def main(stop: asyncio.Event) -> tuple[list[Any], int, str | None]:
        client = await connect()
        done = []
        workflow_id = collector_id(name, destination)
        async with leased(client, workflow_id, take=not dry_run) as lease:
            runs = await collector_unplaced(client, workflow_id, force=force)
            check = with_progress(lease.checker(stop.is_set), destination)
            for found in runs.found:
                done += await asyncio.to_thread(salvage_items, found, connector(mq),
                                                send=not dry_run, before_each=check)  # fmt: skip
            lease.sent = sum(m.verdict == "sent" for m in done)
        return done, runs.forgotten, lease.stopped

    done, forgotten, stopped = run(main)
    if stopped:
        click.echo(f"left: {destination}: salvage {stopped}", err=True)
    if forgotten:
        click.echo(f"{forgotten} run(s) that ended longer ago than ledger_hours left out: the "
                   "ledger no longer tells what an earlier salvage put back (--force takes "
                   "them)", err=True)  # fmt: skip
    if as_json:
        for item in done:
            click.echo(json.dumps(dataclasses.asdict(item)))
        return
    if not done:
        click.echo(f"{destination}: no run of {name}'s collector that ended by hand holds "
                   "a message it had not PUT (a run that ended a moment ago may take a "
                   "moment to be listed)")  # fmt: skip
        return
    table = Table("run", "batch", "MsgId", "bytes", "held", "to", "verdict")
    for m in done:
        table.add_row(m.run_id[:8], str(m.batch), m.msg_id, f"{m.size:,}",
                      "yes" if m.held else "", m.queue, m.verdict)  # fmt: skip
    Console().print(table)
    salvage_summary(f"{destination}: {len(done)} message(s) taken and not PUT by runs ended "
                    "by hand", [m.verdict for m in done], dry_run, "put back")  # fmt: skip


COMMANDS = [collector]
