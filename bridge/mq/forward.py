"""Forwarding a message intact to another queue, with the reason it was moved.

Used for the failure, late, unknown, duplicate, backout and dead-letter queues. The
original MQMD (MsgId, CorrelId, PutApplName, PutDateTime, ...) and body are kept; the
dead-letter information travels in message properties, so the body stays exactly as
it was.
"""

from __future__ import annotations

from bridge.mq.errors import NoMessageAvailable
from bridge.mq.models import Match, MQMessage, PutOptions
from bridge.mq.transport import Transport
from mqgather.names import PROP_BACKOUT_COUNT, PROP_GATHER_ID, PROP_REASON, PROP_SOURCE_QUEUE


def with_reason(message: MQMessage, reason: str, source_queue: str, gather: str = "") -> MQMessage:
    """The message with the dead-letter properties added (body and MQMD untouched)."""
    props = dict(message.properties)
    props[PROP_REASON] = reason
    props[PROP_SOURCE_QUEUE] = source_queue
    props[PROP_BACKOUT_COUNT] = message.backout_count
    if gather:
        props[PROP_GATHER_ID] = gather
    return message.model_copy(update={"properties": props})


def already_on(transport: Transport, queue: str, msg_id: bytes) -> bool:
    """Whether a message with this MsgId is on the queue (a retried PUT that got through)."""
    try:
        transport.get(queue, match=Match(msg_id=msg_id), browse="first")
    except NoMessageAvailable:
        return False
    return True


def forward(
    transport: Transport,
    queue: str,
    message: MQMessage,
    reason: str,
    source_queue: str,
    gather: str = "",
    *,
    idempotent: bool = False,
) -> None:
    """PUT a copy of ``message`` to ``queue`` under syncpoint, keeping its context.

    Args:
        idempotent: skip the put if a message with the same MsgId is already there
            (for activity retries).
    """
    if idempotent and already_on(transport, queue, message.msg_id):
        return
    transport.put(
        queue,
        with_reason(message, reason, source_queue, gather),
        PutOptions(syncpoint=True, set_all_context=True),
    )
