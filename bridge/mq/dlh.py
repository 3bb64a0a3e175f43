"""The MQDLH dead-letter header: what IBM MQ's dead-letter handler (runmqdlq) and every
MQ tool expect at the start of a message on the dead-letter queue.

A message put to the dead-letter queue is the header followed by the original body; the
MQMD's Format becomes MQDEAD and the header keeps the original Format, CodedCharSetId
and Encoding. Integers are written in the byte order the DLQ message's MQMD Encoding
names (MQENC_NATIVE, little-endian, as on x86 and ARM Linux), text one byte a character.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from datetime import UTC, datetime

from bridge.mq.models import MQENC_NATIVE, MQMessage, chars_text, fixed_chars, put_date_time
from mqgather.ccsid import CCSID_UTF8

STRUC_ID = b"DLH "
VERSION_1 = 1
#: MQFMT_DEAD_LETTER_HEADER: the MQMD Format of a message that starts with an MQDLH.
MQFMT_DEAD_LETTER_HEADER = "MQDEAD"
#: MQAT_UNIX: the put application type of a process on Linux or UNIX.
MQAT_UNIX = 6

_LAYOUT = struct.Struct("<4sii48s48sii8si28s8s8s")
#: Size of an MQDLH, version 1.
LENGTH = _LAYOUT.size


class NotADeadLetter(ValueError):
    """The body does not start with an MQDLH."""


@dataclass(frozen=True)
class DeadLetterHeader:
    """The fields of an MQDLH."""

    reason: int
    dest_q_name: str
    dest_q_mgr_name: str
    encoding: int
    coded_char_set_id: int
    format: str
    put_appl_type: int
    put_appl_name: str
    put_date: str
    put_time: str


def pack(header: DeadLetterHeader) -> bytes:
    """The header's 172 bytes."""
    return _LAYOUT.pack(
        STRUC_ID,
        VERSION_1,
        header.reason,
        fixed_chars(header.dest_q_name, 48),
        fixed_chars(header.dest_q_mgr_name, 48),
        header.encoding,
        header.coded_char_set_id,
        fixed_chars(header.format, 8),
        header.put_appl_type,
        fixed_chars(header.put_appl_name, 28),
        fixed_chars(header.put_date, 8),
        fixed_chars(header.put_time, 8),
    )


def unpack(body: bytes) -> tuple[DeadLetterHeader, bytes]:
    """The header at the start of ``body`` and the original body after it.

    Raises:
        NotADeadLetter: ``body`` is shorter than a header or does not start with one.
    """
    if len(body) < LENGTH or not body.startswith(STRUC_ID):
        raise NotADeadLetter("the body does not start with an MQDLH")
    fields = _LAYOUT.unpack_from(body)
    header = DeadLetterHeader(
        reason=fields[2],
        dest_q_name=chars_text(fields[3]),
        dest_q_mgr_name=chars_text(fields[4]),
        encoding=fields[5],
        coded_char_set_id=fields[6],
        format=chars_text(fields[7]),
        put_appl_type=fields[8],
        put_appl_name=chars_text(fields[9]),
        put_date=chars_text(fields[10]),
        put_time=chars_text(fields[11]),
    )
    return header, body[LENGTH:]


def dead_letter(
    message: MQMessage,
    reason: int,
    dest_q_name: str,
    dest_q_mgr_name: str,
    put_appl_name: str,
    now: datetime | None = None,
) -> MQMessage:
    """The message as it goes to the dead-letter queue: an MQDLH naming why and where it
    was going, then the original body; MQMD context (MsgId, CorrelId, ...) unchanged."""
    put_date, put_time = put_date_time(now or datetime.now(UTC))
    header = DeadLetterHeader(
        reason=reason,
        dest_q_name=dest_q_name,
        dest_q_mgr_name=dest_q_mgr_name,
        encoding=message.encoding,
        coded_char_set_id=message.coded_char_set_id,
        format=message.format,
        put_appl_type=MQAT_UNIX,
        put_appl_name=put_appl_name,
        put_date=put_date,
        put_time=put_time,
    )
    # The MQMD now describes the header (ASCII text, native integers); the header
    # describes the original body after it.
    return message.model_copy(
        update={
            "format": MQFMT_DEAD_LETTER_HEADER,
            "coded_char_set_id": CCSID_UTF8,
            "encoding": MQENC_NATIVE,
            "body": pack(header) + message.body,
        }
    )
