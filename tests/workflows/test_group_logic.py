"""The rules of a gather over one MQ logical group, as pure functions."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.identify import IdentificationError, identify
from bridge.mq.models import NONE_ID, MQMessage, MsgFlags
from mqgather.config import AggregateSpec
from mqgather.routing import Destination
from workflows import logic
from workflows.models import GatherState, Reply

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GROUP = b"G".ljust(24, b"\0")
SPEC = AggregateSpec(name="grp", mode="static", leg_identification="group", timeout_seconds=30)


def reply(seq: int, *, last: bool = False, n: int | None = None) -> Reply:
    flags = MsgFlags.LAST_MSG_IN_GROUP if last else MsgFlags.MSG_IN_GROUP
    message = MQMessage(
        msg_id=(n if n is not None else seq).to_bytes(24, "big"),
        correl_id=b"REQ-1",
        group_id=GROUP,
        msg_seq_number=seq,
        msg_flags=int(flags),
        body=f"part {seq}".encode(),
    )
    found = identify(message, [SPEC])
    return Reply(
        message=message, leg_index=found.leg_index, source_queue="GATHER.IN", received_at=T0
    )


def started() -> GatherState:
    state = GatherState()
    logic.start_static(SPEC, state, T0)
    return state


def test_the_group_id_is_the_gather_and_the_sequence_number_the_leg():
    found = identify(reply(3).message, [SPEC])
    assert (found.correl_id, found.leg_index) == (GROUP, 2)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (MQMessage(correl_id=b"X", body=b"{}"), "in none"),
        (MQMessage(msg_flags=int(MsgFlags.MSG_IN_GROUP), body=b"{}"), "in none"),
        (
            MQMessage(group_id=GROUP, msg_flags=int(MsgFlags.MSG_IN_GROUP), msg_seq_number=1001),
            "max_group_size",
        ),
    ],
)
def test_a_reply_outside_any_group_or_past_the_limit_is_refused(message, reason):
    with pytest.raises(IdentificationError) as info:
        identify(message, [SPEC])
    assert reason in str(info.value) and info.value.aggregate == SPEC
    assert message.group_id in (NONE_ID, GROUP)


def test_a_group_spec_needs_static_mode_and_no_legs():
    with pytest.raises(ValueError, match="group"):
        AggregateSpec(name="g", leg_identification="group")


@given(st.permutations(range(1, 6)))
def test_complete_only_with_every_number_up_to_the_last_in_any_order(order):
    state = started()
    for i, seq in enumerate(order):
        logic.take_replies(SPEC, state, [reply(seq, last=seq == 5)], T0, "g")
        done = logic.decide(SPEC, state, T0) == "COMPLETE"
        assert done == (i == 4)
    assert [leg.sequence for leg in state.expected] == [1, 2, 3, 4, 5]
    assert state.request_msg_id == b"REQ-1".ljust(24, b"\0")


def test_a_timeout_names_the_missing_numbers_and_an_unknown_end():
    state = started()
    logic.take_replies(SPEC, state, [reply(1), reply(3), reply(4, last=True)], T0, "g")
    assert logic.missing(state) == ["Reply2"]
    open_end = started()
    logic.take_replies(SPEC, open_end, [reply(1), reply(3)], T0, "g")
    assert logic.missing(open_end) == ["Reply2", logic.GROUP_END]
    assert logic.decide(SPEC, open_end, T0) is None


def test_a_duplicate_sequence_number_is_a_duplicate_leg():
    state = started()
    logic.take_replies(SPEC, state, [reply(1), reply(1, n=99), reply(2, last=True)], T0, "g")
    assert state.duplicates == 1
    assert [item.kind for item in state.outbox] == [Destination.DUPLICATE]
    assert logic.decide(SPEC, state, T0) == "COMPLETE"


def test_replies_past_the_end_or_a_late_end_marker_go_to_the_unknown_queue():
    state = started()
    logic.take_replies(SPEC, state, [reply(3), reply(2, last=True)], T0, "g")
    logic.take_replies(SPEC, state, [reply(1), reply(4, n=40), reply(5, last=True)], T0, "g")
    reasons = [item.reason for item in state.outbox]
    assert [item.kind for item in state.outbox] == [Destination.UNKNOWN] * 1
    assert "Reply3 came already" in reasons[0]
    # The end at 2 was refused, so 4 and then 5 (last) define the group: 1..5, 2 and 4 in.
    assert state.group_size == 5
    assert logic.missing(state) == ["Reply2"]
