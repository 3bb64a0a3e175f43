"""How many bytes of a workflow's messages one bridge signals inline before it holds the
rest on the hold queue."""

from __future__ import annotations

from bridge.inline import InlineBytes
from bridge.mq.models import MQMessage

INLINE, BUDGET = 100, 250


def message(size: int, backout_count: int = 0) -> MQMessage:
    return MQMessage(body=b"x" * size, backout_count=backout_count)


def test_a_gather_takes_replies_inline_up_to_its_bytes_and_the_rest_are_held():
    inline = InlineBytes()
    held = [inline.held("g", message(100), INLINE, BUDGET) for _ in range(4)]
    assert held == [False, False, True, True]
    # A smaller one still fits; another gather counts from nothing.
    assert not inline.held("g", message(50), INLINE, BUDGET)
    assert not inline.held("h", message(100), INLINE, BUDGET)


def test_a_reply_held_for_its_size_or_got_before_is_judged_by_its_size_and_not_counted():
    inline = InlineBytes()
    assert inline.held("g", message(101), INLINE, BUDGET)  # for its size
    assert inline.held("g", message(101, backout_count=1), INLINE, BUDGET)
    assert [inline.held("g", message(100, 1), INLINE, BUDGET) for _ in range(3)] == [False] * 3
    assert not inline.held("g", message(100), INLINE, BUDGET)  # nothing counted


def test_a_destinations_bytes_are_let_go_of_at_its_rate():
    now = [0.0]
    inline = InlineBytes(clock=lambda: now[0])
    assert [inline.held("d", message(100), INLINE, BUDGET, 100) for _ in range(3)] == [
        False, False, True,
    ]  # fmt: skip
    now[0] = 0.5  # 50 let go of: 150 + 100 = 250 fit
    assert not inline.held("d", message(100), INLINE, BUDGET, 100)
    assert inline.held("d", message(100), INLINE, BUDGET, 100)


def test_the_least_recent_workflow_is_forgotten_first():
    inline = InlineBytes(tracked=2)
    for key in ("a", "a", "b", "b"):
        inline.held(key, message(100), INLINE, BUDGET)
    inline.held("a", message(10), INLINE, BUDGET)  # "a" is the most recent now
    inline.held("c", message(10), INLINE, BUDGET)  # "b" is forgotten
    assert inline.held("a", message(100), INLINE, BUDGET)
    assert not inline.held("b", message(100), INLINE, BUDGET)
