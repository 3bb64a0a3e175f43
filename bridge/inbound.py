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
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from opentelemetry import trace
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from bridge.identify import IdentificationError, identify
from bridge.mq.errors import MQError
from bridge.mq.forward import forward
from bridge.mq.models import MQMessage, QueueAttributes
from bridge.mq.transport import Transport
from mqgather.config import AggregateSpec
from mqgather.names import PROP_TRACEPARENT, SIGNAL_REPLIES, TASK_QUEUE
from mqgather.routing import Destination, owner_of_shared_queue, queue_for
from mqgather.runtime import telemetry
from mqgather.runtime.temporal import healthy
from workflows.gather import GatherWorkflow
from workflows.models import GatherInput, GatherResult, Reply, ReplyBatch, gather_id

log = logging.getLogger("mqgather.bridge")
T = TypeVar("T")

#: Bodies per signal at most: Temporal refuses payloads over 2 MB, and base64 grows them.
SIGNAL_BODY_BYTES = 1024 * 1024

#: Errors after which the batch is backed out and retried later. The SDK's native client
#: reports a failed (re)connect to the server as a plain RuntimeError ("Failed client
#: connect"), not as an RPCError.
RETRYABLE = (MQError, RPCError, TimeoutError, RuntimeError)


def chunk_replies(replies: list[Reply], limit: int = SIGNAL_BODY_BYTES) -> list[list[Reply]]:
    """Split one gather's replies into signals whose bodies stay under ``limit`` bytes
    (a single larger reply travels alone)."""
    chunks: list[list[Reply]] = [[]]
    size = 0
    for reply in replies:
        body = len(reply.message.body)
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
    backed_out_to_boq: int = 0
    rollbacks: int = 0


@dataclass
class _Move:
    kind: Destination
    queue: str
    message: MQMessage
    reason: str


class InboundBridge:
    """Feeds the gathers of the given aggregates from their reply queues."""

    def __init__(
        self,
        client: Client,
        connect: Callable[[], Transport],
        aggregates: Sequence[AggregateSpec],
        *,
        task_queue: str = TASK_QUEUE,
        batch_size: int = 100,
        wait_ms: int = 500,
        rpc_timeout: float = 10.0,
        max_backoff: float = 15.0,
    ) -> None:
        self.client = client
        self.connect = connect
        self.task_queue = task_queue
        self.batch_size = batch_size
        self.wait_ms = wait_ms
        self.rpc_timeout = timedelta(seconds=rpc_timeout)
        self.max_backoff = max_backoff
        self.stats = BridgeStats()
        self.by_queue: dict[str, list[AggregateSpec]] = {}
        for spec in aggregates:
            self.by_queue.setdefault(spec.reply_queue, []).append(spec)

    async def run(self, stop: asyncio.Event) -> None:
        """Serve every reply queue until ``stop`` is set."""
        await asyncio.gather(*(self._serve(q, specs, stop) for q, specs in self.by_queue.items()))

    async def _serve(self, queue: str, specs: list[AggregateSpec], stop: asyncio.Event) -> None:
        # MQ connection handles belong to one thread, so all MQ calls go through this one.
        pool = ThreadPoolExecutor(1, thread_name_prefix=f"mq-{queue}")
        loop = asyncio.get_running_loop()

        async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
            return await loop.run_in_executor(pool, functools.partial(fn, *args, **kwargs))

        transport: Transport | None = None
        backoff = 0.2
        try:
            while not stop.is_set():
                try:
                    if transport is None:
                        transport = await call(self.connect)
                        attrs = await call(transport.inquire, queue)
                        dlq = await call(transport.dead_letter_queue)
                    batch = await call(
                        transport.get_batch, queue, self.batch_size, wait_ms=self.wait_ms
                    )
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
                        await self._process(call, transport, queue, specs, attrs, dlq, batch)
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

    async def _recover(
        self, call: Callable[..., Any], transport: Transport | None, exc: BaseException
    ) -> Transport | None:
        """Back the batch out; drop a connection that is broken."""
        if transport is None:
            return None
        try:
            await call(transport.backout)
        except MQError as err:
            log.warning("backout failed (%s); reconnecting", err)
            await call(transport.close)
            return None
        if isinstance(exc, MQError) and exc.transient:
            await call(transport.close)
            return None
        return transport

    async def _pause(self, stop: asyncio.Event, seconds: float) -> None:
        """Wait ``seconds``, then until Temporal answers (backing off), unless stopping.

        While Temporal is down nothing is got, so replies wait on the queue instead of
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
                log.warning("Temporal unreachable; replies stay on the queue until it answers")
                warned = True
            seconds = min(seconds * 2, self.max_backoff)

    async def _process(
        self,
        call: Callable[..., Any],
        transport: Transport,
        queue: str,
        specs: list[AggregateSpec],
        attrs: QueueAttributes,
        dlq: str,
        batch: list[MQMessage],
    ) -> None:
        now = datetime.now(UTC)
        moves: list[_Move] = []
        groups: dict[tuple[str, bytes], tuple[AggregateSpec, list[Reply]]] = {}
        owner = owner_of_shared_queue(specs)
        for message in batch:
            if attrs.bothresh and message.backout_count >= attrs.bothresh:
                kind = Destination.BACKOUT if attrs.boqname else Destination.DEAD_LETTER
                target = queue_for(owner, kind, boqname=attrs.boqname, dead_letter_queue=dlq)
                reason = (
                    f"backed out {message.backout_count} times (BOTHRESH {attrs.bothresh} of "
                    f"{queue})"
                )
                moves.append(_Move(kind, target, message, reason))
                continue
            try:
                found = identify(message, specs)
            except IdentificationError as exc:
                target = queue_for(exc.aggregate or owner, Destination.FAILURE)
                moves.append(_Move(Destination.FAILURE, target, message, str(exc)))
                continue
            key = (found.aggregate.name, found.correl_id)
            group = groups.setdefault(key, (found.aggregate, []))
            group[1].append(
                Reply(
                    message=message,
                    leg=found.leg,
                    leg_index=found.leg_index,
                    source_queue=queue,
                    received_at=now,
                )
            )
        results = await asyncio.gather(
            *(
                self._signal(spec, correl, replies)
                for (_, correl), (spec, replies) in groups.items()
            ),
            return_exceptions=True,
        )
        for ((_, correl), (spec, replies)), result in zip(groups.items(), results, strict=True):
            if isinstance(result, WorkflowAlreadyStartedError):
                moves += await self._late(spec, correl, replies)
            elif isinstance(result, BaseException):
                raise result
            else:
                self.stats.signals += 1
        if moves:
            await call(self._move, transport, queue, moves)

    async def _signal(self, spec: AggregateSpec, correl: bytes, replies: list[Reply]) -> None:
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
            await self._send(spec, correl, replies)

    async def _send(self, spec: AggregateSpec, correl: bytes, replies: list[Reply]) -> None:
        for chunk in chunk_replies(replies):
            await self.client.start_workflow(
                GatherWorkflow.run,
                GatherInput(aggregate=spec, correl_id=correl),
                id=gather_id(spec.name, correl),
                task_queue=self.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                start_signal=SIGNAL_REPLIES,
                start_signal_args=[ReplyBatch(replies=chunk)],
                rpc_timeout=self.rpc_timeout,
            )

    async def _late(self, spec: AggregateSpec, correl: bytes, replies: list[Reply]) -> list[_Move]:
        """Replies for a closed gather go to the late queue, except redeliveries of replies
        the gather already consumed (the bridge died between signal and commit)."""
        gid = gather_id(spec.name, correl)
        consumed: set[str] = set()
        if any(r.message.backout_count for r in replies):
            try:
                handle = self.client.get_workflow_handle(gid, result_type=GatherResult)
                result = await handle.result(rpc_timeout=self.rpc_timeout)
                consumed = set(result.consumed_msg_ids)
            except WorkflowFailureError:
                consumed = set()
        moves = []
        for reply in replies:
            if reply.message.msg_id.hex() in consumed:
                self.stats.redeliveries_dropped += 1
                continue
            self.stats.late += 1
            moves.append(
                _Move(
                    Destination.LATE,
                    queue_for(spec, Destination.LATE),
                    reply.message,
                    f"gather {gid} already closed",
                )
            )
        return moves

    def _move(self, transport: Transport, queue: str, moves: list[_Move]) -> None:
        for move in moves:
            forward(transport, move.queue, move.message, move.reason, queue)
            telemetry.instruments().bridge_moved.add(1, {"queue": queue, "kind": move.kind.value})
            if move.kind is Destination.FAILURE:
                self.stats.failures += 1
            elif move.kind in (Destination.BACKOUT, Destination.DEAD_LETTER):
                self.stats.backed_out_to_boq += 1
            log.info("moved a message from %s to %s: %s", queue, move.queue, move.reason)
