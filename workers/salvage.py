"""``salvage``: the replies of a gather that ended without answering, sent where they belong.

A gather places every reply it takes: in its response or partial, or forwarded to the
late, unknown, duplicate or failure queue. A gather ended by hand before it answered
(the Temporal UI's Terminate, ``temporal workflow terminate``), or whose workflow failed
or timed out, leaves the replies it held in its history only: they left the reply queue
when it took them. Salvage asks the gather (a worker replays it) which replies it held
in no place, finds those that are in one after all (its final carried them, it forwarded
them, or a held one left its hold queue), and sends each of the others, intact and once,
where it belongs: where the gather was forwarding it; a reply of its legs to the late
queue, since the gather closed without it; one waiting for a registration to the
unknown queue. The ledger records each forward, so a second salvage sends nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from temporalio.client import WorkflowExecutionStatus, WorkflowHandle, WorkflowQueryFailedError
from temporalio.service import RPCError

from activities.mq import MQActivities, placed
from bridge.mq.hold import HeldReplyError
from bridge.mq.models import format_id
from bridge.mq.transport import Transport
from mqgather.errors import MQGatherError
from mqgather.names import QUERY_UNPLACED
from mqgather.routing import Destination, queue_for
from workflows.models import Reply, Routed, UnplacedReplies

#: How long a worker has to replay the gather and answer.
QUERY_SECONDS = 30.0


@dataclass(frozen=True)
class SalvagedReply:
    """One reply a gather held in no place, and what salvage found or did."""

    msg_id: str
    leg: str
    size: int
    held: bool
    #: Where it goes ("" for a duplicate the aggregate discards).
    queue: str
    #: "sent", "to send" (a dry run), or where it is already.
    verdict: str


def destinations(found: UnplacedReplies) -> list[tuple[Routed, bool]]:
    """Where each reply of ``found`` goes, and whether the gather's legs held it (a final
    would have carried it)."""
    closed = f"gather {found.gather_id} ended without answering"
    return [
        *((item, False) for item in found.outbox),
        *((Routed(kind=Destination.LATE, reply=reply, reason=closed), True)
          for reply in found.legs),
        *((Routed(kind=Destination.UNKNOWN, reply=reply,
                  reason=f"{closed} (no registration came)"), False)
          for reply in found.waiting),
    ]  # fmt: skip


async def unplaced(handle: WorkflowHandle[Any, Any]) -> UnplacedReplies:
    """What a gather that ended without answering held in no place (a worker replays it).

    Raises:
        MQGatherError: the gather is running or answered, or no worker answered.
    """
    try:
        desc = await handle.describe()
    except RPCError as exc:
        raise MQGatherError(f"no gather {handle.id}: {exc.message}") from exc
    if desc.status == WorkflowExecutionStatus.RUNNING:
        raise MQGatherError(
            f"{handle.id} is running: it places its replies itself (`mqgather cancel` ends "
            "it now, with its partial on the timeout queue)"
        )
    if desc.status == WorkflowExecutionStatus.COMPLETED:
        raise MQGatherError(f"{handle.id} answered (completed): its replies are in place")
    try:
        return await asyncio.wait_for(
            handle.query(QUERY_UNPLACED, result_type=UnplacedReplies), QUERY_SECONDS
        )
    except (RPCError, WorkflowQueryFailedError, TimeoutError) as exc:
        raise MQGatherError(
            f"{handle.id} ({desc.status.name if desc.status else 'closed'}) did not say what "
            f"it held ({exc or 'no answer'}): a worker of this release replays it; start one "
            "with `mqgather worker` and run this again"
        ) from exc


def salvage(
    found: UnplacedReplies, connect: Callable[[], Transport], *, send: bool = True
) -> list[SalvagedReply]:
    """Find where each reply of ``found`` is, and with ``send`` forward each that is in no
    place, intact and exactly once (the ledger records every forward)."""
    items = destinations(found)
    acts = MQActivities(connect)
    transport = connect()
    try:
        replies = [(item.reply, leg) for item, leg in items]
        where = placed(transport, found.aggregate, found.gather_id, replies)
    finally:
        transport.close()
    out = []
    try:
        for (item, _), already in zip(items, where, strict=True):
            out.append(_salvaged(acts, found, item, already, send))
    finally:
        acts.close()
    return out


def _salvaged(
    acts: MQActivities, found: UnplacedReplies, item: Routed, already: str, send: bool
) -> SalvagedReply:
    reply, queue = item.reply, queue_for(found.aggregate, item.kind)
    verdict = already
    if not verdict and not queue and reply.held is None:
        verdict = "a duplicate the aggregate discards"
    elif not verdict:
        verdict = _send(acts, found, (queue, reply, item.reason)) if send else "to send"
    return SalvagedReply(format_id(reply.message.msg_id), reply.leg or "", reply.size,
                         reply.held is not None, queue, verdict)  # fmt: skip


def _send(acts: MQActivities, found: UnplacedReplies, item: tuple[str, Reply, str]) -> str:
    """Forward one reply once; "sent", or why not (a held one left its hold queue)."""
    try:
        # As a run after a reset does: a reply the gather's final carried stays there.
        acts.forward_once(found.aggregate, found.gather_id, [item], after_reset=True)
    except HeldReplyError as exc:
        return f"not sent: {exc}"
    return "sent"
