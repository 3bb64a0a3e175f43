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
from collections.abc import Sequence

from bridge.mq.errors import NoMessageAvailable
from bridge.mq.models import NONE_ID, Match, MQMessage, PutOptions
from bridge.mq.transport import Transport

#: Expiry is kept in tenths of a second.
_TENTHS_PER_HOUR = 36_000


def ledger_key(*parts: str) -> bytes:
    """A 24-byte MsgId naming one PUT (for example gather, destination and message)."""
    return hashlib.sha256("|".join(parts).encode()).digest()[:24]


def done(transport: Transport, ledger: str, key: bytes) -> bool:
    """Whether the PUT ``key`` names was committed before (its marker is on the ledger)."""
    return find(transport, ledger, Match(msg_id=key)) is not None


def find(transport: Transport, ledger: str, match: Match) -> MQMessage | None:
    """The first marker on the ledger that ``match`` selects (browsed), or None."""
    try:
        return transport.get(ledger, match=match, browse="first")
    except NoMessageAvailable:
        return None


def mark(
    transport: Transport,
    ledger: str,
    key: bytes,
    note: str,
    hours: float,
    *,
    group: bytes = NONE_ID,
    lines: Sequence[str] = (),
) -> None:
    """Put the marker of ``key`` under syncpoint: it commits with the PUT it records.

    ``group`` (its CorrelId) finds the markers of one kind of PUT whatever their keys;
    ``lines`` are kept after the note, for whoever finds the marker.
    """
    body = note.replace("\n", " ").encode("utf-8", "replace")[:1024]
    for line in lines:
        body += b"\n" + line.encode("utf-8", "replace")
    transport.put(
        ledger,
        MQMessage(
            msg_id=key,
            correl_id=group,
            expiry=max(1, int(hours * _TENTHS_PER_HOUR)),
            body=body,
        ),
        PutOptions(syncpoint=True),
    )


def digest(key: str) -> str:
    """What a marker keeps of a message it names in its lines: 64 bits of the digest of
    its key (MsgId and fingerprint), in hex."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def lines(marker: MQMessage) -> list[str]:
    """What :func:`mark` kept: the note, then its ``lines``."""
    return marker.body.decode("utf-8", "replace").split("\n")
