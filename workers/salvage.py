"""``salvage``: what a gather or a collector ended by hand had taken, sent where it belongs.

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

A collector ended by hand leaves its batch under construction, and those waiting for
their PUT, in its history only; salvage puts each of their messages that no batch PUT
back on the collector's input queue as it came, once, and the destination's collector
(a new run) batches it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.service import RPCError

from activities.batch import item_key, put_before
from activities.mq import MQActivities, placed
from bridge.mq import hold, ledger
from bridge.mq.hold import HeldReplyError
from bridge.mq.ledger import ledger_key
from bridge.mq.models import PutOptions, format_id
from bridge.mq.transport import Transport
from mqgather.constants import MQ_ATTEMPT_SECONDS, SALVAGE_AFTER_ATTEMPT_SECONDS
from mqgather.errors import MQGatherError
from mqgather.names import (
    AGGREGATE_NAME,
    COLLECT_WORKFLOW,
    CORREL_ID,
    GATHER_ID_PREFIX,
    GATHER_WORKFLOW,
    QUERY_UNPLACED,
)
from mqgather.routing import Destination, queue_for
from workers.lease import SalvageStopped
from workers.replayed import replayed_answer
from workflows import redelivery
from workflows.collect_models import Item, UnplacedItems
from workflows.models import Reply, Routed, UnplacedReplies

#: The verdict on a message a salvage left when it stopped (its lease near its end, or
#: asked to): run again, it sends it.
STOPPED = "left: the salvage stopped"
#: How long a worker has to replay the gather and answer.
QUERY_SECONDS = 30.0

T = TypeVar("T", bound=BaseModel)


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
    #: The run that held it.
    run_id: str = ""


@dataclass(frozen=True)
class SalvagedItem:
    """One message a collector's run took and had not PUT, and what salvage found or did."""

    run_id: str
    batch: int
    msg_id: str
    size: int
    held: bool
    #: Where it goes: the collector's input queue.
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


@dataclass(frozen=True)
class EndedRun:
    """One run of a gather that ended without placing what it held, and what it held."""

    run_id: str
    found: UnplacedReplies


async def unplaced_runs(
    client: Client, handle: WorkflowHandle[Any, Any], *, force: bool = False
) -> list[EndedRun]:
    """What each run of a gather that ended by hand held in no place, the newest first:
    its latest run when that ended so, and the earlier runs an operator's reset ended
    (what came after the point a reset went back to, when the reset applied no signals
    again, is in those runs' histories only); each within the ledger's memory
    (``ledger_hours``), which alone tells what was sent before: past it, the latest run
    only with ``force``. A reply two runs held (a reset applies again what came after its
    point) is listed once, by the newer.

    Raises:
        MQGatherError: the gather is running, answered and no earlier run ended so, or
            ended past the ledger's memory (without ``force``).
    """
    try:
        latest = await handle.describe()
    except RPCError as exc:
        raise MQGatherError(f"no gather {handle.id}: {exc.message}") from exc
    if latest.status == WorkflowExecutionStatus.RUNNING:
        raise MQGatherError(
            f"{handle.id} is running: it places its replies itself (`mqgather cancel` ends "
            "it now, with its partial on the timeout queue)"
        )
    earlier: list[tuple[str, WorkflowExecutionStatus | None, datetime | None]] = []
    async for run in client.list_workflows(_runs_query(handle.id)):  # matched in code
        if run.id == handle.id and run.run_id != latest.run_id:
            earlier.append((run.run_id, run.status, run.close_time))
    earlier.sort(key=lambda r: r[2] or datetime.min.replace(tzinfo=UTC), reverse=True)
    ended: list[EndedRun] = []
    seen: set[str] = set()
    hours: float | None = None  # the aggregate's ledger_hours, once a run has said it
    for run_id, status, closed in [(latest.run_id, latest.status, latest.close_time), *earlier]:
        if status not in _ENDED:
            continue
        if run_id != latest.run_id and hours is not None and not _remembered(hours, closed):
            continue  # past the ledger's memory: not replayed only to be left
        found = await _asked(client.get_workflow_handle(handle.id, run_id=run_id),
                             UnplacedReplies, status)  # fmt: skip
        attempts_over(handle.id, found.mq_work, closed)
        hours = found.aggregate.ledger_hours
        if not _remembered(hours, closed):
            if run_id != latest.run_id:
                continue  # the ledger no longer tells whether its replies were sent before
            if not force:
                raise MQGatherError(
                    f"{handle.id} ended more than ledger_hours "
                    f"({found.aggregate.ledger_hours:g}) ago: the ledger no longer tells "
                    "whether salvage sent its replies before; --force sends those in no "
                    "other place anyway"
                )
        ended.append(EndedRun(run_id, _unseen(found, seen)))
    if not ended:
        raise MQGatherError(f"{handle.id} answered (completed): its replies are in place")
    return ended


def _runs_query(workflow_id: str) -> str:
    """A visibility query that lists a gather's runs among those of its CorrelId (always
    hex; an aggregate's name, and so the id, may hold a quote): match the id in code."""
    correl_hex = workflow_id.rsplit(":", 1)[-1]
    return f"WorkflowType = '{GATHER_WORKFLOW}' AND {CORREL_ID.name} = '{correl_hex}'"


async def ended_gathers(
    client: Client, aggregate: str | None, within: timedelta
) -> list[WorkflowHandle[Any, Any]]:
    """The gathers (of ``aggregate``, or of every aggregate) with a run that ended by hand,
    or whose workflow failed or timed out, within ``within``, newest first; each once."""
    since = (datetime.now(UTC) - within).strftime("%Y-%m-%dT%H:%M:%SZ")
    statuses = ", ".join(f"'{s}'" for s in ENDED_BY_HAND)
    query = (f"WorkflowType = '{GATHER_WORKFLOW}' AND ExecutionStatus IN ({statuses}) "
             f"AND CloseTime > '{since}'")  # fmt: skip
    if aggregate is not None and _plain(aggregate):
        query += f" AND {AGGREGATE_NAME.name} = '{aggregate}'"
    ids: dict[str, None] = {}
    async for run in client.list_workflows(query):
        if aggregate is None or _of_aggregate(run.id, aggregate):
            ids.setdefault(run.id, None)
    return [client.get_workflow_handle(gid) for gid in ids]


def attempts_over(workflow_id: str, mq_work: bool, closed: datetime | None) -> None:
    """Refuse a run that ended with MQ work under way until no attempt of it can commit:
    one still in a worker commits within its timeout, or backs out
    (:func:`~mqgather.runtime.attempts.check_in_time`).

    Raises:
        MQGatherError: it ended too recently; the message says when to try again.
    """
    if not mq_work or closed is None:
        return
    over = closed + timedelta(seconds=MQ_ATTEMPT_SECONDS + SALVAGE_AFTER_ATTEMPT_SECONDS)
    left = (over - datetime.now(UTC)).total_seconds()
    if left > 0:
        raise MQGatherError(
            f"{workflow_id} ended {(datetime.now(UTC) - closed).total_seconds():.0f} s ago "
            "with its MQ work under way: an attempt still running in a worker commits "
            f"within its {MQ_ATTEMPT_SECONDS:.0f} s, or backs out; run salvage again in "
            f"{math.ceil(left)} s"
        )


def _of_aggregate(gid: str, aggregate: str) -> bool:
    """Whether a gather id is one of ``aggregate``'s (a name may hold a colon; the rest of
    the id is the CorrelId in hex)."""
    rest = gid.removeprefix(f"{GATHER_ID_PREFIX}{aggregate}:")
    return rest != gid and ":" not in rest


def _plain(text: str) -> bool:
    """Whether ``text`` can stand in a visibility query's quotes as it is."""
    return not any(c in text for c in "'\"\\")


def _remembered(hours: float, closed: datetime | None) -> bool:
    """Whether a run closed recently enough that the ledger, which keeps its markers for
    ``hours`` (``ledger_hours``), still records what salvage sent of it."""
    return closed is not None and datetime.now(UTC) - closed < timedelta(hours=hours)


def _unseen(found: UnplacedReplies, seen: set[str]) -> UnplacedReplies:
    """``found`` less the replies already in ``seen`` (by key), which then takes its own."""

    def fresh(reply: Reply) -> bool:
        key = redelivery.key(reply.message, reply.fingerprint)
        if key in seen:
            return False
        seen.add(key)
        return True

    return found.model_copy(update={
        "outbox": [item for item in found.outbox if fresh(item.reply)],
        "legs": [reply for reply in found.legs if fresh(reply)],
        "waiting": [reply for reply in found.waiting if fresh(reply)],
    })  # fmt: skip


async def _asked(handle: WorkflowHandle[Any, Any], result_type: type[T],
                 ended: WorkflowExecutionStatus | None) -> T:  # fmt: skip
    """The ``unplaced`` query's answer of a run that ended: this process's replay of its
    history (:mod:`workers.replayed`), else a worker's."""
    # Replayed here first: the server replays no run ended while a task waited to start
    # (a message had just come), and with the workers down none would answer.
    try:
        return await replayed_answer(handle, result_type)
    except MQGatherError as exc:
        replayed: MQGatherError = exc
    # Its history did not replay against this release: a worker of its own replays it.
    try:
        return await asyncio.wait_for(
            handle.query(QUERY_UNPLACED, result_type=result_type), QUERY_SECONDS
        )
    except (RPCError, WorkflowQueryFailedError, TimeoutError) as exc:
        state = ended.name if ended else "closed"
        raise MQGatherError(
            f"{replayed}; asked, {handle.id} ({state}) did not say what it held either "
            f"({exc or 'no answer in time'}): start a worker of the release that ran it "
            "(`mqgather worker`, a collector's `mqgather collector run`) and run this again"
        ) from exc


#: How a run ends without placing what it holds (by hand, or its workflow failed); a run
#: that continued as new handed its state on.
_ENDED = frozenset(
    {
        WorkflowExecutionStatus.TERMINATED,
        WorkflowExecutionStatus.FAILED,
        WorkflowExecutionStatus.TIMED_OUT,
        WorkflowExecutionStatus.CANCELED,
    }
)
#: The same as visibility queries name them (TimedOut for TIMED_OUT).
ENDED_BY_HAND = tuple(sorted(s.name.title().replace("_", "") for s in _ENDED))


@dataclass
class CollectorRuns:
    """The runs of a collector that ended by hand: what each held, and how many ended
    longer ago than the ledger remembers (left out unless forced)."""

    found: list[UnplacedItems]
    forgotten: int = 0


async def collector_unplaced(
    client: Client, workflow_id: str, *, force: bool = False
) -> CollectorRuns:
    """What each run of a collector that ended by hand had taken and not PUT, the oldest
    first (so that putting them back in turn keeps the order the destination's messages
    came in); a run that ended longer ago than ``ledger_hours`` only with ``force`` (the
    ledger no longer tells what an earlier salvage put back). The destination's next
    message starts a new run under the same id, so the ended runs are found by their
    status."""
    statuses = ", ".join(f"'{s}'" for s in ENDED_BY_HAND)
    query = f"WorkflowType = '{COLLECT_WORKFLOW}' AND ExecutionStatus IN ({statuses})"
    # A destination comes from a message property, so the id may hold a quote: named in
    # the query only when it holds none, and always matched here.
    if _plain(workflow_id):
        query += f" AND WorkflowId = '{workflow_id}'"
    runs = CollectorRuns(found=[])
    # Visibility lists the newest first.
    ended = [run async for run in client.list_workflows(query) if run.id == workflow_id]
    for run in sorted(ended, key=lambda run: run.start_time):
        handle = client.get_workflow_handle(workflow_id, run_id=run.run_id)
        found = await _asked(handle, UnplacedItems, run.status)
        attempts_over(workflow_id, found.mq_work, run.close_time)
        if force or _remembered(found.collector.ledger_hours, run.close_time):
            runs.found.append(found)
        else:
            runs.forgotten += 1
    return runs


def salvage_items(
    found: UnplacedItems,
    connect: Callable[[], Transport],
    *,
    send: bool = True,
    before_each: Callable[[], None] = lambda: None,
) -> list[SalvagedItem]:
    """Find which messages of ``found`` a batch PUT after all, and with ``send`` put each
    of the others back on the collector's input queue as it came (MQMD, properties, body:
    the destination's collector batches it anew), exactly once (the ledger records it).
    ``before_each`` is called before each is put back; once it raises
    :class:`~workers.lease.SalvageStopped` the rest are left, marked :data:`STOPPED`."""
    spec, queue = found.collector, found.collector.input_queue
    transport = connect()
    out = []
    turns = _Turns(send, before_each)
    try:
        for batch in found.batches:
            keyed = [(item_key(item), item) for item in batch.items]
            put = put_before(transport, spec.ledger_queue, found.workflow_id, batch.number,
                             {k for k, _ in keyed}).put  # fmt: skip
            for digest, item in keyed:
                key = ledger_key("salvage", found.workflow_id, digest)
                if digest in put:
                    verdict = f"put in batch {batch.number}"
                elif ledger.done(transport, spec.ledger_queue, key):
                    verdict = f"put back on {queue} before"
                else:
                    verdict = turns.verdict(lambda: _put_back(transport, found, item, key))  # noqa: B023 - called in this iteration
                out.append(SalvagedItem(found.run_id, batch.number,
                                        format_id(item.message.msg_id), item.body_bytes(),
                                        item.held is not None, queue, verdict))  # fmt: skip
    finally:
        transport.close()
    return out


class _Turns:
    """What a salvage does with each message that is in no place: with ``send``, sends
    it while ``before_each`` lets the salvage go on; once that raises
    :class:`~workers.lease.SalvageStopped`, leaves it and every later one."""

    def __init__(self, send: bool, before_each: Callable[[], None]) -> None:
        self._send, self._before_each = send, before_each
        self._stopped = False

    def verdict(self, act: Callable[[], str]) -> str:
        """``act()``'s verdict; "to send" in a dry run; :data:`STOPPED` once stopped."""
        if not self._send:
            return "to send"
        if not self._stopped:
            try:
                self._before_each()
            except SalvageStopped:
                self._stopped = True
        return STOPPED if self._stopped else act()


def _put_back(transport: Transport, found: UnplacedItems, item: Item, key: bytes) -> str:
    """Put one message back on the input queue as it came, and its marker, in one unit of
    work; "sent", or why not (a held one left its hold queue)."""
    spec = found.collector
    reader = hold.HeldReader(transport)
    try:
        # Asked again inside the unit of work: another salvage may have put it meanwhile.
        if ledger.done(transport, spec.ledger_queue, key):
            transport.backout()
            return f"put back on {spec.input_queue} before"
        message = reader.take_held(item.held, item.message) if item.held else item.message
        transport.put(spec.input_queue, message, PutOptions(syncpoint=True, set_all_context=True))
        note = f"{found.workflow_id} put back on {spec.input_queue}"
        ledger.mark(transport, spec.ledger_queue, key, note, spec.ledger_hours)
        reader.put_back()
        transport.commit()
    except hold.HeldReplyError as exc:
        transport.backout()
        return f"not sent: {exc}"
    except BaseException:
        transport.backout()
        raise
    return "sent"


def salvage(
    found: UnplacedReplies,
    connect: Callable[[], Transport],
    *,
    send: bool = True,
    run_id: str = "",
    before_each: Callable[[], None] = lambda: None,
) -> list[SalvagedReply]:
    """Find where each reply of ``found`` (held by the run ``run_id``) is, and with
    ``send`` forward each that is in no place, intact and exactly once (the ledger records
    every forward). ``before_each`` is called before each forward; once it raises
    :class:`~workers.lease.SalvageStopped` the rest are left, marked :data:`STOPPED`."""
    items = destinations(found)
    acts = MQActivities(connect)
    transport = connect()
    try:
        replies = [(item.reply, leg) for item, leg in items]
        where = placed(transport, found.aggregate, found.gather_id, replies, found.chain)
    finally:
        transport.close()
    out = []
    turns = _Turns(send, before_each)
    try:
        for (item, _), already in zip(items, where, strict=True):
            reply, queue = item.reply, queue_for(found.aggregate, item.kind)
            if already:
                verdict = already
            elif not queue and reply.held is None:
                verdict = "a duplicate the aggregate discards"
            else:
                routed = (queue, reply, item.reason)
                verdict = turns.verdict(lambda: _send(acts, found, routed))  # noqa: B023 - called in this iteration
            out.append(SalvagedReply(format_id(reply.message.msg_id), reply.leg or "",
                                     reply.size, reply.held is not None, queue, verdict,
                                     run_id))  # fmt: skip
    finally:
        acts.close()
    return out


def _send(acts: MQActivities, found: UnplacedReplies, item: tuple[str, Reply, str]) -> str:
    """Forward one reply once; "sent", or why not (a held one left its hold queue)."""
    try:
        # As a run after a reset does: a reply the gather's final carried stays there.
        acts.forward_once(found.aggregate, found.gather_id, [item], after_reset=True,
                          chain=found.chain)  # fmt: skip
    except HeldReplyError as exc:
        return f"not sent: {exc}"
    return "sent"
