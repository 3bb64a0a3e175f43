"""The inbound loop: reply queue -> one signal-with-start per gather -> MQCMIT.

GET a batch under syncpoint, identify each reply, group the replies by gather, send one
signal-with-start per gather, and commit only after Temporal accepted every signal;
back out otherwise, so a reply is never lost and a redelivery is a no-op in the
workflow (it dedupes by MsgId).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

from opentelemetry import trace
from pydantic import BaseModel
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from bridge.identify import IdentificationError, ReportedLeg, ReportMessage, identify, reported_leg
from bridge.inline import InlineBytes
from bridge.mq import hold
from bridge.mq.errors import REASONS, MQError, QueueInhibited, SyncpointLimitReached
from bridge.mq.forward import forward
from bridge.mq.models import MQMessage, QueueAttributes, fingerprint, not_whole
from bridge.mq.transport import Transport
from mqgather.config import AggregateSpec
from mqgather.constants import BRIDGE_BACKOUT_THRESHOLD, DEFAULT_MAXUMSGS, LEAST_MAXUMSGS_GATHER
from mqgather.errors import MQGatherError
from mqgather.names import PROP_TRACEPARENT, SIGNAL_REPLIES, TASK_QUEUE
from mqgather.routing import Destination, owner_of_shared_queue, queue_for, set_aside
from mqgather.runtime import telemetry
from mqgather.runtime.temporal import healthy
from workflows import redelivery
from workflows.gather import GatherWorkflow
from workflows.models import (
    GatherResult,
    HeldBody,
    Reply,
    ReplyBatch,
    Undelivered,
    gather_id,
    held_reference,
    start_input,
    start_options,
)

log = logging.getLogger("mqgather.bridge")
T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

#: Encoded replies per signal at most: Temporal refuses payloads over 2 MB.
SIGNAL_BODY_BYTES = 1024 * 1024
#: One reply's encoded size at most; a larger one goes to the failure queue, since the
#: signal that carried it (with the gather's input) would be refused.
REPLY_PAYLOAD_BYTES = 1536 * 1024

#: Errors after which the batch is backed out and retried later. The SDK's native client
#: reports a failed (re)connect to the server as a plain RuntimeError ("Failed client
#: connect"), not as an RPCError.
RETRYABLE = (MQError, RPCError, TimeoutError, RuntimeError)
#: How often a bridge looks again at an input queue an operator set GET(DISABLED).
INHIBITED_POLL_SECONDS = 1.0
#: Closed gathers whose record of what they took a bridge keeps, the oldest let go
#: first: a closed run's record never changes, so a flood of late replies for one
#: CorrelId reads its history once.
CLOSED_RECORDS = 1024


class _HasMessage(Protocol):
    message: MQMessage


C = TypeVar("C", bound=_HasMessage)


def _body_size(item: _HasMessage) -> int:
    return len(item.message.body)


def chunk_replies(
    replies: list[C],
    limit: int = SIGNAL_BODY_BYTES,
    size_of: Callable[[C], int] = _body_size,
) -> list[list[C]]:
    """Split the messages of one signal target (a gather's replies, a destination's
    items) into signals whose sizes (``size_of``, by default the body's) stay under
    ``limit`` bytes (a single larger one travels alone)."""
    chunks: list[list[C]] = [[]]
    size = 0
    for reply in replies:
        body = size_of(reply)
        if chunks[-1] and size + body > limit:
            chunks.append([])
            size = 0
        chunks[-1].append(reply)
        size += body
    return chunks


@dataclass
class BridgeStats:
    """Counters a bridge keeps (also printed on exit)."""

    batches: int = 0
    replies: int = 0
    signals: int = 0
    late: int = 0
    redeliveries_dropped: int = 0
    failures: int = 0
    reports: int = 0
    #: Reports of undelivered requests told to their gathers.
    undelivered: int = 0
    backed_out_to_boq: int = 0
    rollbacks: int = 0
    held: int = 0
    #: Looks at an input queue that was GET(DISABLED).
    inhibited_waits: int = 0


@dataclass
class _Sent:
    """How far one gather's signals got: the replies Temporal accepted, and the error
    that stopped the rest (None when all went)."""

    sent: list[Reply]
    error: BaseException | None = None


def _plain(value: object) -> str:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"unexpected {type(value).__name__}")


def _fingerprint(item: BaseModel) -> str:
    """Every value of a model exactly (NaN and lone surrogates included, unlike ==)."""
    return json.dumps(item.model_dump(), default=_plain, sort_keys=True)


def refused_for_content(error: BaseException) -> bool:
    """Temporal refused the request for what it carried (too large, malformed), so
    retrying the same replies cannot succeed; anything else may pass later."""
    return isinstance(error, RPCError) and error.status == RPCStatusCode.INVALID_ARGUMENT


@dataclass
class Move:
    kind: Destination
    queue: str
    message: MQMessage
    reason: str


class QueueBridge:
    """The loop every bridge runs per input queue: GET a batch under syncpoint, hand it
    to :meth:`_process` (which signals Temporal and moves what cannot go), MQCMIT; back
    out and wait for Temporal on a failure."""

    #: The smallest MAXUMSGS one unit of work of this bridge fits in.
    least_maxumsgs = LEAST_MAXUMSGS_GATHER

    def __init__(
        self,
        client: Client,
        connect: Callable[[], Transport],
        *,
        task_queue: str = TASK_QUEUE,
        batch_size: int = 100,
        wait_ms: int = 500,
        rpc_timeout: float = 10.0,
        max_backoff: float = 15.0,
        backout_threshold: int = BRIDGE_BACKOUT_THRESHOLD,
    ) -> None:
        self.client = client
        self.connect = connect
        self.task_queue = task_queue
        self.batch_size = batch_size
        self.wait_ms = wait_ms
        self.rpc_timeout = timedelta(seconds=rpc_timeout)
        self.max_backoff = max_backoff
        self.backout_threshold = backout_threshold
        # The input queues warned of that have nowhere to set a message aside.
        self._nowhere: set[str] = set()
        self.stats = BridgeStats()
        self._hold_maxmsgl: dict[str, int] = {}
        # The input queues found GET(DISABLED), until they are enabled again.
        self._inhibited: set[str] = set()
        #: The queue manager's MAXUMSGS, read at each connect.
        self.maxumsgs = DEFAULT_MAXUMSGS
        # Per queue or destination, the size MAXUMSGS allows, once warned of.
        self._capped: dict[str, int] = {}

    def queues(self) -> list[str]:
        """The input queues this bridge serves."""
        raise NotImplementedError

    def backed_out_too_often(
        self, queue: str, attrs: QueueAttributes, dlq: str, message: MQMessage
    ) -> Move | None:
        """Where ``message`` goes instead of being processed again, or None: backed out
        BOTHRESH times, or, where the queue has BOTHRESH(0), ``backout_threshold`` times,
        it goes to BOQNAME, else the dead-letter queue (MQ leaves BOTHRESH to its
        applications; with none, a message that failed every time was backed out for
        ever, holding back every message behind it)."""
        threshold = attrs.bothresh or self.backout_threshold
        if not threshold or message.backout_count < threshold:
            return None
        if attrs.bothresh:
            why = f"BOTHRESH {threshold} of {queue}"
        else:
            why = f"{queue} has BOTHRESH(0): the bridge's --backout-threshold {threshold}"
        reason = f"backed out {message.backout_count} times ({why})"
        kind, target = set_aside(attrs.boqname, dlq)
        if not target:
            # Nowhere to go: it stays, as MQ keeps it (a put to no queue would fail and
            # back the batch out all the same), said once per queue.
            if queue not in self._nowhere:
                self._nowhere.add(queue)
                log.error(
                    "%s: a message %s, but the queue has no BOQNAME and the queue manager "
                    "no DEADQ, so it stays there, backed out each time with its batch; "
                    "set BOQNAME on %s or DEADQ on the queue manager",
                    queue, reason, queue,
                )  # fmt: skip
            return None
        return Move(kind, target, message, reason)

    async def run(self, stop: asyncio.Event) -> None:
        """Serve every input queue until ``stop`` is set."""
        await asyncio.gather(*(self._serve(q, stop) for q in self.queues()))

    async def _serve(self, queue: str, stop: asyncio.Event) -> None:
        # MQ connection handles belong to one thread, so all MQ calls go through this one.
        pool = ThreadPoolExecutor(1, thread_name_prefix=f"mq-{queue}")
        loop = asyncio.get_running_loop()

        async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
            return await loop.run_in_executor(pool, functools.partial(fn, *args, **kwargs))

        transport: Transport | None = None
        size = self.batch_size
        backoff = 0.2
        try:
            while not stop.is_set():
                try:
                    if transport is None:
                        transport = await call(self.connect)
                        attrs = await call(transport.inquire, queue)
                        dlq = await call(transport.dead_letter_queue)
                        self.maxumsgs = await call(transport.max_uncommitted)
                        if self.maxumsgs < self.least_maxumsgs:
                            raise MQGatherError(
                                f"MAXUMSGS({self.maxumsgs}) of queue manager "
                                f"{transport.qmgr_name} is too small for this bridge: one "
                                f"unit of work may need {self.least_maxumsgs} messages; "
                                "raise it (ALTER QMGR MAXUMSGS)"
                            )
                        size = self._fitting(queue, self.maxumsgs)
                    try:
                        batch = await call(transport.get_batch, queue, size, wait_ms=self.wait_ms)
                    except QueueInhibited as exc:
                        # An operator's GET(DISABLED): nothing was got, so nothing is
                        # backed out; the messages wait on the queue until GET(ENABLED).
                        await self._wait_enabled(queue, exc, stop)
                        continue
                    if queue in self._inhibited:
                        self._inhibited.discard(queue)
                        log.warning("%s: GET(ENABLED) again; taking messages", queue)
                    if not batch:
                        continue
                    got_at = time.perf_counter()
                    with telemetry.tracer().start_as_current_span(
                        "mqgather.bridge.batch",
                        kind=trace.SpanKind.CONSUMER,
                        attributes={
                            "messaging.system": "ibm_mq",
                            "messaging.destination.name": queue,
                            "messaging.batch.message_count": len(batch),
                        },
                    ):
                        await self._process(call, transport, queue, attrs, dlq, batch)
                        await call(transport.commit)
                    self.stats.batches += 1
                    self.stats.replies += len(batch)
                    metrics = telemetry.instruments()
                    metrics.bridge_replies.add(len(batch), {"queue": queue})
                    metrics.bridge_batch_size.record(len(batch), {"queue": queue})
                    metrics.bridge_commit_latency.record(
                        (time.perf_counter() - got_at) * 1000, {"queue": queue}
                    )
                    backoff = 0.2
                except RETRYABLE as exc:
                    self.stats.rollbacks += 1
                    telemetry.instruments().bridge_rollbacks.add(1, {"queue": queue})
                    log.warning("batch on %s backed out: %s", queue, exc)
                    transport = await self._recover(call, transport, exc)
                    await self._pause(stop, backoff)
                    backoff = min(backoff * 2, self.max_backoff)
        finally:
            if transport is not None:
                await call(transport.close)
            pool.shutdown(wait=False)

    async def _process(
        self,
        call: Callable[..., Any],
        transport: Transport,
        queue: str,
        attrs: QueueAttributes,
        dlq: str,
        batch: list[MQMessage],
    ) -> None:
        """Signal the batch's messages and move those that cannot go (before MQCMIT)."""
        raise NotImplementedError

    def _fitting(self, queue: str, maxumsgs: int) -> int:
        """Messages per unit of work: ``batch_size``, or fewer when the queue manager's
        MAXUMSGS could not hold them. Each message is got and at most once put (held or
        moved); the queue manager counts the COD its get may cause and the COA of a move
        that keeps the message's report options, so a batch may need four times its
        size; a unit of work past MAXUMSGS would fail and be backed out for ever."""
        return self._within(queue, "--batch-size", self.batch_size, maxumsgs // 4,
                            "each message may need a get, a put and the COD and COA they "
                            "cause")  # fmt: skip

    def _within(self, key: str, setting: str, asked: int, most: int, why: str) -> int:
        """``asked``, or ``most`` when that is smaller, warning once per ``key`` (and per
        ``most``) that MAXUMSGS lowered ``setting``."""
        if asked <= most:
            return asked
        if self._capped.get(key) != most:
            log.warning(
                "%s: %d instead of %s %d (%s); the queue manager's MAXUMSGS is %d",
                key, most, setting, asked, why, self.maxumsgs,
            )  # fmt: skip
            self._capped[key] = most
        return most

    async def _wait_enabled(self, queue: str, exc: QueueInhibited, stop: asyncio.Event) -> None:
        """Wait while the input queue is GET(DISABLED), saying so once."""
        if queue not in self._inhibited:
            self._inhibited.add(queue)
            log.warning("%s: %s; its messages wait there until GET(ENABLED)", queue, exc)
        self.stats.inhibited_waits += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=INHIBITED_POLL_SECONDS)

    async def _recover(
        self, call: Callable[..., Any], transport: Transport | None, exc: BaseException
    ) -> Transport | None:
        """Back the batch out; drop a connection that is broken."""
        self._hold_maxmsgl.clear()  # read again: the queue may have been altered
        if transport is None:
            return None
        try:
            await call(transport.backout)
        except MQError as err:
            log.warning("backout failed (%s); reconnecting", err)
            await call(transport.close)
            return None
        # Past MAXUMSGS, it was lowered since the connect: connect again to read it.
        if isinstance(exc, MQError) and (exc.transient or isinstance(exc, SyncpointLimitReached)):
            await call(transport.close)
            return None
        return transport

    async def _pause(self, stop: asyncio.Event, seconds: float) -> None:
        """Wait ``seconds``, then until Temporal answers (backing off), unless stopping.

        While Temporal is down nothing is got, so messages wait on the queue instead of
        gathering backouts toward BOTHRESH.
        """
        warned = False
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=seconds)
            if await healthy(self.client):
                if warned:
                    log.warning("Temporal answers again; resuming")
                return
            if not warned:
                log.warning("Temporal unreachable; messages stay on the queue until it answers")
                warned = True
            seconds = min(seconds * 2, self.max_backoff)

    def _carried(
        self,
        item: BaseModel,
        box: M,
        unbox: Callable[[M], BaseModel],
        noun: str,
        home: str,
    ) -> tuple[str, int]:
        """Whether the worker will decode ``item``, sent inside ``box``, exactly as sent:
        its encoded size, or why not. What fails here never reaches a signal, so it is
        never lost after MQCMIT."""
        converter = self.client.data_converter.payload_converter
        try:
            payload = converter.to_payloads([box])
            back = unbox(converter.from_payloads(payload, [type(box)])[0])
        except (ValueError, TypeError) as exc:  # pydantic's errors are ValueErrors
            return f"the {noun} cannot be carried to {home} ({type(exc).__name__}: {exc})", 0
        size = payload[0].ByteSize()
        # Equal models came back unchanged; only when == says no (a NaN is never equal to
        # itself) are the exact values compared, at the price of dumping both.
        if back != item and _fingerprint(back) != _fingerprint(item):
            return (
                f"the {noun} cannot be carried to {home} unchanged (a property name or "
                "value is not valid text)",
                size,
            )
        if size > REPLY_PAYLOAD_BYTES:
            return (
                f"the {noun} encodes to {size} bytes (body and properties); {home} takes at "
                f"most {REPLY_PAYLOAD_BYTES}",
                size,
            )
        return "", size

    async def _claim(
        self,
        call: Callable[..., Any],
        transport: Transport,
        message: MQMessage,
        queue: str,
        held: bool,
    ) -> tuple[MQMessage, HeldBody] | str | None:
        """Whether a message travels in its signal (None, unless ``held``), or waits on
        the hold ``queue``: then the message as the signal carries it and the reference
        to the whole; or why it can be neither (it is larger than the hold queue takes)."""
        if not held:
            return None
        if queue not in self._hold_maxmsgl:  # read once per connection
            self._hold_maxmsgl[queue] = (await call(transport.inquire, queue)).maxmsgl
        room = self._hold_maxmsgl[queue]
        if len(message.body) > room:
            return (
                f"the message of {len(message.body)} bytes is larger than MAXMSGL ({room}) of "
                f"the hold queue {queue}"
            )
        return hold.without_body(message), held_reference(queue, message)

    async def _ask_taken(
        self,
        handle: WorkflowHandle[Any, Any],
        taken: Callable[[Any, list[str]], list[str]],
        by_msg_id: Callable[[Any, list[str]], list[str]],
        keys: list[str],
    ) -> set[str]:
        """Which of these messages (by key) a running workflow took. A workflow of an
        earlier release knows no keys (its worker fails the ``taken`` query): it is asked
        by MsgId, and answers as it decided, by MsgId alone."""
        try:
            return set(await handle.query(taken, keys, rpc_timeout=self.rpc_timeout))
        except WorkflowQueryFailedError:
            msg_ids = [redelivery.msg_id_of(k) for k in keys]
            seen = set(await handle.query(by_msg_id, msg_ids, rpc_timeout=self.rpc_timeout))
            return {k for k in keys if redelivery.msg_id_of(k) in seen}

    def _hold(self, transport: Transport, held: list[tuple[str, MQMessage]]) -> None:
        """Put on their hold queues the messages whose references Temporal took."""
        for queue, message in held:
            hold.hold(transport, queue, message)
        self.stats.held += len(held)

    def _move(self, transport: Transport, queue: str, moves: list[Move]) -> None:
        for move in moves:
            dead = move.kind is Destination.DEAD_LETTER
            forward(
                transport, move.queue, move.message, move.reason, queue,
                dead_letter_reason=REASONS["MQRC_BACKOUT_THRESHOLD_REACHED"] if dead else 0,
            )  # fmt: skip
            telemetry.instruments().bridge_moved.add(1, {"queue": queue, "kind": move.kind.value})
            if move.kind is Destination.FAILURE:
                self.stats.failures += 1
            elif move.kind is Destination.REPORT:
                self.stats.reports += 1
            elif move.kind in (Destination.BACKOUT, Destination.DEAD_LETTER):
                self.stats.backed_out_to_boq += 1
            log.info("moved a message from %s to %s: %s", queue, move.queue, move.reason)


def message_key(message: MQMessage) -> str:
    """The key a gather or collector remembers this message by (as got off the queue)."""
    return redelivery.key(message, fingerprint(message))


def _key(reply: Reply) -> str:
    return redelivery.key(reply.message, reply.fingerprint)


class InboundBridge(QueueBridge):
    """Feeds the gathers of the given aggregates from their reply queues."""

    def __init__(
        self,
        client: Client,
        connect: Callable[[], Transport],
        aggregates: Sequence[AggregateSpec],
        **options: Any,
    ) -> None:
        super().__init__(client, connect, **options)
        self.by_queue: dict[str, list[AggregateSpec]] = {}
        for spec in aggregates:
            self.by_queue.setdefault(spec.reply_queue, []).append(spec)
        # Closed gathers' records of what they took, by run id (CLOSED_RECORDS).
        self._closed: dict[str, redelivery.Seen] = {}
        self._inline = InlineBytes()

    def queues(self) -> list[str]:
        return list(self.by_queue)

    async def _process(
        self,
        call: Callable[..., Any],
        transport: Transport,
        queue: str,
        attrs: QueueAttributes,
        dlq: str,
        batch: list[MQMessage],
    ) -> None:
        specs = self.by_queue[queue]
        now = datetime.now(UTC)
        moves: list[Move] = []
        groups: dict[tuple[str, bytes], tuple[AggregateSpec, list[Reply]]] = {}
        sizes: dict[int, int] = {}
        # Held replies travel without their bodies; the whole message is kept here for
        # the hold queue, or for wherever else it goes.
        whole: dict[int, MQMessage] = {}
        owner = owner_of_shared_queue(specs)
        # The first report per gather and leg in the batch.
        undelivered: dict[tuple[str, bytes, int], tuple[AggregateSpec, MQMessage, ReportedLeg]]
        undelivered = {}
        for message in batch:
            aside = self.backed_out_too_often(queue, attrs, dlq, message)
            # Its leg or CorrelId could be among what is missing, or in another segment.
            if problem := message.unreadable or not_whole(message):
                # Aside at the threshold too: its move to the failure queue may be what
                # backs the batch out.
                target = queue_for(owner, Destination.FAILURE)
                moves.append(aside or Move(Destination.FAILURE, target, message, problem))
                continue
            # A redelivery the gather took already is signalled again, not moved: the
            # gather may hold it by a reference whose put backed out with its get (held
            # again for its size, or, held for its gather's bytes, now with its body);
            # else the gather counts it a redelivery.
            if aside and not await self._already_consumed(message, specs):
                moves.append(aside)
                continue
            try:
                found = identify(message, specs)
            except ReportMessage as exc:
                target = queue_for(exc.aggregate, Destination.REPORT)
                moves.append(Move(Destination.REPORT, target, message, str(exc)))
                leg = reported_leg(message, exc.aggregate)
                # One per leg and batch: a flood of reports for one gather adds no more
                # to its history than one signal per leg per batch.
                if leg is not None:
                    about = (exc.aggregate.name, leg.correl_id, leg.leg_index)
                    undelivered.setdefault(about, (exc.aggregate, message, leg))
                continue
            except IdentificationError as exc:
                target = queue_for(exc.aggregate or owner, Destination.FAILURE)
                moves.append(Move(Destination.FAILURE, target, message, str(exc)))
                continue
            spec = found.aggregate
            reply = Reply(
                message=message,
                leg=found.leg,
                leg_index=found.leg_index,
                source_queue=queue,
                received_at=now,
                size=len(message.body),
                fingerprint=fingerprint(message),
            )
            # Keyed as the batch's signals are grouped: no gather id is built per reply.
            gather = (spec.name, found.correl_id)
            holding = self._inline.held(
                gather, message, spec.inline_reply_bytes, spec.gather_inline_bytes
            )
            claim = await self._claim(call, transport, message, spec.hold_queue, holding)
            if isinstance(claim, str):
                target = queue_for(spec, Destination.FAILURE)
                moves.append(Move(Destination.FAILURE, target, message, claim))
                continue
            if claim is not None:
                reply = reply.model_copy(update={"message": claim[0], "held": claim[1]})
                whole[id(reply)] = message
            problem, size = self._check(reply)
            if problem:
                target = queue_for(spec, Destination.FAILURE)
                moves.append(Move(Destination.FAILURE, target, message, problem))
                continue
            sizes[id(reply)] = size
            key = (spec.name, found.correl_id)
            groups.setdefault(key, (spec, []))[1].append(reply)
        results = await asyncio.gather(
            *(
                self._signal(spec, correl, replies, lambda r: sizes[id(r)])
                for (_, correl), (spec, replies) in groups.items()
            )
        )
        held: list[tuple[str, MQMessage]] = []
        closed: list[tuple[AggregateSpec, bytes, list[Reply]]] = []
        for ((_, correl), (spec, replies)), outcome in zip(groups.items(), results, strict=True):
            # Those the gather was told of wait on the hold queue for it, committed with
            # the GET; none is put there before Temporal took its reference.
            held += [(r.held.queue, whole[id(r)]) for r in outcome.sent if r.held is not None]
            rest = replies[len(outcome.sent) :]
            error = outcome.error
            if error is None:
                continue
            if isinstance(error, WorkflowAlreadyStartedError):
                closed.append((spec, correl, rest))
            elif refused_for_content(error):
                # Only the replies Temporal did not take; those it took are in the gather.
                failure = queue_for(spec, Destination.FAILURE)
                reason = f"Temporal refused the signal: {error}"
                moves += [
                    Move(Destination.FAILURE, failure, whole.get(id(r), r.message), reason)
                    for r in rest
                ]
            else:
                raise error
        # Side by side, as the signals: each closed gather's record may be read. A failure
        # backs out the whole batch once every read has settled.
        lates = await asyncio.gather(*(self._late(*c, whole) for c in closed),
                                     return_exceptions=True)  # fmt: skip
        for late in lates:
            if isinstance(late, BaseException):
                raise late
            moves += late
        # Before MQCMIT, as the replies' signals: a report got again re-requests nothing
        # more (the gather remembers its MsgId).
        await asyncio.gather(*(self._undelivered(*item) for item in undelivered.values()))
        if held:
            await call(self._hold, transport, held)
        if moves:
            await call(self._move, transport, queue, moves)

    async def _undelivered(self, spec: AggregateSpec, report: MQMessage, leg: ReportedLeg) -> None:
        """Tell the gather MQ reported its leg's request undelivered. A gather that is
        gone (ended, or never started) has nothing to ask again: the report goes to the
        report queue all the same."""
        gid = gather_id(spec.name, leg.correl_id)
        told = Undelivered(leg_index=leg.leg_index, reason=leg.reason[:200],
                           report=report.msg_id.hex())  # fmt: skip
        try:
            await self.client.get_workflow_handle(gid).signal(
                GatherWorkflow.undelivered, told, rpc_timeout=self.rpc_timeout
            )
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            log.info("no open gather %s for the report on its leg %d", gid, leg.leg_index + 1)
            return
        self.stats.undelivered += 1

    def _check(self, reply: Reply) -> tuple[str, int]:
        """Whether the worker will decode this reply exactly as sent (see
        :meth:`QueueBridge._carried`)."""
        return self._carried(
            reply, ReplyBatch(replies=[reply]), lambda b: b.replies[0], "reply", "its gather"
        )

    async def _signal(
        self,
        spec: AggregateSpec,
        correl: bytes,
        replies: list[Reply],
        size_of: Callable[[Reply], int],
    ) -> _Sent:
        # Continue the back end's trace when the reply carries one; link the batch to it.
        carried = [
            telemetry.extract(r.message.properties)
            for r in replies
            if PROP_TRACEPARENT in r.message.properties
        ]
        parents = [trace.get_current_span(c).get_span_context() for c in carried]
        batch = trace.get_current_span().get_span_context()
        with telemetry.tracer().start_as_current_span(
            "mqgather.bridge.signal",
            context=carried[0] if carried else None,
            links=[trace.Link(c) for c in (batch, *parents[1:]) if c.is_valid],
            attributes={"mqgather.gather_id": gather_id(spec.name, correl),
                        "mqgather.replies": len(replies)},
        ):  # fmt: skip
            return await self._send(spec, correl, replies, size_of)

    async def _send(
        self,
        spec: AggregateSpec,
        correl: bytes,
        replies: list[Reply],
        size_of: Callable[[Reply], int],
    ) -> _Sent:
        done = _Sent(sent=[])
        # Read by the server only when the signal starts the gather; built once per gather.
        start = start_options(spec, correl)
        for chunk in chunk_replies(replies, size_of=size_of):
            try:
                await self.client.start_workflow(
                    GatherWorkflow.run,
                    start_input(spec, correl),
                    id=gather_id(spec.name, correl),
                    task_queue=self.task_queue,
                    id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                    start_signal=SIGNAL_REPLIES,
                    start_signal_args=[ReplyBatch(replies=chunk)],
                    **start,
                    rpc_timeout=self.rpc_timeout,
                )
            except (WorkflowAlreadyStartedError, *RETRYABLE) as exc:
                done.error = exc
                return done
            done.sent += chunk
            self.stats.signals += 1
        return done

    async def _taken_keys(self, gid: str, keys: list[str]) -> set[str]:
        """Which of these messages (by key: :mod:`workflows.redelivery`) the gather took:
        a running gather is asked, a completed one read from its result (once per run,
        kept: :data:`CLOSED_RECORDS`); a gather that never started, or ended without a
        result, took none."""
        handle = self.client.get_workflow_handle(gid, result_type=GatherResult)
        try:
            desc = await handle.describe(rpc_timeout=self.rpc_timeout)
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return set()
            raise
        if desc.status == WorkflowExecutionStatus.RUNNING:
            return await self._ask_taken(
                handle, GatherWorkflow.taken, GatherWorkflow.consumed, keys
            )
        # By run: a gather an operator resets runs again under a new run id.
        record = self._closed.get(desc.run_id)
        if record is not None:
            return set(record.taken(keys))
        record = redelivery.Seen()
        try:
            result = await handle.result(rpc_timeout=self.rpc_timeout)
        except WorkflowFailureError:
            pass  # it took none that went anywhere, and never will
        else:
            record.rebuild(result.consumed_msg_ids)
        if len(self._closed) >= CLOSED_RECORDS:
            del self._closed[next(iter(self._closed))]
        self._closed[desc.run_id] = record
        return set(record.taken(keys))

    async def _already_consumed(self, message: MQMessage, specs: list[AggregateSpec]) -> bool:
        """Whether a message at BOTHRESH already reached its gather (the bridge was
        stopped between signal and MQCMIT each time): then it must not also go to the
        backout queue."""
        try:
            found = identify(message, specs)
        except IdentificationError:
            return False
        gid = gather_id(found.aggregate.name, found.correl_id)
        return bool(await self._taken_keys(gid, [message_key(message)]))

    async def _late(
        self,
        spec: AggregateSpec,
        correl: bytes,
        replies: list[Reply],
        whole: dict[int, MQMessage],
    ) -> list[Move]:
        """Replies for a closed gather go to the late queue, except redeliveries of inline
        replies the gather already consumed (the bridge died between signal and commit).
        A held reply still here was never on the hold queue for the gather (its put backs
        out with the GET), so it goes to the late queue whatever the gather saw.

        The gather's record is read even for a reply whose BackoutCount is 0: a queue
        manager may restart with the count lower than the backouts (z/OS, on a private
        queue without HARDENBO), and a message an operator moved back counts from 0.
        """
        gid = gather_id(spec.name, correl)
        inline = [_key(r) for r in replies if r.held is None]
        consumed = await self._taken_keys(gid, inline) if inline else set()
        moves = []
        for reply in replies:
            if reply.held is None and _key(reply) in consumed:
                self.stats.redeliveries_dropped += 1
                continue
            self.stats.late += 1
            moves.append(
                Move(
                    Destination.LATE,
                    queue_for(spec, Destination.LATE),
                    whole.get(id(reply), reply.message),
                    f"gather {gid} already closed",
                )
            )
        return moves
