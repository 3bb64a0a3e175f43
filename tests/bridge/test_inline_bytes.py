"""How many bytes of a gather's replies one bridge signals inline before it holds the
rest on the hold queue."""

from __future__ import annotations

from bridge.inbound import InlineBytes
from bridge.mq.models import MQMessage
from mqgather.config import AggregateSpec

SPEC = AggregateSpec(name="t", inline_reply_bytes=100, gather_inline_bytes=250)


def test_a_gather_takes_replies_inline_up_to_its_bytes_and_the_rest_are_held():
    inline = InlineBytes()
    held = [inline.held(SPEC, "g", MQMessage(body=b"x" * 100)) for _ in range(4)]
    assert held == [False, False, True, True]
    # A smaller one still fits; another gather counts from nothing.
    assert not inline.held(SPEC, "g", MQMessage(body=b"x" * 50))
    assert not inline.held(SPEC, "h", MQMessage(body=b"x" * 100))


def test_a_reply_held_for_its_size_or_got_before_is_judged_by_its_size_and_not_counted():
    inline = InlineBytes()
    assert inline.held(SPEC, "g", MQMessage(body=b"x" * 101))  # for its size
    assert inline.held(SPEC, "g", MQMessage(body=b"x" * 101, backout_count=1))
    redelivered = MQMessage(body=b"x" * 100, backout_count=1)
    assert [inline.held(SPEC, "g", redelivered) for _ in range(3)] == [False] * 3
    assert not inline.held(SPEC, "g", MQMessage(body=b"x" * 100))  # nothing counted


def test_the_least_recent_gather_is_forgotten_first():
    inline = InlineBytes(tracked=2)
    for gather in ("a", "a", "b", "b"):
        inline.held(SPEC, gather, MQMessage(body=b"x" * 100))
    inline.held(SPEC, "a", MQMessage(body=b"x" * 10))  # "a" is the most recent now
    inline.held(SPEC, "c", MQMessage(body=b"x" * 10))  # "b" is forgotten
    assert inline.held(SPEC, "a", MQMessage(body=b"x" * 100))
    assert not inline.held(SPEC, "b", MQMessage(body=b"x" * 100))
