"""Inputs and outputs of the gather workflow: one model per signal, update, query and result."""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import lru_cache
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from bridge.mq.hold import digest, without_body
from bridge.mq.models import (
    FINGERPRINT_PATTERN,
    MQRO_DISCARD_MSG,
    MQRO_NAN,
    MQRO_PAN,
    MQRO_PASS_DISCARD_AND_EXPIRY,
    MQRO_PASS_MSG_ID,
    MQMessage,
    id_text,
)
from mqgather.config import AggregateSpec, LegSpec, shared_spec
from mqgather.constants import MAX_WAIT_SECONDS
from mqgather.limits import shown
from mqgather.names import AGGREGATE_NAME, CORREL_ID, CORREL_ID_TEXT, GATHER_ID_PREFIX
from mqgather.routing import Destination
from workflows.redelivery import Seen

GatherStateName = Literal[
    "OPEN", "PARTIAL", "COMPLETE", "TIMEOUT", "RELEASED", "CANCELLED", "UNKNOWN", "FAILED"
]
#: The states after which a gather takes no more replies.
CLOSED_STATES = ("COMPLETE", "TIMEOUT", "RELEASED", "CANCELLED", "UNKNOWN", "FAILED")
Outcome = Literal["COMPLETE", "TIMEOUT", "RELEASED", "CANCELLED"]

#: Where a gather forwards a reply it does not merge.
ROUTED_KINDS = frozenset(
    {Destination.LATE, Destination.UNKNOWN, Destination.DUPLICATE, Destination.FAILURE}
)

_BYTES = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")


#: The whole message's fingerprint (bridge.mq.models.fingerprint), which tells a
#: redelivery from another message with its MsgId; none from bridges of earlier releases.
Fingerprint = Annotated[
    str, Field(pattern=FINGERPRINT_PATTERN, description="the message's fingerprint, hex")
]


class HeldBody(BaseModel):
    """Where a reply too large to travel in a signal waits: on the aggregate's hold queue,
    MQMD, properties and body as they came. Its reply carries the MQMD without body or
    properties; whoever needs them gets the held message by MsgId and CorrelId."""

    model_config = _BYTES

    queue: str = Field(min_length=1, max_length=48)
    msg_id: bytes
    correl_id: bytes
    sha256: str = Field(description="digest of the body, hex; checked when it is read back")


class Reply(BaseModel):
    """One reply as the bridge got it, with what identification found."""

    message: MQMessage
    leg: str | None = Field(default=None, description="leg name (property identification)")
    leg_index: int | None = Field(default=None, description="leg index (CorrelId layout)")
    source_queue: str = ""
    received_at: datetime
    size: int = Field(default=0, ge=0, description="the body's length in bytes, held or not")
    held: HeldBody | None = Field(
        default=None, description="set when the body is on the hold queue, not in ``message``"
    )
    fingerprint: Fingerprint = ""


def held_reference(queue: str, message: MQMessage) -> HeldBody:
    """The reference to ``message`` waiting whole on the hold ``queue``."""
    return HeldBody(
        queue=queue, msg_id=message.msg_id, correl_id=message.correl_id, sha256=digest(message.body)
    )


def as_held(reply: Reply, ref: HeldBody) -> Reply:
    """``reply`` as its gather keeps it once its message waits on a hold queue: the MQMD
    without body (:func:`~bridge.mq.hold.without_body`) and the reference ``ref``."""
    return reply.model_copy(update={"message": without_body(reply.message), "held": ref})


class LegRequest(BaseModel):
    """A leg's request as scatter sent it, kept with the gather so the leg can be asked
    again: the queue and the message (MQMD, properties and body)."""

    queue: str = Field(min_length=1, max_length=48)
    message: MQMessage


class Rerequest(BaseModel):
    """A re-request decided by the gather (or an operator), PUT exactly once: attempt 2
    is the first re-request."""

    leg: str
    attempt: int = Field(ge=2)
    reason: str = ""


class ReplyBatch(BaseModel):
    """Signal ``replies``: every reply of one gather from one bridge batch."""

    replies: list[Reply]


class Undelivered(BaseModel):
    """Signal ``undelivered``: MQ reported that a leg's request was not delivered (an
    exception or expiration report on the reply queue, its CorrelId naming the leg)."""

    leg_index: int = Field(ge=0, description="the leg, by its place in the CorrelId layout")
    reason: str = Field(max_length=200, description="what the report says")
    report: str = Field(max_length=48, description="the report's MsgId (hex), seen once")


class ReplyTerms(BaseModel):
    """What a requester's request asked of its reply through its report options, which
    the gather's response to it keeps."""

    model_config = _BYTES

    msg_id: bytes | None = Field(
        default=None, description="the request's MsgId (MQRO_PASS_MSG_ID); None: a derived one"
    )
    expires_at: datetime | None = Field(
        default=None,
        description="when the request's Expiry runs out (MQRO_PASS_DISCARD_AND_EXPIRY); "
        "None: never",
    )
    report: int = Field(default=0, description="report options passed on (MQRO_DISCARD_MSG)")
    notify: int = Field(
        default=0,
        description="the action notifications asked for (MQRO_PAN when its request is "
        "answered, MQRO_NAN when not)",
    )

    @classmethod
    def asked_by(cls, request: MQMessage, got_at: datetime) -> ReplyTerms | None:
        """The terms ``request`` asks for, its Expiry counted from ``got_at``; None when
        it asks for none of them."""
        terms = cls()
        if request.report & MQRO_PASS_MSG_ID:
            terms.msg_id = request.msg_id
        if request.report & MQRO_PASS_DISCARD_AND_EXPIRY:
            terms.report = request.report & MQRO_DISCARD_MSG
            if request.expiry > 0:
                terms.expires_at = got_at + timedelta(seconds=request.expiry / 10)
        terms.notify = request.report & (MQRO_PAN | MQRO_NAN)
        return terms if terms != cls() else None


class Registration(BaseModel):
    """Signal ``expect`` from the fan-out side (ACE AggregateControl + AggregateRequest)."""

    model_config = _BYTES

    legs: list[LegSpec] = Field(default_factory=list, description="empty: the aggregate's legs")
    count: int = Field(default=0, ge=0, description="count-only aggregates: replies to expect")
    request_msg_id: bytes | None = None
    reply_to_q: str = ""
    reply_to_qmgr: str = ""
    timeout_seconds: float | None = Field(default=None, ge=0, description="overrides the spec")
    requests: dict[str, LegRequest] = Field(
        default_factory=dict, description="what scatter sent, by leg, for re-requests"
    )
    reply_terms: ReplyTerms | None = Field(
        default=None, description="what the requester's request asked of its response"
    )


class ExtendInput(BaseModel):
    """Update ``extend``: push the deadline out by ``seconds`` from now."""

    seconds: float = Field(gt=0, description=f"at most {shown(MAX_WAIT_SECONDS)} (366 days)")


class ReleaseInput(BaseModel):
    """Update ``release``: PUT what has arrived now, as a RELEASED response."""

    reason: str = "released by an operator"


class CancelInput(BaseModel):
    """Update ``cancel``: end the gather; what arrived goes to the timeout queue."""

    reason: str = "cancelled by an operator"


class RerequestInput(BaseModel):
    """Update ``rerequest``: PUT a leg's request again now."""

    leg: str
    reason: str = "re-requested by an operator"


class UpdateResult(BaseModel):
    """What an operator update did."""

    accepted: bool
    state: GatherStateName
    deadline: datetime | None = None
    message: str = ""


class Routed(BaseModel):
    """A reply to forward, intact, to a queue of the aggregate (late, unknown, duplicate,
    failure)."""

    kind: Destination
    reply: Reply
    reason: str

    @field_validator("kind")
    @classmethod
    def _routable(cls, kind: Destination) -> Destination:
        if kind not in ROUTED_KINDS:
            raise ValueError(f"a gather routes replies only to {sorted(ROUTED_KINDS)}")
        return kind


def _chain() -> Any:
    """The field an activity's input (or an answer) names its gather's chain in: the
    first run, which its ledger keys name (:attr:`GatherState.chain`)."""
    return Field(default="", description="the first run of the gather's chain, which its "
                 "ledger keys name; empty for gathers started before")  # fmt: skip


def _moved_to_hold() -> Any:
    """The field an activity's input says in whether its gather moved replies to the
    hold queue (:attr:`GatherState.moved_to_hold`)."""
    return Field(default=False, description="take from the hold queue a reply the gather "
                 "moved there, though these replies carry it inline (the move's result "
                 "never reached the gather)")  # fmt: skip


class GatherState(BaseModel):
    """Everything a gather knows; carried across continue-as-new."""

    model_config = _BYTES

    state: GatherStateName = "OPEN"
    registered: bool = False
    registrations: int = 0
    expected: list[LegSpec] = Field(default_factory=list)
    received: dict[str, list[Reply]] = Field(default_factory=dict)
    held: list[Reply] = Field(default_factory=list, description="replies before registration")
    seen_msg_ids: list[str] = Field(
        default_factory=list,
        description="the keys of the replies taken, redeliveries told apart by them "
        "(MsgId in hex, then the fingerprint if any: workflows.redelivery)",
    )
    duplicates: int = 0
    redeliveries: int = 0
    late: int = 0
    unknown: int = 0
    request_msg_id: bytes | None = None
    reply_to_q: str = ""
    reply_to_qmgr: str = ""
    reply_terms: ReplyTerms | None = None
    started_at: datetime | None = None
    registered_at: datetime | None = None
    deadline: datetime | None = None
    unknown_deadline: datetime | None = None
    release: str | None = None
    cancel: str | None = None
    outbox: list[Routed] = Field(default_factory=list)
    last_error: str = Field(default="", description="the MQ work failing now, and why")
    failing_since: datetime | None = None
    failed_rounds: int = Field(default=0, description="rounds of attempts failed in a row")
    group_size: int | None = Field(
        default=None,
        description="group aggregates: the last-in-group's MsgSeqNumber, 0 until it comes "
        "(None: not a group gather)",
    )
    requests: dict[str, LegRequest] = Field(
        default_factory=dict, description="legs' requests kept for re-requests"
    )
    rerequested: dict[str, list[datetime]] = Field(
        default_factory=dict, description="when each leg was asked again, by leg"
    )
    after_reset: bool = Field(
        default=False,
        description="a run an operator's reset started (or one continued from it): the "
        "gather may have answered before, and its MQ work looks for that final",
    )
    chain: str = Field(
        default="",
        description="the first run of this gather's chain (a reset and continue-as-new keep "
        "it): its ledger keys name it, so a later gather under the same id, once this one's "
        "history is gone, is not taken for this one (empty: gathers started before)",
    )
    rerequest_reasons: dict[str, str] = Field(
        default_factory=dict, description="why each leg was asked again the last time, by leg"
    )
    reported: list[str] = Field(
        default_factory=list,
        description="MsgIds (hex) of the reports of undelivered requests acted upon: a "
        "report got again (its bridge stopped before MQCMIT) re-requests nothing more",
    )
    to_request: list[Rerequest] = Field(
        default_factory=list, description="re-requests decided and not yet PUT"
    )
    closed_by: str = Field(
        default="",
        description="what ended it: the rule, the deadline, lost legs, an operator",
    )
    moved_to_hold: bool = Field(
        default=False,
        description="it began moving replies it took inline to its hold queue (its state "
        "was too large to carry into a new run): its MQ work looks for such moves",
    )
    #: ``seen_msg_ids`` indexed, for lookups; rebuilt from the list, never carried.
    _seen: Seen = PrivateAttr(default_factory=Seen)


class GatherInput(BaseModel):
    """Workflow input: the aggregate's spec (recorded in history) and the CorrelId."""

    model_config = _BYTES

    aggregate: AggregateSpec
    correl_id: bytes
    carried: GatherState | None = None
    settle: bool = Field(
        default=False,
        description="wait for one server event before closing, so a reply racing the close "
        "is taken (set by every starter; gathers started before it replay without)",
    )
    changed_attributes_only: bool = Field(
        default=False,
        description="upsert only the search attributes whose value changed (set by every "
        "starter; gathers started before it replay upserting all of them)",
    )
    legs_bounded: bool = Field(
        default=False,
        description="refuse a registration of more legs than MAX_LEGS (set by every "
        "starter; gathers started before it replay taking any)",
    )
    redelivery_by_content: bool = Field(
        default=False,
        description="a redelivery is the same MsgId and content, and another reply that "
        "reuses a MsgId is taken (set by every starter; gathers started before it replay "
        "telling by MsgId alone)",
    )
    ledger_by_chain: bool = Field(
        default=False,
        description="name the gather's first run in its ledger keys (set by every starter; "
        "gathers started before it keep the keys they began with)",
    )

    @field_validator("aggregate")
    @classmethod
    def _shared(cls, spec: AggregateSpec) -> AggregateSpec:
        # Every open gather of an aggregate holds its input: one spec object for them all.
        return shared_spec(spec)


class LegStatus(BaseModel):
    """One expected leg as operators see it: whether it came, its size, whether its body
    waits on the hold queue."""

    name: str
    received: bool
    replies: int = 0
    bytes: int = Field(default=0, description="the bodies of its replies, held or not")
    held: bool = Field(default=False, description="a reply of it is on the hold queue")
    received_at: datetime | None = Field(
        default=None, description="when the bridge got its first reply off the queue"
    )
    attempts: int = Field(default=1, ge=0, description="requests sent, the first included")
    deadline: datetime | None = Field(default=None, description="the leg's own deadline")
    lost: bool = Field(default=False, description="past its deadline or its last retry")
    next_request_at: datetime | None = Field(default=None, description="next re-request")
    last_reason: str = Field(default="", description="why it was asked again the last time")

    def asked(self) -> str:
        """``2 requests (last: no reply)``, or "" for a leg asked once."""
        if self.attempts <= 1:
            return ""
        why = f" (last: {self.last_reason})" if self.last_reason else ""
        return f"{self.attempts} requests{why}"

    def line(self) -> str:
        """``CREDIT: 10,485,760 bytes (held)`` or ``TAX: missing, 2 requests (last: no
        reply)``."""
        asked = f", {times}" if (times := self.asked()) else ""
        if not self.received:
            gone = " (lost)" if self.lost else ""
            due = f", due {self.deadline:%H:%M:%S}" if self.deadline and not self.lost else ""
            return f"{self.name}: missing{gone}{asked}{due}"
        many = f" in {self.replies} replies" if self.replies > 1 else ""
        return f"{self.name}: {self.bytes:,} bytes{many}{' (held)' if self.held else ''}{asked}"


class GatherStatus(BaseModel):
    """Query ``status``."""

    gather_id: str
    aggregate: str
    correl_id: str
    state: GatherStateName
    registered: bool
    registrations: int = 0
    legs_expected: list[str]
    legs_received: list[str]
    legs_missing: list[str]
    held: int = Field(description="replies waiting for a registration")
    duplicates: int
    redeliveries: int
    late: int
    unknown: int
    started_at: datetime | None
    deadline: datetime | None
    last_error: str = Field(default="", description="the MQ work failing now, and why")
    legs: list[LegStatus] = Field(default_factory=list)
    complete_when: str = "all"


class UnplacedReplies(BaseModel):
    """Query ``unplaced``: the replies a gather took that are in no place of their own
    yet, and the aggregate it ran with (its queues)."""

    model_config = _BYTES

    gather_id: str
    aggregate: AggregateSpec
    outbox: list[Routed] = Field(default_factory=list, description="to forward, and where")
    legs: list[Reply] = Field(default_factory=list, description="in the legs, for a final")
    waiting: list[Reply] = Field(default_factory=list, description="for a registration")
    chain: str = _chain()
    mq_work: bool = Field(
        default=False,
        description="an attempt of its MQ work was under way when the run ended: it may yet "
        "commit until its timeout",
    )


class ReceivedLeg(BaseModel):
    """One expected leg and the replies that filled it (several with duplicates=all)."""

    leg: LegSpec
    replies: list[Reply]


class PutResponseInput(BaseModel):
    """Activity input: merge the legs and PUT the response."""

    model_config = _BYTES

    aggregate: AggregateSpec
    gather_id: str
    correl_id: bytes
    outcome: Outcome
    legs: list[ReceivedLeg]
    missing: list[str]
    request_msg_id: bytes | None = None
    reply_to_q: str = ""
    reply_to_qmgr: str = ""
    reply_terms: ReplyTerms | None = None
    started_at: datetime | None = None
    reason: str = Field(default="", description="the operator's reason (RELEASED, CANCELLED)")
    rerequested: list[str] = Field(default_factory=list, description="legs asked again")
    attempts_before: int = Field(
        default=0, ge=0, description="PUT attempts already made and failed in earlier rounds"
    )
    after_reset: bool = Field(
        default=False, description="look for a final of the gather's run before a reset"
    )
    chain: str = _chain()
    moved_to_hold: bool = _moved_to_hold()


class PutResponseResult(BaseModel):
    """Activity result: where the response went, or why the merge failed."""

    outcome: Literal["COMPLETE", "TIMEOUT", "RELEASED", "CANCELLED", "FAILED"]
    queues: list[str]
    msg_id: str
    error: str = ""


#: How a gather's final may end: the first line its ledger marker keeps.
FINAL_ENDINGS = frozenset(get_args(PutResponseResult.model_fields["outcome"].annotation))


class SendRequestInput(BaseModel):
    """Activity input: PUT a leg's request again (new MsgId, same CorrelId), once."""

    aggregate: AggregateSpec
    gather_id: str
    leg: str
    attempt: int = Field(ge=2)
    request: LegRequest
    reason: str = ""
    expires_at: datetime | None = Field(
        default=None,
        description="when nobody waits for the leg's reply any more (expire_requests): "
        "the request expires then",
    )
    chain: str = _chain()
    attempts_before: int = Field(
        default=0, ge=0, description="PUT attempts already made and failed in earlier rounds"
    )


class HoldRepliesInput(BaseModel):
    """Activity input: put replies a gather took inline on its hold queue, each once, so
    its state carries references to them instead of their bodies."""

    aggregate: AggregateSpec
    gather_id: str
    replies: list[Reply]
    chain: str = _chain()


class HoldRepliesResult(BaseModel):
    """Where each reply of the input now waits, in the input's order."""

    held: list[HeldBody]


class RouteInput(BaseModel):
    """Activity input: forward replies, intact, to the aggregate's queues."""

    aggregate: AggregateSpec
    gather_id: str
    items: list[Routed]
    after_reset: bool = Field(
        default=False, description="leave in place what a final before a reset carried"
    )
    chain: str = _chain()
    moved_to_hold: bool = _moved_to_hold()
    attempts_before: int = Field(
        default=0, ge=0, description="forward attempts already made and failed in earlier rounds"
    )


class GatherResult(BaseModel):
    """The workflow's result: what the gather ended as."""

    gather_id: str
    aggregate: str
    correl_id: str
    state: GatherStateName
    legs_expected: list[str]
    legs_received: list[str]
    legs_missing: list[str]
    duplicates: int
    redeliveries: int
    late: int
    unknown: int
    response_queues: list[str] = Field(default_factory=list)
    response_msg_id: str = ""
    error: str = ""
    consumed_msg_ids: list[str] = Field(
        default_factory=list, description="the keys of the replies taken (see seen_msg_ids)"
    )
    started_at: datetime | None = None
    ended_at: datetime | None = None
    legs: list[LegStatus] = Field(default_factory=list)
    closed_by: str = Field(default="", description="the rule, the deadline, lost legs...")
    # The aggregate's rule and timeout, so the result alone tells what the gather was
    # held to (None: a result of an older gather, which left them in its input only).
    complete_when: str | None = Field(default=None, description="the completion rule")
    timeout_seconds: float | None = Field(
        default=None, description="the aggregate's configured timeout (not a registration's)"
    )


def gather_id(aggregate: str, correl_id: bytes) -> str:
    """The workflow id of a gather: ``gather:<aggregate>:<CorrelId as 48 hex chars>``."""
    return f"{GATHER_ID_PREFIX}{aggregate}:{correl_id.hex()}"


def start_input(spec: AggregateSpec, correl_id: bytes) -> GatherInput:
    """A new gather's input, with every behaviour that gathers started before it lack (so
    those replay as they ran) switched on."""
    return GatherInput(
        aggregate=spec,
        correl_id=correl_id,
        settle=True,
        changed_attributes_only=True,
        legs_bounded=True,
        redelivery_by_content=True,
        ledger_by_chain=True,
    )


def start_options(spec: AggregateSpec, correl_id: bytes) -> dict[str, Any]:
    """Start arguments of a gather: the summary and details the Temporal UI shows, and the
    search attributes that find it from its first moment (by text or hex CorrelId)."""
    text = id_text(correl_id) if spec.correl_id_text else None
    pairs: list[SearchAttributePair[Any]] = [
        SearchAttributePair(AGGREGATE_NAME, spec.name),
        SearchAttributePair(CORREL_ID, correl_id.hex()),
    ]
    if text is not None:
        pairs.append(SearchAttributePair(CORREL_ID_TEXT, text))
    shown = f"{text!r} " if text is not None else ""
    return {
        "static_summary": f"{spec.name}: CorrelId {shown}hex:{correl_id.hex()}",
        "static_details": static_details(spec),
        "search_attributes": TypedSearchAttributes(pairs),
    }


@lru_cache(maxsize=256)
def static_details(spec: AggregateSpec) -> str:
    """How the gather's aggregate is set up, for the UI's Details field (markdown); the
    same for every gather of the aggregate, so made once per aggregate, not per gather."""
    legs = ", ".join(leg.name for leg in spec.legs) or (
        "one per message of the replies' logical group"
        if spec.leg_identification == "group"
        else "from each registration"
    )
    timer = "from the first registration" if spec.timer == "first" else "restarted by each"
    return "\n".join(
        [
            f"**aggregate {spec.name}** ({spec.mode}); legs: {legs}",
            "",
            f"- replies on `{spec.reply_queue}`, leg by {spec.leg_identification}",
            f"- timeout {spec.timeout_seconds:g} s, {timer} registration",
            f"- response to `{spec.response_queue}` ({spec.merge}), "
            f"partial on timeout to `{spec.timeout_queue}`",
            f"- late replies to `{spec.late_queue}`, duplicates kept: {spec.duplicates}",
        ]
    )
