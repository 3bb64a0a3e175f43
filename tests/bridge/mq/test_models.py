"""Ids and typed properties of the message model."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from bridge.mq.models import (
    FINGERPRINT_HEX,
    MQMT_REPORT,
    MQMessage,
    MsgFlags,
    QueueAttributes,
    fingerprint,
    format_id,
    not_whole,
    parse_id,
)
from mqgather.errors import ConfigError


def test_text_ids_are_nul_padded_like_mq():
    assert parse_id("R1") == b"R1" + b"\x00" * 22
    assert parse_id("hex:0102") == b"\x01\x02" + b"\x00" * 22
    assert format_id(parse_id("hex:" + "ff" * 24)) == "hex:" + "ff" * 24


@pytest.mark.parametrize("bad", ["x" * 25, "hex:zz", "hex:" + "00" * 25])
def test_bad_ids_are_refused(bad):
    with pytest.raises(ConfigError):
        parse_id(bad)


def test_json_round_trip_keeps_property_types_and_binary_body():
    m = MQMessage(
        body=b"\xff\x00",
        correl_id=b"c",
        properties={"s": "1", "i": 1, "f": 1.0, "b": True, "y": b"1", "n": None},
    )
    again = MQMessage.model_validate_json(m.model_dump_json())
    assert again == m
    assert [type(v) for v in again.properties.values()] == [
        str,
        int,
        float,
        bool,
        bytes,
        type(None),
    ]


def test_out_of_range_integer_property_is_refused():
    with pytest.raises(ValueError, match="64-bit"):
        MQMessage(properties={"n": 2**64})


def test_properties_survive_json_losslessly():
    import math

    props = {"nan": math.nan, "inf": math.inf, "ninf": -math.inf, "raw": "a\udcff",
             "b": b"\x00\xff", "i": 2**63 - 1, "t": True, "n": None, "s": "é"}  # fmt: skip
    back = MQMessage.model_validate_json(MQMessage(properties=props).model_dump_json()).properties
    assert math.isnan(back.pop("nan")) and back.pop("inf") == math.inf
    props.pop("nan"), props.pop("inf")
    assert back == props and type(back["t"]) is bool


def test_a_tagged_property_of_the_wrong_type_is_a_validation_error():
    import pydantic
    import pytest

    for bad in ({"type": "float64", "value": None}, {"type": "int64", "value": "7"},
                {"type": "bytes", "value": "!!"}, {"type": "weird", "value": 1}):  # fmt: skip
        with pytest.raises(pydantic.ValidationError, match="property 'p'"):
            MQMessage.model_validate({"properties": {"p": bad}})


@pytest.mark.parametrize(
    "field", ["expiry", "persistence", "msg_flags", "encoding", "report", "feedback", "msg_type"]
)
@pytest.mark.parametrize("value", [2**31, -(2**31) - 1])
def test_an_mqmd_number_is_an_mqlong(field, value):
    # A number no MQLONG holds cannot be packed into an MQMD: refused where it is made,
    # not at the put, where the IBM MQ client's packing would fail without a reason code.
    with pytest.raises(ValidationError, match=field):
        MQMessage(**{field: value})
    assert getattr(MQMessage(**{field: 2**31 - 1}), field) == 2**31 - 1


@pytest.mark.parametrize(
    "attrs", [{"maxdepth": 1_000_000_000}, {"bothresh": 2**31}, {"maxmsgl": 104_857_601}]
)
def test_queue_attributes_are_those_mq_takes(attrs):
    with pytest.raises(ValidationError, match=next(iter(attrs))):
        QueueAttributes(name="Q", **attrs)


def test_a_fingerprint_leaves_out_what_a_redelivery_changes_and_keeps_everything_else():
    base = MQMessage(
        msg_id=b"M" * 24, correl_id=b"C" * 24, reply_to_q="Q", body=b"body",
        properties={"a": 1, "b": "x", "f": float("nan"), "s": "caf\udce9"},
        put_date_time=datetime(2026, 1, 1, tzinfo=UTC),
    )  # fmt: skip
    same = fingerprint(base)
    assert len(same) == FINGERPRINT_HEX and int(same, 16) >= 0
    # As a release before Offset and OriginalLength were kept computed it: a redelivery
    # of a message signalled by it is still known.
    assert same == "b128ce6d57ebf18d"
    assert fingerprint(base.model_copy(update={"backout_count": 4, "expiry": 17})) == same
    # Properties are compared as a set of names and values, whatever their order.
    reordered = dict(reversed(list(base.properties.items())))
    assert fingerprint(base.model_copy(update={"properties": reordered})) == same
    changes = {
        "correl_id": b"D" * 24, "group_id": b"G" * 24, "msg_seq_number": 2, "msg_flags": 8,
        "format": "MQHRF2", "coded_char_set_id": 1047, "encoding": 785, "persistence": 0,
        "priority": 5, "reply_to_q": "R", "reply_to_qmgr": "QM2", "put_appl_name": "app",
        "put_date_time": datetime(2026, 1, 2, tzinfo=UTC), "user_identifier": "u",
        "accounting_token": b"\x01" * 32, "appl_identity_data": "i", "put_appl_type": 11,
        "appl_origin_data": "o", "msg_type": 2, "report": 1, "feedback": 256,
        "offset": 100, "original_length": 4,
        "properties": {**base.properties, "a": True}, "body": b"bodY", "msg_id": b"N" * 24,
    }  # fmt: skip
    for field, value in changes.items():
        assert fingerprint(base.model_copy(update={field: value})) != same, field


@pytest.mark.parametrize(
    ("flags", "named"),
    [(MsgFlags.SEGMENT, "MQMF_SEGMENT"), (MsgFlags.LAST_SEGMENT, "MQMF_LAST_SEGMENT"),
     (MsgFlags.SEGMENT | MsgFlags.MSG_IN_GROUP, "MQMF_SEGMENT")],
)  # fmt: skip
def test_a_segment_is_not_a_whole_message_and_says_what_to_change(flags, named):
    reason = not_whole(MQMessage(msg_flags=flags, body=b"part"))
    assert f"(MsgFlags {named})" in reason and "MAXMSGL" in reason


def test_whole_messages_and_reports_on_segments_are_whole():
    assert not_whole(MQMessage(body=b"x")) == ""
    assert not_whole(MQMessage(msg_flags=MsgFlags.LAST_MSG_IN_GROUP, body=b"x")) == ""
    # A report on a segment copies the segment's flags; its own data is whole.
    report = MQMessage(msg_type=MQMT_REPORT, msg_flags=MsgFlags.SEGMENT, original_length=9)
    assert not_whole(report) == ""
