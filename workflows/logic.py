"""The gather's rules as pure functions of its state: deterministic, no I/O, no clock
(the workflow passes ``now``). Imported into the workflow sandbox as passed through, so
it is compiled once per worker rather than once per gather."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

from pydantic import BaseModel
from temporalio.common import SearchAttributeKey, SearchAttributeUpdate, TypedSearchAttributes

from bridge.mq.models import NONE_ID
from mqgather import names
from mqgather.config import AggregateSpec, LegSpec, leg_name_clash
from mqgather.constants import (
    CARRIED_STATE_BYTES,
    MAX_LEGS,
    MAX_REASON_CHARS,
    MAX_WAIT_SECONDS,
    MOVE_BATCH,
    MOVE_MIN_BYTES,
    SEARCH_VALUE_BYTES,
)
from mqgather.limits import shown
from mqgather.routing import Destination
from workflows import legs, redelivery
from workflows.models import (
    CLOSED_STATES,
    CancelInput,
    ExtendInput,
    GatherResult,
    GatherState,
    GatherStatus,
    HeldBody,
    LegStatus,
    Outcome,
    PutResponseInput,
    PutResponseResult,
    ReceivedLeg,
    Registration,
    ReleaseInput,
    Reply,
    RerequestInput,
    Routed,
    UpdateResult,
    as_held,
)
from workflows.timing import after


def is_closed(state: GatherState) -> bool:
    """Whether the gather takes no more replies."""
    return state.state in CLOSED_STATES


def received_names(state: GatherState) -> list[str]:
    """Expected legs that have a reply, in leg order."""
    return [leg.name for leg in state.expected if leg.name in state.received]


#: What a group gather misses while its last-in-group message has not come.
GROUP_END = "last-in-group"


def missing(state: GatherState) -> list[str]:
    """Expected legs still without a reply (a group gather whose end is unknown also
    misses its last-in-group message)."""
    gaps = [leg.name for leg in state.expected if leg.name not in state.received]
    return [*gaps, GROUP_END] if state.group_size == 0 else gaps


def search_values(
    spec: AggregateSpec, state: GatherState, correl_id: bytes
) -> list[tuple[SearchAttributeKey[Any], Any]]:
    """What the gather's search attributes should hold now (None: not set)."""
    received = len(received_names(state))
    values: list[tuple[SearchAttributeKey[Any], Any]] = [
        (names.AGGREGATE_NAME, spec.name),
        (names.CORREL_ID, correl_id.hex()),
        (names.GATHER_STATE, state.state),
        (names.LEGS_PENDING, len(state.expected) - received),
        (names.LEGS_RECEIVED, received),
        (names.LEGS_MISSING, within_search_limit(missing(state))),
        (names.GATHER_DEADLINE, None if is_closed(state) else state.deadline),
    ]
    # Only once a leg was asked again: gathers without re-requests never carry it.
    if state.rerequested:
        values.append((names.LEGS_REREQUESTED, within_search_limit(sorted(state.rerequested))))
    return values


def carriable(state: BaseModel, limit: int = CARRIED_STATE_BYTES) -> bool:
    """Whether the next run could carry ``state`` (its JSON within ``limit``). One
    holding more than a payload takes stays in this run: continued as new, it failed
    its workflow task each time (TMPRL1103), and the gather or collector stood."""
    return len(state.model_dump_json()) <= limit


def to_move(
    state: GatherState, most: int = MOVE_BATCH, smallest: int = MOVE_MIN_BYTES
) -> list[Reply]:
    """Up to ``most`` replies of the gather's legs that it took inline and would rather
    keep on its hold queue, its state being too large to carry: those of ``smallest``
    bytes or more, in the order of its legs. Replies waiting for a registration stay,
    since ``max_held_bytes`` bounds them by their bodies."""
    found: list[Reply] = []
    for replies in state.received.values():
        for reply in replies:
            if reply.held is None and len(reply.message.body) >= smallest:
                found.append(reply)
                if len(found) == most:
                    return found
    return found


def moved(state: GatherState, held: Sequence[tuple[Reply, HeldBody]]) -> None:
    """Keep each reply of ``held`` by its reference, wherever it is now: in its leg, or
    in the outbox (a later duplicate may have taken its place meanwhile), so whatever
    consumes it takes it from the hold queue."""
    refs = {id(reply): ref for reply, ref in held}

    def kept(reply: Reply) -> Reply:
        ref = refs.get(id(reply))
        return reply if ref is None else as_held(reply, ref)

    _replace_replies(state, kept)


def within_search_limit(legs: list[str], limit: int = SEARCH_VALUE_BYTES) -> list[str]:
    """``legs`` as a keyword list the server takes: all of them when their JSON fits one
    search attribute's ``limit``, else as many as fit and then ``+N more`` for the rest
    (the gather's status and details still name every one)."""
    # Measured as the payload converter writes it, as the server measures it.
    if len(json.dumps(legs, separators=(",", ":"))) <= limit:
        return legs
    kept: list[str] = []
    size = 2  # the brackets
    for name in legs:
        # Room for this name, its comma, and the marker of whatever would follow it.
        marker = len(json.dumps(f"+{len(legs) - len(kept)} more")) + 1
        step = len(json.dumps(name)) + 1
        if size + step + marker > limit:
            break
        kept.append(name)
        size += step
    return [*kept, f"+{len(legs) - len(kept)} more"]


def search_updates(
    shown: TypedSearchAttributes,
    values: Sequence[tuple[SearchAttributeKey[Any], Any]],
    *,
    changed_only: bool = True,
) -> list[SearchAttributeUpdate[Any]]:
    """The updates that make ``shown`` hold ``values``: with ``changed_only``, none for a
    value it holds already (an empty list counts as not set, as the server has it);
    without, one for every value, as gathers started before this rule still do."""
    updates: list[SearchAttributeUpdate[Any]] = []
    for key, value in values:
        if changed_only:
            held = shown.get(key)
            if held == value or (held is None and value == []):
                continue
        updates.append(key.value_unset() if value is None else key.value_set(value))
    return updates


def refresh(state: GatherState) -> None:
    """OPEN with no leg yet, PARTIAL with some (closed states stay)."""
    if not is_closed(state):
        state.state = "PARTIAL" if received_names(state) else "OPEN"


def route(state: GatherState, kind: Destination, reply: Reply, reason: str) -> None:
    """Queue a reply for forwarding to the late / unknown / duplicate / failure queue."""
    if kind is Destination.LATE:
        state.late += 1
    elif kind is Destination.UNKNOWN:
        state.unknown += 1
    state.outbox.append(Routed(kind=kind, reply=reply, reason=reason))


def leg_of(state: GatherState, reply: Reply) -> LegSpec | None:
    """The expected leg a reply fills: by name, by CorrelId index, or the next empty one."""
    if reply.leg is not None:
        return next((leg for leg in state.expected if leg.name == reply.leg), None)
    if reply.leg_index is not None:
        index = reply.leg_index
        return state.expected[index] if 0 <= index < len(state.expected) else None
    return next((leg for leg in state.expected if leg.name not in state.received), None)


def _place_in_group(spec: AggregateSpec, state: GatherState, reply: Reply) -> str:
    """Grow a group gather's legs to the reply's MsgSeqNumber and learn the group's size
    from its last-in-group message; the reason it does not fit ("" when it does)."""
    message = reply.message
    seq = message.msg_seq_number
    if state.group_size and seq > state.group_size:
        return f"MsgSeqNumber {seq} is past the group's last message ({state.group_size})"
    if message.group_status == "last-in-group" and not state.group_size:
        beyond = [leg.name for leg in state.expected[seq:] if leg.name in state.received]
        if beyond:
            return f"last in group at {seq}, but {', '.join(beyond)} came already"
        state.group_size = seq
        del state.expected[seq:]
    if state.request_msg_id is None and message.correl_id != NONE_ID:
        # The response answers the request the group's replies carry as their CorrelId.
        state.request_msg_id = message.correl_id
    for number in range(len(state.expected) + 1, seq + 1):
        state.expected.append(LegSpec(name=f"{spec.label}{number}", sequence=number))
    return ""


def accept(spec: AggregateSpec, state: GatherState, reply: Reply) -> None:
    """File a reply under its leg, applying the duplicate policy."""
    if state.group_size is not None:
        unplaced = _place_in_group(spec, state, reply)
        if unplaced:
            route(state, Destination.UNKNOWN, reply, unplaced)
            return
    leg = leg_of(state, reply)
    if leg is None:
        route(state, Destination.UNKNOWN, reply, "reply names no expected leg")
        return
    have = state.received.setdefault(leg.name, [])
    if not have:
        have.append(reply)
        return
    state.duplicates += 1
    if spec.duplicates == "all":
        if len(have) < spec.max_held_replies:
            have.append(reply)
        elif spec.duplicate_queue:
            reason = f"leg {leg.name} already keeps {len(have)} replies (max_held_replies)"
            route(state, Destination.DUPLICATE, reply, reason)
        return
    dropped = reply
    if spec.duplicates == "last":
        dropped, have[0] = have[0], reply
    if spec.duplicate_queue:
        route(state, Destination.DUPLICATE, dropped, f"duplicate reply for leg {leg.name}")


def start_static(spec: AggregateSpec, state: GatherState, now: datetime) -> None:
    """Static legs: the first reply starts the gather and its timer."""
    state.registered = True
    state.registered_at = state.registered_at or now
    state.expected = list(spec.legs)
    if spec.leg_identification == "group":
        state.group_size = 0
    if spec.timeout_seconds > 0:
        state.deadline = after(now, spec.timeout_seconds)
    state.unknown_deadline = None
    held, state.held = state.held, []
    for reply in held:
        accept(spec, state, reply)


def register(spec: AggregateSpec, state: GatherState, reg: Registration, now: datetime) -> None:
    """Apply a registration: legs, reply-to, and the timer (ACE: from the first
    registration; IA72 restart: from each one)."""
    if is_closed(state):
        return
    state.registrations += 1
    if not state.registered or spec.timer == "restart":
        timeout = reg.timeout_seconds if reg.timeout_seconds is not None else spec.timeout_seconds
        state.deadline = after(now, timeout) if timeout > 0 else None
    first = state.registered_at is None
    state.registered_at = state.registered_at or now
    state.request_msg_id = reg.request_msg_id or state.request_msg_id
    state.reply_to_q = reg.reply_to_q or state.reply_to_q
    state.reply_to_qmgr = reg.reply_to_qmgr or state.reply_to_qmgr
    state.reply_terms = reg.reply_terms or state.reply_terms
    state.requests.update(reg.requests)
    if first or not state.expected:
        if reg.legs:
            state.expected = list(reg.legs)
        elif reg.count:
            state.expected = [
                LegSpec(name=f"{spec.label}{i}", sequence=i) for i in range(1, reg.count + 1)
            ]
        elif spec.legs:
            state.expected = list(spec.legs)
    state.registered = True
    state.unknown_deadline = None
    held, state.held = state.held, []
    for reply in held:
        accept(spec, state, reply)
    refresh(state)


def take_replies(
    spec: AggregateSpec,
    state: GatherState,
    replies: list[Reply],
    now: datetime,
    gather: str,
    by_content: bool = False,
) -> None:
    """Apply a batch of replies: redeliveries ignored, late ones routed, early ones held.

    A redelivery is a reply taken before: by its MsgId and content when ``by_content``
    (another reply that reuses its MsgId is taken), by its MsgId alone otherwise (gathers
    recorded before, as they ran); see :mod:`workflows.redelivery`.
    """
    seen = _seen(state)
    for reply in replies:
        msg_key = redelivery.key(reply.message, reply.fingerprint, by_content)
        if seen.redelivered(msg_key):
            state.redeliveries += 1  # the bridge died before MQCMIT: already counted
            if by_content:
                # Its body, for a reference that names nothing (redelivery.with_body).
                _replace_replies(state, functools.partial(redelivery.with_body, came=reply))
            continue
        seen.add(msg_key)
        state.seen_msg_ids.append(msg_key)
        if is_closed(state):
            route(state, Destination.LATE, reply, f"gather {gather} already {state.state}")
        elif not state.registered:
            if state.unknown_deadline is None:
                state.unknown_deadline = after(now, spec.unknown_timeout_seconds)
            full = _hold_limit(spec, state, reply)
            if full:
                route(state, Destination.UNKNOWN, reply, full)
            else:
                state.held.append(reply)
        else:
            accept(spec, state, reply)
    refresh(state)


def _replace_replies(state: GatherState, replace: Callable[[Reply], Reply]) -> None:
    """Put ``replace(reply)`` in place of every reply the gather keeps: in its legs,
    waiting for a registration, and in the outbox."""
    for replies in [*state.received.values(), state.held]:
        replies[:] = [replace(reply) for reply in replies]
    for index, item in enumerate(state.outbox):
        replaced = replace(item.reply)
        if replaced is not item.reply:
            state.outbox[index] = item.model_copy(update={"reply": replaced})


def _seen(state: GatherState) -> redelivery.Seen:
    """The keys taken so far, indexed (kept beside the list, which is what is carried)."""
    seen = state._seen
    if len(seen) != len(state.seen_msg_ids):
        seen.rebuild(state.seen_msg_ids)
    return seen


def _hold_limit(spec: AggregateSpec, state: GatherState, reply: Reply) -> str:
    """Why one more reply cannot be held before the registration ("" if it can): the
    gather's state, carried in history, must stay far under Temporal's payload limit."""
    if len(state.held) >= spec.max_held_replies:
        return (
            f"the gather already holds {len(state.held)} replies waiting for a registration "
            "(max_held_replies)"
        )
    held_bytes = sum(len(r.message.body) for r in state.held) + len(reply.message.body)
    if held_bytes > spec.max_held_bytes:
        return (
            f"held replies would reach {held_bytes} bytes waiting for a registration "
            "(max_held_bytes)"
        )
    return ""


def consumed(state: GatherState, msg_ids: list[str]) -> list[str]:
    """Those of ``msg_ids`` (hex) the gather has taken a message of (the question of a
    bridge that knows no fingerprints)."""
    seen = _seen(state)
    return [msg_id for msg_id in msg_ids if seen.any_with(msg_id)]


def taken(state: GatherState, keys: list[str]) -> list[str]:
    """Those of ``keys`` (:mod:`workflows.redelivery`) whose message the gather took."""
    return _seen(state).taken(keys)


def unknown_expired(state: GatherState, now: datetime) -> bool:
    """No registration came within the unknown-message timeout."""
    return (
        not state.registered
        and state.unknown_deadline is not None
        and now >= state.unknown_deadline
    )


def expire_unknown(state: GatherState) -> None:
    """Send every held reply to the unknown queue and close as UNKNOWN."""
    for reply in state.held:
        route(state, Destination.UNKNOWN, reply, "no registration came within the unknown timeout")
    state.held = []
    state.state = "UNKNOWN"


def decide(spec: AggregateSpec, state: GatherState, now: datetime) -> Outcome | None:
    """Whether the gather ends now, and how."""
    ending = decide_why(spec, state, now)
    return ending[0] if ending else None


def decide_why(
    spec: AggregateSpec, state: GatherState, now: datetime
) -> tuple[Outcome, str] | None:
    """Whether the gather ends now: how, and what ended it (``closed_by``)."""
    if state.cancel is not None:
        return "CANCELLED", "operator"
    # A group gather misses its end until the last-in-group comes (legs.verdict).
    ruled = legs.verdict(spec, state, now) if state.registered and state.expected else None
    if ruled == "COMPLETE":
        return "COMPLETE", legs.BY_RULE
    if state.release is not None:
        return "RELEASED", "operator"
    if state.registered and state.deadline is not None and now >= state.deadline:
        # Optional legs are awaited until the gather's deadline at the latest.
        if legs.holds_now(spec, state):
            return "COMPLETE", legs.BY_RULE
        return "TIMEOUT", legs.BY_DEADLINE
    if ruled == "TIMEOUT":
        return "TIMEOUT", legs.BY_LOST_LEGS
    return None


def _refused(state: GatherState) -> UpdateResult | None:
    """An operator's change is refused once the gather is closed."""
    if is_closed(state):
        return UpdateResult(accepted=False, state=state.state, message="already closed")
    return None


def _accepted(
    spec: AggregateSpec, state: GatherState, now: datetime, message: str = ""
) -> UpdateResult:
    """What an accepted change did: the state the gather is in (or ends as) after it, and
    the deadline that now governs it."""
    governing = state.deadline if state.registered else state.unknown_deadline
    outcome = decide(spec, state, now)
    return UpdateResult(
        accepted=True, state=outcome or state.state, deadline=governing, message=message
    )


def _adopt_held(spec: AggregateSpec, state: GatherState) -> None:
    """Release or cancel of a gather that holds replies but has no registration: the
    replies go with it. The aggregate's legs, if it lists any, take them; whatever fits
    no leg goes to the unknown queue. None stays behind."""
    if state.registered or not state.held:
        return
    if not state.expected:
        state.expected = list(spec.legs)
    held, state.held = state.held, []
    for reply in held:
        accept(spec, state, reply)
    state.unknown_deadline = None
    refresh(state)


def release(spec: AggregateSpec, state: GatherState, reason: str, now: datetime) -> UpdateResult:
    """Operator update ``release``: the gather ends now as RELEASED with what it has
    (unless it is complete by then, which wins)."""
    refused = _refused(state)
    if refused is not None:
        return refused
    _adopt_held(spec, state)
    state.release = reason
    return _accepted(spec, state, now, reason)


def registration_refusal(spec: AggregateSpec, reg: Registration) -> str | None:
    """Why a registration is refused, or None: it asks for more legs than a gather holds
    (``MAX_LEGS``), or names a leg twice (:func:`leg_name_clash`). Scatter never sends
    one; a hand-made signal could, and taken, the one would grow the gather's state and
    result past what a payload carries, the other merge a reply twice or one over
    another."""
    asked = max(len(reg.legs), reg.count)
    if asked > MAX_LEGS:
        return f"{asked:,} legs, more than a gather holds ({MAX_LEGS:,})"
    return leg_name_clash((leg.name for leg in reg.legs), spec.merge)


def update_refusal(inp: ExtendInput | ReleaseInput | CancelInput | RerequestInput) -> str | None:
    """Why an operator's update is refused before it is taken, or None: an extend by a
    wait no timer keeps (beyond ``MAX_WAIT_SECONDS``, infinite or not a number), which
    would fail the workflow's every task from then on, or a reason too long
    (:func:`reason_refusal`)."""
    if isinstance(inp, ExtendInput):
        if not 0 < inp.seconds <= MAX_WAIT_SECONDS:
            return f"seconds: {inp.seconds:g} is not a wait; give more than 0 and at most " + (
                f"{shown(MAX_WAIT_SECONDS)} (366 days)"
            )
        return None
    return reason_refusal(inp.reason)


def reason_refusal(reason: str) -> str | None:
    """Why an operator's reason is refused, or None: it is longer than
    ``MAX_REASON_CHARS`` (it travels in the result and as a property of a message PUT)."""
    if len(reason) > MAX_REASON_CHARS:
        return f"reason: {len(reason):,} characters; give at most {MAX_REASON_CHARS:,}"
    return None


def extend(spec: AggregateSpec, state: GatherState, seconds: float, now: datetime) -> UpdateResult:
    """Operator update ``extend``: the deadline that governs the gather becomes ``seconds``
    from ``now`` (earlier or later than before): its timeout, or before a registration,
    the unknown-message timeout of the replies it holds."""
    refused = _refused(state)
    if refused is not None:
        return refused
    if state.registered or state.unknown_deadline is None:
        state.deadline = after(now, seconds)
    else:
        state.unknown_deadline = after(now, seconds)
    return _accepted(spec, state, now)


def rerequest(state: GatherState, leg: str, reason: str, now: datetime) -> UpdateResult:
    """Operator update ``rerequest``: PUT leg ``leg``'s request again now (it counts as
    one of the leg's attempts)."""
    refused = _refused(state)
    if refused is not None:
        return refused
    why = legs.refuse_rerequest(state, leg, now)
    if why:
        return UpdateResult(accepted=False, state=state.state, message=why)
    planned = legs.rerequest_now(state, leg, reason, now)
    return UpdateResult(
        accepted=True,
        state=state.state,
        deadline=state.deadline,
        message=f"leg {leg}: request {planned.attempt} goes out now",
    )


def cancel(spec: AggregateSpec, state: GatherState, reason: str, now: datetime) -> UpdateResult:
    """Operator update ``cancel``: the gather ends as CANCELLED; what arrived goes to the
    timeout queue."""
    refused = _refused(state)
    if refused is not None:
        return refused
    _adopt_held(spec, state)
    state.cancel = reason
    return _accepted(spec, state, now, reason)


def next_timer(state: GatherState, now: datetime) -> float | None:
    """Seconds until the next deadline (the gather's or unknown-message, a leg's deadline
    or re-request), or None to wait forever: one durable timer at a time."""
    due = state.deadline if state.registered else state.unknown_deadline
    if state.registered and not is_closed(state):
        leg_due = legs.next_due(state, now)
        if leg_due is not None and (due is None or leg_due < due):
            due = leg_due
    if due is None:
        return None
    return max((due - now).total_seconds(), 0.001)


def response_input(
    spec: AggregateSpec, state: GatherState, correl_id: bytes, gather: str, outcome: Outcome
) -> PutResponseInput:
    """The merge-and-PUT activity's input for this outcome."""
    return PutResponseInput(
        aggregate=spec,
        gather_id=gather,
        correl_id=correl_id,
        outcome=outcome,
        legs=[
            ReceivedLeg(leg=leg, replies=state.received[leg.name])
            for leg in state.expected
            if leg.name in state.received
        ],
        missing=missing(state),
        request_msg_id=state.request_msg_id,
        reply_to_q=state.reply_to_q,
        reply_to_qmgr=state.reply_to_qmgr,
        reply_terms=state.reply_terms,
        started_at=state.started_at,
        reason=_operator_reason(state, outcome),
        rerequested=[leg.name for leg in state.expected if leg.name in state.rerequested],
        after_reset=state.after_reset,
        chain=state.chain,
        moved_to_hold=state.moved_to_hold,
    )


def _operator_reason(state: GatherState, outcome: Outcome) -> str:
    if outcome == "CANCELLED":
        return state.cancel or ""
    if outcome == "RELEASED":
        return state.release or ""
    return ""


def reply_bytes(reply: Reply) -> int:
    """A reply's body length (histories from before sizes were recorded: the body's)."""
    return reply.size or len(reply.message.body)


def leg_status(state: GatherState, now: datetime | None = None) -> list[LegStatus]:
    """Each expected leg: received or not, its bytes, whether it is held, its requests,
    its own deadline, whether it is lost (``now`` given) and its next re-request."""
    shown = []
    for leg in state.expected:
        replies = state.received.get(leg.name, [])
        pending = not replies and not is_closed(state)
        shown.append(
            LegStatus(
                name=leg.name,
                received=bool(replies),
                replies=len(replies),
                bytes=sum(reply_bytes(r) for r in replies),
                held=any(r.held is not None for r in replies),
                received_at=min(r.received_at for r in replies) if replies else None,
                attempts=legs.attempts(state, leg),
                deadline=legs.deadline(state, leg),
                lost=now is not None and legs.is_lost(state, leg, now),
                next_request_at=legs.retry_due(state, leg) if pending else None,
                last_reason=state.rerequest_reasons.get(leg.name, ""),
            )
        )
    return shown


def status(
    spec: AggregateSpec, state: GatherState, correl_id: bytes, gather: str, now: datetime
) -> GatherStatus:
    """The ``status`` query's answer."""
    return GatherStatus(
        gather_id=gather,
        aggregate=spec.name,
        correl_id=correl_id.hex(),
        state=state.state,
        registered=state.registered,
        registrations=state.registrations,
        legs_expected=[leg.name for leg in state.expected],
        legs_received=received_names(state),
        legs_missing=missing(state),
        held=len(state.held),
        duplicates=state.duplicates,
        redeliveries=state.redeliveries,
        late=state.late,
        unknown=state.unknown,
        started_at=state.started_at,
        deadline=state.deadline,
        last_error=error_note(state),
        legs=leg_status(state, now),
        complete_when=spec.complete_when,
    )


def result(
    spec: AggregateSpec,
    state: GatherState,
    correl_id: bytes,
    gather: str,
    response: PutResponseResult | None,
    now: datetime,
) -> GatherResult:
    """The workflow's result."""
    return GatherResult(
        gather_id=gather,
        aggregate=spec.name,
        correl_id=correl_id.hex(),
        state=state.state,
        legs_expected=[leg.name for leg in state.expected],
        legs_received=received_names(state),
        legs_missing=missing(state),
        duplicates=state.duplicates,
        redeliveries=state.redeliveries,
        late=state.late,
        unknown=state.unknown,
        response_queues=response.queues if response else [],
        response_msg_id=response.msg_id if response else "",
        error=response.error if response else "",
        consumed_msg_ids=list(state.seen_msg_ids),
        started_at=state.started_at,
        ended_at=now,
        legs=leg_status(state, now),
        closed_by=state.closed_by,
        complete_when=spec.complete_when,
        timeout_seconds=spec.timeout_seconds,
    )


#: Attempts of the MQ work (merge and PUT, or forwarding) in one round, inside the
#: worker, before the workflow records the error where operators look and waits.
ATTEMPTS_PER_ROUND = 2
#: Longest wait between rounds.
MAX_ROUND_DELAY = 30.0
#: The reason a cancel requested through Temporal (UI, ``temporal workflow cancel``) gives.
TEMPORAL_CANCEL_REASON = "cancel requested through Temporal"


class FailureRecord(Protocol):
    """The state of work retried in rounds (a gather's, a collector's)."""

    last_error: str
    failing_since: datetime | None
    failed_rounds: int


def attempt_failed(state: FailureRecord, work: str, error: str, now: datetime) -> float:
    """Record a failed round of MQ work; return the seconds to wait before the next one."""
    if not _of(state, work):
        # Another work's record (a cancel interrupted it): this one counts its own.
        state.failed_rounds, state.failing_since = 0, None
    state.failed_rounds += 1
    state.last_error = f"{work}: {error}"
    if state.failing_since is None:
        state.failing_since = now
    return min(2.0**state.failed_rounds, MAX_ROUND_DELAY)


def failed_attempts(state: FailureRecord, work: str | None = None) -> int:
    """Attempts of the current MQ work (of ``work``, when named) that failed in a row
    (every round makes the same number). A record another work left counts none for
    ``work``: a response after a cancel that cut its forwards short is not on its last
    attempt at once."""
    if work is not None and not _of(state, work):
        return 0
    return state.failed_rounds * ATTEMPTS_PER_ROUND


def _of(state: FailureRecord, work: str) -> bool:
    """Whether the failure record, if any, is ``work``'s."""
    return not state.last_error or state.last_error.startswith(f"{work}: ")


def attempt_succeeded(state: FailureRecord) -> bool:
    """Clear the failure record; True when there was one (the UI needs refreshing)."""
    had = bool(state.last_error)
    state.last_error, state.failing_since = "", None
    state.failed_rounds = 0
    return had


def error_note(state: GatherState) -> str:
    """The failing MQ work for operators: what, since when, how often, the MQ reason."""
    if not state.last_error or state.failing_since is None:
        return ""
    return (
        f"failing since {state.failing_since:%Y-%m-%d %H:%M:%S} UTC after "
        f"{failed_attempts(state)} attempts, retrying: {state.last_error}"
    )


def details(state: GatherState, now: datetime) -> str:
    """The gather's current details for the Temporal UI (markdown): state, a legs table,
    the deadline with the time left, counters, and the error the MQ work is failing with."""
    shown = leg_status(state, now)
    rows = [
        f"| {leg.name} | received | {leg.bytes:,} bytes{', held' if leg.held else ''}"
        f"{_asked(leg)} |"
        for leg in shown
        if leg.received
    ]
    gaps = {leg.name: leg for leg in shown if not leg.received}
    rows += [f"| {name} | **{_gap(gaps.get(name))}** | {_asked(gaps.get(name))} |"
             for name in missing(state)]  # fmt: skip
    lines = [f"**{state.state}** — {len(received_names(state))} of {len(state.expected)} legs"]
    if state.held:
        lines.append(f"{len(state.held)} replies held, waiting for the registration")
    if rows:
        lines += ["", "| leg | | size |", "|---|---|---|", *rows, ""]
    due = state.deadline if state.registered else state.unknown_deadline
    if due is not None and not is_closed(state):
        left = max((due - now).total_seconds(), 0.0)
        lines.append(f"deadline {due:%Y-%m-%d %H:%M:%S} UTC ({_span(left)} left)")
    lines.append(
        f"duplicates {state.duplicates}, late {state.late}, unknown {state.unknown}, "
        f"redeliveries {state.redeliveries}"
    )
    if state.last_error:
        lines.append(f"⚠ {error_note(state)}")
    return "\n".join(lines)


def _gap(leg: LegStatus | None) -> str:
    return "lost" if leg is not None and leg.lost else "missing"


def _asked(leg: LegStatus | None) -> str:
    """A leg's requests and clocks for the details table ("" when it has none)."""
    if leg is None:
        return ""
    parts = [times] if (times := leg.asked()) else []
    if leg.next_request_at is not None:
        parts.append(f"next {leg.next_request_at:%H:%M:%S}")
    if leg.deadline is not None and not leg.received:
        parts.append(f"deadline {leg.deadline:%H:%M:%S}")
    return (", " if leg.received and parts else "") + ", ".join(parts)


def _span(seconds: float) -> str:
    whole = int(seconds)
    if whole >= 3600:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    if whole >= 60:
        return f"{whole // 60} min {whole % 60} s"
    return f"{seconds:.1f} s"
