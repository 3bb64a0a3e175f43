"""Where a message can end: one vocabulary for the bridge and the activities.

Every message that enters ends in exactly one of these destinations. Which queue a
destination is comes from the aggregate's spec, except for the two that belong to the
queue manager: ``BACKOUT`` (the reply queue's BOQNAME, else the dead-letter queue) and
``DEAD_LETTER``.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from mqgather.config import AggregateSpec


class Destination(StrEnum):
    """Where a message ends (the value is how histories, metrics and logs name it)."""

    RESPONSE = "response"
    TIMEOUT = "timeout"
    LATE = "late"
    UNKNOWN = "unknown"
    DUPLICATE = "duplicate"
    REPORT = "report"
    FAILURE = "failure"
    BACKOUT = "backout"
    DEAD_LETTER = "dead_letter"


def queue_for(
    spec: AggregateSpec, kind: Destination, *, boqname: str = "", dead_letter_queue: str = ""
) -> str:
    """The queue a message of ``kind`` goes to for this aggregate.

    Args:
        spec: the aggregate.
        kind: the destination.
        boqname: the reply queue's BOQNAME (for ``BACKOUT``).
        dead_letter_queue: the queue manager's dead-letter queue (``BACKOUT`` without a
            BOQNAME, and ``DEAD_LETTER``).

    Returns:
        The queue name; ``""`` for ``DUPLICATE`` when the aggregate discards duplicates.
    """
    if kind is Destination.BACKOUT:
        return set_aside(boqname, dead_letter_queue)[1]
    if kind is Destination.DEAD_LETTER:
        return dead_letter_queue
    return {
        Destination.RESPONSE: spec.response_queue,
        Destination.TIMEOUT: spec.timeout_queue,
        Destination.LATE: spec.late_queue,
        Destination.UNKNOWN: spec.unknown_queue,
        Destination.DUPLICATE: spec.duplicate_queue,
        Destination.REPORT: spec.report_queue,
        Destination.FAILURE: spec.failure_queue,
    }[kind]


def set_aside(boqname: str, dead_letter_queue: str) -> tuple[Destination, str]:
    """Where a message backed out too often goes, and as what: the input queue's BOQNAME
    as it is, else the queue manager's dead-letter queue (behind an MQDLH); "" when there
    is neither."""
    if boqname:
        return Destination.BACKOUT, boqname
    return Destination.DEAD_LETTER, dead_letter_queue


def owner_of_shared_queue(specs: Sequence[AggregateSpec]) -> AggregateSpec:
    """The aggregate whose queues take a reply that names none of those sharing its reply
    queue: the one whose name sorts first, so every bridge picks the same one.

    Raises:
        ValueError: ``specs`` is empty.
    """
    if not specs:
        raise ValueError("no aggregate serves this reply queue")
    return min(specs, key=lambda spec: spec.name)
