"""The MQXQH transmission-queue header: what a queue manager puts in front of a message
bound for another queue manager while it waits on a transmission queue.

The header names the destination queue and queue manager and carries the message's own
descriptor (an MQMD version 1); a message whose descriptor has version 2 fields (a group
or a segment) has an MQMDE after the header for them. Integers are written in the byte
order MQENC_NATIVE names (little-endian), text one byte a character, as for the MQDLH.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from bridge.mq.models import (
    MQENC_NATIVE,
    MQMT_DATAGRAM,
    MQOL_UNDEFINED,
    NONE_ID,
    MQMessage,
    chars_text,
    fixed_chars,
    put_date_time,
)
from mqgather.ccsid import CCSID_UTF8

#: MQFMT_XMIT_Q_HEADER: the Format of a message on a transmission queue.
MQFMT_XMIT_Q_HEADER = "MQXMIT"
#: MQFMT_MD_EXTENSION: the Format that says an MQMDE follows.
MQFMT_MD_EXTENSION = "MQHMDE"

_XQH = struct.Struct("<4si48s48s")
_MD1 = struct.Struct("<4siiiiiii8sii24s24si48s48s12s32s32si28s8s8s4s")
_MDE = struct.Struct("<4siiii8si24siiii")
#: Size of an MQXQH: its own fields and the MQMD version 1 it carries.
LENGTH = _XQH.size + _MD1.size


class NotTransmitted(ValueError):
    """The body does not start with an MQXQH."""


@dataclass(frozen=True)
class Transmitted:
    """What a message on a transmission queue holds: where it is going, and the message
    as its sender put it (MQMD fields as :class:`MQMessage` has them, and its body)."""

    remote_q_name: str
    remote_q_mgr_name: str
    message: MQMessage


def _has_v2_fields(m: MQMessage) -> bool:
    return (
        m.group_id != NONE_ID
        or m.msg_seq_number != 1
        or m.offset != 0
        or m.msg_flags != 0
        or m.original_length != MQOL_UNDEFINED
    )


def pack(message: MQMessage, remote_q_name: str, remote_q_mgr_name: str) -> bytes:
    """The MQXQH (and MQMDE, when the message needs one) and the body after it."""
    m = message
    extension = b""
    fmt, ccsid, encoding = m.format, m.coded_char_set_id, m.encoding
    if _has_v2_fields(m):
        extension = _MDE.pack(
            b"MDE ", 2, _MDE.size, encoding, ccsid, fixed_chars(fmt, 8), 0,
            m.group_id, m.msg_seq_number, m.offset, m.msg_flags, m.original_length,
        )  # fmt: skip
        fmt, ccsid, encoding = MQFMT_MD_EXTENSION, CCSID_UTF8, MQENC_NATIVE
    put_date, put_time = put_date_time(m.put_date_time) if m.put_date_time else ("", "")
    descriptor = _MD1.pack(
        b"MD  ", 1, m.report, m.msg_type if m.msg_type is not None else MQMT_DATAGRAM,
        m.expiry, m.feedback, encoding, ccsid, fixed_chars(fmt, 8), m.priority, m.persistence,
        m.msg_id, m.correl_id, 0, fixed_chars(m.reply_to_q, 48), fixed_chars(m.reply_to_qmgr, 48),
        fixed_chars(m.user_identifier, 12), m.accounting_token.ljust(32, b"\0")[:32],
        fixed_chars(m.appl_identity_data, 32), m.put_appl_type, fixed_chars(m.put_appl_name, 28),
        fixed_chars(put_date, 8), fixed_chars(put_time, 8),
        fixed_chars(m.appl_origin_data, 4),
    )  # fmt: skip
    header = _XQH.pack(
        b"XQH ", 1, fixed_chars(remote_q_name, 48), fixed_chars(remote_q_mgr_name, 48)
    )
    return header + descriptor + extension + m.body


def carried(message: MQMessage) -> Transmitted | None:
    """What a message on a transmission queue (Format MQXMIT) carries, or None for any
    other message, or one whose body does not hold a whole MQXQH."""
    if message.format != MQFMT_XMIT_Q_HEADER:
        return None
    try:
        return unpack(message.body)
    except NotTransmitted:
        return None


def unpack(body: bytes) -> Transmitted:
    """The destination and the message an MQXQH body holds (the MQMDE's fields folded in).

    Raises:
        NotTransmitted: ``body`` does not start with an MQXQH.
    """
    if len(body) < LENGTH or not body.startswith(b"XQH "):
        raise NotTransmitted("the body does not start with an MQXQH")
    _, _, remote_q, remote_qmgr = _XQH.unpack_from(body)
    md = _MD1.unpack_from(body, _XQH.size)
    rest = body[LENGTH:]
    fields = {
        "report": md[2], "msg_type": md[3], "expiry": md[4], "feedback": md[5],
        "encoding": md[6], "coded_char_set_id": md[7], "format": chars_text(md[8]),
        "priority": md[9], "persistence": md[10], "msg_id": md[11], "correl_id": md[12],
        "reply_to_q": chars_text(md[14]), "reply_to_qmgr": chars_text(md[15]),
        "user_identifier": chars_text(md[16]), "accounting_token": md[17],
        "appl_identity_data": chars_text(md[18]), "put_appl_type": md[19],
        "put_appl_name": chars_text(md[20]), "appl_origin_data": chars_text(md[23]),
    }  # fmt: skip
    if fields["format"] == MQFMT_MD_EXTENSION and len(rest) >= _MDE.size:
        mde = _MDE.unpack_from(rest)
        fields.update(
            encoding=mde[3], coded_char_set_id=mde[4], format=chars_text(mde[5]), group_id=mde[7],
            msg_seq_number=mde[8], offset=mde[9], msg_flags=mde[10], original_length=mde[11],
        )  # fmt: skip
        rest = rest[_MDE.size :]
    message = MQMessage(body=rest, **fields)
    return Transmitted(chars_text(remote_q), chars_text(remote_qmgr), message)
