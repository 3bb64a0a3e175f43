"""Dead letters put back where they were going, as runmqdlq's RETRY action puts them.

Each one leaves the dead-letter queue in the unit of work that puts it to the queue its
MQDLH names, at the queue manager it names: committed together, or (refused again, or a
crash between the two) neither, so a message is never in both places nor in neither.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from typing import Literal

from bridge.mq import dlh
from bridge.mq.errors import MQError, NoMessageAvailable, undeliverable
from bridge.mq.models import Match, MQMessage, PutOptions, QueueAddress, fingerprint
from bridge.mq.transport import Transport


def undead(message: MQMessage) -> tuple[dlh.DeadLetterHeader, MQMessage]:
    """A dead letter's MQDLH, and the message as it was before it was dead-lettered:
    the body after the header, with the Format, CodedCharSetId and Encoding the header
    kept; the MQMD, context and properties as they are.

    Raises:
        dlh.NotADeadLetter: the message does not start with an MQDLH.
    """
    if message.format != dlh.MQFMT_DEAD_LETTER_HEADER:
        raise dlh.NotADeadLetter(f"Format {message.format!r}, not MQDEAD")
    header, body = dlh.unpack(message.body)
    original = message.model_copy(
        update={
            "format": header.format,
            "coded_char_set_id": header.coded_char_set_id,
            "encoding": header.encoding,
            "body": body,
            # An Expiry left of 0 (under a tenth of a second) is one MQ refuses on a put.
            "expiry": message.expiry or 1,
        }
    )
    return header, original


#: What became of a chosen dead letter: put where it was going; refused there again
#: (it stays); gone or changed since it was browsed (left as it is); or, in a dry run,
#: nothing.
Fate = Literal["put", "refused", "gone", "chosen"]


@dataclass(frozen=True)
class Retried:
    """One dead letter chosen: where it was going, why it was dead-lettered, and what
    became of it (``error``: why it was refused again)."""

    msg_id: bytes
    to: QueueAddress
    reason: int
    fate: Fate = "chosen"
    error: MQError | None = None


@dataclass
class RetryReport:
    """What a retry did: each dead letter chosen, and how many it passed over (not an
    MQDLH, or not among the reasons and destinations chosen)."""

    chosen: list[Retried] = field(default_factory=list)
    passed_over: int = 0

    def count(self, fate: Fate) -> int:
        """How many chosen dead letters met ``fate``."""
        return sum(1 for r in self.chosen if r.fate == fate)


def retry_dead_letters(
    transport: Transport,
    queue: str,
    *,
    reasons: Collection[int] = (),
    destinations: Collection[str] = (),
    dry_run: bool = False,
    each: Callable[[Retried], None] | None = None,
) -> RetryReport:
    """Put each dead letter on ``queue`` whose MQDLH names one of ``reasons`` and one of
    ``destinations`` (empty: any) back to the queue and queue manager its header names.

    The queue is browsed from the start; a chosen message is got by its ids under
    syncpoint, checked to be the one browsed, put with its context as it is
    (MQPMO_SET_ALL_CONTEXT), and committed with the put. One refused again is backed out
    and stays, its BackoutCount one higher, and the reason is reported. ``dry_run``
    gets and puts nothing.

    Raises:
        MQError: the connection failed (what was not committed stays on ``queue``).
    """
    report = RetryReport()
    for seen in transport.browse(queue):
        try:
            header, _ = undead(seen)
        except dlh.NotADeadLetter:
            report.passed_over += 1
            continue
        if (reasons and header.reason not in reasons) or (
            destinations and header.dest_q_name not in destinations
        ):
            report.passed_over += 1
            continue
        to = transport.address(header.dest_q_name, header.dest_q_mgr_name)
        chosen = Retried(seen.msg_id, to, header.reason)
        if not dry_run:
            chosen = _move(transport, queue, seen, chosen)
        report.chosen.append(chosen)
        if each is not None:
            each(chosen)
    return report


def _move(transport: Transport, queue: str, seen: MQMessage, chosen: Retried) -> Retried:
    """Get ``seen`` off ``queue`` and put the message it holds where ``chosen`` names, in
    one unit of work."""
    try:
        got = transport.get(queue, match=Match(msg_id=seen.msg_id, correl_id=seen.correl_id))
        if fingerprint(got) != fingerprint(seen):
            # Another message with the same ids came first: leave both as they are.
            transport.backout()
            return replace(chosen, fate="gone")
        transport.put(
            chosen.to.queue,
            undead(got)[1],  # its Expiry as left now
            PutOptions(syncpoint=True, set_all_context=True),
            qmgr=chosen.to.qmgr,
        )
        transport.commit()
    except NoMessageAvailable:
        transport.backout()
        return replace(chosen, fate="gone")  # taken by someone else since it was browsed
    except MQError as exc:
        transport.backout()
        if not undeliverable(exc):
            raise
        return replace(chosen, fate="refused", error=exc)
    return replace(chosen, fate="put")
