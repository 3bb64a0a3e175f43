"""The contract every transport keeps: embedded always, IBM MQ when one is configured."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime

import pytest

from bridge.mq import dlh, reports, xqh
from bridge.mq.errors import (
    MessageTooBig,
    MQError,
    NoMessageAvailable,
    QueueFull,
    QueueInhibited,
    SyncpointLimitReached,
    UnknownObjectName,
    UnknownRemoteQueueManager,
)
from bridge.mq.models import (
    MQACT_NONE,
    MQAT_UNIX,
    MQMT_REPORT,
    MQMT_REQUEST,
    MQOL_UNDEFINED,
    MQPER_PERSISTENCE_AS_Q_DEF,
    NONE_ID,
    Match,
    MQMessage,
    MsgFlags,
    PutOptions,
    QueueAttributes,
    fingerprint,
    parse_id,
)

SEGMENT, LAST = int(MsgFlags.SEGMENT), int(MsgFlags.LAST_SEGMENT)


def test_fifo_within_priority(connect, make_queue):
    qm = connect()
    q = make_queue(qm)
    for body, prio in ((b"a", 0), (b"b", 5), (b"c", 0), (b"d", 5), (b"e", 9)):
        qm.put(q, MQMessage(body=body, priority=prio))
    qm.commit()
    got = [qm.get(q).body for _ in range(5)]
    qm.commit()
    assert got == [b"e", b"b", b"d", b"a", b"c"]


@pytest.mark.parametrize("field", ["msg_id", "correl_id", "group_id"])
def test_match_by_id(connect, make_queue, field):
    qm = connect()
    q = make_queue(qm)
    for i in range(3):
        qm.put(q, MQMessage(body=f"m{i}".encode(), **{field: parse_id(f"ID-{i}")}))
    qm.commit()
    got = qm.get(q, match=Match(**{field: parse_id("ID-2")}))
    assert got.body == b"m2"
    assert getattr(got, field) == parse_id("ID-2")
    with pytest.raises(NoMessageAvailable):
        qm.get(q, match=Match(**{field: parse_id("ID-9")}))
    qm.commit()


def test_generated_msg_id_is_unique_and_returned(connect, make_queue):
    qm = connect()
    q = make_queue(qm)
    ids = {qm.put(q, MQMessage(body=b"x")).msg_id for _ in range(50)}
    qm.commit()
    assert len(ids) == 50
    first = qm.put(q, MQMessage(body=b"y"))
    qm.commit()
    assert qm.get(q, match=Match(msg_id=first.msg_id)).body == b"y"
    qm.commit()


def test_get_wait_times_out_with_no_msg_available(connect, make_queue):
    qm = connect()
    q = make_queue(qm)
    start = time.monotonic()
    with pytest.raises(NoMessageAvailable) as info:
        qm.get(q, wait_ms=200)
    assert time.monotonic() - start >= 0.2
    assert info.value.reason == "MQRC_NO_MSG_AVAILABLE" and info.value.code == 2033


def test_syncpoint_get_invisible_until_commit(connect, make_queue):
    a, b = connect(), connect()
    q = make_queue(a)
    a.put(q, MQMessage(body=b"one"))
    a.commit()
    assert a.get(q).body == b"one"
    with pytest.raises(NoMessageAvailable):
        b.get(q)
    a.commit()
    with pytest.raises(NoMessageAvailable):
        b.get(q)


def test_backout_restores_and_counts(connect, make_queue):
    a, b = connect(), connect()
    q = make_queue(a)
    a.put(q, MQMessage(body=b"one"))
    a.commit()
    for expected in (0, 1, 2):
        got = a.get(q)
        assert got.backout_count == expected
        a.backout()
    got = b.get(q)
    assert got.body == b"one" and got.backout_count == 3
    b.commit()


def test_syncpoint_put_invisible_until_commit_and_discarded_on_backout(connect, make_queue):
    a, b = connect(), connect()
    q = make_queue(a)
    a.put(q, MQMessage(body=b"kept"))
    with pytest.raises(NoMessageAvailable):
        b.get(q)
    a.commit()
    a.put(q, MQMessage(body=b"dropped"))
    a.backout()
    assert b.get(q).body == b"kept"
    with pytest.raises(NoMessageAvailable):
        b.get(q)
    b.commit()


def test_browse_first_next_does_not_remove(connect, make_queue):
    qm = connect()
    q = make_queue(qm)
    for body in (b"1", b"2", b"3"):
        qm.put(q, MQMessage(body=body))
    qm.commit()
    assert [m.body for m in qm.browse(q)] == [b"1", b"2", b"3"]
    assert qm.get(q, browse="first").body == b"1"
    assert qm.get(q, browse="next").body == b"2"
    assert qm.inquire(q).curdepth == 3
    assert qm.get(q).body == b"1"
    qm.commit()


def test_expired_messages_are_never_delivered(connect, make_queue):
    qm = connect()
    q = make_queue(qm)
    qm.put(q, MQMessage(body=b"short", expiry=1))  # a tenth of a second
    qm.put(q, MQMessage(body=b"long", expiry=600))
    qm.commit()
    time.sleep(0.3)  # the expiry interval itself must pass; nothing to await
    got = qm.get(q)
    assert got.body == b"long"
    assert 0 < got.expiry <= 600
    with pytest.raises(NoMessageAvailable):
        qm.get(q)
    assert [m.body for m in qm.browse(q)] == []
    qm.commit()


def test_maxdepth_gives_q_full(connect, make_queue):
    qm = connect()
    q = make_queue(qm, maxdepth=2)
    qm.put(q, MQMessage(body=b"1"))
    qm.put(q, MQMessage(body=b"2"))
    with pytest.raises(QueueFull) as info:
        qm.put(q, MQMessage(body=b"3"))
    assert info.value.reason == "MQRC_Q_FULL"
    qm.commit()
    qm.get(q)
    qm.commit()
    qm.put(q, MQMessage(body=b"3"))
    qm.commit()


def test_curdepth_counts_uncommitted_puts_and_leaves_out_uncommitted_gets(connect, make_queue):
    """CURDEPTH goes up on a put and down on a get as each is made, in a unit of work or
    not, and back on a backout, as MQ keeps it; the messages themselves wait for the
    commit."""
    a, b = connect(), connect()
    q = make_queue(a)
    a.put(q, MQMessage(body=b"one"))
    a.put(q, MQMessage(body=b"two"))
    assert b.inquire(q).curdepth == 2
    with pytest.raises(NoMessageAvailable):
        b.get(q)
    a.backout()
    assert b.inquire(q).curdepth == 0
    a.put(q, MQMessage(body=b"one"))
    a.commit()
    assert b.inquire(q).curdepth == 1
    assert b.get(q).body == b"one"
    assert a.inquire(q).curdepth == 0
    b.backout()
    assert a.inquire(q).curdepth == 1
    b.get(q)
    b.commit()
    assert a.inquire(q).curdepth == 0


def test_another_connections_uncommitted_puts_fill_the_queue(connect, make_queue):
    a, b = connect(), connect()
    q = make_queue(a, maxdepth=2)
    a.put(q, MQMessage(body=b"1"))
    a.put(q, MQMessage(body=b"2"))
    for options in (PutOptions(syncpoint=True), PutOptions(syncpoint=False)):
        with pytest.raises(QueueFull) as info:
            b.put(q, MQMessage(body=b"3"), options)
        assert info.value.code == 2053
    a.backout()
    b.put(q, MQMessage(body=b"3"), PutOptions(syncpoint=False))
    assert b.inquire(q).curdepth == 1


def test_a_connections_own_uncommitted_puts_count_outside_syncpoint(connect, make_queue):
    qm = connect()
    q = make_queue(qm, maxdepth=1)
    qm.put(q, MQMessage(body=b"1"))
    with pytest.raises(QueueFull):
        qm.put(q, MQMessage(body=b"2"), PutOptions(syncpoint=False))
    qm.commit()
    assert qm.inquire(q).curdepth == 1


def test_a_get_under_syncpoint_makes_room_and_its_backout_may_pass_maxdepth(connect, make_queue):
    """MQ leaves an uncommitted get out of CURDEPTH, so a put may take its place; backed
    out, the message returns and the queue holds more than MAXDEPTH."""
    a, b = connect(), connect()
    q = make_queue(a, maxdepth=1)
    a.put(q, MQMessage(body=b"first"), PutOptions(syncpoint=False))
    assert a.get(q).body == b"first"
    b.put(q, MQMessage(body=b"second"), PutOptions(syncpoint=False))
    a.backout()
    assert b.inquire(q).curdepth == 2
    with pytest.raises(QueueFull):
        b.put(q, MQMessage(body=b"third"), PutOptions(syncpoint=False))
    assert [a.get(q).body, a.get(q).body] == [b"first", b"second"]
    a.commit()


def test_maxmsgl_gives_msg_too_big(connect, make_queue):
    qm = connect()
    q = make_queue(qm, maxmsgl=10)
    qm.put(q, MQMessage(body=b"x" * 10))
    with pytest.raises(MessageTooBig) as info:
        qm.put(q, MQMessage(body=b"x" * 11))
    assert info.value.reason == "MQRC_MSG_TOO_BIG_FOR_Q"
    qm.commit()


def test_unknown_queue(connect):
    qm = connect()
    with pytest.raises(UnknownObjectName) as info:
        qm.put("NO.SUCH.QUEUE", MQMessage(body=b"x"))
    assert info.value.reason == "MQRC_UNKNOWN_OBJECT_NAME" and "NO.SUCH.QUEUE" in str(info.value)
    with pytest.raises(UnknownObjectName):
        qm.get("NO.SUCH.QUEUE")
    with pytest.raises(UnknownObjectName):
        qm.inquire("NO.SUCH.QUEUE")


def test_a_put_for_another_queue_manager_waits_on_its_transmission_queue(connect, make_queue):
    """ObjectQMgrName: this queue manager's own name opens its own queue; another is
    reached through the transmission queue named after it, where the message waits behind
    an MQXQH naming its queue and queue manager; a queue of that name that is no
    transmission queue refuses it (MQRC_XMIT_Q_USAGE_ERROR); with neither the put fails
    with MQRC_UNKNOWN_REMOTE_Q_MGR, and no queue of the same name here gets it."""
    qm = connect()
    q = make_queue(qm)
    with pytest.raises(UnknownRemoteQueueManager) as refused:
        qm.put(q, MQMessage(body=b"for QM9"), qmgr="NO.ROUTE.QM9")
    assert refused.value.reason == "MQRC_UNKNOWN_REMOTE_Q_MGR" and refused.value.code == 2087
    qm.put(q, MQMessage(body=b"here"), qmgr=qm.qmgr_name)
    qm.commit()
    assert qm.inquire(q).curdepth == 1
    assert qm.get(q).body == b"here"
    qm.commit()

    xmitq, normal = make_queue(qm, usage="xmitq"), make_queue(qm)
    assert (qm.inquire(xmitq).usage, qm.inquire(normal).usage) == ("xmitq", "normal")
    with pytest.raises(MQError) as usage:
        qm.put(q, MQMessage(body=b"x"), qmgr=normal)
    assert usage.value.reason == "MQRC_XMIT_Q_USAGE_ERROR"
    # Properties that survive only a careful encoding travel with it: NaN, raw bytes.
    props = {"leg": "CREDIT", "ratio": float("nan"), "raw": b"\x00\xff"}
    sent = MQMessage(body=b"to QM9", correl_id=parse_id("C-9"), reply_to_q="R.Q",
                     properties=props, priority=3)  # fmt: skip
    put = qm.put(q, sent, qmgr=xmitq)
    qm.commit()
    assert qm.inquire(q).curdepth == 0
    waiting = qm.get(xmitq)
    qm.commit()
    assert waiting.format == xqh.MQFMT_XMIT_Q_HEADER
    ratio = waiting.properties.pop("ratio")
    assert isinstance(ratio, float) and math.isnan(ratio)
    assert waiting.properties == {"leg": "CREDIT", "raw": b"\x00\xff"}
    carried = xqh.unpack(waiting.body)
    assert (carried.remote_q_name, carried.remote_q_mgr_name) == (q, xmitq)
    inner = carried.message
    assert (inner.body, inner.msg_id, inner.correl_id) == (b"to QM9", put.msg_id, sent.correl_id)
    assert (inner.reply_to_q, inner.reply_to_qmgr, inner.priority) == ("R.Q", qm.qmgr_name, 3)


def test_a_blank_reply_to_qmgr_is_filled_with_this_queue_managers_name(connect, make_queue):
    qm = connect()
    q = make_queue(qm)
    qm.put(q, MQMessage(body=b"x", reply_to_q="APP.REPLY"))
    qm.put(q, MQMessage(body=b"y"))
    qm.commit()
    first, second = qm.get(q), qm.get(q)
    qm.commit()
    assert first.reply_to_qmgr == second.reply_to_qmgr == qm.qmgr_name
    assert (first.reply_to_q, second.reply_to_q) == ("APP.REPLY", "")


def test_coa_and_cod_are_confirmed_once_each_to_the_reply_to_queue(connect, make_queue):
    """The queue manager confirms a message's arrival (COA, with its first 100 bytes)
    when the put commits and its delivery (COD) when a get commits; a browse, a backed
    out get and a backed out put confirm nothing."""
    qm, sender = connect(), connect()
    q, replies = make_queue(qm), make_queue(qm)
    asks = reports.MQRO_COA_WITH_DATA | reports.MQRO_COD | 0x40  # MQRO_PASS_CORREL_ID
    body = bytes(range(150))
    sent = MQMessage(body=body, correl_id=parse_id("C-1"), reply_to_q=replies, report=asks,
                     priority=4, persistence=0)  # fmt: skip
    sender.put(q, sent)
    sender.backout()
    assert qm.inquire(replies).curdepth == 0
    put = sender.put(q, sent)
    # In the put's unit of work: counted in CURDEPTH, as every uncommitted put is, but
    # not there to get.
    assert qm.inquire(replies).curdepth == 1
    with pytest.raises(NoMessageAvailable):
        qm.get(replies, syncpoint=False)
    sender.commit()
    coa = qm.get(replies, syncpoint=False)
    assert (coa.msg_type, coa.feedback, coa.body) == (MQMT_REPORT, reports.MQFB_COA, body[:100])
    assert coa.correl_id == sent.correl_id and coa.msg_id not in (put.msg_id, NONE_ID)
    assert (coa.priority, coa.persistence, coa.report, coa.reply_to_q) == (4, 0, 0, "")
    assert coa.put_appl_type == reports.MQAT_QMGR

    assert qm.get(q, browse="first").body == body
    qm.get(q)
    qm.backout()
    assert qm.inquire(replies).curdepth == 0
    got = qm.get(q)
    assert qm.inquire(replies).curdepth == 1  # the COD, in the get's unit of work
    with pytest.raises(NoMessageAvailable):
        connect().get(replies, syncpoint=False)
    qm.commit()
    cod = qm.get(replies, syncpoint=False)
    assert (cod.feedback, cod.body, cod.correl_id) == (reports.MQFB_COD, b"", sent.correl_id)
    assert got.report == asks  # the message keeps what it asked
    with pytest.raises(NoMessageAvailable):
        qm.get(replies, syncpoint=False)


def test_a_cod_outside_syncpoint_with_full_data_and_the_msg_id_passed_on(connect, make_queue):
    qm = connect()
    q, replies = make_queue(qm), make_queue(qm)
    asks = reports.MQRO_COD_WITH_FULL_DATA | 0x80  # MQRO_PASS_MSG_ID
    put = qm.put(q, MQMessage(body=b"y" * 300, reply_to_q=replies, report=asks,
                              format="MQSTR"), PutOptions(syncpoint=False))  # fmt: skip
    assert qm.inquire(replies).curdepth == 0  # no COA was asked
    qm.get(q, syncpoint=False)
    cod = qm.get(replies, syncpoint=False)
    assert (cod.feedback, cod.body, cod.format) == (reports.MQFB_COD, b"y" * 300, "MQSTR")
    assert cod.msg_id == cod.correl_id == put.msg_id


@pytest.mark.parametrize("refusal", ["missing", "too small"])
def test_a_confirmation_the_reply_to_queue_refuses_is_dead_lettered_and_the_put_stands(
    connect, make_queue, refusal
):
    """A ReplyToQ that is not there (2085), or one too small for a COA with all of a
    large message's data (2030): the COA goes to the dead-letter queue, the put stands."""
    qm = connect()
    q = make_queue(qm, maxmsgl=1_000_000)
    reply_q, asks, reason = "NO.SUCH.REPLY.Q", reports.MQRO_COA, 2085
    if refusal == "too small":
        reply_q = make_queue(qm, maxmsgl=1000)
        asks, reason = reports.MQRO_COA_WITH_FULL_DATA, 2030
    dlq = qm.dead_letter_queue()
    assert dlq
    before = qm.inquire(dlq).curdepth
    body = b"x" * (500_000 if refusal == "too small" else 1)
    put = qm.put(q, MQMessage(body=body, reply_to_q=reply_q, report=asks))
    qm.commit()
    assert qm.inquire(q).curdepth == 1
    assert qm.inquire(dlq).curdepth == before + 1
    dead = qm.get(dlq, match=Match(correl_id=put.msg_id))
    qm.commit()
    header, rest = dlh.unpack(dead.body)
    assert (header.reason, header.dest_q_name) == (reason, reply_q)
    assert rest == (body if refusal == "too small" else b"")
    assert dead.feedback == reports.MQFB_COA


def test_a_confirmation_for_a_sender_on_another_queue_manager_waits_on_the_route(
    connect, make_queue
):
    """A COA for a ReplyToQ at another queue manager goes behind an MQXQH on the
    transmission queue named after it; a message got off a transmission queue (where the
    queue manager at the other end confirms) causes no COD here."""
    qm = connect()
    q, xmitq, replies = make_queue(qm), make_queue(qm, usage="xmitq"), make_queue(qm)
    asks = reports.MQRO_COA | reports.MQRO_COD
    put = qm.put(q, MQMessage(body=b"x", reply_to_q="APP.REPORTS", reply_to_qmgr=xmitq,
                              report=asks))  # fmt: skip
    qm.commit()
    waiting = qm.get(xmitq)
    qm.commit()
    carried = xqh.unpack(waiting.body)
    assert (carried.remote_q_name, carried.remote_q_mgr_name) == ("APP.REPORTS", xmitq)
    assert (carried.message.feedback, carried.message.correl_id) == (reports.MQFB_COA, put.msg_id)

    qm.put(q, MQMessage(body=b"y", reply_to_q=replies, report=asks), qmgr=xmitq)
    qm.commit()
    assert qm.inquire(replies).curdepth == 0  # its arrival is confirmed at the other end
    qm.get(xmitq)
    qm.commit()
    assert qm.inquire(replies).curdepth == 0  # and so is its delivery


def test_maxumsgs_counts_the_confirmations_a_unit_of_work_causes(
    connect, make_queue, request, maxumsgs
):
    qm = connect()
    q, replies = make_queue(qm), make_queue(qm)
    limit = maxumsgs(qm, 5)
    if request.node.callspec.params["connect"] != "ibmmq":
        assert limit == 5
    confirm = MQMessage(body=b"c", reply_to_q=replies, report=reports.MQRO_COA | reports.MQRO_COD)
    for _ in range(limit // 2):
        qm.put(q, confirm)  # each with its COA: two each
    with pytest.raises(SyncpointLimitReached):
        qm.put(q, confirm)  # room for the message, none for its COA
    qm.put(q, MQMessage(body=b"plain"))
    qm.commit()
    assert qm.inquire(replies).curdepth == limit // 2
    got = qm.get_batch(q, limit)  # each with its COD: two each, and the plain one
    assert [m.body for m in got] == [b"c"] * (limit // 2) + [b"plain"] * (limit % 2)
    qm.commit()
    assert qm.inquire(replies).curdepth == 2 * (limit // 2)


def test_properties_of_every_type_round_trip(connect, make_queue):
    qm = connect()
    q = make_queue(qm)
    props = {
        "leg": "CREDIT",
        "count": -(2**40),
        "big": 2**63 - 1,
        "ratio": 0.25,
        "flag": True,
        "off": False,
        "raw": b"\x00\xffbytes",
        "nothing": None,
        "unicode": "Zürich ✓",
    }
    qm.put(q, MQMessage(body=b"p", properties=props))
    qm.commit()
    got = qm.get(q)
    qm.commit()
    expected = dict(props)
    if qm.booleans_read_as_int:  # the documented limit of the ibmmq library
        expected.update(flag=1, off=0)
    assert got.properties == expected
    for name, value in expected.items():
        assert type(got.properties[name]) is type(value), name


def test_mqmd_fields_round_trip(connect, make_queue):
    qm = connect()
    q = make_queue(qm)
    sent = MQMessage(
        body=b"\x00binary\xff",
        correl_id=parse_id("hex:" + "ab" * 24),
        group_id=parse_id("GROUP-1"),
        msg_seq_number=3,
        msg_flags=0x18,
        format="",
        persistence=0,
        priority=4,
        reply_to_q="REPLY.Q",
        reply_to_qmgr="QM2",
    )
    put = qm.put(q, sent)
    qm.commit()
    got = qm.get(q)
    qm.commit()
    for field in (
        "body", "correl_id", "group_id", "msg_seq_number", "msg_flags", "format",
        "persistence", "priority", "reply_to_q", "reply_to_qmgr",
    ):  # fmt: skip
        assert getattr(got, field) == getattr(sent, field), field
    assert got.msg_id == put.msg_id
    assert got.put_date_time is not None and got.put_appl_name


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"expiry": 0}, "MQRC_EXPIRY_ERROR"),
        ({"expiry": -2}, "MQRC_EXPIRY_ERROR"),
        ({"expiry": 1_000_000_000}, "MQRC_EXPIRY_ERROR"),
        ({"persistence": 3}, "MQRC_PERSISTENCE_ERROR"),
        ({"persistence": -1}, "MQRC_PERSISTENCE_ERROR"),
        ({"msg_type": 0}, "MQRC_MSG_TYPE_ERROR"),
        ({"msg_type": 1_000_000_000}, "MQRC_MSG_TYPE_ERROR"),
        ({"feedback": -1}, "MQRC_FEEDBACK_ERROR"),
        ({"feedback": 1_000_000_000}, "MQRC_FEEDBACK_ERROR"),
        ({"report": 0x00040000}, "MQRC_REPORT_OPTIONS_ERROR"),
        # A request, or a message that asks for a report (COA here), needs a ReplyToQ.
        ({"msg_type": MQMT_REQUEST}, "MQRC_MISSING_REPLY_TO_Q"),
        ({"report": 0x100, "reply_to_q": "  "}, "MQRC_MISSING_REPLY_TO_Q"),
        ({"msg_flags": 0x20}, "MQRC_MSG_FLAGS_ERROR"),
        ({"offset": -1}, "MQRC_OFFSET_ERROR"),
        ({"offset": 1_000_000_000, "msg_flags": SEGMENT}, "MQRC_OFFSET_ERROR"),
        ({"msg_flags": SEGMENT, "body": b""}, "MQRC_SEGMENT_LENGTH_ZERO"),
        # A report on a segment says how long that segment was.
        ({"msg_flags": SEGMENT, "msg_type": MQMT_REPORT, "original_length": 0},
         "MQRC_ORIGINAL_LENGTH_ERROR"),
        ({"msg_flags": LAST, "msg_type": MQMT_REPORT, "original_length": 0},
         "MQRC_ORIGINAL_LENGTH_ERROR"),  # shorter than the report's own data
    ],
)  # fmt: skip
def test_a_descriptor_mq_refuses_is_refused_and_nothing_is_put(connect, make_queue, fields, reason):
    qm = connect()
    q = make_queue(qm)
    with pytest.raises(MQError) as refused:
        qm.put(q, MQMessage(**{"body": b"x", **fields}))
    assert refused.value.reason == reason
    qm.put(q, MQMessage(body=b"kept"))
    qm.commit()
    assert [m.body for m in qm.browse(q)] == [b"kept"]


def test_what_mq_takes_in_msg_type_feedback_and_report_is_kept(connect, make_queue):
    qm = connect()
    q = make_queue(qm)
    sent = [
        # An application's own MsgType and Feedback; report options that ask for no
        # report need no ReplyToQ.
        MQMessage(msg_type=65536 + 7, feedback=65536 + 3, report=0x40 | 0x80, body=b"a"),
        MQMessage(msg_type=MQMT_REPORT, feedback=2053, body=b"b"),
        MQMessage(msg_type=MQMT_REQUEST, reply_to_q="R", report=0x4000, body=b"c"),
    ]
    for message in sent:
        qm.put(q, message)
    qm.commit()
    got = [qm.get(q) for _ in sent]
    qm.commit()
    assert [(m.msg_type, m.feedback, m.report) for m in got] == [
        (m.msg_type, m.feedback, m.report) for m in sent
    ]


def test_segments_keep_their_offset_and_mq_sets_their_original_length(connect, make_queue):
    qm = connect()
    q = make_queue(qm)
    group = parse_id("LOGICAL-1")
    sent = [
        # OriginalLength given on a segment that is no report is replaced by its length.
        MQMessage(group_id=group, msg_flags=SEGMENT, offset=0, original_length=99, body=b"abc"),
        MQMessage(group_id=group, msg_flags=LAST, offset=3, body=b"de"),
        # A report on a segment keeps the one given: the length of the segment it is on.
        MQMessage(group_id=group, msg_flags=LAST, offset=3, msg_type=MQMT_REPORT,
                  original_length=2, body=b""),
        # On a message that is no segment, MQ keeps none.
        MQMessage(body=b"whole", original_length=5),
    ]  # fmt: skip
    for message in sent:
        qm.put(q, message)
    qm.commit()
    got = [qm.get(q) for _ in sent]
    qm.commit()
    assert [(m.group_id, m.msg_flags & (SEGMENT | LAST), m.offset) for m in got] == [
        (group, SEGMENT, 0), (group, LAST, 3), (group, LAST, 3), (NONE_ID, 0, 0)
    ]  # fmt: skip
    assert [m.original_length for m in got] == [3, 2, 2, MQOL_UNDEFINED]
    assert [m.body for m in got] == [m.body for m in sent]


@pytest.mark.parametrize("wait_ms", [-2, -5000, 2**31])
def test_a_wait_mq_refuses_is_refused_and_the_message_stays(connect, make_queue, wait_ms):
    qm = connect()
    q = make_queue(qm)
    qm.put(q, MQMessage(body=b"kept"))
    qm.commit()
    with pytest.raises(MQError) as refused:
        qm.get(q, wait_ms=wait_ms)
    qm.backout()
    assert refused.value.reason == "MQRC_WAIT_INTERVAL_ERROR"
    assert [m.body for m in qm.browse(q)] == [b"kept"]


def test_a_put_to_an_unknown_queue_is_refused_for_the_queue_before_its_descriptor(connect):
    qm = connect()
    with pytest.raises(UnknownObjectName):
        qm.put("NO.SUCH.QUEUE", MQMessage(body=b"x", expiry=0))


def test_the_widest_expiry_mq_takes_and_persistence_as_the_queue_defines_it(connect, make_queue):
    qm = connect()
    q = make_queue(qm)
    qm.put(q, MQMessage(body=b"a", expiry=999_999_999, persistence=MQPER_PERSISTENCE_AS_Q_DEF))
    qm.commit()
    got = qm.get(q)
    qm.commit()
    assert 0 < got.expiry <= 999_999_999
    assert got.persistence == 0  # a queue defined with the defaults: DEFPSIST(NO)


def test_set_all_context_keeps_identity_and_origin_default_context_replaces_them(
    connect, make_queue
):
    qm = connect()
    q = make_queue(qm)
    stamp = datetime(2026, 3, 4, 5, 6, 7, 80000, tzinfo=UTC)
    sent = MQMessage(
        body=b"relayed",
        user_identifier="backend",
        accounting_token=b"\x16acct-7",
        appl_identity_data="order-service",
        put_appl_type=11,
        appl_origin_data="EU1",
        put_appl_name="CREDIT.SVC",
        put_date_time=stamp,
    )
    context = {"user_identifier", "accounting_token", "appl_identity_data", "put_appl_type",
               "appl_origin_data", "put_appl_name", "put_date_time"}  # fmt: skip
    qm.put(q, sent, PutOptions(set_all_context=True))
    qm.put(q, sent)
    qm.commit()
    kept, replaced = qm.get(q), qm.get(q)
    qm.commit()
    assert kept.model_dump(include=context) == sent.model_dump(include=context)
    assert replaced.user_identifier != "backend" and replaced.put_appl_type == MQAT_UNIX
    assert (replaced.accounting_token, replaced.appl_identity_data) == (MQACT_NONE, "")
    assert replaced.put_appl_name != "CREDIT.SVC" and replaced.put_date_time != stamp


def test_inquire_reports_backout_settings_and_depth(connect, make_queue):
    qm = connect()
    boq = make_queue(qm)
    q = make_queue(qm, bothresh=3, boqname=boq)
    qm.put(q, MQMessage(body=b"1"))
    qm.commit()
    attrs = qm.inquire(q)
    assert (attrs.bothresh, attrs.boqname, attrs.curdepth) == (3, boq, 1)
    assert qm.dead_letter_queue()


def test_get_batch_takes_up_to_n_under_syncpoint(connect, make_queue):
    a, b = connect(), connect()
    q = make_queue(a)
    for i in range(5):
        a.put(q, MQMessage(body=str(i).encode()))
    a.commit()
    batch = a.get_batch(q, 3, wait_ms=1000)
    assert [m.body for m in batch] == [b"0", b"1", b"2"]
    assert [m.body for m in b.get_batch(q, 10)] == [b"3", b"4"]
    a.backout()
    b.commit()
    again = b.get_batch(q, 10)
    assert [(m.body, m.backout_count) for m in again] == [(b"0", 1), (b"1", 1), (b"2", 1)]
    b.commit()
    assert b.get_batch(q, 10, wait_ms=50) == []


def test_put_and_get_disabled_refuse_puts_gets_and_browses(connect, make_queue):
    qm, other = connect(), connect()
    q = make_queue(qm)
    qm.put(q, MQMessage(body=b"before"))
    put_before = other.put(q, MQMessage(body=b"in a unit of work"))
    qm.commit()
    qm.define(QueueAttributes(name=q, put="disabled"), replace=True)
    assert (qm.inquire(q).put, qm.inquire(q).get) == ("disabled", "enabled")
    for syncpoint in (True, False):
        with pytest.raises(QueueInhibited) as info:
            qm.put(q, MQMessage(body=b"refused"), PutOptions(syncpoint=syncpoint))
        assert (info.value.reason, info.value.code) == ("MQRC_PUT_INHIBITED", 2051)
    # A put done before the queue was inhibited still commits, as on MQ.
    other.commit()
    assert qm.inquire(q).curdepth == 2 and put_before.body == b"in a unit of work"
    # Defining it again without naming PUT leaves it disabled; GET(DISABLED) stops gets
    # and browses, and leaves the messages where they are.
    qm.define(QueueAttributes(name=q, get="disabled", descr="again"), replace=True)
    assert (qm.inquire(q).put, qm.inquire(q).get) == ("disabled", "disabled")
    for attempt in (lambda: qm.get(q), lambda: qm.get(q, browse="first"),
                    lambda: qm.get_batch(q, 5), lambda: qm.get(q, syncpoint=False)):  # fmt: skip
        with pytest.raises(QueueInhibited) as info:
            attempt()
        assert (info.value.reason, info.value.code) == ("MQRC_GET_INHIBITED", 2016)
    listed = {a.name: a for a in qm.list_queues(q)}
    assert (listed[q].put, listed[q].get) == ("disabled", "disabled")
    qm.define(QueueAttributes(name=q, put="enabled", get="enabled"), replace=True)
    qm.put(q, MQMessage(body=b"after"))
    qm.commit()
    assert [m.body for m in qm.get_batch(q, 5)] == [b"before", b"in a unit of work", b"after"]
    qm.commit()


def test_a_unit_of_work_holds_at_most_maxumsgs_messages(connect, make_queue, request, maxumsgs):
    qm, other = connect(), connect()
    q = make_queue(qm, maxdepth=999_999)
    limit = maxumsgs(qm, 6)
    if request.node.callspec.params["connect"] != "ibmmq":
        assert limit == 6
    for i in range(limit):
        qm.put(q, MQMessage(body=str(i).encode()))
    with pytest.raises(SyncpointLimitReached) as info:
        qm.put(q, MQMessage(body=b"one too many"))
    assert info.value.code == 2024
    qm.put(q, MQMessage(body=b"outside"), PutOptions(syncpoint=False))  # not counted
    qm.commit()  # the unit of work stayed open: what it held commits
    assert other.inquire(q).curdepth == limit + 1

    # Gets count as puts do; a browse and a get outside syncpoint do not.
    got = qm.get_batch(q, limit + 5)  # "outside" was there before the commit
    assert [m.body for m in got] == [b"outside"] + [str(i).encode() for i in range(limit - 1)]
    with pytest.raises(SyncpointLimitReached):
        qm.get(q)
    with pytest.raises(SyncpointLimitReached):
        qm.put(q, MQMessage(body=b"x"))
    last = str(limit - 1).encode()
    assert qm.get(q, browse="first").body == last
    assert qm.get(q, syncpoint=False).body == last
    qm.backout()  # a backout empties the unit of work too
    assert len(qm.get_batch(q, limit)) == limit
    qm.commit()
    assert other.inquire(q).curdepth == 0


def test_clear_commits_as_often_as_maxumsgs_needs(connect, make_queue, maxumsgs):
    qm = connect()
    q = make_queue(qm)
    for i in range(10):
        qm.put(q, MQMessage(body=str(i).encode()), PutOptions(syncpoint=False))
    maxumsgs(qm, 3)
    assert qm.clear(q) == 10
    assert qm.inquire(q).curdepth == 0


@pytest.mark.timeout(60)  # a clear that retries the same get for ever fails here
def test_clear_takes_a_message_asking_for_a_cod_when_maxumsgs_is_1(connect, make_queue, maxumsgs):
    """A get under syncpoint needs room for the message and its COD: with MAXUMSGS 1
    even an empty unit of work has none, so clear takes that one outside syncpoint."""
    qm = connect()
    q, replies = make_queue(qm), make_queue(qm)
    for i in range(4):
        asks = reports.MQRO_COD if i % 2 else 0
        qm.put(q, MQMessage(body=b"%d" % i, reply_to_q=replies, report=asks),
               PutOptions(syncpoint=False))  # fmt: skip
    maxumsgs(qm, 1)  # IBM MQ's own where the test cannot set it
    assert qm.clear(q) == 4
    assert (qm.inquire(q).curdepth, qm.inquire(replies).curdepth) == (0, 2)


def test_a_redelivered_message_keeps_its_fingerprint_and_a_reused_msg_id_does_not(
    connect, make_queue
):
    qm = connect()
    q = make_queue(qm)
    props = {"leg": "CREDIT", "ratio": float("nan"), "raw": b"\x00\xff", "n": 7}
    sent = qm.put(q, MQMessage(body=b"one", properties=props, expiry=600_000,
                               correl_id=parse_id("C-1")))  # fmt: skip
    # Another message with the same MsgId (set by the application), else the same.
    qm.put(q, MQMessage(msg_id=sent.msg_id, body=b"two", properties=props, expiry=600_000,
                        correl_id=parse_id("C-1")))  # fmt: skip
    qm.commit()
    first = qm.get(q, syncpoint=True)
    qm.backout()
    again = qm.get(q, syncpoint=True)
    twin = qm.get(q, syncpoint=True)
    qm.commit()
    assert again.backout_count == first.backout_count + 1 and again.msg_id == twin.msg_id
    assert fingerprint(again) == fingerprint(first)
    assert fingerprint(twin) != fingerprint(first)


@pytest.mark.parametrize(
    ("name", "boqname"),
    [("BAD NAME", ""), ("ORDER-RESPONSE", ""), ("größe", ""), ("GOOD", "BAD BOQ")],
)
def test_a_define_with_a_name_mq_does_not_allow_is_refused(connect, name, boqname):
    qm = connect()
    with pytest.raises(MQError) as refused:
        qm.define(QueueAttributes(name=name, boqname=boqname))
    assert refused.value.reason == "MQRCCF_OBJECT_NAME_ERROR"
    assert refused.value.code == 4008
    assert qm.list_queues(name) == []


def test_every_character_mq_allows_in_a_name_defines(connect):
    qm = connect()
    name = f"T.a/b_c%{time.time_ns() % 10**9}"
    qm.define(QueueAttributes(name=name, boqname="Z.back/out_q%1"))
    assert qm.inquire(name).boqname == "Z.back/out_q%1"
