"""Completion rules, optional legs, per-leg deadlines and re-requests as plain function
calls on a gather's state: no server, no worker, no clock."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.mq.models import MQMessage
from mqgather.config import LegSpec
from tests.workflows.test_logic import GATHER, T0, registered, reply, spec
from workflows import legs, logic
from workflows.models import LegRequest, Registration

NAMES = ["CREDIT", "STOCK", "STOCK_ALT"]
THREE = tuple(LegSpec(name=name) for name in NAMES)


def at(seconds: float):
    return T0 + timedelta(seconds=seconds)


def kept(*names: str) -> dict[str, LegRequest]:
    return {n: LegRequest(queue=f"BACKEND.{n}", message=MQMessage(body=b"{}")) for n in names}


def run(rule: str, order: list[str], **changes):
    """Replies in ``order``; the outcome after each one."""
    s = spec(legs=THREE, complete_when=rule, **changes)
    state = registered(s)
    outcomes = []
    for n, name in enumerate(order):
        logic.take_replies(s, state, [reply(n, name)], T0, GATHER)
        outcomes.append(logic.decide(s, state, T0))
    return s, state, outcomes


@given(st.permutations(NAMES))
def test_all_any_quorum_and_an_expression_in_every_order(order):
    assert run("all", order)[2] == [None, None, "COMPLETE"]
    assert run("any", order)[2][0] == "COMPLETE"
    assert run("quorum:2", order)[2][:2] == [None, "COMPLETE"]
    *_, outcomes = run("CREDIT and (STOCK or STOCK_ALT)", order)
    first = next(i for i, o in enumerate(outcomes) if o == "COMPLETE")
    have = set(order[: first + 1])
    assert "CREDIT" in have and have & {"STOCK", "STOCK_ALT"}
    assert not {"CREDIT"} <= set(order[:first]) or not set(order[:first]) & {"STOCK", "STOCK_ALT"}


def test_the_response_names_the_legs_used_and_missing():
    s, state, _ = run("quorum:2", ["STOCK_ALT", "CREDIT"])
    inp = logic.response_input(s, state, b"C" * 24, GATHER, "COMPLETE")
    assert [leg.leg.name for leg in inp.legs] == ["CREDIT", "STOCK_ALT"]
    assert inp.missing == ["STOCK"]


def test_an_optional_leg_is_awaited_until_its_own_deadline_only():
    optional = LegSpec(name="STOCK_ALT", required=False, timeout_seconds=2)
    s = spec(legs=(*THREE[:2], optional), timeout_seconds=30)
    state = registered(s)
    logic.take_replies(s, state, [reply(1, "CREDIT"), reply(2, "STOCK")], T0, GATHER)
    assert logic.decide(s, state, at(1)) is None  # still awaited
    assert logic.next_timer(state, at(1)) == 1  # its deadline, not the gather's
    assert logic.decide_why(s, state, at(2)) == ("COMPLETE", legs.BY_RULE)
    assert logic.missing(state) == ["STOCK_ALT"]
    status = logic.leg_status(state, at(2))
    assert [leg.lost for leg in status] == [False, False, True]


def test_an_optional_leg_without_a_deadline_completes_at_the_gathers():
    s = spec(legs=(*THREE[:2], LegSpec(name="STOCK_ALT", required=False)))
    state = registered(s)
    logic.take_replies(s, state, [reply(1, "CREDIT"), reply(2, "STOCK")], T0, GATHER)
    assert logic.decide(s, state, at(29)) is None
    assert logic.decide_why(s, state, at(30)) == ("COMPLETE", legs.BY_RULE)
    logic.take_replies(s, state, [reply(3, "STOCK_ALT")], T0, GATHER)
    assert logic.decide(s, state, at(1)) == "COMPLETE"


def test_a_needed_leg_past_its_deadline_ends_the_gather_there():
    s = spec(legs=(LegSpec(name="CREDIT", timeout_seconds=4), *THREE[1:]))
    state = registered(s)
    assert logic.next_timer(state, at(1)) == 3
    assert logic.decide(s, state, at(3.9)) is None
    assert logic.decide_why(s, state, at(4)) == ("TIMEOUT", legs.BY_LOST_LEGS)


def test_a_lost_leg_the_rule_can_do_without_leaves_the_gather_open():
    s = spec(legs=(LegSpec(name="CREDIT", timeout_seconds=4), *THREE[1:]),
             complete_when="quorum:2")  # fmt: skip
    state = registered(s)
    logic.take_replies(s, state, [reply(1, "STOCK")], T0, GATHER)
    assert logic.decide(s, state, at(5)) is None
    logic.take_replies(s, state, [reply(2, "STOCK_ALT")], T0, GATHER)
    assert logic.decide(s, state, at(5)) == "COMPLETE"


def test_a_rule_that_can_no_longer_hold_gives_up_at_once():
    s = spec(legs=(LegSpec(name="CREDIT", timeout_seconds=1),
                   LegSpec(name="STOCK", timeout_seconds=2), THREE[2]),
             complete_when="CREDIT or STOCK")  # fmt: skip
    state = registered(s)
    assert logic.decide(s, state, at(1.5)) is None  # STOCK may still come
    assert logic.decide_why(s, state, at(2)) == ("TIMEOUT", legs.BY_LOST_LEGS)


def retrying(**leg):
    s = spec(legs=(LegSpec(name="CREDIT", retries=2, retry_after_seconds=2, **leg), *THREE[1:]))
    return s, registered(s, Registration(requests=kept("CREDIT")))


def test_re_requests_follow_the_backoff_each_recorded_once():
    s, state = retrying()
    assert logic.next_timer(state, at(0)) == 2
    assert legs.plan_rerequests(state, at(1.9)) == []
    first = legs.plan_rerequests(state, at(2))
    assert [(r.leg, r.attempt) for r in first] == [("CREDIT", 2)]
    assert legs.plan_rerequests(state, at(2)) == []  # recorded: not again
    assert logic.next_timer(state, at(2)) == 4  # backoff 2: 2 s, then 4 s
    second = legs.plan_rerequests(state, at(6))
    assert [r.attempt for r in second] == [3] and len(state.to_request) == 2
    assert legs.plan_rerequests(state, at(100)) == []  # no third
    # After the last one, one more wait (8 s), then the leg is lost and "all" gives up.
    assert logic.decide(s, state, at(13.9)) is None
    assert logic.decide_why(s, state, at(14)) == ("TIMEOUT", legs.BY_LOST_LEGS)
    assert logic.leg_status(state, at(14))[0].attempts == 3


def test_a_reply_stops_the_re_requests():
    s, state = retrying()
    logic.take_replies(s, state, [reply(1, "CREDIT")], T0, GATHER)
    assert legs.plan_rerequests(state, at(50)) == []
    assert logic.next_timer(state, at(1)) == 29  # the gather's deadline


def test_a_leg_deadline_bounds_its_re_requests():
    s, state = retrying(timeout_seconds=5)
    assert len(legs.plan_rerequests(state, at(2))) == 1
    assert legs.retry_due(state, s.legs[0]) is None  # due at 6, past the deadline at 5
    assert logic.decide_why(s, state, at(5)) == ("TIMEOUT", legs.BY_LOST_LEGS)


def test_without_the_request_kept_there_is_nothing_to_re_request():
    s = spec(legs=(LegSpec(name="CREDIT", retries=2), *THREE[1:]))
    state = registered(s)
    assert legs.plan_rerequests(state, at(99)) == []
    assert "CREDIT's request was not kept" in legs.refuse_rerequest(state, "CREDIT", at(1))


def test_an_operators_re_request_is_checked_and_counted():
    s, state = retrying()
    assert "not a leg" in logic.rerequest(state, "NOPE", "ops", at(1)).message
    done = logic.rerequest(state, "CREDIT", "ops", at(1))
    assert done.accepted and "request 2" in done.message
    assert [(r.leg, r.attempt, r.reason) for r in state.to_request] == [("CREDIT", 2, "ops")]
    assert legs.retry_due(state, s.legs[0]) == at(1 + 4)  # the next wait counts from it
    logic.take_replies(s, state, [reply(1, "CREDIT")], T0, GATHER)
    assert "has its reply" in logic.rerequest(state, "CREDIT", "ops", at(2)).message
    state.state = "COMPLETE"
    assert not logic.rerequest(state, "STOCK", "ops", at(2)).accepted


def test_a_report_of_an_undelivered_request_asks_again_at_once_once_per_report():
    s, state = retrying()
    made = legs.rerequest_reported(state, 0, "MQRC_Q_FULL (2053)", "aa", at(0.5))
    assert made is not None and (made.leg, made.attempt) == ("CREDIT", 2)
    assert "MQRC_Q_FULL (2053)" in made.reason
    assert legs.retry_due(state, s.legs[0]) == at(0.5 + 4)  # the next wait counts from it
    # The same report got again, a leg out of range: nothing more.
    assert legs.rerequest_reported(state, 0, "again", "aa", at(1)) is None
    assert legs.rerequest_reported(state, 7, "no such leg", "bb", at(1)) is None
    # Another report: the last re-request left.
    assert legs.rerequest_reported(state, 0, "MQRC_Q_FULL (2053)", "cc", at(1))
    assert [r.attempt for r in state.to_request] == [2, 3]
    # None left: the leg keeps its clock (the report may be about an earlier request).
    assert legs.rerequest_reported(state, 0, "late report", "dd", at(2)) is None
    assert state.reported == ["aa", "cc"]
    assert logic.decide(s, state, at(2)) is None


def test_a_report_asks_nothing_of_a_leg_that_replied_or_whose_request_was_not_kept():
    s, state = retrying()
    logic.take_replies(s, state, [reply(1, "CREDIT")], T0, GATHER)
    assert legs.rerequest_reported(state, 0, "MQRC_Q_FULL (2053)", "aa", at(1)) is None
    # STOCK has no retries and no request kept.
    assert legs.rerequest_reported(state, 1, "MQRC_Q_FULL (2053)", "bb", at(1)) is None
    assert state.to_request == [] and state.reported == []


def test_a_legs_reply_is_awaited_until_its_own_deadline_or_the_gathers():
    _, state = retrying()  # the gather's deadline: 30 s
    assert legs.awaited_until(state, "CREDIT") == at(30)
    _, state = retrying(timeout_seconds=5)
    assert legs.awaited_until(state, "CREDIT") == at(5)
    assert legs.awaited_until(state, "STOCK") == at(30)
    state.deadline = None  # a gather that waits for ever
    assert legs.awaited_until(state, "STOCK") is None


def test_re_requests_not_yet_put_when_the_gather_closes_were_never_made():
    _, state = retrying()
    legs.plan_rerequests(state, at(2))
    legs.drop_unsent(state)
    assert state.to_request == [] and state.rerequested == state.rerequest_reasons == {}


@pytest.mark.parametrize("rule", ["any", "quorum:1", "CREDIT or STOCK"])
def test_a_required_leg_is_needed_whatever_the_rule(rule):
    s = spec(legs=(LegSpec(name="CREDIT", required=True), *THREE[1:]), complete_when=rule)
    state = registered(s)
    logic.take_replies(s, state, [reply(1, "STOCK")], T0, GATHER)
    assert logic.decide(s, state, T0) is None
    logic.take_replies(s, state, [reply(2, "CREDIT")], T0, GATHER)
    assert logic.decide(s, state, T0) == "COMPLETE"


def test_details_show_each_legs_requests_and_deadline():
    _, state = retrying(timeout_seconds=20)
    legs.plan_rerequests(state, at(2))
    shown = logic.details(state, at(3))
    assert (
        "| CREDIT | **missing** | 2 requests (last: no reply), next 00:00:06, "
        "deadline 00:00:20 |" in shown
    )
    (credit, *_) = logic.leg_status(state, at(3))
    assert credit.line() == "CREDIT: missing, 2 requests (last: no reply), due 00:00:20"
