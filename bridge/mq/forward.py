"""Forwarding a message intact to another queue, with the reason it was moved.

Used for the failure, late, unknown, duplicate, backout and dead-letter queues. The
original MQMD (MsgId, CorrelId, PutApplName, PutDateTime, ...) and body are kept; the
dead-letter information travels in message properties, so the body stays exactly as
it was.
"""

from __future__ import annotations

from bridge.mq.dlh import dead_letter
from bridge.mq.models import MQMessage, PutOptions
from bridge.mq.transport import Transport
from mqgather.names import (
    APPL_NAME,
    PROP_BACKOUT_COUNT,
    PROP_GATHER_ID,
    PROP_REASON,
    PROP_SOURCE_QUEUE,
)


def with_reason(message: MQMessage, reason: str, source_queue: str, gather: str = "") -> MQMessage:
    """The message with the dead-letter properties added (body and MQMD untouched)."""
    props = dict(message.properties)
    props[PROP_REASON] = reason
    props[PROP_SOURCE_QUEUE] = source_queue
    props[PROP_BACKOUT_COUNT] = message.backout_count
    if gather:
        props[PROP_GATHER_ID] = gather
    return message.model_copy(update={"properties": props})


def forward(
    transport: Transport,
    queue: str,
    message: MQMessage,
    reason: str,
    source_queue: str,
    gather: str = "",
    *,
    dead_letter_reason: int = 0,
) -> None:
    """PUT a copy of ``message`` to ``queue`` under syncpoint, keeping its context.

    Args:
        dead_letter_reason: for the dead-letter queue, the MQRC_* code its MQDLH names
            (the header also names ``source_queue`` as where the message was).
    """
    copy = with_reason(message, reason, source_queue, gather)
    if dead_letter_reason:
        copy = dead_letter(copy, dead_letter_reason, source_queue, transport.qmgr_name, APPL_NAME)
    transport.put(queue, copy, PutOptions(syncpoint=True, set_all_context=True))
