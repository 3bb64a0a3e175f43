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
from collections.abc import Collection, Sequence

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


def ledger_owner(gather: str, chain: str) -> str:
    """What a gather's ledger keys name: its id, and the first run of its chain when it
    has one (gathers started before carry none). A reset and continue-as-new keep the
    chain; a gather that uses a CorrelId again, once the earlier gather's history is gone
    (the namespace's retention is shorter than ``ledger_hours``), begins a chain of its
    own, so the earlier one's markers are not taken for its own."""
    return f"{gather} {chain}" if chain else gather


def final_group(owner: str) -> bytes:
    """The CorrelId of a gather's final marker on the ledger, whatever its outcome: a run
    after a reset finds the final of the run before by it (``owner``: :func:`ledger_owner`)."""
    return ledger_key("final", owner)


def final_record(
    marker: MQMessage | None, endings: Collection[str]
) -> tuple[str, str, set[str]] | None:
    """A final's marker read: its note, how the gather ended (one of ``endings``) and the
    digests (:func:`digest`) of the replies it carried; None for no marker, or one from
    before finals recorded them."""
    if marker is None:
        return None
    note, *kept = lines(marker)
    if len(kept) < 2 or kept[0] not in endings:
        return None
    return note, kept[0], set(kept[1].split())


def carried_by_final(
    transport: Transport, ledger: str, owner: str, endings: Collection[str]
) -> set[str]:
    """The digests of the replies a gather's final carried (none before its final)."""
    record = final_record(find(transport, ledger, Match(correl_id=final_group(owner))), endings)
    return record[2] if record is not None else set()


def move_group(gather: str) -> bytes:
    """The CorrelId of the markers of a gather's moves to its hold queue, so that what
    they put there can be found from the gather id alone, which a held copy gives (its
    history may be gone). Markers from before named the gather's :func:`ledger_owner`."""
    return ledger_key("moves", gather)


def moved_copies(
    transport: Transport, ledger: str, gather: str, owners: Collection[str] = ()
) -> list[tuple[str, str, str]]:
    """Of each move the gather's markers record: the :func:`ledger_owner` that made it,
    the digest of the reply moved (as its final's marker keeps it) and its copy's
    :func:`bridge.mq.hold.copy_id`. ``owners`` also finds the markers that were grouped
    by owner (before they named it); moves from before markers recorded their replies are
    not among them."""
    found = []
    for group in dict.fromkeys((gather, *owners)):
        for marker in transport.browse(ledger, Match(correl_id=move_group(group))):
            kept = lines(marker)[1:]
            if len(kept) >= 2:
                found.append((kept[2] if len(kept) >= 3 else group, kept[0], kept[1]))
    return found
