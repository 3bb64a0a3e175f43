"""The gather's rules as plain function calls: no server, no worker, no clock."""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from bridge.mq.models import (
    MQRO_DISCARD_MSG,
    MQRO_PASS_DISCARD_AND_EXPIRY,
    MQRO_PASS_MSG_ID,
    MQMessage,
    fingerprint,
)
from mqgather import names
from mqgather.config import AggregateSpec, LegSpec
from mqgather.constants import MAX_LEGS, MAX_REASON_CHARS, MAX_WAIT_SECONDS, SEARCH_VALUE_BYTES
from mqgather.routing import Destination
from workflows import logic
from workflows.models import (
    CancelInput,
    ExtendInput,
    GatherState,
    HeldBody,
    Registration,
    ReleaseInput,
    Reply,
    ReplyTerms,
    RerequestInput,
    Routed,
    as_held,
    held_reference,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LEGS = (LegSpec(name="CREDIT", sequence=10), LegSpec(name="STOCK", sequence=20),
        LegSpec(name="TAX", sequence=30))  # fmt: skip
GATHER = "gather:t:00"


def spec(**changes) -> AggregateSpec:
    return AggregateSpec(**{"name": "t", "legs": LEGS, "timeout_seconds": 30, **changes})


def reply(n: int, leg: str | None = None, index: int | None = None) -> Reply:
    msg_id = n.to_bytes(24, "big")
    return Reply(
        message=MQMessage(msg_id=msg_id, correl_id=b"C", body=f'{{"n":{n}}}'.encode()),
        leg=leg,
        leg_index=index,
        source_queue="GATHER.IN",
        received_at=T0,
    )


def registered(s: AggregateSpec | None = None, reg: Registration | None = None) -> GatherState:
    state = GatherState()
    logic.register(s or spec(), state, reg or Registration(), T0)
    return state


def routed(state: GatherState) -> list[tuple[Destination, int]]:
    return [(item.kind, int.from_bytes(item.reply.message.msg_id, "big")) for item in state.outbox]


def bodies(state: GatherState, leg: str) -> list[int]:
    return [int.from_bytes(r.message.msg_id, "big") for r in state.received[leg]]


# ------------------------------------------------------------------- registration


def test_registration_takes_its_legs_reply_to_and_starts_the_timer():
    legs = [LegSpec(name="A"), LegSpec(name="B")]
    state = registered(reg=Registration(legs=legs, request_msg_id=b"R" * 24, reply_to_q="Q",
                                        reply_to_qmgr="QM"))  # fmt: skip
    assert state.registered and state.registrations == 1
    assert [leg.name for leg in state.expected] == ["A", "B"]
    assert (state.request_msg_id, state.reply_to_q, state.reply_to_qmgr) == (b"R" * 24, "Q", "QM")
    assert state.deadline == T0 + timedelta(seconds=30)
    assert state.state == "OPEN"


def test_registration_without_legs_uses_the_aggregate_legs_or_a_count():
    assert [leg.name for leg in registered().expected] == ["CREDIT", "STOCK", "TAX"]
    counted = registered(spec(label="Part"), Registration(count=2))
    assert [(leg.name, leg.sequence) for leg in counted.expected] == [("Part1", 1), ("Part2", 2)]


def test_registration_timeout_override_and_zero_waits_forever():
    assert registered(reg=Registration(timeout_seconds=5)).deadline == T0 + timedelta(seconds=5)
    assert registered(reg=Registration(timeout_seconds=0)).deadline is None
    assert registered(spec(timeout_seconds=0)).deadline is None


@pytest.mark.parametrize(("timer", "moves"), [("first", False), ("restart", True)])
def test_timer_modes(timer, moves):
    s = spec(timer=timer)
    state = registered(s)
    logic.register(s, state, Registration(), T0 + timedelta(seconds=10))
    assert state.registrations == 2
    expected = T0 + timedelta(seconds=40 if moves else 30)
    assert state.deadline == expected


def test_a_second_registration_keeps_the_first_legs():
    s = spec()
    state = registered(s, Registration(legs=[LegSpec(name="A")]))
    logic.register(s, state, Registration(legs=[LegSpec(name="B")]), T0)
    assert [leg.name for leg in state.expected] == ["A"]


def test_registration_after_close_changes_nothing():
    s = spec()
    state = registered(s)
    state.state = "TIMEOUT"
    logic.register(s, state, Registration(reply_to_q="OTHER"), T0 + timedelta(seconds=99))
    assert state.registrations == 1 and state.reply_to_q == ""


# ------------------------------------------------------------------------ replies


def test_replies_fill_legs_and_the_state_follows():
    s, state = spec(), registered()
    logic.take_replies(s, state, [reply(1, "CREDIT")], T0, GATHER)
    assert state.state == "PARTIAL" and logic.missing(state) == ["STOCK", "TAX"]
    logic.take_replies(s, state, [reply(2, "TAX"), reply(3, "STOCK")], T0, GATHER)
    assert logic.received_names(state) == ["CREDIT", "STOCK", "TAX"]
    assert logic.decide(spec(), state, T0) == "COMPLETE"


def test_a_redelivery_is_counted_once_and_changes_nothing():
    s, state = spec(), registered()
    logic.take_replies(s, state, [reply(1, "CREDIT")], T0, GATHER)
    logic.take_replies(s, state, [reply(1, "CREDIT")], T0, GATHER)
    assert state.redeliveries == 1 and state.duplicates == 0
    assert bodies(state, "CREDIT") == [1] and state.outbox == []


def test_replies_before_registration_are_held_then_filed():
    s, state = spec(unknown_timeout_seconds=7), GatherState()
    logic.take_replies(s, state, [reply(1, "TAX")], T0, GATHER)
    logic.take_replies(s, state, [reply(2, "CREDIT")], T0 + timedelta(seconds=3), GATHER)
    assert len(state.held) == 2 and not state.received
    assert state.unknown_deadline == T0 + timedelta(seconds=7)  # from the first, not moved
    logic.register(s, state, Registration(), T0 + timedelta(seconds=4))
    assert state.held == [] and logic.received_names(state) == ["CREDIT", "TAX"]
    assert state.unknown_deadline is None and state.state == "PARTIAL"


def test_a_reply_after_close_is_late():
    s, state = spec(), registered()
    state.state = "COMPLETE"
    logic.take_replies(s, state, [reply(9, "TAX")], T0, GATHER)
    assert state.late == 1 and routed(state) == [(Destination.LATE, 9)]
    assert GATHER in state.outbox[0].reason


def test_leg_by_unknown_name_or_index_is_unknown():
    s, state = spec(), registered()
    logic.take_replies(s, state, [reply(1, "NOPE"), reply(2, index=3), reply(3, index=-1)],
                       T0, GATHER)  # fmt: skip
    assert routed(state) == [(Destination.UNKNOWN, 1), (Destination.UNKNOWN, 2),
                             (Destination.UNKNOWN, 3)]  # fmt: skip
    assert state.unknown == 3 and not state.received


def test_leg_by_correl_id_index_and_by_count():
    s, state = spec(), registered()
    logic.take_replies(s, state, [reply(1, index=2)], T0, GATHER)
    assert logic.received_names(state) == ["TAX"]
    counted = registered(reg=Registration(count=2))
    logic.take_replies(s, counted, [reply(5), reply(6), reply(7)], T0, GATHER)
    assert bodies(counted, "Reply1") == [5] and bodies(counted, "Reply2") == [6]
    assert routed(counted) == [(Destination.UNKNOWN, 7)]


# --------------------------------------------------------------------- duplicates


@pytest.mark.parametrize(
    ("policy", "kept", "dropped"), [("first", [1], [2]), ("last", [2], [1]), ("all", [1, 2], [])]
)
def test_duplicate_policies(policy, kept, dropped):
    s = spec(duplicates=policy)
    state = registered(s)
    logic.take_replies(s, state, [reply(1, "CREDIT"), reply(2, "CREDIT")], T0, GATHER)
    assert state.duplicates == 1
    assert bodies(state, "CREDIT") == kept
    assert routed(state) == [(Destination.DUPLICATE, n) for n in dropped]


def test_duplicates_without_a_queue_are_counted_and_not_routed():
    s = spec(duplicate_queue="")
    state = registered(s)
    logic.take_replies(s, state, [reply(1, "CREDIT"), reply(2, "CREDIT")], T0, GATHER)
    assert state.duplicates == 1 and state.outbox == []


# ------------------------------------------------------------------------ unknown


def test_unknown_expiry_routes_every_held_reply():
    s, state = spec(unknown_timeout_seconds=5), GatherState()
    logic.take_replies(s, state, [reply(1, "CREDIT"), reply(2, "TAX")], T0, GATHER)
    assert not logic.unknown_expired(state, T0 + timedelta(seconds=4.9))
    assert logic.unknown_expired(state, T0 + timedelta(seconds=5))
    logic.expire_unknown(state)
    assert state.state == "UNKNOWN" and state.held == [] and state.unknown == 2
    assert routed(state) == [(Destination.UNKNOWN, 1), (Destination.UNKNOWN, 2)]


def test_a_registered_gather_never_expires_as_unknown():
    s, state = spec(unknown_timeout_seconds=1), GatherState()
    logic.take_replies(s, state, [reply(1, "CREDIT")], T0, GATHER)
    logic.register(s, state, Registration(), T0)
    assert not logic.unknown_expired(state, T0 + timedelta(hours=1))


def test_static_start_files_held_replies_and_starts_the_timer():
    s, state = spec(mode="static"), GatherState()
    state.held.append(reply(1, "STOCK"))
    logic.start_static(s, state, T0)
    assert state.registered and logic.received_names(state) == ["STOCK"]
    assert state.deadline == T0 + timedelta(seconds=30)


# ------------------------------------------------------------- deciding and timers


def test_decide_order_cancel_complete_release_timeout():
    state = registered()
    assert logic.decide(spec(), state, T0) is None
    assert logic.decide(spec(), state, T0 + timedelta(seconds=30)) == "TIMEOUT"
    state.release = "ops"
    assert logic.decide(spec(), state, T0) == "RELEASED"
    for n, leg in enumerate(LEGS):
        state.received[leg.name] = [reply(n, leg.name)]
    assert logic.decide(spec(), state, T0) == "COMPLETE"
    state.cancel = "withdrawn"
    assert logic.decide(spec(), state, T0) == "CANCELLED"


def test_an_unregistered_gather_does_not_time_out():
    state = GatherState(deadline=T0)
    assert logic.decide(spec(), state, T0 + timedelta(days=1)) is None


def test_next_timer():
    state = registered()
    assert logic.next_timer(state, T0 + timedelta(seconds=10)) == 20
    assert logic.next_timer(state, T0 + timedelta(seconds=99)) == 0.001
    assert logic.next_timer(registered(spec(timeout_seconds=0)), T0) is None
    held = GatherState(unknown_deadline=T0 + timedelta(seconds=3))
    assert logic.next_timer(held, T0) == 3


# -------------------------------------------------------------- operator updates


def test_release_extend_cancel_on_an_open_gather():
    state = registered()
    moved = logic.extend(spec(), state, 5, T0 + timedelta(seconds=1))
    assert moved.accepted and moved.deadline == T0 + timedelta(seconds=6) == state.deadline
    released = logic.release(spec(), state, "ops", T0)
    assert released.accepted and released.message == "ops" and state.release == "ops"
    assert released.state == "RELEASED"  # what it ends as, not what it was
    cancelled = logic.cancel(spec(), state, "gone", T0)
    assert cancelled.accepted and state.cancel == "gone" and cancelled.state == "CANCELLED"


@pytest.mark.parametrize("update", ["release", "extend", "cancel"])
def test_operator_updates_are_refused_once_closed(update):
    state = registered()
    state.state = "COMPLETE"
    before = state.model_copy(deep=True)
    if update == "extend":
        result = logic.extend(spec(), state, 60, T0)
    else:
        result = getattr(logic, update)(spec(), state, "late", T0)
    assert not result.accepted and result.state == "COMPLETE" and result.message
    assert state == before


def test_release_of_a_complete_gather_reports_complete():
    s = spec()
    state = registered(s)
    logic.take_replies(s, state, [reply(n, leg.name) for n, leg in enumerate(LEGS)], T0, GATHER)
    assert logic.release(s, state, "ops", T0).state == "COMPLETE"


@pytest.mark.parametrize("update", ["release", "cancel"])
def test_release_or_cancel_before_registration_takes_the_held_replies(update):
    s, state = spec(), GatherState()
    logic.take_replies(s, state, [reply(1, "TAX"), reply(2, "NOPE")], T0, GATHER)
    result = getattr(logic, update)(s, state, "ops", T0)
    assert result.accepted and state.held == []
    assert logic.received_names(state) == ["TAX"]  # the aggregate's legs took it
    assert routed(state) == [(Destination.UNKNOWN, 2)]  # no leg for it: routed, not lost
    outcome = logic.decide(spec(), state, T0)
    assert outcome == ("RELEASED" if update == "release" else "CANCELLED")
    inp = logic.response_input(s, state, b"C" * 24, GATHER, outcome)
    assert [leg.leg.name for leg in inp.legs] == ["TAX"] and inp.reason == "ops"


def test_release_before_registration_without_aggregate_legs_routes_them_unknown():
    s, state = spec(legs=()), GatherState()
    logic.take_replies(s, state, [reply(1, "TAX")], T0, GATHER)
    logic.release(s, state, "ops", T0)
    assert state.held == [] and routed(state) == [(Destination.UNKNOWN, 1)]


def test_extend_before_registration_moves_the_unknown_deadline():
    s, state = spec(unknown_timeout_seconds=5), GatherState()
    logic.take_replies(s, state, [reply(1, "TAX")], T0, GATHER)
    result = logic.extend(spec(), state, 60, T0 + timedelta(seconds=1))
    assert result.deadline == state.unknown_deadline == T0 + timedelta(seconds=61)
    assert not logic.unknown_expired(state, T0 + timedelta(seconds=30))


@pytest.mark.parametrize("seconds", [float("inf"), 1e15, MAX_WAIT_SECONDS + 1])
def test_an_extend_no_timer_keeps_is_refused_before_it_is_taken(seconds):
    assert "is not a wait" in (logic.update_refusal(ExtendInput(seconds=seconds)) or "")


@pytest.mark.parametrize("update", [ReleaseInput, CancelInput])
def test_a_reason_too_long_to_carry_is_refused_and_the_longest_is_taken(update):
    assert logic.update_refusal(update(reason="r" * MAX_REASON_CHARS)) is None
    refused = logic.update_refusal(update(reason="r" * (MAX_REASON_CHARS + 1)))
    assert refused is not None and "reason: 1,001 characters" in refused
    assert logic.update_refusal(RerequestInput(leg="TAX", reason="r" * 5000)) is not None


def test_a_registration_of_more_legs_than_a_gather_holds_is_refused():
    refusal = functools.partial(logic.registration_refusal, spec())
    assert refusal(Registration(count=MAX_LEGS)) is None
    assert "5,001 legs" in (refusal(Registration(count=MAX_LEGS + 1)) or "")
    many = [LegSpec(name=f"L{i}") for i in range(MAX_LEGS + 1)]
    assert refusal(Registration(legs=many)) is not None


def test_a_registration_that_names_a_leg_twice_is_refused():
    def refusal(merge: str, *names: str) -> str | None:
        legs = [LegSpec(name=n) for n in names]
        return logic.registration_refusal(spec(merge=merge), Registration(legs=legs))

    assert "leg A is named twice" in (refusal("folders", "A", "B", "A") or "")
    assert "A and a are one key" in (refusal("json", "A", "a") or "")
    assert refusal("folders", "A", "a") is None


def test_the_longest_extend_is_taken_and_its_deadline_is_a_datetime():
    assert logic.update_refusal(ExtendInput(seconds=MAX_WAIT_SECONDS)) is None
    state = GatherState(registered=True)
    result = logic.extend(spec(), state, MAX_WAIT_SECONDS, T0)
    assert result.deadline == T0 + timedelta(days=366)


# ------------------------------------------------------------------ bounded state


def test_held_replies_are_capped_and_the_surplus_goes_out_at_once():
    s, state = spec(max_held_replies=3), GatherState()
    logic.take_replies(s, state, [reply(n, "TAX") for n in range(5)], T0, GATHER)
    assert len(state.held) == 3
    assert routed(state) == [(Destination.UNKNOWN, 3), (Destination.UNKNOWN, 4)]
    assert "max_held_replies" in state.outbox[0].reason


def test_held_bytes_are_capped():
    s, state = spec(max_held_bytes=20), GatherState()
    logic.take_replies(s, state, [reply(n, "TAX") for n in range(5)], T0, GATHER)  # 7 B each
    assert len(state.held) == 2 and len(state.outbox) == 3


def test_duplicates_all_keep_at_most_the_cap_per_leg():
    s = spec(duplicates="all", max_held_replies=2)
    state = registered(s)
    logic.take_replies(s, state, [reply(n, "TAX") for n in range(4)], T0, GATHER)
    assert bodies(state, "TAX") == [0, 1]
    assert routed(state) == [(Destination.DUPLICATE, 2), (Destination.DUPLICATE, 3)]
    assert state.duplicates == 3


def test_a_flood_keeps_the_carried_state_small():
    s, state = spec(), GatherState()
    flood = [reply(n, "TAX") for n in range(10_000)]
    logic.take_replies(s, state, flood, T0, GATHER)
    state.outbox = []  # forwarded by the workflow as it goes
    assert len(state.model_dump_json()) < 1_000_000
    assert state.unknown_deadline == T0 + timedelta(seconds=30)


# ------------------------------------------------------------------- the outputs


def test_response_input_status_and_result():
    s = spec(destination="replyToQueue")
    state = registered(s, Registration(reply_to_q="REQ.REPLY", request_msg_id=b"M" * 24))
    logic.take_replies(s, state, [reply(2, "TAX"), reply(1, "CREDIT")], T0, GATHER)
    inp = logic.response_input(s, state, b"C" * 24, GATHER, "TIMEOUT")
    assert [leg.leg.name for leg in inp.legs] == ["CREDIT", "TAX"]  # leg order, not arrival
    assert inp.missing == ["STOCK"] and inp.reply_to_q == "REQ.REPLY"
    assert inp.request_msg_id == b"M" * 24 and inp.outcome == "TIMEOUT"
    current = logic.status(s, state, b"C" * 24, GATHER, T0)
    assert (current.legs_received, current.legs_missing) == (["CREDIT", "TAX"], ["STOCK"])
    state.state = "TIMEOUT"
    done = logic.result(s, state, b"C" * 24, GATHER, None, T0)
    assert done.state == "TIMEOUT" and len(done.consumed_msg_ids) == 2
    # What the gather was held to, for analytics that need not read its start input.
    assert (done.complete_when, done.timeout_seconds) == (s.complete_when, s.timeout_seconds)
    assert "**TIMEOUT** — 2 of 3 legs" in logic.details(state, T0)


def test_routed_refuses_a_destination_a_gather_does_not_route_to():
    with pytest.raises(ValueError, match="routes replies only"):
        Routed(kind=Destination.RESPONSE, reply=reply(1), reason="no")


# ------------------------------------------------------------- order independence

NAMES = [leg.name for leg in LEGS]


@st.composite
def arrivals(draw):
    """A registration and replies (some for no expected leg, some duplicates, some
    redelivered) in two different orders."""
    s = spec(
        duplicates=draw(st.sampled_from(["first", "last", "all"])),
        duplicate_queue=draw(st.sampled_from(["GATHER.DUPLICATE", ""])),
    )
    legs = draw(st.lists(st.sampled_from([*NAMES, "STRAY"]), min_size=0, max_size=8))
    messages = [reply(n, leg) for n, leg in enumerate(legs)]
    again = draw(st.lists(st.sampled_from(messages), max_size=3)) if messages else []
    events: list[Registration | Reply] = [Registration(), *messages, *again]
    return s, events, draw(st.permutations(events)), len(messages)


def apply(s: AggregateSpec, events) -> GatherState:
    state = GatherState()
    for event in events:
        if isinstance(event, Registration):
            logic.register(s, state, event, T0)
        else:
            logic.take_replies(s, state, [event], T0, GATHER)
    return state


@settings(max_examples=300, deadline=None)
@given(arrivals())
def test_outcome_and_merged_legs_do_not_depend_on_arrival_order(case):
    s, events, shuffled, distinct = case
    canonical, other = apply(s, events), apply(s, shuffled)
    assert logic.decide(spec(), other, T0) == logic.decide(spec(), canonical, T0)
    assert logic.received_names(other) == logic.received_names(canonical)
    assert logic.missing(other) == logic.missing(canonical)
    for field in ("duplicates", "redeliveries", "unknown", "state"):
        assert getattr(other, field) == getattr(canonical, field), field
    for state in (canonical, other):
        # Nothing lost, nothing twice: each distinct reply is merged, routed or (a
        # duplicate the aggregate discards) counted, exactly once.
        merged = sum(len(replies) for replies in state.received.values())
        discarded = state.duplicates if s.duplicates != "all" and not s.duplicate_queue else 0
        assert merged + len(state.outbox) + discarded == distinct
        assert state.redeliveries == len(events) - 1 - distinct
        ids = [r.message.msg_id for rs in state.received.values() for r in rs]
        ids += [item.reply.message.msg_id for item in state.outbox]
        assert len(ids) == len(set(ids))


def test_details_show_a_legs_table_and_the_time_left():
    s = spec()
    state = registered(s, Registration(timeout_seconds=90))
    logic.take_replies(s, state, [reply(1, "CREDIT")], T0, GATHER)
    shown = logic.details(state, T0 + timedelta(seconds=15))
    assert "| CREDIT | received |" in shown and "| STOCK | **missing** |" in shown
    assert "(1 min 15 s left)" in shown and "⚠" not in shown
    state.state = "TIMEOUT"
    assert "left)" not in logic.details(state, T0 + timedelta(seconds=95))


def test_a_failing_round_is_recorded_backs_off_and_clears_on_success():
    state = GatherState()
    error = "MQRC_Q_FULL (2053): queue 'R'"
    at = [T0 + timedelta(seconds=n) for n in range(6)]
    waits = [logic.attempt_failed(state, "PUT of the response", error, t) for t in at]
    assert waits == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert logic.failed_attempts(state) == 6 * logic.ATTEMPTS_PER_ROUND
    note = logic.error_note(state)
    assert note.startswith("failing since 2026-01-01 00:00:00 UTC after 12 attempts")
    assert note.endswith("PUT of the response: MQRC_Q_FULL (2053): queue 'R'")
    assert "MQRC_Q_FULL" in logic.status(spec(), state, b"C" * 24, GATHER, T0).last_error
    assert "⚠ failing since" in logic.details(state, T0)
    assert logic.attempt_succeeded(state) and not logic.attempt_succeeded(state)
    assert (logic.error_note(state), logic.failed_attempts(state), state.failing_since) == (
        "",
        0,
        None,
    )


def test_a_work_counts_its_own_failed_attempts_not_those_another_left():
    # Forwards failed two rounds, then a cancel cut them short: the response counted
    # their four attempts as its own, and its first refusal was its last (dead-lettered).
    state = GatherState()
    logic.attempt_failed(state, "forwarding of replies", "MQRC_Q_FULL (2053)", T0)
    logic.attempt_failed(state, "forwarding of replies", "MQRC_Q_FULL (2053)", T0)
    assert logic.failed_attempts(state, "forwarding of replies") == 4
    assert logic.failed_attempts(state, "PUT of the response") == 0
    later = T0 + timedelta(seconds=9)
    assert logic.attempt_failed(state, "PUT of the response", "MQRC_Q_FULL (2053)", later) == 2.0
    assert logic.failed_attempts(state, "PUT of the response") == logic.ATTEMPTS_PER_ROUND
    assert state.failing_since == later


def test_correl_id_text_can_be_kept_out_of_the_search_attributes():
    from mqgather.names import CORREL_ID, CORREL_ID_TEXT
    from workflows.models import start_options

    correl = b"ORDER-123".ljust(24, b"\x00")
    shown = start_options(AggregateSpec(name="a"), correl)
    assert shown["search_attributes"].get(CORREL_ID_TEXT) == "ORDER-123"
    hidden = start_options(AggregateSpec(name="b", correl_id_text=False), correl)
    assert hidden["search_attributes"].get(CORREL_ID_TEXT) is None
    assert hidden["search_attributes"].get(CORREL_ID) == correl.hex()
    assert "ORDER-123" not in hidden["static_summary"]


def _updates(updates) -> dict[str, object]:
    """name -> value set (None: unset)."""
    return {u.key.name: u.value for u in updates}


def test_search_updates_name_only_what_changed():
    shown = TypedSearchAttributes(
        [
            SearchAttributePair(names.AGGREGATE_NAME, "t"),
            SearchAttributePair(names.LEGS_RECEIVED, 1),
            SearchAttributePair(names.LEGS_MISSING, ["TAX"]),
            SearchAttributePair(names.GATHER_DEADLINE, T0),
        ]
    )
    values = [
        (names.AGGREGATE_NAME, "t"),  # as shown: left alone
        (names.LEGS_RECEIVED, 3),  # changed
        (names.GATHER_STATE, "COMPLETE"),  # not shown yet
        (names.LEGS_MISSING, []),  # emptied: set empty, so a search no longer finds it
        (names.LEGS_REREQUESTED, []),  # empty and not shown: nothing to say
        (names.GATHER_DEADLINE, None),  # closed: the deadline goes
        (names.CORREL_ID_TEXT, None),  # not set and not shown
    ]
    changed = _updates(logic.search_updates(shown, values))
    assert changed == {
        "LegsReceived": 3,
        "GatherState": "COMPLETE",
        "LegsMissing": [],
        "GatherDeadline": None,
    }
    assert logic.search_updates(shown, values[:1]) == []


def test_search_updates_of_older_gathers_name_every_value():
    shown = TypedSearchAttributes([SearchAttributePair(names.AGGREGATE_NAME, "t")])
    values = [(names.AGGREGATE_NAME, "t"), (names.GATHER_DEADLINE, None)]
    every = _updates(logic.search_updates(shown, values, changed_only=False))
    assert every == {"AggregateName": "t", "GatherDeadline": None}


def test_search_values_follow_the_state():
    state = registered()
    state.rerequested = ["TAX"]
    values = dict((k.name, v) for k, v in logic.search_values(spec(), state, b"\x01"))
    assert values["AggregateName"] == "t" and values["CorrelId"] == "01"
    assert values["LegsPending"] == 3 and values["LegsReceived"] == 0
    assert values["LegsMissing"] == ["CREDIT", "STOCK", "TAX"]
    assert values["GatherDeadline"] == state.deadline
    assert values["LegsRerequested"] == ["TAX"]
    state.state = "TIMEOUT"
    closed = dict((k.name, v) for k, v in logic.search_values(spec(), state, b"\x01"))
    assert closed["GatherDeadline"] is None


def test_a_leg_arrives_when_its_first_reply_was_got():
    state = registered()
    later = reply(2, "CREDIT").model_copy(update={"received_at": T0 + timedelta(seconds=5)})
    first = reply(1, "CREDIT").model_copy(update={"received_at": T0 + timedelta(seconds=2)})
    logic.take_replies(spec(duplicates="all"), state, [later, first], T0, GATHER)
    shown = {leg.name: leg for leg in logic.leg_status(state)}
    assert shown["CREDIT"].replies == 2
    assert shown["CREDIT"].received_at == T0 + timedelta(seconds=2)
    assert shown["STOCK"].received_at is None


def _twin(n: int, leg: str, body: bytes) -> Reply:
    """Reply ``n``'s MsgId on another message (a MsgId the application reused)."""
    one = reply(n, leg)
    message = one.message.model_copy(update={"body": body})
    return one.model_copy(update={"message": message, "fingerprint": fingerprint(message)})


def _printed(r: Reply) -> Reply:
    return r.model_copy(update={"fingerprint": fingerprint(r.message)})


def test_replies_that_reuse_a_msg_id_are_taken_and_a_redelivery_of_one_is_not():
    s, state = spec(), registered()
    credit = _printed(reply(1, "CREDIT"))
    stock, tax = _twin(1, "STOCK", b'{"s":1}'), _twin(1, "TAX", b'{"t":1}')
    logic.take_replies(s, state, [credit, stock], T0, GATHER, by_content=True)
    logic.take_replies(s, state, [stock, tax], T0, GATHER, by_content=True)
    assert state.redeliveries == 1 and logic.decide(s, state, T0) == "COMPLETE"
    assert [r.message.body for r in state.received["STOCK"]] == [b'{"s":1}']
    keys = [r.message.msg_id.hex() + r.fingerprint for r in (credit, stock, tax)]
    assert state.seen_msg_ids == keys
    assert logic.taken(state, [*keys, reply(2).message.msg_id.hex() + "0" * 16]) == keys
    # A bridge of an earlier release asks by MsgId: one was taken.
    assert logic.consumed(state, [keys[0][:48], "00" * 24]) == [keys[0][:48]]


def test_gathers_recorded_before_tell_redeliveries_by_msg_id_alone():
    s, state = spec(), registered()
    credit, stock = _printed(reply(1, "CREDIT")), _twin(1, "STOCK", b'{"s":1}')
    logic.take_replies(s, state, [credit, stock], T0, GATHER)
    assert state.redeliveries == 1 and logic.received_names(state) == ["CREDIT"]
    assert state.seen_msg_ids == [credit.message.msg_id.hex()]


def test_a_reply_without_a_fingerprint_is_one_taken_with_its_msg_id():
    # From a bridge of an earlier release, racing a new one on the same queue: either
    # side of a redelivery may lack the fingerprint, and it is still a redelivery.
    s = spec()
    for first, again in ((_printed(reply(1, "CREDIT")), reply(1, "CREDIT")),
                         (reply(1, "CREDIT"), _printed(reply(1, "CREDIT")))):  # fmt: skip
        state = registered()
        logic.take_replies(s, state, [first], T0, GATHER, by_content=True)
        logic.take_replies(s, state, [again], T0, GATHER, by_content=True)
        assert state.redeliveries == 1 and bodies(state, "CREDIT") == [1]


def test_the_terms_a_request_asks_for_reach_the_response_and_a_later_registration_keeps_them():
    asks = MQRO_PASS_MSG_ID | MQRO_PASS_DISCARD_AND_EXPIRY | MQRO_DISCARD_MSG
    request = MQMessage(msg_id=b"Q" * 24, report=asks, expiry=600)
    terms = ReplyTerms.asked_by(request, T0)
    assert terms == ReplyTerms(msg_id=b"Q" * 24, expires_at=T0 + timedelta(seconds=60),
                               report=MQRO_DISCARD_MSG)  # fmt: skip
    # Each option alone asks for its part only; none, or MQRO_DISCARD_MSG alone, for none.
    only_id = ReplyTerms.asked_by(MQMessage(msg_id=b"Q" * 24, report=MQRO_PASS_MSG_ID), T0)
    assert only_id == ReplyTerms(msg_id=b"Q" * 24)
    no_expiry = MQMessage(report=MQRO_PASS_DISCARD_AND_EXPIRY | MQRO_DISCARD_MSG)
    assert ReplyTerms.asked_by(no_expiry, T0) == ReplyTerms(report=MQRO_DISCARD_MSG)
    for plain in (MQMessage(expiry=600), MQMessage(report=MQRO_DISCARD_MSG, expiry=600)):
        assert ReplyTerms.asked_by(plain, T0) is None
    s, state = spec(timer="restart"), GatherState()
    logic.register(s, state, Registration(reply_terms=terms), T0)
    logic.register(s, state, Registration(), T0)  # IA72's restart: no request this time
    assert logic.response_input(s, state, b"C", GATHER, "COMPLETE").reply_terms == terms


def test_a_keyword_list_past_the_servers_limit_keeps_what_fits_and_counts_the_rest():
    # Past 2 KB of JSON the server fails the upsert's workflow task and ends the gather.
    few = [f"R{i}" for i in range(1, 251)]
    assert logic.within_search_limit(few) == few  # as gathers have always upserted it
    many = [f"R{i}" for i in range(1, 2001)]
    kept = logic.within_search_limit(many)
    assert kept[:-1] == many[: len(kept) - 1] and kept[-1] == f"+{2001 - len(kept)} more"
    assert len(json.dumps(kept, separators=(",", ":"))) <= SEARCH_VALUE_BYTES
    long = [f"{'L' * 60}{i:04d}" for i in range(100)]
    assert len(json.dumps(logic.within_search_limit(long), separators=(",", ":"))) <= 2048
    state = GatherState(registered=True, expected=[LegSpec(name=n) for n in many])
    values = dict(logic.search_values(spec(legs=()), state, b"C"))
    assert values[names.LEGS_MISSING] == kept


def test_a_state_is_carried_into_a_new_run_only_while_a_payload_takes_it():
    small = GatherState(registered=True, expected=[LegSpec(name="A")])
    assert logic.carriable(small)
    big = GatherState(registered=True, received={"A": [reply(n) for n in range(5)]})
    assert logic.carriable(big, limit=len(big.model_dump_json()))
    assert not logic.carriable(big, limit=len(big.model_dump_json()) - 1)


# ------------------------------------------------------------------- the hold queue


def sized(n: int, leg: str, size: int) -> Reply:
    """Reply ``n`` to ``leg`` with a body of ``size`` bytes, its fingerprint taken."""
    message = MQMessage(msg_id=n.to_bytes(24, "big"), correl_id=b"C", body=b"x" * size)
    return Reply(message=message, leg=leg, source_queue="GATHER.IN", received_at=T0,
                 size=size, fingerprint=fingerprint(message))  # fmt: skip


def ref(r: Reply) -> HeldBody:
    return held_reference("GATHER.HOLD", r.message)


def test_only_bodies_worth_their_reference_move_to_the_hold_queue_in_leg_order():
    state = registered(spec(duplicates="all"))
    for r in (sized(1, "CREDIT", 5000), sized(2, "STOCK", 10), sized(3, "TAX", 2000),
              sized(4, "CREDIT", 3000)):  # fmt: skip
        logic.accept(spec(duplicates="all"), state, r)
    state.received["TAX"][0] = as_held(state.received["TAX"][0], ref(state.received["TAX"][0]))
    ids = [int.from_bytes(r.message.msg_id, "big") for r in logic.to_move(state, smallest=1024)]
    assert ids == [1, 4]  # STOCK's is too small, TAX's is held already
    assert len(logic.to_move(state, most=1, smallest=1024)) == 1


def test_moved_replies_are_kept_by_reference_in_their_leg_or_the_outbox():
    state = registered()
    credit, stock = sized(1, "CREDIT", 5000), sized(2, "STOCK", 5000)
    logic.accept(spec(), state, credit)
    logic.accept(spec(), state, stock)
    # A later duplicate took CREDIT's place while the move ran: CREDIT is in the outbox.
    state.outbox.append(Routed(kind=Destination.DUPLICATE, reply=credit, reason="dup"))
    logic.moved(state, [(credit, ref(credit)), (stock, ref(stock))])
    kept = state.received["STOCK"][0]
    assert kept.held == ref(stock) and kept.message.body == b"" and kept.size == 5000
    assert kept.fingerprint == stock.fingerprint and kept.message.msg_id == stock.message.msg_id
    assert state.outbox[0].reply.held == ref(credit) and state.outbox[0].reply.message.body == b""
    # CREDIT's leg held the same object, so it is kept by reference there too.
    assert state.received["CREDIT"][0].held == ref(credit)


def test_a_held_reply_that_comes_again_with_its_body_is_kept_with_it_wherever_it_is():
    s = spec()
    state = registered(s)
    credit = sized(1, "CREDIT", 50)
    logic.take_replies(s, state, [as_held(credit, ref(credit))], T0, GATHER, by_content=True)
    logic.take_replies(s, state, [credit], T0, GATHER, by_content=True)
    assert state.redeliveries == 1
    assert state.received["CREDIT"][0].held is None
    assert state.received["CREDIT"][0].message.body == credit.message.body
    # Another message with its MsgId, or gathers told apart by MsgId alone, change nothing.
    other = sized(2, "STOCK", 50)
    again = registered(s)
    logic.take_replies(s, again, [as_held(other, ref(other))], T0, GATHER, by_content=False)
    logic.take_replies(s, again, [other], T0, GATHER, by_content=False)
    assert again.received["STOCK"][0].held == ref(other)
