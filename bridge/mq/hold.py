"""The hold queue: a claim check for replies too large to travel inside a signal.

The bridge puts such a reply, MQMD, properties and body as they came, on the
aggregate's hold queue in the unit of work of its GET; the gather keeps a reference
(MsgId, CorrelId, a digest of the body) and whoever consumes the reply (the response,
or a forward to the late, unknown, duplicate or failure queue) gets it from there in
the unit of work of its own PUT. So the body never enters Temporal, and it leaves the
hold queue exactly when its gather is done with it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Protocol

from bridge.mq.errors import NoMessageAvailable
from bridge.mq.models import (
    MQEI_UNLIMITED,
    MQPER_PERSISTENT,
    MQRO_REPORTS_ASKED,
    Match,
    MQMessage,
    PropertyValue,
    PutOptions,
    encode_properties,
)
from bridge.mq.transport import Transport
from mqgather.errors import MQGatherError
from mqgather.names import TRACE_PROPERTIES

#: How long a read of a held reply waits for it: the bridge commits its put right after
#: Temporal accepted the signal that told the gather about it, so the reply can be a few
#: milliseconds behind the gather.
HELD_WAIT_MS = 2000


class HeldReplyError(MQGatherError):
    """A held reply is not on its hold queue (not yet committed, or taken by someone
    else), or it is not the message the reference names. Retried: the work waits."""


def digest(body: bytes) -> str:
    """The digest a reference keeps of a held body (SHA-256, hex)."""
    return hashlib.sha256(body).hexdigest()


def copy_id(message: MQMessage) -> str:
    """What names a message's copy on a hold queue (a move's ledger marker keeps it): its
    MsgId and body digest, since :func:`hold` changes its Persistence and reports."""
    return f"{message.msg_id.hex()} {digest(message.body)}"


def property_bytes(properties: dict[str, PropertyValue]) -> int:
    """What the properties weigh in a signal: their typed JSON, escapes and base64
    included (a string of control characters weighs six times its length there)."""
    if not properties:
        return 0
    return len(json.dumps(encode_properties(properties)))


def wire_size(message: MQMessage) -> int:
    """What a reply weighs inline: its body and properties."""
    return len(message.body) + property_bytes(message.properties)


def without_body(message: MQMessage) -> MQMessage:
    """The MQMD of a held reply, as its gather keeps it: no body, and of the properties
    only the trace context (the bridge continues the back end's trace from it)."""
    kept = {
        key: value
        for key, value in message.properties.items()
        if key in TRACE_PROPERTIES and isinstance(value, str) and len(value) <= 512
    }
    return message.model_copy(update={"body": b"", "properties": kept})


def hold(transport: Transport, queue: str, message: MQMessage) -> None:
    """Put a reply on the hold queue under syncpoint, its MQMD and context as they were,
    but for its Expiry, Persistence and the reports it asks for. The bridge got it in
    time, so it is its gather's now: it must not expire while the gather waits for its
    other legs, nor be lost when the queue manager restarts (which discards
    non-persistent messages). Its arrival and delivery were confirmed on the reply queue
    (COA, COD); the hold queue is mqgather's own, so its put there and the merge's get
    must not confirm them again to the sender. Its gather keeps the MQMD it came with
    (in its reference), and whatever forwards it restores all three
    (:meth:`HeldReader.take_held`)."""
    kept = message.model_copy(
        update={
            "expiry": MQEI_UNLIMITED,
            "persistence": MQPER_PERSISTENT,
            "report": message.report & ~MQRO_REPORTS_ASKED,
        }
    )
    transport.put(queue, kept, PutOptions(syncpoint=True, set_all_context=True))


class Reference(Protocol):
    """What names a held message: where it waits, its ids and its body's digest (a
    gather's or collector's ``HeldBody``)."""

    queue: str
    msg_id: bytes
    correl_id: bytes
    sha256: str


def body_digest(message: MQMessage) -> str:
    """What a reference names a held reply by, beside its ids: its body's digest."""
    return digest(message.body)


class HeldReader:
    """Gets held replies under syncpoint for one unit of work: each leaves the hold queue
    when that unit of work commits.

    Back ends may pass the request's MsgId and CorrelId on, so several held messages can
    share both; they are told apart by ``identity`` (by default the body's digest, which
    a gather's reference keeps). One got for a reference it does not match is kept for
    the reference that names it, and whatever no reference took is put back by
    :meth:`put_back`, which the caller runs before it commits.
    """

    def __init__(
        self,
        transport: Transport,
        identity: Callable[[MQMessage], str] = body_digest,
        what: str = "body digests",
    ) -> None:
        self.transport = transport
        self.identity = identity
        self.what = what
        self._spare: list[tuple[str, str, MQMessage]] = []  # queue, identity, message

    def take(
        self,
        queue: str,
        msg_id: bytes,
        correl_id: bytes,
        want: str,
        *,
        wait_ms: int = HELD_WAIT_MS,
    ) -> MQMessage:
        """The held message with these ids whose identity is ``want``.

        Raises:
            HeldReplyError: it did not come within the wait, or no message there is the
                one named (the gets are backed out with the caller's unit of work).
        """
        for index, (where, found, message) in enumerate(self._spare):
            same = message.msg_id == msg_id and message.correl_id == correl_id
            if where == queue and same and found == want:
                del self._spare[index]
                return message
        while True:
            try:
                message = self.transport.get(
                    queue, wait_ms=wait_ms, match=Match(msg_id=msg_id, correl_id=correl_id)
                )
            except NoMessageAvailable as exc:
                raise HeldReplyError(self._missing(queue, msg_id, correl_id, want)) from exc
            found = self.identity(message)
            if found == want:
                return message
            self._spare.append((queue, found, message))

    def take_held(self, ref: Reference, descriptor: MQMessage) -> MQMessage:
        """The held message ``ref`` names, as it came: with the Expiry, Persistence and
        Report of ``descriptor``, the MQMD its gather or collector kept (:func:`hold`
        changed them).

        Raises:
            HeldReplyError: as :meth:`take`.
        """
        held = self.take(ref.queue, ref.msg_id, ref.correl_id, ref.sha256)
        return held.model_copy(
            update={
                "expiry": descriptor.expiry,
                "persistence": descriptor.persistence,
                "report": descriptor.report,
            }
        )

    def _missing(self, queue: str, msg_id: bytes, correl_id: bytes, want: str) -> str:
        others = [
            found[:16]
            for where, found, m in self._spare
            if where == queue and m.msg_id == msg_id and m.correl_id == correl_id
        ]
        if others:
            return (
                f"held reply MsgId {msg_id.hex()} on {queue}: the messages there with its "
                f"MsgId and CorrelId have {self.what} {', '.join(others)}, not the "
                f"{want[:16]} named; was it moved by hand?"
            )
        return (
            f"held reply MsgId {msg_id.hex()} is not on {queue} (MQRC_NO_MSG_AVAILABLE): "
            "its bridge has not committed it yet, or it was moved by hand"
        )

    def put_back(self) -> None:
        """Put back on the hold queue, in this unit of work, what was got for no
        reference, MQMD and context as they were."""
        for queue, _, message in self._spare:
            # An Expiry left of 0 (under a tenth of a second) is one MQ refuses on a put.
            back = message.model_copy(update={"expiry": message.expiry or 1})
            self.transport.put(queue, back, PutOptions(syncpoint=True, set_all_context=True))
        self._spare.clear()
