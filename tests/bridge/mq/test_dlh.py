"""The MQDLH as IBM MQ lays it out."""

from __future__ import annotations

import struct
from datetime import UTC, datetime

import pytest

from bridge.mq import dlh
from bridge.mq.models import MQMessage


def test_header_layout_and_round_trip():
    original = MQMessage(msg_id=b"M" * 24, format="MQSTR", body=b"payload")
    when = datetime(2026, 3, 4, 5, 6, 7, 890_000, tzinfo=UTC)
    dead = dlh.dead_letter(original, 2085, "NO.SUCH.Q", "QM1", "mqgather", when)
    assert dead.format == "MQDEAD" and dead.msg_id == original.msg_id
    raw = dead.body
    assert dlh.LENGTH == 172 and raw[:4] == b"DLH "
    assert struct.unpack_from("<ii", raw, 4) == (1, 2085)  # Version, Reason
    assert raw[12:60] == b"NO.SUCH.Q".ljust(48)  # DestQName
    assert raw[108:112] == struct.pack("<i", 546)  # Encoding: native
    assert raw[116:124] == b"MQSTR   "  # Format of what follows
    assert raw[156:164] == b"20260304" and raw[164:172] == b"05060789"
    header, body = dlh.unpack(raw)
    assert body == b"payload" and header.dest_q_mgr_name == "QM1"
    assert header.put_appl_name == "mqgather" and header.coded_char_set_id == 1208


def test_a_body_without_a_header_is_refused():
    with pytest.raises(dlh.NotADeadLetter):
        dlh.unpack(b"plain text")
