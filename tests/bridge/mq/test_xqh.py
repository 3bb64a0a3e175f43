"""The MQXQH transmission-queue header as MQ lays it out, read back whole."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bridge.mq import xqh
from bridge.mq.models import MQMessage, MsgFlags
from tests.mqi_standin import install


def test_the_header_is_laid_out_as_mq_reads_it():
    # ibmmq's own MQXQH and MQMD structures read what xqh writes.
    install()
    import ibmmq

    sent = MQMessage(body=b"payload", msg_id=b"M" * 24, correl_id=b"C" * 24, priority=7,
                     reply_to_q="R.Q", reply_to_qmgr="QM1", put_appl_name="app",
                     put_date_time=datetime(2026, 11, 27, 18, 9, 10, 120000, tzinfo=UTC),
                     format="MQSTR", coded_char_set_id=37, msg_type=2)  # fmt: skip
    packed = xqh.pack(sent, "APP.REPLY", "QM9")
    assert len(packed) == xqh.LENGTH + len(b"payload") == 428 + 7
    header = ibmmq.XQH().get_header(packed)
    assert (header.RemoteQName.rstrip(), header.RemoteQMgrName.rstrip()) == (b"APP.REPLY", b"QM9")
    md = ibmmq.XQH().get_embedded_md(packed)
    assert (md.MsgId, md.CorrelId, md.Priority, md.MsgType) == (b"M" * 24, b"C" * 24, 7, 2)
    assert (md.Format, md.CodedCharSetId) == (b"MQSTR   ", 37)
    assert (md.PutDate, md.PutTime) == (b"20261127", b"18091012")
    assert packed[xqh.LENGTH :] == b"payload"


def test_a_message_in_a_group_carries_an_mqmde_and_comes_back_whole():
    sent = MQMessage(body=b"part", group_id=b"G" * 24, msg_seq_number=3, encoding=785,
                     msg_flags=int(MsgFlags.MSG_IN_GROUP), format="MQSTR",
                     coded_char_set_id=500)  # fmt: skip
    packed = xqh.pack(sent, "Q", "QM9")
    assert packed[xqh.LENGTH : xqh.LENGTH + 4] == b"MDE "
    back = xqh.unpack(packed)
    assert (back.remote_q_name, back.remote_q_mgr_name) == ("Q", "QM9")
    got = back.message
    assert (got.group_id, got.msg_seq_number, got.msg_flags) == (b"G" * 24, 3, sent.msg_flags)
    assert (got.format, got.coded_char_set_id, got.encoding, got.body) == (
        "MQSTR", 500, 785, b"part",
    )  # fmt: skip


def test_a_body_without_a_header_is_refused():
    with pytest.raises(xqh.NotTransmitted):
        xqh.unpack(b"XQH " + b"\0" * 10)
