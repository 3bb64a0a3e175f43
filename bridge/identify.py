"""Which aggregate, gather and leg a reply belongs to: pure functions of the message."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bridge.mq import reports
from bridge.mq.errors import feedback_name
from bridge.mq.models import ID_LENGTH, MQMT_REPORT, NONE_ID, MQMessage, rfh2_hint
from mqgather.config import AggregateSpec
from mqgather.errors import MQGatherError
from mqgather.names import PROP_AGGREGATE
from mqgather.routing import owner_of_shared_queue

#: CorrelId layout of our own fan-out: 20 bytes of gather key, then the leg index.
KEY_LENGTH = 20
INDEX_LENGTH = ID_LENGTH - KEY_LENGTH


class IdentificationError(MQGatherError):
    """The reply cannot be matched to a gather; the message says why (it becomes the
    dead-letter reason on the failure queue). ``aggregate`` is the aggregate it was
    found to belong to, if identification got that far."""

    def __init__(self, reason: str, aggregate: AggregateSpec | None = None) -> None:
        self.aggregate = aggregate
        super().__init__(reason)


class ReportMessage(IdentificationError):
    """A report message (MsgType MQMT_REPORT) that its aggregate does not take as a reply:
    it goes to the aggregate's report queue, the message says which report it is."""

    aggregate: AggregateSpec


@dataclass(frozen=True)
class Identified:
    """Where a reply belongs."""

    aggregate: AggregateSpec
    correl_id: bytes
    leg: str | None = None
    leg_index: int | None = None


def leg_correl_id(gather_key: bytes, index: int) -> bytes:
    """The request MsgId (and so the reply CorrelId) for leg ``index`` of a gather."""
    return gather_key[:KEY_LENGTH].ljust(KEY_LENGTH, b"\x00") + index.to_bytes(INDEX_LENGTH, "big")


def gather_correl_id(gather_key: bytes) -> bytes:
    """The gather's CorrelId in the CorrelId layout: the key with a zero leg index."""
    return leg_correl_id(gather_key, 0)


@dataclass(frozen=True)
class ReportedLeg:
    """A leg whose request MQ reported undelivered: its gather's CorrelId, its index in
    the CorrelId layout, and what the report says."""

    correl_id: bytes
    leg_index: int
    reason: str


def reported_leg(message: MQMessage, spec: AggregateSpec) -> ReportedLeg | None:
    """The leg a report about an undelivered request (exception, expiration) names, when
    the aggregate asked for such reports (``request_reports``); None for any other
    report, or one whose CorrelId names no leg."""
    reason = reports.undelivered(message) if spec.request_reports else None
    index = int.from_bytes(message.correl_id[KEY_LENGTH:], "big")
    if reason is None or not index:
        return None
    return ReportedLeg(gather_correl_id(message.correl_id), index - 1, reason)


def identify(message: MQMessage, candidates: Sequence[AggregateSpec]) -> Identified:
    """Match a reply to its aggregate, gather (CorrelId) and leg.

    Args:
        message: the reply.
        candidates: the aggregates whose reply queue it came from.

    Raises:
        IdentificationError: no CorrelId, unknown aggregate, no leg, or too big.
    """
    named = message.properties.get(PROP_AGGREGATE)
    if message.message_type == MQMT_REPORT:
        _refuse_report(message, named, candidates)
    if named is not None:
        spec = _named(named, candidates)
        if spec is None:
            raise IdentificationError(f"unknown aggregate {named!r} (property {PROP_AGGREGATE})")
    elif len(candidates) == 1:
        spec = candidates[0]
    else:
        raise IdentificationError(
            f"unknown aggregate: several share this queue and the reply has no "
            f"{PROP_AGGREGATE!r} property{rfh2_hint(message)}"
        )
    if spec.leg_identification == "group":
        return _in_group(message, spec)
    if message.correl_id == NONE_ID:
        raise IdentificationError("the reply has no CorrelId (MQCI_NONE)")
    _check_size(message, spec)
    if spec.leg_identification == "property":
        leg = message.properties.get(spec.leg_property)
        if not isinstance(leg, str) or not leg:
            raise IdentificationError(
                f"the reply has no string property {spec.leg_property!r} naming its leg"
                f"{rfh2_hint(message)}",
                spec,
            )
        return Identified(spec, message.correl_id, leg=leg)
    if spec.leg_identification == "correlid":
        index = int.from_bytes(message.correl_id[KEY_LENGTH:], "big")
        if index == 0:
            raise IdentificationError(
                "the CorrelId carries no leg index (last 4 bytes are 0)", spec
            )
        return Identified(spec, gather_correl_id(message.correl_id), leg_index=index - 1)
    return Identified(spec, message.correl_id)


def _refuse_report(message: MQMessage, named: object, candidates: Sequence[AggregateSpec]) -> None:
    """Raise ReportMessage unless the report's aggregate takes reports as replies.

    A queue manager's reports (COA, COD, expiry, exception, activity) carry the request's
    MsgId as their CorrelId, as its replies do, so they would match a gather and pass as
    a leg's answer. One that names no aggregate goes to the shared queue's owner.
    """
    spec = _named(named, candidates) or owner_of_shared_queue(candidates)
    if spec.reports_are_replies:
        return
    raise ReportMessage(
        f"a report message (MsgType MQMT_REPORT, Feedback {feedback_name(message.feedback)}), "
        f"not a reply: aggregate {spec.name} takes no reports as replies "
        "(reports_are_replies = false)",
        spec,
    )


def _named(named: object, candidates: Sequence[AggregateSpec]) -> AggregateSpec | None:
    """The aggregate a message names in its aggregate property, among those of its queue."""
    return next((a for a in candidates if a.name == named), None)


def _check_size(message: MQMessage, spec: AggregateSpec) -> None:
    if len(message.body) > spec.max_reply_bytes:
        raise IdentificationError(
            f"reply of {len(message.body)} bytes exceeds max_reply_bytes "
            f"({spec.max_reply_bytes}) of aggregate {spec.name}",
            spec,
        )


def _in_group(message: MQMessage, spec: AggregateSpec) -> Identified:
    """A reply of a group aggregate: its GroupId is the gather, MsgSeqNumber the leg."""
    if not message.in_group or message.group_id == NONE_ID:
        raise IdentificationError(
            f"aggregate {spec.name} takes its replies as a logical group, and this reply is "
            "in none (no MQMF_MSG_IN_GROUP flag or GroupId MQGI_NONE)",
            spec,
        )
    _check_size(message, spec)
    if message.msg_seq_number > spec.max_group_size:
        raise IdentificationError(
            f"MsgSeqNumber {message.msg_seq_number} exceeds max_group_size "
            f"({spec.max_group_size}) of aggregate {spec.name}",
            spec,
        )
    return Identified(spec, message.group_id, leg_index=message.msg_seq_number - 1)
