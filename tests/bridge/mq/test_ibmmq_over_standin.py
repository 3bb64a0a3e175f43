"""The IBM MQ adapter through the real ``ibmmq`` package, over the stand-in for IBM's C
library: one test per rule of IBM MQ the adapter used to break."""

from __future__ import annotations

import math
import os
import sys
import threading
import time

import pytest

from bridge.mq.errors import (
    ConnectionBroken,
    MessageTooBig,
    NotAuthorized,
    UnitOfWorkBackedOut,
    UnknownObjectName,
    error_for_reason,
)
from bridge.mq.forward import forward
from bridge.mq.ibmmq_adapter import IBMMQTransport, connect_options, parse_ibmmq_url
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage, PutOptions, QueueAttributes
from tests.conftest import standin_connector
from tests.mqi_standin import ibmmqc

EBCDIC_HELLO = "Grüße".encode("cp037")


@pytest.fixture
def adapter(tmp_path):
    connect = standin_connector(tmp_path / "qm.db")
    opened = []

    def open_one(**_: object) -> IBMMQTransport:
        opened.append(connect())
        return opened[-1]

    yield open_one
    for t in opened:
        t.close()


def test_a_client_connection_names_its_channel_type_and_disables_reconnect(adapter):
    adapter()
    seen = ibmmqc.CONNECTS[-1]
    assert (seen["channel_type"], seen["transport"]) == (ibmmqc.CHT_CLNTCONN, ibmmqc.XPT_TCP)
    assert seen["channel"] == "DEV.APP.SVRCONN" and seen["conname"] == "localhost(1414)"
    mq = sys.modules["ibmmq"]
    assert seen["options"] & mq.CMQC.MQCNO_RECONNECT_DISABLED
    assert seen["options"] & mq.CMQC.MQCNO_CLIENT_BINDING


def test_only_the_structures_in_use_are_passed(adapter):
    adapter()
    mq = sys.modules["ibmmq"]
    plain = connect_options(mq, parse_ibmmq_url("ibmmq://QM@h(1)/CH", env={}))
    assert set(plain) == {"cno", "cd"}  # no None for TLS or credentials
    tls = parse_ibmmq_url("ibmmq://QM@h(1)/CH?cipher=X&keyrepo=/k&user=app",
                          env={"MQGATHER_MQ_PASSWORD": "pw"})  # fmt: skip
    assert set(connect_options(mq, tls)) == {"cno", "cd", "sco", "user", "password"}


def test_the_ccdt_travels_in_the_connect_options_not_the_environment(tmp_path, adapter):
    adapter()
    ccdt = tmp_path / "ccdt.json"
    ccdt.write_text("{}")
    standin_connector(tmp_path / "qm2.db", qmgr="CCDTQM")
    before = os.environ.get("MQCCDTURL")
    settings = parse_ibmmq_url(f"ibmmq://CCDTQM?ccdt={ccdt}", env={})
    IBMMQTransport(settings).close()
    assert ibmmqc.CONNECTS[-1]["ccdt_url"] == f"file://{ccdt}"
    assert os.environ.get("MQCCDTURL") == before


def test_wrong_credentials_are_refused_with_a_typed_error(tmp_path):
    standin_connector(tmp_path / "qm.db", qmgr="SECURE", users={"app": "right"})
    url = "ibmmq://SECURE@localhost(1414)/DEV.APP.SVRCONN?user=app"
    with pytest.raises(NotAuthorized, match="2035"):
        IBMMQTransport(parse_ibmmq_url(url, env={"MQGATHER_MQ_PASSWORD": "wrong"}))
    IBMMQTransport(parse_ibmmq_url(url, env={"MQGATHER_MQ_PASSWORD": "right"})).close()


def test_long_property_values_are_read_whole(adapter):
    t = adapter()
    t.define(QueueAttributes(name="LONG"))
    reason = "the leg body is not valid JSON: Expecting value: line 1 column 1 " * 20
    props = {"mqgather_reason": reason, "blob": b"\x01" * 10_000}
    t.put("LONG", MQMessage(body=b"x", properties=props))
    t.commit()
    got = t.get("LONG")
    t.commit()
    assert got.properties == props


def test_the_body_comes_back_as_put_in_its_own_ccsid(adapter):
    t = adapter()
    t.define(QueueAttributes(name="EBCDIC"))
    t.put("EBCDIC", MQMessage(body=EBCDIC_HELLO, coded_char_set_id=37, encoding=785))
    t.commit()
    got = t.get("EBCDIC")
    t.commit()
    assert (got.body, got.coded_char_set_id, got.encoding) == (EBCDIC_HELLO, 37, 785)


def test_inquire_of_an_unknown_queue_is_a_typed_error(adapter):
    with pytest.raises(UnknownObjectName, match="2085"):
        adapter().inquire("NO.SUCH.QUEUE")


def test_a_listing_that_matches_nothing_is_empty(adapter):
    assert adapter().list_queues("NOTHING.HERE.*") == []


def test_replace_changes_only_the_attributes_it_names(tmp_path, adapter):
    t = adapter()
    with LocalQueueManager(tmp_path / "qm.db") as qm:
        qm.define(QueueAttributes(name="KEEP", descr="owned by payments", maxdepth=10))
    t.define(QueueAttributes(name="KEEP", maxdepth=77, bothresh=3), replace=True)
    with LocalQueueManager(tmp_path / "qm.db") as qm:
        now = qm.inquire("KEEP")
    assert (now.maxdepth, now.bothresh, now.descr) == (77, 3, "owned by payments")


def test_competing_consumers_share_a_queue_defined_for_exclusive_input(tmp_path):
    connect = standin_connector(tmp_path / "qm.db", qmgr="EXCL", exclusive_queues={"REPLIES"})
    a, b = connect(), connect()
    try:
        a.define(QueueAttributes(name="REPLIES"))
        for n in range(2):
            a.put("REPLIES", MQMessage(body=b"%d" % n), None)
        a.commit()
        got = {a.get("REPLIES").body, b.get("REPLIES").body}
        a.commit()
        b.commit()
    finally:
        a.close()
        b.close()
    assert got == {b"0", b"1"}


def test_close_backs_out_what_it_got(adapter):
    t = adapter()
    t.define(QueueAttributes(name="UOW"))
    t.put("UOW", MQMessage(body=b"keep me"))
    t.commit()
    assert t.get("UOW", syncpoint=True).body == b"keep me"
    t.close()  # MQDISC alone would commit the get
    other = adapter()
    again = other.get("UOW")
    other.commit()
    assert again.body == b"keep me" and again.backout_count == 1


def test_requests_with_a_reply_queue_go_out_as_requests(tmp_path, adapter):
    t = adapter()
    t.define(QueueAttributes(name="REQ"))
    t.put("REQ", MQMessage(body=b"q", reply_to_q="GATHER.IN"))
    t.put("REQ", MQMessage(body=b"d"))
    t.commit()
    with LocalQueueManager(tmp_path / "qm.db") as qm:
        kinds = [m.msg_type for m in qm.browse("REQ")]
    mq = sys.modules["ibmmq"]
    assert kinds == [mq.CMQC.MQMT_REQUEST, mq.CMQC.MQMT_DATAGRAM]


def test_the_libraries_own_tracing_is_off_so_trace_context_travels_once(adapter):
    t = adapter()
    import mqcommon  # the ibmmq package's own module

    assert mqcommon.OTelFunctions.put_trace_before is None
    assert mqcommon.OTelFunctions.open is None
    t.define(QueueAttributes(name="TRACE"))
    t.put("TRACE", MQMessage(body=b"t"))
    t.commit()
    assert "traceparent" not in t.get("TRACE").properties


@pytest.mark.parametrize("code", [2009, 2019, 2161, 2162, 2202, 2203, 2537, 2538, 2548, 2549])
def test_reasons_that_pass_with_time_are_transient(code):
    err = error_for_reason(code)
    assert isinstance(err, ConnectionBroken) and err.transient


def test_a_unit_of_work_the_queue_manager_backed_out_is_retried():
    err = error_for_reason(2003)
    assert isinstance(err, UnitOfWorkBackedOut) and err.transient


def test_forwarding_keeps_context_fields_byte_for_byte_whatever_their_bytes(adapter):
    """Context another application set in its own character set (here bytes that are not
    UTF-8) reaches the forwarded copy unchanged, within the field's length."""
    t = adapter()
    mq, C = t.mq, t.mq.CMQC
    for name in ("RAW.IN", "RAW.OUT"):
        t.define(QueueAttributes(name=name))
    sent = {"UserIdentifier": b"us\xe9r\xff", "ApplIdentityData": b"\xffid\x80" + b"x" * 28,
            "ApplOriginData": b"\xc1\xc2", "PutApplName": b"CICS\xe4PP"}  # fmt: skip
    md = mq.MD(**sent)
    pmo = mq.PMO(Options=C.MQPMO_SET_ALL_CONTEXT | C.MQPMO_NO_SYNCPOINT)
    q = mq.Queue(t.qmgr, "RAW.IN", C.MQOO_OUTPUT | C.MQOO_SET_ALL_CONTEXT)
    q.put(b"reply", md, pmo)
    q.close()
    got = t.get("RAW.IN")
    forward(t, "RAW.OUT", got, "late", "RAW.IN")
    t.commit()
    out = mq.MD()
    q = mq.Queue(t.qmgr, "RAW.OUT", C.MQOO_INPUT_SHARED)
    # Only its descriptor is read: its properties (the forward's reason) stay behind.
    q.get(None, out, mq.GMO(Options=C.MQGMO_NO_SYNCPOINT | C.MQGMO_NO_PROPERTIES))
    q.close()
    assert {name: bytes(getattr(out, name)).rstrip(b"\x00 ") for name in sent} == sent


def _big_queue(path) -> None:
    with LocalQueueManager(path) as qm:
        qm.define(QueueAttributes(name="BIG", maxmsgl=100 * 1024 * 1024))


def test_messages_over_four_megabytes_cross_a_channel_raised_to_carry_them(tmp_path):
    # The client's MQCD says 100 MB; the channel carries what the SVRCONN allows too.
    connect = standin_connector(tmp_path / "qm.db", qmgr="BIGMSG",
                                channel_maxmsgl=100 * 1024 * 1024)  # fmt: skip
    _big_queue(tmp_path / "qm.db")
    body = os.urandom(10 * 1024 * 1024)
    with connect() as qm:
        qm.put("BIG", MQMessage(body=body, properties={"n": 1}))
        qm.commit()
        got = qm.get("BIG")  # the library reads it again into a buffer of its length
        qm.commit()
    assert got.body == body and got.properties == {"n": 1}


def test_a_channel_left_at_four_megabytes_refuses_larger_messages_by_name(tmp_path):
    connect = standin_connector(tmp_path / "qm.db", qmgr="SMALLCHL")
    _big_queue(tmp_path / "qm.db")
    with LocalQueueManager(tmp_path / "qm.db") as local:
        local.put("BIG", MQMessage(body=b"x" * (5 * 1024 * 1024)))
        local.commit()
    with connect() as qm:
        with pytest.raises(MessageTooBig, match="MAXMSGL of the SVRCONN") as got:
            qm.get("BIG")
        assert got.value.code == 2010
        with pytest.raises(MessageTooBig, match="2010"):
            qm.put("BIG", MQMessage(body=b"y" * (5 * 1024 * 1024)))
        qm.backout()
    with LocalQueueManager(tmp_path / "qm.db") as local:
        assert local.inquire("BIG").curdepth == 1  # nothing got, nothing lost


def test_channel_and_host_names_that_begin_with_mq_travel_as_text(tmp_path):
    standin_connector(tmp_path / "qm.db", qmgr="QM1", channel="MQGATHER.SVRCONN")
    url = "ibmmq://QM1@MQHOST1(1414)/MQGATHER.SVRCONN"
    IBMMQTransport(parse_ibmmq_url(url, env={})).close()
    seen = ibmmqc.CONNECTS[-1]
    assert (seen["channel"], seen["conname"]) == ("MQGATHER.SVRCONN", "MQHOST1(1414)")
    assert (seen["channel_type"], seen["transport"]) == (ibmmqc.CHT_CLNTCONN, ibmmqc.XPT_TCP)


def test_replying_to_more_queues_than_maxhands_closes_the_least_recently_used(adapter):
    from bridge.mq.ibmmq_adapter import MAX_OPEN_QUEUES

    t = adapter()
    queues = [f"REPLY.{n:03d}" for n in range(300)]  # past the queue manager's MAXHANDS 256
    for queue in queues:
        t.define(QueueAttributes(name=queue))
    for queue in queues:
        t.put(queue, MQMessage(body=queue.encode()))
        assert ibmmqc.most_open_objects() <= MAX_OPEN_QUEUES + 2  # + the PCF queues
    t.commit()
    assert [t.get(queue).body for queue in queues[:3]] == [q.encode() for q in queues[:3]]
    t.commit()


def test_a_browse_cursor_survives_many_other_queues(adapter):
    t = adapter()
    t.define(QueueAttributes(name="BROWSED"))
    for n in range(3):
        t.put("BROWSED", MQMessage(body=b"%d" % n))
    t.commit()
    first = t.get("BROWSED", browse="first").body
    for n in range(200):  # enough other handles to evict an unpinned one
        t.define(QueueAttributes(name=f"OTHER.{n}"))
        t.put(f"OTHER.{n}", MQMessage(body=b"x"))
    t.commit()
    rest = [t.get("BROWSED", browse="next").body for _ in range(2)]
    assert [first, *rest] == [b"0", b"1", b"2"]


JMS_REPLY_PROPERTIES = {
    "JMSDestination": "queue:///GATHER.IN",
    "JMSDeliveryMode": 2,
    "JMSExpiration": 0,
    "JMSPriority": 4,
    "JMSTimestamp": 1_795_000_000_000,
    "JMSCorrelationID": "ID:414d51",
    "JMSType": "stock-reply",
    "leg": "STOCK",
}


def test_a_reply_from_a_jms_back_end_is_forwarded_with_what_mq_lets_be_set(tmp_path, adapter):
    t = adapter()
    t.define(QueueAttributes(name="FROM.JMS"))
    t.define(QueueAttributes(name="LATE"))
    with LocalQueueManager(tmp_path / "qm.db") as qm:  # as a JMS program puts it
        message = MQMessage(body=b"{}", properties=JMS_REPLY_PROPERTIES)
        qm.put("FROM.JMS", message, PutOptions(syncpoint=False))
    got = t.get("FROM.JMS")
    assert got.properties == JMS_REPLY_PROPERTIES  # MQINQMP shows them all
    forward(t, "LATE", got, "late", "FROM.JMS")
    t.commit()
    copy = t.get("LATE")
    t.commit()
    kept = {k: v for k, v in copy.properties.items() if not k.startswith("mqgather")}
    assert kept == {"JMSCorrelationID": "ID:414d51", "JMSType": "stock-reply", "leg": "STOCK"}
    assert (copy.body, copy.persistence, copy.priority) == (b"{}", got.persistence, got.priority)


def test_mq_refuses_the_jms_names_it_sets_itself(adapter):
    t = adapter()
    mq = sys.modules["ibmmq"]
    handle = mq.MessageHandle(t.qmgr)
    try:
        with pytest.raises(mq.MQMIError) as refused:
            handle.properties.set("JMSTimestamp", 1, property_type=mq.CMQC.MQTYPE_INT64)
        assert refused.value.reason == 2442
        handle.properties.set("JMSType", "x", property_type=mq.CMQC.MQTYPE_STRING)
    finally:
        handle.dlt()


def test_under_a_ccdt_group_dead_letters_name_the_queue_manager_reached(tmp_path):
    from bridge.mq import dlh

    ccdt = tmp_path / "ccdt.json"
    ccdt.write_text("{}")
    standin_connector(tmp_path / "qm.db", qmgr="PAYQM2", group="PAY")
    t = IBMMQTransport(parse_ibmmq_url(f"ibmmq://*PAY?ccdt={ccdt}", env={}))
    try:
        assert t.qmgr_name == "PAYQM2"
        t.define(QueueAttributes(name="DLQ"))
        forward(t, "DLQ", MQMessage(body=b"x"), "undeliverable", "IN", dead_letter_reason=2053)
        t.commit()
        header, body = dlh.unpack(t.get("DLQ").body)
        t.commit()
    finally:
        t.close()
    assert (header.dest_q_mgr_name, body) == ("PAYQM2", b"x")


def test_a_queue_defined_through_the_adapter_keeps_its_description(tmp_path, adapter):
    adapter().define(QueueAttributes(name="DESCRIBED", descr="replies from payments"))
    with LocalQueueManager(tmp_path / "qm.db") as qm:
        assert qm.inquire("DESCRIBED").descr == "replies from payments"


def test_a_forwarded_report_keeps_its_message_type_report_options_and_feedback(tmp_path, adapter):
    mq = sys.modules["ibmmq"]
    C = mq.CMQC
    t = adapter()
    t.define(QueueAttributes(name="REPORTS"))
    t.define(QueueAttributes(name="UNKNOWN"))
    # Reports on it are asked for, so it names where they go (MQ refuses it otherwise).
    original = MQMessage(body=b"expired", msg_type=C.MQMT_REPORT, feedback=C.MQFB_EXPIRATION,
                         report=C.MQRO_EXPIRATION_WITH_DATA | C.MQRO_PASS_CORREL_ID,
                         reply_to_q="APP.REPORTS")  # fmt: skip
    with LocalQueueManager(tmp_path / "qm.db") as qm:
        qm.put("REPORTS", original, PutOptions(syncpoint=False))
    got = t.get("REPORTS")
    forward(t, "UNKNOWN", got, "unknown", "REPORTS")
    t.commit()
    copy = t.get("UNKNOWN")
    t.commit()
    fields = ("msg_type", "report", "feedback")
    assert copy.model_dump(include=set(fields)) == original.model_dump(include=set(fields))


def test_the_key_repository_password_travels_in_the_mqsco_from_a_file(tmp_path):
    standin_connector(tmp_path / "qm.db", qmgr="TLSQM")
    secret = tmp_path / "keyrepo-password"
    secret.write_text("s3cret-from-a-file\n")
    url = (f"ibmmq://TLSQM@localhost(1414)/DEV.APP.SVRCONN?cipher=ANY_TLS13_OR_HIGHER"
           f"&keyrepo=/tls/mq-client.p12&keyrepo_password_file={secret}")  # fmt: skip
    settings = parse_ibmmq_url(url, env={})
    assert "s3cret" not in settings.describe() and "s3cret" not in repr(settings)
    IBMMQTransport(settings).close()
    seen = ibmmqc.CONNECTS[-1]
    assert seen["key_repository"] == "/tls/mq-client.p12"
    assert seen["keyrepo_password"] == "s3cret-from-a-file"
    assert "s3cret" not in "".join(os.environ.values())


def test_a_key_repository_password_in_the_url_is_refused():
    from mqgather.errors import ConfigError

    with pytest.raises(ConfigError, match="not the URL"):
        parse_ibmmq_url("ibmmq://QM@h(1)/CH?keyrepo=/k&keyrepo_password=x", env={})


#: "Hello" in a CCSID the queue manager has no conversion for, as an EBCDIC back end sets
#: it (ValueCCSID 4711); valid UTF-8 it is not.
UNCONVERTIBLE = {"note": "Hello".encode("cp037"), ibmmqc.UNCONVERTIBLE + "note": 4711}


def test_a_property_mq_cannot_convert_is_reported_not_raised(tmp_path, adapter):
    t = adapter()
    t.define(QueueAttributes(name="ODD"))
    with LocalQueueManager(tmp_path / "qm.db") as qm:
        odd = MQMessage(body=b"{}", properties={"leg": "TAX", **UNCONVERTIBLE})
        qm.put("ODD", odd, PutOptions(syncpoint=False))
        qm.put(
            "ODD", MQMessage(body=b"next", properties={"leg": "TAX"}), PutOptions(syncpoint=False)
        )
    got = t.get("ODD")
    assert got.properties == {"leg": "TAX"} and got.body == b"{}"
    assert "MQRC_PROP_VALUE_NOT_CONVERTED" in got.unreadable
    assert t.get("ODD").body == b"next"  # nothing stalls behind it
    t.commit()


def test_a_message_whose_property_mq_cannot_convert_goes_aside_with_it_intact(tmp_path, adapter):
    """Moved aside on the connection that got it, the message keeps every property as MQ
    holds it: the one no one could read (its bytes and its CCSID), the readable ones,
    and the reason added; a property taken off the copy is not on it. Put on another
    connection, only what could be read goes with it."""
    t, other = adapter(), adapter()
    for name in ("ODD3", "ASIDE", "ELSEWHERE"):
        t.define(QueueAttributes(name=name))
    with LocalQueueManager(tmp_path / "qm.db") as qm:
        odd = MQMessage(body=b"{}", properties={"leg": "TAX", "gone": None, "nan": math.nan,
                                                **UNCONVERTIBLE})  # fmt: skip
        qm.put("ODD3", odd, PutOptions(syncpoint=False))
        qm.put("ODD3", odd, PutOptions(syncpoint=False))
    first, second = t.get("ODD3"), t.get("ODD3")
    assert first.kept_handle and second.kept_handle and first.kept_handle != second.kept_handle
    trimmed = first.model_copy(update={"properties": {
        k: v for k, v in first.properties.items() if k != "gone"}})  # fmt: skip
    forward(t, "ASIDE", trimmed, "unreadable property", "ODD3")
    forward(other, "ELSEWHERE", second, "unreadable property", "ODD3")
    t.commit()
    other.commit()
    assert not t._kept  # released with the unit of work
    with LocalQueueManager(tmp_path / "qm.db") as qm:
        aside = qm.get("ASIDE", syncpoint=False).properties
        elsewhere = qm.get("ELSEWHERE", syncpoint=False).properties
    unreadable = {k: aside[k] for k in UNCONVERTIBLE}
    assert unreadable == UNCONVERTIBLE and aside["leg"] == "TAX" and math.isnan(aside["nan"])
    assert "gone" not in aside and aside["mqgather_reason"] == "unreadable property"
    assert "note" not in elsewhere and elsewhere["leg"] == "TAX" and "gone" in elsewhere


def test_a_dead_letter_put_back_keeps_a_property_mq_cannot_convert(tmp_path, adapter):
    """`mqgather queues retry` over IBM MQ: the message goes where it was going with the
    property no one could read, as MQ held it."""
    from bridge.mq.deadletters import retry_dead_letters
    from bridge.mq.dlh import dead_letter

    t = adapter()
    for name in ("DLQ", "APP.REPLY"):
        t.define(QueueAttributes(name=name))
    letter = dead_letter(MQMessage(body=b"{}", properties={"leg": "TAX", **UNCONVERTIBLE}),
                         2053, "APP.REPLY", t.qmgr_name, "mqgather")  # fmt: skip
    with LocalQueueManager(tmp_path / "qm.db") as qm:
        qm.put("DLQ", letter, PutOptions(syncpoint=False, set_all_context=True))
    report = retry_dead_letters(t, "DLQ")
    with LocalQueueManager(tmp_path / "qm.db") as qm:
        back = qm.get("APP.REPLY", syncpoint=False)
    assert [r.fate for r in report.chosen] == ["put"]
    assert {k: back.properties[k] for k in UNCONVERTIBLE} == UNCONVERTIBLE
    assert (back.body, back.properties["leg"]) == (b"{}", "TAX")


def test_a_message_handle_serves_the_connection_that_made_it_only(adapter):
    """As in MQ: another connection's MQSETMP, MQINQMP, MQDLTMP or MQDLTMH on it fails
    with MQRC_HMSG_ERROR (2460), which is why the adapter keeps a got message's handle
    by a token of its own, never by the handle's number."""
    mine, other = adapter(), adapter()
    mq = sys.modules["ibmmq"]
    handle = mq.MessageHandle(mine.qmgr)
    borrowed = mq.MessageHandle(other.qmgr, dup_handle=handle.msg_handle)
    calls = (lambda: borrowed.properties.set("leg", "TAX"),
             lambda: borrowed.properties.get("leg"),
             lambda: borrowed.properties.dlt("leg"),
             lambda: borrowed.dlt())  # fmt: skip
    for call in calls:
        with pytest.raises(mq.MQMIError) as refused:
            call()
        assert refused.value.reason == mq.CMQC.MQRC_HMSG_ERROR
    handle.properties.set("leg", "TAX")
    handle.dlt()


def test_a_get_or_put_with_another_connections_message_handle_fails_and_moves_nothing(
    tmp_path, adapter
):
    """MQGET's MsgHandle and MQPUT's OriginalMsgHandle too (and a get asking for the
    properties in a handle and giving none): 2460, and the message the get would have
    taken stays on its queue, the one the put would have put is nowhere."""
    mine, other = adapter(), adapter()
    mine.define(QueueAttributes(name="HELD"))
    mine.put("HELD", MQMessage(body=b"kept", properties={"leg": "TAX"}))
    mine.commit()
    mq, C = sys.modules["ibmmq"], sys.modules["ibmmq"].CMQC
    handle = mq.MessageHandle(mine.qmgr)
    handle.properties.set("leg", "FX")
    try:
        queue = mq.Queue(other.qmgr, "HELD", C.MQOO_INPUT_SHARED | C.MQOO_OUTPUT)
        gmo = mq.GMO(Options=C.MQGMO_PROPERTIES_IN_HANDLE | C.MQGMO_SYNCPOINT,
                     Version=C.MQGMO_VERSION_4, MsgHandle=handle.msg_handle)  # fmt: skip
        pmo = mq.PMO(Options=C.MQPMO_NO_SYNCPOINT, Version=C.MQPMO_VERSION_3,
                     OriginalMsgHandle=handle.msg_handle)  # fmt: skip
        bare = mq.GMO(Options=C.MQGMO_PROPERTIES_IN_HANDLE | C.MQGMO_SYNCPOINT,
                      Version=C.MQGMO_VERSION_4)  # fmt: skip
        calls = (lambda: queue.get(None, mq.MD(), gmo),
                 lambda: queue.get(None, mq.MD(), bare),
                 lambda: queue.put(b"not put", mq.MD(), pmo),
                 lambda: other.qmgr.put1("HELD", b"not put", mq.MD(), pmo))  # fmt: skip
        for call in calls:
            with pytest.raises(mq.MQMIError) as refused:
                call()
            assert refused.value.reason == C.MQRC_HMSG_ERROR
        other.commit()
        queue.close()
    finally:
        handle.dlt()
    with LocalQueueManager(tmp_path / "qm.db") as qm:
        assert qm.inquire("HELD").curdepth == 1
        left = qm.get("HELD", syncpoint=False)
    assert (left.body, left.properties) == (b"kept", {"leg": "TAX"})


def test_the_library_fails_on_such_a_value_without_conversion_too(tmp_path, adapter):
    """Why the adapter cannot simply read it unconverted: the C layer decodes strictly."""
    t = adapter()
    t.define(QueueAttributes(name="ODD2"))
    with LocalQueueManager(tmp_path / "qm.db") as qm:
        qm.put("ODD2", MQMessage(body=b"x", properties=UNCONVERTIBLE), PutOptions(syncpoint=False))
    mq = sys.modules["ibmmq"]
    handle = mq.MessageHandle(t.qmgr)
    try:
        queue = mq.Queue(t.qmgr, "ODD2", mq.CMQC.MQOO_INPUT_SHARED)
        gmo = mq.GMO(Options=mq.CMQC.MQGMO_PROPERTIES_IN_HANDLE | mq.CMQC.MQGMO_NO_SYNCPOINT,
                     Version=mq.CMQC.MQGMO_VERSION_4, MsgHandle=handle.msg_handle)  # fmt: skip
        queue.get(None, mq.MD(), gmo)
        with pytest.raises(UnicodeDecodeError):
            handle.properties.get("%", impo=mq.IMPO(Options=mq.CMQC.MQIMPO_INQ_FIRST))
        queue.close()
    finally:
        handle.dlt()


def test_a_string_property_keeps_a_nul_inside_it(adapter):
    t = adapter()
    t.define(QueueAttributes(name="NUL"))
    props = {"ref": "A\x00B", "plain": "caf\u00e9"}
    t.put("NUL", MQMessage(body=b"x", properties=props))
    t.commit()
    assert t.get("NUL").properties == props
    t.commit()


def test_a_property_name_mq_refuses_does_not_block_the_message(tmp_path, adapter, caplog):
    t = adapter()
    t.define(QueueAttributes(name="FROM.RFH2"))
    t.define(QueueAttributes(name="FAILED"))
    props = {"Root.Custom": "x", "usr.AND": 1, "leg": "TAX"}  # as an RFH2 writer could
    with LocalQueueManager(tmp_path / "qm.db") as qm:
        qm.put("FROM.RFH2", MQMessage(body=b"b", properties=props), PutOptions(syncpoint=False))
    got = t.get("FROM.RFH2")
    forward(t, "FAILED", got, "failure", "FROM.RFH2")
    t.commit()
    copy = t.get("FAILED")
    t.commit()
    assert copy.body == b"b" and copy.properties["leg"] == "TAX"
    assert "Root.Custom" not in copy.properties and "AND" not in copy.properties
    assert "'Root.Custom' refused by MQ (MQRC_PROPERTY_NAME_ERROR" in caplog.text


@pytest.mark.parametrize(
    ("priority", "completion", "reason", "stored"),
    [(-2, "MQCC_FAILED", 2050, None), (12, "MQCC_WARNING", 2049, 9), (-1, None, None, 0)],
)
def test_a_priority_is_taken_as_mq_takes_it(adapter, priority, completion, reason, stored):
    # The message model keeps a priority to 0-9, so the adapter never sends these; the
    # stand-in answers them as MQ does, for any caller of the library.
    t = adapter()
    t.define(QueueAttributes(name="PRIO"))
    mq = sys.modules["ibmmq"]
    md = mq.MD(Priority=priority)
    if completion is None:
        mq.Queue(t.qmgr, "PRIO").put(b"x", md)
    else:
        with pytest.raises(mq.MQMIError) as said:
            mq.Queue(t.qmgr, "PRIO").put(b"x", md)
        assert (said.value.comp, said.value.reason) == (getattr(mq.CMQC, completion), reason)
    t.commit()
    kept = [m.priority for m in t.browse("PRIO")]
    assert kept == ([] if stored is None else [stored])


@pytest.mark.parametrize(
    "name", ["leg name", "leg-name", "a=b", "2leg", ".leg", "le\U0001f600g", "x\u00b2"]
)
def test_mq_refuses_a_property_name_that_is_no_java_identifier(tmp_path, name):
    """MQSETMP's names are Java identifiers with inner dots, within Unicode's Basic
    Multilingual Plane (2442 otherwise); a NUL inside one is Java's too. Passed as bytes
    in the process's CCSID (UTF-8 here): the library would encode a str as ASCII."""
    t = standin_connector(tmp_path / "qm.db", application_ccsid=1208)()
    mq = sys.modules["ibmmq"]
    handle = mq.MessageHandle(t.qmgr)
    try:
        with pytest.raises(mq.MQMIError) as refused:
            handle.properties.set(name.encode(), "x", property_type=mq.CMQC.MQTYPE_STRING)
        assert refused.value.reason == mq.CMQC.MQRC_PROPERTY_NAME_ERROR
        for fine in ("leg", "$amount", "café_2.x", "a\x00b", "mq_usr.a.b"):
            handle.properties.set(fine.encode(), "x", property_type=mq.CMQC.MQTYPE_STRING)
    finally:
        handle.dlt()
        t.close()


#: Names MQ takes (Java identifiers), none of them ASCII, as a JMS back end may set them:
#: "größe" has a form in CCSID 819, "価格" none.
NOT_ASCII = {"größe": "XL", "価格": 12, "leg": "TAX"}


@pytest.mark.parametrize("ccsid", [1208, 819])
def test_a_property_name_that_is_not_ascii_goes_on_with_its_message(tmp_path, ccsid):
    """The library encodes a name it is given as ASCII, and reads a name back in the
    process's own CCSID (MQCCSI_APPL) as UTF-8. With a UTF-8 locale (1208) the adapter
    reads such names and writes them back as UTF-8; in a C locale (819) it cannot read
    them (the bytes are not UTF-8, or 2492 where 819 has no such letter), and the copy
    goes with the handle it was got with, so MQ copies them. Either way the forwarded
    copy has every property, and nothing raises out of the adapter."""
    t = standin_connector(tmp_path / "qm.db", application_ccsid=ccsid)()
    try:
        for name in ("FROM.JMS", "OUT"):
            t.define(QueueAttributes(name=name))
        with LocalQueueManager(tmp_path / "qm.db") as qm:
            message = MQMessage(body=b"b", properties=NOT_ASCII)
            qm.put("FROM.JMS", message, PutOptions(syncpoint=False))
        got = t.get("FROM.JMS")
        assert got.properties == (NOT_ASCII if ccsid == 1208 else {"leg": "TAX"})
        forward(t, "OUT", got, "failure", "FROM.JMS")
        t.commit()
    finally:
        t.close()
    with LocalQueueManager(tmp_path / "qm.db") as qm:
        copy = qm.get("OUT", syncpoint=False)
    assert {k: copy.properties[k] for k in NOT_ASCII} == NOT_ASCII
    assert copy.body == b"b" and copy.properties["mqgather_reason"]


def test_a_property_name_that_is_not_text_is_left_off_and_the_message_goes(
    tmp_path, adapter, caplog
):
    """IBM MQ holds no such name (a lone surrogate); given one by a caller, the adapter
    puts the message without it, saying so, as it does for a name MQ refuses."""
    t = adapter()
    t.define(QueueAttributes(name="ODDNAME"))
    t.put("ODDNAME", MQMessage(body=b"b", properties={"k\udcff": 1, "leg": "TAX"}))
    t.commit()
    assert t.get("ODDNAME").properties == {"leg": "TAX"}
    t.commit()
    assert "has a name that is not text" in caplog.text


def _raw(t, queue: str, options: int):
    """``queue`` opened straight through the library with ``options``."""
    return t.mq.Queue(t.qmgr, queue, options)


#: Calls IBM MQ's rules for validating MQI options refuse with MQRC_OPTIONS_ERROR, each
#: with a queue holding one message and open for all it needs.
BAD_OPTIONS = {
    "open for two kinds of input": lambda mq, C, q, t: _raw(
        t, "OPTS", C.MQOO_INPUT_SHARED | C.MQOO_INPUT_EXCLUSIVE
    ),
    "open to set context without output": lambda mq, C, q, t: _raw(
        t, "OPTS", C.MQOO_INPUT_SHARED | C.MQOO_SET_ALL_CONTEXT
    ),
    "open to save context without input": lambda mq, C, q, t: _raw(
        t, "OPTS", C.MQOO_OUTPUT | C.MQOO_SAVE_ALL_CONTEXT
    ),
    "put in and out of syncpoint": lambda mq, C, q, t: q.put(
        b"x", mq.MD(), mq.PMO(Options=C.MQPMO_SYNCPOINT | C.MQPMO_NO_SYNCPOINT)
    ),
    "put with two kinds of context": lambda mq, C, q, t: q.put(
        b"x", mq.MD(), mq.PMO(Options=C.MQPMO_NO_CONTEXT | C.MQPMO_DEFAULT_CONTEXT)
    ),
    "put with another user's authority": lambda mq, C, q, t: q.put(
        b"x", mq.MD(), mq.PMO(Options=C.MQPMO_ALTERNATE_USER_AUTHORITY)
    ),
    "put1 in logical order": lambda mq, C, q, t: t.qmgr.put1(
        "OPTS", b"x", mq.MD(), mq.PMO(Options=C.MQPMO_LOGICAL_ORDER)
    ),
    "get in and out of syncpoint": lambda mq, C, q, t: q.get(
        None, mq.MD(), mq.GMO(Options=C.MQGMO_SYNCPOINT | C.MQGMO_NO_SYNCPOINT)
    ),
    "browse under syncpoint": lambda mq, C, q, t: q.get(
        None, mq.MD(), mq.GMO(Options=C.MQGMO_BROWSE_FIRST | C.MQGMO_SYNCPOINT)
    ),
    "browse first and next": lambda mq, C, q, t: q.get(
        None, mq.MD(), mq.GMO(Options=C.MQGMO_BROWSE_FIRST | C.MQGMO_BROWSE_NEXT)
    ),
    "properties both in a handle and not at all": lambda mq, C, q, t: q.get(
        None,
        mq.MD(),
        mq.GMO(Options=C.MQGMO_NO_SYNCPOINT | C.MQGMO_PROPERTIES_IN_HANDLE | C.MQGMO_NO_PROPERTIES),
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_OPTIONS))
def test_options_mq_refuses_together_fail_and_move_nothing(tmp_path, adapter, case):
    """MQOPEN, MQPUT, MQPUT1 and MQGET check their options as IBM MQ's "rules for
    validating MQI options" state (2046), before anything is got or put."""
    t = adapter()
    t.define(QueueAttributes(name="OPTS"))
    t.put("OPTS", MQMessage(body=b"kept"))
    t.commit()
    mq, C = t.mq, t.mq.CMQC
    q = _raw(t, "OPTS", C.MQOO_INPUT_SHARED | C.MQOO_BROWSE | C.MQOO_OUTPUT)
    with pytest.raises(mq.MQMIError) as refused:
        BAD_OPTIONS[case](mq, C, q, t)
    assert refused.value.reason == C.MQRC_OPTIONS_ERROR
    t.commit()
    q.close()
    with LocalQueueManager(tmp_path / "qm.db") as qm:
        assert qm.inquire("OPTS").curdepth == 1
        assert qm.get("OPTS", syncpoint=False).body == b"kept"


def test_a_get_that_names_no_syncpoint_option_is_outside_the_unit_of_work(tmp_path, adapter):
    """Outside z/OS a get with neither MQGMO_SYNCPOINT nor MQGMO_NO_SYNCPOINT takes its
    message for good: a backout does not bring it back."""
    t = adapter()
    t.define(QueueAttributes(name="NOSP"))
    t.put("NOSP", MQMessage(body=b"taken"))
    t.commit()
    mq, C = t.mq, t.mq.CMQC
    q = _raw(t, "NOSP", C.MQOO_INPUT_SHARED)
    assert q.get(None, mq.MD(), mq.GMO(Options=C.MQGMO_NO_WAIT)) == b"taken"
    t.backout()
    q.close()
    with LocalQueueManager(tmp_path / "qm.db") as qm:
        assert qm.inquire("NOSP").curdepth == 0


def test_mq_reads_only_the_fields_of_the_structure_version_given(tmp_path, adapter):
    """A version 1 MQGMO has no MatchOptions (MsgId and CorrelId match), a version 2 or
    3 no MsgHandle, and a version 1 or 2 MQPMO no message handles: their properties are
    not put."""
    t = adapter()
    t.define(QueueAttributes(name="VERS"))
    for correl in (b"A" * 24, b"B" * 24):
        t.put("VERS", MQMessage(body=correl[:1], correl_id=correl))
    t.commit()
    mq, C = t.mq, t.mq.CMQC
    q = _raw(t, "VERS", C.MQOO_INPUT_SHARED | C.MQOO_OUTPUT)
    handle = mq.MessageHandle(t.qmgr)
    try:
        wanted = mq.MD(CorrelId=b"B" * 24)
        old = mq.GMO(Options=C.MQGMO_NO_SYNCPOINT, Version=C.MQGMO_VERSION_1, MatchOptions=0)
        assert q.get(None, wanted, old) == b"B"
        # Without MsgHandle in its version, the get asks for a handle and names none.
        asks = mq.GMO(Options=C.MQGMO_NO_SYNCPOINT | C.MQGMO_PROPERTIES_IN_HANDLE,
                      Version=C.MQGMO_VERSION_3, MsgHandle=handle.msg_handle)  # fmt: skip
        with pytest.raises(mq.MQMIError) as refused:
            q.get(None, mq.MD(), asks)
        assert refused.value.reason == C.MQRC_HMSG_ERROR
        handle.properties.set("leg", "TAX")
        pmo = mq.PMO(Options=C.MQPMO_NO_SYNCPOINT, Version=C.MQPMO_VERSION_2,
                     OriginalMsgHandle=handle.msg_handle)  # fmt: skip
        q.put(b"bare", mq.MD(), pmo)
    finally:
        handle.dlt()
        q.close()
    with LocalQueueManager(tmp_path / "qm.db") as qm:
        assert [(m.body, m.properties) for m in qm.browse("VERS")] == [(b"A", {}), (b"bare", {})]


def test_a_get_of_properties_without_a_handle_is_refused_loudly(tmp_path, adapter):
    """MQ would hand them over in an MQRFH2 header before the body, which the stand-in
    does not build; asked for none (MQGMO_NO_PROPERTIES), the body comes alone."""
    t = adapter()
    t.define(QueueAttributes(name="RFH"))
    t.put("RFH", MQMessage(body=b"b", properties={"leg": "TAX"}))
    t.commit()
    mq, C = t.mq, t.mq.CMQC
    q = _raw(t, "RFH", C.MQOO_BROWSE)
    with pytest.raises(NotImplementedError, match="MQRFH2"):
        q.get(None, mq.MD(), mq.GMO(Options=C.MQGMO_BROWSE_FIRST))
    bare = mq.GMO(Options=C.MQGMO_BROWSE_FIRST | C.MQGMO_NO_PROPERTIES)
    assert q.get(None, mq.MD(), bare) == b"b"
    q.close()


def test_a_call_from_another_thread_waits_out_a_get_under_way(adapter):
    """The library connects with MQCNO_HANDLE_SHARE_BLOCK, so MQ runs one call at a time
    on a connection: a put from another thread waits while a get waits for a message."""
    t = adapter()
    for name in ("EMPTY", "OTHER"):
        t.define(QueueAttributes(name=name))
    mq, C = t.mq, t.mq.CMQC
    q = _raw(t, "EMPTY", C.MQOO_INPUT_SHARED)
    ended: list[str] = []

    def waiting_get() -> None:
        gmo = mq.GMO(Options=C.MQGMO_WAIT | C.MQGMO_NO_SYNCPOINT, WaitInterval=1500)
        with pytest.raises(mq.MQMIError) as nothing:
            q.get(None, mq.MD(), gmo)
        ended.append(f"get {nothing.value.reason}")

    getter = threading.Thread(target=waiting_get)
    getter.start()
    busy, deadline = ibmmqc._conns[t.qmgr.get_handle()].busy, time.monotonic() + 10
    while busy.acquire(blocking=False):  # until the getter is inside its call
        busy.release()
        assert time.monotonic() < deadline, "the get never held its connection"
        time.sleep(0.001)
    t.put("OTHER", MQMessage(body=b"x"))
    ended.append("put")
    getter.join()
    q.close()
    t.commit()
    assert ended == [f"get {C.MQRC_NO_MSG_AVAILABLE}", "put"]
