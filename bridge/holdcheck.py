"""``hold check``: held replies whose gather will never take them, found and routed.

A held reply belongs to a gather that is running: the bridge puts it on the hold queue
only after Temporal took the gather's reference to it, and a gather closes only after
its response or a forward took every reply it was told of. So a held reply whose gather
has closed, or is not known at all, can only come from outside mqgather's paths (a
gather terminated or deleted by hand, a message put on the hold queue by a person); this
check finds such replies and routes them, intact and with the reason: to the late queue
when their gather closed, the unknown queue when there is none, the failure queue when
no aggregate of the hold queue claims them.

One more kind comes from mqgather itself, after a double fault: a copy of a reply whose
gather's final carried it (a move to the hold queue, on one worker, committed after the
final on another looked for it, and its worker died before it looked again for the
final). Its one place is that final's response, so the copy is withdrawn, not routed:
late (or unknown, its gather's history gone), it would have been in two places.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from bridge.identify import IdentificationError, identify
from bridge.mq import hold, ledger
from bridge.mq.forward import forward
from bridge.mq.models import MQMessage, fingerprint
from bridge.mq.transport import Transport
from mqgather.config import AggregateSpec
from mqgather.routing import Destination, queue_for
from workflows.models import FINAL_ENDINGS, gather_id


@dataclass(frozen=True)
class HeldReply:
    """One message on a hold queue and what the check found about its gather."""

    hold_queue: str
    msg_id: str
    size: int
    gather: str
    #: running (it belongs), closed, carried (a copy of a reply its gather's final
    #: carried), unknown (no such gather) or unidentified.
    verdict: str
    #: Where it went (or would go): "" for one that belongs, "withdrawn" for a copy.
    routed_to: str = ""

    @property
    def orphan(self) -> bool:
        """Whether no gather will take it."""
        return self.verdict != "running"


def _owner(message: MQMessage, specs: Sequence[AggregateSpec]) -> tuple[AggregateSpec, str]:
    """The aggregate and gather a held reply is for, as the bridge identified it (trying
    each reply queue whose aggregates share the hold queue).

    Raises:
        IdentificationError: none of them claims it.
    """
    by_reply_queue: dict[str, list[AggregateSpec]] = {}
    for spec in specs:
        by_reply_queue.setdefault(spec.reply_queue, []).append(spec)
    problem: IdentificationError | None = None
    for candidates in by_reply_queue.values():
        try:
            found = identify(message, candidates)
        except IdentificationError as exc:
            problem = exc
            continue
        return found.aggregate, gather_id(found.aggregate.name, found.correl_id)
    raise problem or IdentificationError("no aggregate holds replies on this queue")


async def _verdict(client: Client, gid: str) -> tuple[str, str]:
    """Whether the gather is running, closed or unknown, and the first run of its chain."""
    try:
        desc = await client.get_workflow_handle(gid).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return "unknown", ""
        raise
    chain = desc.raw_description.workflow_execution_info.first_run_id
    return "running" if desc.status == WorkflowExecutionStatus.RUNNING else "closed", chain


def _carried_copies(transport: Transport, spec: AggregateSpec, gid: str, chain: str) -> set[str]:
    """The :func:`bridge.mq.hold.copy_id` of every copy the gather's moves put on its hold
    queue of a reply whose final carried it. The move's marker names the chain that made
    it, so this holds when the gather's history is gone too (``chain`` ""); ``chain`` also
    finds the markers from before they named it. Each final is read once, however many
    moves its chain made."""
    owners = (ledger.ledger_owner(gid, chain),) if chain else ()
    finals: dict[str, set[str]] = {}
    copies = set()
    for owner, reply, moved in ledger.moved_copies(transport, spec.ledger_queue, gid, owners):
        if owner not in finals:
            finals[owner] = ledger.carried_by_final(
                transport, spec.ledger_queue, owner, FINAL_ENDINGS
            )
        if reply in finals[owner]:
            copies.add(moved)
    return copies


@dataclass(frozen=True)
class _Seen:
    """What the check keeps of a held message between its browse and its move: the
    names that find it again, not its body (a hold queue holds the replies too large
    for a signal, thousands of them after a flood)."""

    queue: str
    msg_id: bytes
    correl_id: bytes
    fingerprint: str
    copy_id: str
    size: int
    spec: AggregateSpec
    #: The gather it is for; "" when no aggregate of its hold queue claims it.
    gid: str
    #: Why no aggregate claims it ("" when one does).
    unclaimed: str = ""


def _browse(transport: Transport, queue: str, specs: Sequence[AggregateSpec]) -> Iterator[_Seen]:
    """Each message on ``queue``, named and identified as the bridge identified it."""
    for message in transport.browse(queue):
        names = (message.msg_id, message.correl_id, fingerprint(message), hold.copy_id(message))
        try:
            spec, gid = _owner(message, specs)
        except IdentificationError as exc:
            spec, gid = min(specs, key=lambda s: s.name), ""
            yield _Seen(queue, *names, len(message.body), spec, gid, str(exc))
        else:
            yield _Seen(queue, *names, len(message.body), spec, gid)


async def check_held(
    client: Client,
    transport: Transport,
    aggregates: Sequence[AggregateSpec],
    *,
    route: bool = True,
    on_total: Callable[[int], None] = lambda _: None,
    on_progress: Callable[[int], None] = lambda _: None,
) -> list[HeldReply]:
    """Every message on the aggregates' hold queues and its verdict; with ``route``,
    each orphan is moved (in a unit of work of its own) to where it belongs.

    ``on_total`` is told how many messages the hold queues held, once they are browsed;
    ``on_progress`` how many have been checked, after each.
    """
    by_hold: dict[str, list[AggregateSpec]] = {}
    for spec in aggregates:
        by_hold.setdefault(spec.hold_queue, []).append(spec)
    held = [seen for queue, specs in by_hold.items() for seen in _browse(transport, queue, specs)]
    on_total(len(held))
    found: list[HeldReply] = []
    # A flood's gather moved thousands of replies, each with its own marker: its ledger
    # is read once per check, not once per held copy. A closed gather's verdict is asked
    # again for each of its messages, so one that starts running again meanwhile (a
    # reset) keeps the rest of its replies; a running one's is asked once, since a reply
    # it leaves is only left (one it closes on meanwhile is the next check's).
    carried: dict[tuple[str, str], set[str]] = {}
    running: set[str] = set()
    for seen in held:
        spec, gid = seen.spec, seen.gid
        if not gid:
            verdict = "unidentified"
            reason = f"held reply no aggregate of {seen.queue} claims: {seen.unclaimed}"
        elif gid in running:
            verdict, reason = "running", ""
        else:
            verdict, chain = await _verdict(client, gid)
            if verdict == "running":
                running.add(gid)
            else:
                if (gid, chain) not in carried:
                    carried[gid, chain] = _carried_copies(transport, spec, gid, chain)
                if seen.copy_id in carried[gid, chain]:
                    verdict = "carried"
            reason = f"held reply of gather {gid}, which is {verdict}"
        target = {
            "running": "",
            "closed": queue_for(spec, Destination.LATE),
            "carried": WITHDRAWN,
            "unknown": queue_for(spec, Destination.UNKNOWN),
            "unidentified": queue_for(spec, Destination.FAILURE),
        }[verdict]
        if target and route:
            _move(transport, seen, target, reason)
        found.append(HeldReply(seen.queue, seen.msg_id.hex(), seen.size, gid, verdict, target))
        on_progress(len(found))
    return found


#: Where a copy of a reply its gather's final carried goes: nowhere (got and dropped).
WITHDRAWN = "withdrawn"


def _move(transport: Transport, seen: _Seen, target: str, reason: str) -> None:
    """Move one held message, intact, with the reason (:data:`WITHDRAWN`: drop it, a
    copy); gone already is fine (its gather or another check took it meanwhile). Another
    message there may share its MsgId and CorrelId (a running gather's held reply, say):
    the one moved is this one, told by its fingerprint, and any other got on the way is
    put back."""
    reader = hold.HeldReader(transport, identity=fingerprint, what="fingerprints")
    try:
        taken = reader.take(seen.queue, seen.msg_id, seen.correl_id, seen.fingerprint, wait_ms=0)
    except hold.HeldReplyError:
        transport.backout()
        return
    reader.put_back()
    if target != WITHDRAWN:
        forward(transport, target, taken, reason, seen.queue, seen.gid)
    transport.commit()
