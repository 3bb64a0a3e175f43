"""``mqgather hold``: the hold queues, where replies too large for a signal wait."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bridge.mq.connect import open_transport
from mqgather.cli.options import config_option, mq_option, run
from mqgather.config import load_config
from mqgather.runtime.temporal import connect


@click.group()
def hold() -> None:
    """The hold queues: replies (and collector messages) too large to travel inside a
    signal wait there, MQMD, properties and body intact, until their gather takes them."""


@hold.command()
@mq_option
@config_option
@click.option("--dry-run", is_flag=True, help="Only list what would be routed; move nothing.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per held reply.")
def check(mq: str, config_path: str | None, dry_run: bool, as_json: bool) -> None:
    """List every held reply with its gather, and route those no gather will take.

    A held reply belongs to a running gather, which takes it with its response or a
    forward. One whose gather has closed goes to the aggregate's late queue, one whose
    gather does not exist to its unknown queue, one no aggregate claims to its failure
    queue: intact, with the reason in mqgather_reason. A copy a move put there of a reply
    the gather's final carried (after a worker died between two steps) is withdrawn,
    its history kept or gone: the reply is in that final's response. Normally there
    are none.
    """
    from bridge.holdcheck import check_held

    config = load_config(config_path)
    aggregates = list(config.aggregates.values())

    async def main(_: asyncio.Event) -> list:
        client = await connect()
        transport = await asyncio.to_thread(open_transport, mq)
        # On stderr, so --json's lines stay one object each: a hold queue a flood filled
        # takes a while, a verdict per message.
        with Progress(
            TextColumn("checking held replies"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=Console(stderr=True), transient=True,
        ) as progress:  # fmt: skip
            bar = progress.add_task("check", total=None)
            try:
                return await check_held(
                    client, transport, aggregates, route=not dry_run,
                    on_total=lambda n: progress.update(bar, total=n),
                    on_progress=lambda n: progress.update(bar, completed=n),
                )  # fmt: skip
            finally:
                transport.close()

    found = run(main)
    orphans = [h for h in found if h.orphan]
    if as_json:
        for item in found:
            click.echo(json.dumps(dict(dataclasses.asdict(item), orphan=item.orphan)))
        return
    if found:
        table = Table("hold queue", "MsgId", "bytes", "gather", "verdict", "routed to")
        for h in found:
            table.add_row(h.hold_queue, h.msg_id, f"{h.size:,}", h.gather, h.verdict, h.routed_to)
        Console().print(table)
    moved = "would route" if dry_run else "routed"
    click.echo(
        f"{len(found)} held, {len(found) - len(orphans)} waiting for a running gather, "
        f"{len(orphans)} orphaned ({moved} {len(orphans)})"
    )


COMMANDS = [hold]
