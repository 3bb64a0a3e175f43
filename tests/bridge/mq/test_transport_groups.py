"""MQ logical groups, the same on every transport: put in logical and physical order, get
and browse in logical order, all-messages-available, and groups in units of work."""

from __future__ import annotations

import pytest

from bridge.mq.errors import GroupOrderError, NoMessageAvailable
from bridge.mq.models import NONE_ID, Match, MQMessage, MsgFlags, PutOptions, parse_id

IN = int(MsgFlags.MSG_IN_GROUP)
LAST = int(MsgFlags.LAST_MSG_IN_GROUP)
LOGICAL = PutOptions(logical_order=True)


def put_group(qm, q, bodies, *, priority=0):
    """Put ``bodies`` as one group in logical order; returns the messages as put."""
    put = []
    for i, body in enumerate(bodies):
        flags = LAST if i == len(bodies) - 1 else IN
        put.append(qm.put(q, MQMessage(body=body, msg_flags=flags, priority=priority), LOGICAL))
    return put


def put_physical(qm, q, group, seqs, last, *, priority=0):
    for seq in seqs:
        flags = IN | (LAST if seq == last else 0)
        qm.put(
            q,
            MQMessage(
                body=f"{group}-{seq}".encode(),
                group_id=parse_id(group),
                msg_seq_number=seq,
                msg_flags=flags,
                priority=priority,
            ),
        )


def drain_logical(qm, q, **options):
    got = []
    while True:
        try:
            m = qm.get(q, logical_order=True, **options)
        except NoMessageAvailable:
            return got
        got.append((m.body, m.group_status))


def test_logical_put_gives_one_group_id_and_successive_numbers(connect, make_queue):
    qm = connect()
    q = make_queue(qm)
    first = put_group(qm, q, [b"a", b"b", b"c"])
    second = put_group(qm, q, [b"x", b"y"])
    qm.commit()
    assert len({m.group_id for m in first}) == 1 and first[0].group_id != NONE_ID
    assert [m.msg_seq_number for m in first] == [1, 2, 3]
    assert second[0].group_id not in (NONE_ID, first[0].group_id)
    assert [m.msg_seq_number for m in second] == [1, 2]
    got = [qm.get(q) for _ in range(5)]
    qm.commit()
    assert [(m.group_id, m.msg_seq_number) for m in got] == [
        (m.group_id, m.msg_seq_number) for m in first + second
    ]
    statuses = ["in-group", "in-group", "last-in-group", "in-group", "last-in-group"]
    assert [m.group_status for m in got] == statuses
    # The last message is also "in group", whatever flags the putter gave it.
    assert got[2].msg_flags & IN and got[2].msg_flags & LAST


def test_logical_put_refuses_a_message_outside_the_open_group(connect, make_queue):
    qm = connect()
    q = make_queue(qm)
    qm.put(q, MQMessage(body=b"1", msg_flags=IN), LOGICAL)
    with pytest.raises(GroupOrderError) as info:
        qm.put(q, MQMessage(body=b"stray"), LOGICAL)
    assert info.value.reason == "MQRC_INCOMPLETE_GROUP" and info.value.code == 2241
    with pytest.raises(GroupOrderError) as info:
        qm.put(
            q, MQMessage(body=b"2", msg_flags=LAST), PutOptions(syncpoint=False, logical_order=True)
        )
    assert info.value.reason == "MQRC_INCONSISTENT_UOW"
    qm.put(q, MQMessage(body=b"2", msg_flags=LAST), LOGICAL)
    qm.commit()
    assert [b for b, _ in drain_logical(qm, q)] == [b"1", b"2"]
    qm.commit()


def test_get_in_logical_order_follows_sequence_not_priority_or_arrival(connect, make_queue):
    qm = connect()
    q = make_queue(qm)
    # Physical order, shuffled, with the later numbers at a higher priority.
    put_physical(qm, q, "G1", [3, 1], last=3, priority=9)
    qm.put(q, MQMessage(body=b"plain", priority=5))
    put_physical(qm, q, "G1", [2], last=3, priority=0)
    qm.commit()
    got = drain_logical(qm, q)
    qm.commit()
    # G1 starts where its first message stands (priority 9), then runs 1, 2, 3.
    assert got == [
        (b"G1-1", "in-group"),
        (b"G1-2", "in-group"),
        (b"G1-3", "last-in-group"),
        (b"plain", "not-in-group"),
    ]


def test_physical_put_of_a_first_message_without_group_id_gets_one(connect, make_queue):
    qm = connect()
    q = make_queue(qm)
    first = qm.put(q, MQMessage(body=b"1", msg_flags=IN))
    assert first.group_id != NONE_ID
    qm.put(q, MQMessage(body=b"2", msg_flags=LAST, group_id=first.group_id, msg_seq_number=2))
    qm.commit()
    got = [qm.get(q, match=Match(group_id=first.group_id)) for _ in range(2)]
    qm.commit()
    assert [(m.body, m.msg_seq_number) for m in got] == [(b"1", 1), (b"2", 2)]


def test_all_available_hides_an_incomplete_group_from_get_and_browse(connect, make_queue):
    qm, other = connect(), connect()
    q = make_queue(qm)
    put_physical(qm, q, "PART", [1, 3], last=3)
    put_physical(qm, q, "FULL", [2, 1], last=2)
    qm.commit()
    browsed = [m.body for m in qm.browse(q, logical_order=True, all_available=True)]
    assert browsed == [b"FULL-1", b"FULL-2"]
    assert drain_logical(qm, q, all_available=True) == [
        (b"FULL-1", "in-group"),
        (b"FULL-2", "last-in-group"),
    ]
    qm.commit()
    with pytest.raises(NoMessageAvailable):
        qm.get(q, all_available=True)
    # Another application completes the group: now it comes, whole and in order.
    put_physical(other, q, "PART", [2], last=3)
    other.commit()
    assert [b for b, _ in drain_logical(qm, q, all_available=True)] == [
        b"PART-1",
        b"PART-2",
        b"PART-3",
    ]
    qm.commit()


def test_a_message_in_no_group_is_a_group_of_one(connect, make_queue):
    qm = connect()
    q = make_queue(qm)
    qm.put(q, MQMessage(body=b"alone", msg_seq_number=1))
    qm.commit()
    m = qm.get(q, logical_order=True, all_available=True)
    qm.commit()
    assert (m.body, m.group_status, m.group_id, m.msg_seq_number) == (
        b"alone",
        "not-in-group",
        NONE_ID,
        1,
    )


def test_inside_a_group_another_group_is_not_eligible(connect, make_queue):
    qm, other = connect(), connect()
    q = make_queue(qm)
    put_physical(qm, q, "A", [1, 2], last=3)
    put_physical(qm, q, "B", [1, 2], last=2)
    qm.commit()
    assert qm.get(q, logical_order=True).body == b"A-1"
    assert qm.get(q, logical_order=True).body == b"A-2"
    # A-3 is not there yet: the connection waits for it rather than starting B.
    with pytest.raises(NoMessageAvailable):
        qm.get(q, logical_order=True, wait_ms=100)
    put_physical(other, q, "A", [3], last=3)
    other.commit()
    with pytest.raises(GroupOrderError) as info:
        qm.get(q, logical_order=True, match=Match(group_id=parse_id("B")))
    assert info.value.reason == "MQRC_MATCH_OPTIONS_ERROR"
    assert [b for b, _ in drain_logical(qm, q)] == [b"A-3", b"B-1", b"B-2"]
    qm.commit()


def test_a_group_got_in_one_unit_of_work_is_backed_out_whole(connect, make_queue):
    qm, other = connect(), connect()
    q = make_queue(qm)
    put_group(qm, q, [b"1", b"2", b"3"])
    qm.commit()
    assert qm.get(q, logical_order=True).body == b"1"
    assert qm.get(q, logical_order=True).body == b"2"
    with pytest.raises(GroupOrderError) as info:
        qm.get(q, logical_order=True, syncpoint=False)
    assert info.value.reason == "MQRC_INCONSISTENT_UOW"
    qm.backout()
    # Every message is back and the connection starts the group over from 1.
    got = [qm.get(q, logical_order=True) for _ in range(3)]
    assert [(m.body, m.backout_count) for m in got] == [(b"1", 1), (b"2", 1), (b"3", 0)]
    qm.commit()
    with pytest.raises(NoMessageAvailable):
        other.get(q)


def test_a_logical_put_backed_out_starts_a_new_group(connect, make_queue):
    qm = connect()
    q = make_queue(qm)
    dropped = qm.put(q, MQMessage(body=b"dropped", msg_flags=IN), LOGICAL)
    qm.backout()
    kept = put_group(qm, q, [b"1", b"2"])
    qm.commit()
    assert kept[0].msg_seq_number == 1 and kept[0].group_id != dropped.group_id
    assert [b for b, _ in drain_logical(qm, q)] == [b"1", b"2"]
    qm.commit()


def test_browse_in_logical_order_keeps_its_own_position(connect, make_queue):
    qm = connect()
    q = make_queue(qm)
    put_physical(qm, q, "G", [2, 1], last=2)
    qm.put(q, MQMessage(body=b"plain"))
    qm.commit()
    assert [m.body for m in qm.browse(q, logical_order=True)] == [b"G-1", b"G-2", b"plain"]
    # Browsing moved nothing and did not disturb the get side's position.
    assert qm.get(q, logical_order=True).body == b"G-1"
    assert [m.body for m in qm.browse(q, logical_order=True)] == [b"plain"]
    assert qm.get(q, logical_order=True).body == b"G-2"
    qm.commit()


def test_a_long_message_inside_a_group_keeps_the_group_position(connect, make_queue):
    """A client's first MQGET buffer is short; the long message stays put, the group's
    place with it, and the retry with the right length gets that same message."""
    qm = connect()
    q = make_queue(qm)
    put_group(qm, q, [b"short", b"L" * 70_000, b"end"])
    qm.commit()
    got = drain_logical(qm, q, all_available=True)
    qm.commit()
    assert [len(b) for b, _ in got] == [5, 70_000, 3]
