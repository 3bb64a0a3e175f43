"""Splitting one gather's replies into signals Temporal accepts."""

from __future__ import annotations

from datetime import UTC, datetime

from bridge.inbound import chunk_replies
from bridge.mq.models import MQMessage
from workflows.models import Reply


def reply(size: int) -> Reply:
    return Reply(message=MQMessage(body=b"x" * size), received_at=datetime.now(UTC))


def test_small_replies_share_one_signal():
    replies = [reply(100) for _ in range(5)]
    assert chunk_replies(replies, limit=1000) == [replies]


def test_large_replies_are_split_in_order_under_the_limit():
    replies = [reply(400) for _ in range(5)]
    chunks = chunk_replies(replies, limit=1000)
    assert [len(c) for c in chunks] == [2, 2, 1]
    assert [r for c in chunks for r in c] == replies


def test_a_reply_over_the_limit_travels_alone():
    big, small = reply(5000), reply(10)
    assert chunk_replies([small, big, small], limit=1000) == [[small], [big], [small]]
