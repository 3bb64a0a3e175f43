"""Ids and typed properties of the message model."""

from __future__ import annotations

import pytest

from bridge.mq.models import MQMessage, format_id, parse_id
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
