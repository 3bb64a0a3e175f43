"""Exactly-once PUTs: a marker per PUT, committed in the PUT's own unit of work.

An activity is at-least-once: a worker can die after its PUT was committed and before
Temporal recorded it, and the retry must not PUT again. Looking for the message on its
destination is not enough, since a requester may have consumed it already. So every PUT
also puts a small marker, with a MsgId derived from what was PUT, to the ledger queue in
the same unit of work; a retry that finds the marker knows the PUT is done. Markers
expire (MQ Expiry) after the ledger's retention, which bounds the queue and must exceed
the longest time a PUT can still be retried.
"""

from __future__ import annotations

import hashlib

from bridge.mq.errors import NoMessageAvailable
from bridge.mq.models import Match, MQMessage, PutOptions
from bridge.mq.transport import Transport

#: Expiry is kept in tenths of a second.
_TENTHS_PER_HOUR = 36_000


def ledger_key(*parts: str) -> bytes:
    """A 24-byte MsgId naming one PUT (for example gather, destination and message)."""
    return hashlib.sha256("|".join(parts).encode()).digest()[:24]


def done(transport: Transport, ledger: str, key: bytes) -> bool:
    """Whether the PUT ``key`` names was committed before (its marker is on the ledger)."""
    try:
        transport.get(ledger, match=Match(msg_id=key), browse="first")
    except NoMessageAvailable:
        return False
    return True


def mark(transport: Transport, ledger: str, key: bytes, note: str, hours: float) -> None:
    """Put the marker of ``key`` under syncpoint: it commits with the PUT it records."""
    transport.put(
        ledger,
        MQMessage(
            msg_id=key,
            expiry=max(1, int(hours * _TENTHS_PER_HOUR)),
            body=note.encode("utf-8", "replace")[:1024],
        ),
        PutOptions(syncpoint=True),
    )
