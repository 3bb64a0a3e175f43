"""The collector's batching rules as pure functions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from bridge.mq.hold import without_body
from bridge.mq.models import MQMessage, fingerprint
from mqgather.collector_config import CollectorRule
from mqgather.constants import BATCH_CARRIED_BYTES
from workflows import collect_logic as logic
from workflows.collect_models import CollectInput, CollectorState, Item, PutBatchResult
from workflows.logic import carriable
from workflows.models import held_reference

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def rule(**changes) -> CollectorRule:
    return CollectorRule(**{"destination": "D", "target_queue": "OUT", **changes})


def items(*sizes: int, start: int = 0) -> list[Item]:
    return [
        Item(message=MQMessage(msg_id=(start + i + 1).to_bytes(24, "big"), body=b"x" * n),
             received_at=T0)
        for i, n in enumerate(sizes)
    ]  # fmt: skip


def numbers(batch) -> list[int]:
    return [int.from_bytes(i.message.msg_id, "big") for i in batch.items]


def test_a_batch_closes_on_its_count_and_the_next_one_opens():
    state = CollectorState()
    logic.take(state, CollectInput(rule=rule(max_messages=3), items=items(1, 1, 1, 1)), T0, 100)
    assert [b.reason for b in state.ready] == ["count"]
    assert numbers(state.ready[0]) == [1, 2, 3]
    assert state.open is not None and numbers(state.open) == [4]


def test_a_batch_closes_before_a_message_that_would_pass_its_bytes():
    state = CollectorState()
    logic.take(state, CollectInput(rule=rule(max_bytes=10), items=items(4, 4, 4)), T0, 100)
    assert [(b.reason, numbers(b)) for b in state.ready] == [("bytes", [1, 2])]
    assert numbers(state.open) == [3]


def test_the_delay_counts_from_the_first_message_and_expire_closes():
    state = CollectorState()
    logic.take(state, CollectInput(rule=rule(max_delay_seconds=15), items=items(1)), T0, 100)
    later = T0 + timedelta(seconds=10)
    logic.take(state, CollectInput(rule=rule(max_delay_seconds=15), items=items(1, start=1)),
               later, 100)  # fmt: skip
    assert logic.next_timer(state, later) == 5.0
    logic.expire(state, later)
    assert not state.ready
    logic.expire(state, T0 + timedelta(seconds=15))
    assert [(b.reason, numbers(b)) for b in state.ready] == [("delay", [1, 2])]
    assert logic.next_timer(state, T0) is None


def test_a_new_rule_governs_the_next_batch_not_the_open_one():
    state = CollectorState()
    logic.take(state, CollectInput(rule=rule(max_messages=2), items=items(1)), T0, 100)
    logic.take(state, CollectInput(rule=rule(max_messages=5, target_queue="NEW"),
                                   items=items(1, 1, start=1)), T0, 100)  # fmt: skip
    assert state.ready[0].rule.target_queue == "OUT" and numbers(state.ready[0]) == [1, 2]
    assert state.open.rule.target_queue == "NEW" and numbers(state.open) == [3]


def test_a_redelivery_is_taken_once_and_memory_is_bounded():
    state = CollectorState()
    signal = CollectInput(rule=rule(max_messages=100), items=items(1, 1, 1))
    logic.take(state, signal, T0, 100)
    logic.take(state, signal, T0, 100)
    assert state.redeliveries == 3 and state.messages == 3 and len(state.open.items) == 3
    assert logic.consumed(state, [i.message.msg_id.hex() for i in signal.items[:2]]) == [
        i.message.msg_id.hex() for i in signal.items[:2]
    ]
    logic.take(state, CollectInput(rule=rule(max_messages=1000), items=items(*[1] * 150,
               start=10)), T0, 100)  # fmt: skip
    assert len(state.seen) == 100


def test_release_closes_the_open_batch_and_reports_nothing_to_release():
    state = CollectorState()
    assert not logic.release(state, "why").released
    logic.take(state, CollectInput(rule=rule(), items=items(1, 1)), T0, 100)
    done = logic.release(state, "operator")
    assert done.released and done.messages == 2
    logic.expire(state, T0)
    assert [b.reason for b in state.ready] == ["released"] and state.open is None


@given(st.lists(st.integers(1, 50), max_size=60), st.integers(1, 7), st.integers(50, 120))
def test_every_message_lands_in_exactly_one_batch_within_its_limits(sizes, count, limit):
    state = CollectorState()
    r = rule(max_messages=count, max_bytes=limit)
    for start in range(0, len(sizes), 5):
        chunk = items(*sizes[start : start + 5], start=start)
        logic.take(state, CollectInput(rule=r, items=chunk), T0, 1000)
    logic.release(state, "end")
    logic.expire(state, T0)
    got = [n for b in state.ready for n in numbers(b)]
    assert got == list(range(1, len(sizes) + 1))
    for b in state.ready:
        assert len(b.items) <= count
        assert sum(len(i.message.body) for i in b.items) <= limit


def test_the_delay_counts_from_the_bridges_receipt_never_from_a_clock_ahead():
    late = T0 + timedelta(seconds=3)  # the signal reached the workflow 3 s after receipt
    state = CollectorState()
    logic.take(state, CollectInput(rule=rule(max_delay_seconds=15), items=items(1)), late, 100)
    assert state.open.closes_at == T0 + timedelta(seconds=15)
    assert logic.next_timer(state, late) == 12.0
    early = T0 - timedelta(seconds=3)  # the bridge's clock runs ahead of the workflow's
    ahead = CollectorState()
    logic.take(ahead, CollectInput(rule=rule(max_delay_seconds=15), items=items(1)), early, 100)
    assert ahead.open.closes_at == early + timedelta(seconds=15)
    before = CollectorState()  # a collector that started before the rule: from the task
    logic.take(before, CollectInput(rule=rule(max_delay_seconds=15), items=items(1)), late, 100,
               from_arrival=False)  # fmt: skip
    assert before.open.closes_at == late + timedelta(seconds=15)


def test_failed_put_rounds_back_off_and_a_put_clears_the_record():
    state = CollectorState()
    logic.take(state, CollectInput(rule=rule(max_messages=1), items=items(1)), T0, 100)
    later = T0 + timedelta(seconds=2)
    assert logic.put_failed(state, "MQRC_Q_FULL (2053)", T0) == 2.0
    assert logic.put_failed(state, "MQRC_Q_FULL (2053)", later) == 4.0
    assert state.last_error == "PUT of batch 1 to OUT: MQRC_Q_FULL (2053)"
    assert state.failing_since == T0 and state.failed_rounds == 2
    logic.put_done(state, state.ready[0].facts())
    assert (state.last_error, state.failing_since, state.failed_rounds) == ("", None, 0)
    assert state.batches == 1 and not state.ready


def test_a_batch_put_to_the_dead_letter_queue_is_counted_and_named_in_the_status():
    state = CollectorState()
    logic.take(state, CollectInput(rule=rule(max_messages=1), items=items(1, 1)), T0, 100)
    refused = PutBatchResult(queue="DLQ", messages_put=1, size_bytes=1,
                             refused="OUT: MQRC_PUT_INHIBITED (2051)")  # fmt: skip
    logic.put_done(state, state.ready[0].facts(), refused)
    logic.put_done(state, state.ready[0].facts(), refused.model_copy(update={"refused": ""}))
    shown = logic.status("c", "D", state)
    assert (shown.batches, shown.dead_lettered) == (2, 1)
    assert shown.last_dead_letter == "batch 1 to DLQ: OUT: MQRC_PUT_INHIBITED (2051)"


def test_messages_that_reuse_a_msg_id_are_batched_and_a_redelivery_is_not():
    shared = (1).to_bytes(24, "big")
    twins = [MQMessage(msg_id=shared, body=body) for body in (b"a", b"b")]
    printed = [Item(message=m, received_at=T0, fingerprint=fingerprint(m)) for m in twins]
    state = CollectorState()
    logic.take(state, CollectInput(rule=rule(), items=printed), T0, 100, by_content=True)
    logic.take(state, CollectInput(rule=rule(), items=printed[1:]), T0, 100, by_content=True)
    assert state.messages == 2 and state.redeliveries == 1
    assert [i.message.body for i in state.open.items] == [b"a", b"b"]
    keys = [shared.hex() + i.fingerprint for i in printed]
    other = (2).to_bytes(24, "big").hex() + printed[0].fingerprint
    assert logic.taken(state, [*keys, other]) == keys
    # Asked by MsgId (a bridge of an earlier release): none was taken without a fingerprint.
    assert logic.consumed(state, [shared.hex()]) == []
    # Collectors recorded before tell by MsgId alone, and a MsgId taken so stands for all.
    old = CollectorState()
    logic.take(old, CollectInput(rule=rule(), items=printed), T0, 100)
    assert old.messages == 1 and old.redeliveries == 1
    assert logic.taken(old, keys) == keys and logic.consumed(old, [shared.hex()]) == [shared.hex()]


def test_a_batch_closes_before_its_messages_outgrow_what_its_put_carries():
    # 300 bodies of 5 KB are within max_bytes, and their JSON (7 KB each, base64) is past
    # the 2 MB one payload takes: the batch's PUT failed each time, the destination stood.
    many = CollectInput(
        rule=rule(max_messages=1000, max_bytes=10_000_000), items=items(*[5000] * 300)
    )
    bound, unbound = CollectorState(), CollectorState()
    logic.take(bound, many, T0, 1000, carry_bound=True)
    logic.take(unbound, many, T0, 1000)  # as collectors recorded before the patch
    closed = [b for b in bound.ready if b.reason == "bytes"]
    assert closed and unbound.ready == []
    for batch in closed:
        carried = sum(len(i.model_dump_json()) for i in batch.items)
        assert carried <= BATCH_CARRIED_BYTES
    kept = [*(n for b in bound.ready for n in numbers(b)), *numbers(bound.open)]
    assert kept == list(range(1, 301))  # every message once, in order


def test_a_held_message_that_comes_again_with_its_body_is_kept_with_it_in_its_batch():
    # The bridge held it for its destination's bytes, and its put on the hold queue
    # backed out with its get: the redelivery comes inline, with the body.
    message = MQMessage(msg_id=(1).to_bytes(24, "big"), body=b"body")
    whole = Item(message=message, received_at=T0, size=4, fingerprint=fingerprint(message))
    held = whole.model_copy(update={"message": without_body(message),
                                    "held": held_reference("COLLECT.HOLD", message)})  # fmt: skip
    for closed in (False, True):
        state = CollectorState()
        first = rule(max_messages=1 if closed else 10)
        logic.take(state, CollectInput(rule=first, items=[held]), T0, 100, by_content=True)
        logic.take(state, CollectInput(rule=first, items=[whole]), T0, 100, by_content=True)
        batch = state.ready[0] if closed else state.open
        assert batch is not None and state.redeliveries == 1
        assert [(i.held, i.message.body) for i in batch.items] == [(None, b"body")]


def test_a_state_too_large_to_carry_puts_its_batches_first_the_open_one_closed_if_none_wait():
    # Bodies of 5 KB signalled while the collector settled: the batches they closed, and
    # the open one, were the next run's input (3.3 MB of JSON), and its task failed each
    # time.
    many = CollectInput(
        rule=rule(max_messages=1000, max_bytes=10_000_000), items=items(*[5000] * 600)
    )
    state = CollectorState()
    logic.take(state, many, T0, 1000, carry_bound=True)
    assert not carriable(state) and state.ready
    waiting = list(state.ready)
    assert logic.make_room(state, T0) and state.ready == waiting  # they go first
    state.ready.clear()  # as their PUTs do
    # None waiting: the open batch closes, to go too.
    opened = numbers(state.open)
    assert not carriable(state, limit=100_000) and logic.make_room(state, T0)
    assert [(b.reason, numbers(b)) for b in state.ready] == [("bytes", opened)]
    state.ready.clear()
    assert carriable(state)
    # Neither: nothing in the run makes the state smaller, and it is carried as it is.
    assert not logic.make_room(state, T0)
