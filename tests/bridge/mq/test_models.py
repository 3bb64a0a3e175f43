"""Ids and typed properties of the message model."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bridge.mq.models import MQMessage, QueueAttributes, format_id, parse_id
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
