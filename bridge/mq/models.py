"""The MQ message and queue models shared by every transport."""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
from datetime import UTC, datetime
from enum import IntFlag
from typing import Any, Literal, NamedTuple, cast

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

from mqgather.ccsid import CCSID_UTF8, decode
from mqgather.constants import (
    DEFAULT_MAXDEPTH,
    DEFAULT_MAXMSGL,
    MAX_EXPIRY_TENTHS,
    MAX_QUEUE_DEPTH,
    QMGR_MAXMSGL,
)
from mqgather.errors import ConfigError

ID_LENGTH = 24
#: An MQLONG, the type of every number in the MQMD: a signed 32-bit integer.
MQLONG_MIN, MQLONG_MAX = -(2**31), 2**31 - 1
#: MQMI_NONE / MQCI_NONE / MQGI_NONE: 24 NUL bytes, "no id".
NONE_ID = b"\x00" * ID_LENGTH

# MQMD constants that callers set by name.
MQPER_NOT_PERSISTENT = 0
MQPER_PERSISTENT = 1
#: Persistence as the queue's DEFPSIST says (NO on a queue defined with the defaults).
MQPER_PERSISTENCE_AS_Q_DEF = 2
MQEI_UNLIMITED = -1
#: MQOL_UNDEFINED: OriginalLength of a message that is no segment.
MQOL_UNDEFINED = -1
#: The largest Offset a segment may begin at (MQRC_OFFSET_ERROR past it).
MAX_SEGMENT_OFFSET = 999_999_999
#: MsgFlags MQ refuses when unknown (MQMF_REJECT_UNSUP_MASK), and those it knows.
MQMF_REJECT_UNSUP_MASK, MQMF_KNOWN = 0x0FFF, 0x1F
MQFMT_NONE = ""
MQFMT_STRING = "MQSTR"
#: An MQRFH2 header, with the message's properties in its folders, at the body's start.
MQFMT_RF_HEADER_2 = "MQHRF2"
#: MQENC_NATIVE on little-endian platforms (x86, ARM Linux): integers low byte first.
MQENC_NATIVE = 546
#: MQACT_NONE: an accounting token of 32 NUL bytes.
ACCOUNTING_TOKEN_LENGTH = 32
MQACT_NONE = b"\x00" * ACCOUNTING_TOKEN_LENGTH
#: MQAT_NO_CONTEXT and MQAT_UNIX (PutApplType of a program on Linux / UNIX).
MQAT_NO_CONTEXT = 0
#: MQMD MsgType values (cmqc.h).
MQMT_REQUEST, MQMT_REPLY, MQMT_REPORT, MQMT_DATAGRAM = 1, 2, 4, 8
#: MQMD Report: no report options; Feedback: none.
MQRO_NONE, MQFB_NONE = 0, 0
#: The ranges MQ takes for MsgType and Feedback: system, then applications' own.
MQMT_SYSTEM_FIRST, MQMT_APPL_LAST = 1, 999_999_999
MQFB_SYSTEM_FIRST, MQFB_APPL_FIRST, MQFB_APPL_LAST = 1, 65536, 999_999_999
#: Report options that ask for a report (exception, expiration, COA, COD, PAN, NAN,
#: activity, with or without data): each needs a ReplyToQ to send it to.
MQRO_REPORTS_ASKED = 0x07000000 | 0x00E00000 | 0x00000700 | 0x00003800 | 0x7
#: Report options MQ refuses when it does not know them (MQRO_REJECT_UNSUP_MASK).
MQRO_REJECT_UNSUP_MASK = 0x101C0000
#: Report options a requester sets for its reply's CorrelId: its own CorrelId passed on,
#: instead of its MsgId copied (MQRO_COPY_MSG_ID_TO_CORREL_ID, the default, 0).
MQRO_PASS_CORREL_ID = 0x40
#: Report option a requester sets for its reply's MsgId: its own MsgId passed on, instead
#: of a new one (MQRO_NEW_MSG_ID, the default, 0).
MQRO_PASS_MSG_ID = 0x80
#: Report options a requester sets to hear whether its request was acted on: a positive
#: or a negative action notification (a report with Feedback MQFB_PAN / MQFB_NAN).
MQRO_PAN, MQRO_NAN, MQFB_PAN, MQFB_NAN = 0x1, 0x2, 275, 276
#: Report options a requester sets for its reply's life: the Expiry left on the request,
#: and its MQRO_DISCARD_MSG (discard, not dead-letter, what cannot be delivered), passed on.
MQRO_PASS_DISCARD_AND_EXPIRY, MQRO_DISCARD_MSG = 0x4000, 0x08000000
MQAT_UNIX = 6

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

PropertyValue = bool | int | float | str | bytes | None
_PROPERTY_TAGS: dict[type, str] = {
    bool: "boolean",
    int: "int64",
    float: "float64",
    str: "string",
    bytes: "bytes",
    type(None): "null",
}


class MsgFlags(IntFlag):
    """MQMF_* message flags for logical groups and segments."""

    NONE = 0
    SEGMENT = 0x02
    LAST_SEGMENT = 0x04
    MSG_IN_GROUP = 0x08
    LAST_MSG_IN_GROUP = 0x10


#: The flags that make a message part of a group (the last one implies "in group").
GROUP_FLAGS = MsgFlags.MSG_IN_GROUP | MsgFlags.LAST_MSG_IN_GROUP
#: The flags of a physical segment of a logical message, split by its sender or a queue
#: manager on the way (MQMF_SEGMENTATION_ALLOWED and a message larger than a MAXMSGL).
SEGMENT_FLAGS = MsgFlags.SEGMENT | MsgFlags.LAST_SEGMENT


def not_whole(message: MQMessage) -> str:
    """Why a message got off a queue is not a whole message, or "" when it is.

    A segment carries part of its logical message's body, so taking it as a reply or a
    message to batch would merge a truncated body, and count the others as duplicates.
    """
    if not message.msg_flags & SEGMENT_FLAGS or message.message_type == MQMT_REPORT:
        # A report on a segment carries the segment's flags, and a whole report's data.
        return ""
    which = "MQMF_LAST_SEGMENT" if message.msg_flags & MsgFlags.LAST_SEGMENT else "MQMF_SEGMENT"
    return (
        f"a segment of a segmented message (MsgFlags {which}), not a whole message: "
        "raise the MAXMSGL of the queue and the queue manager above the message's size "
        "so that no queue manager on the way segments it, or have its sender put it whole"
    )


GroupStatus = Literal["not-in-group", "in-group", "last-in-group"]


def group_status(msg_flags: int) -> GroupStatus:
    """MQGMO GroupStatus of a got message: MQGS_NOT_IN_GROUP, MQGS_MSG_IN_GROUP or
    MQGS_LAST_MSG_IN_GROUP, as its MsgFlags give it."""
    if msg_flags & MsgFlags.LAST_MSG_IN_GROUP:
        return "last-in-group"
    if msg_flags & MsgFlags.MSG_IN_GROUP:
        return "in-group"
    return "not-in-group"


def parse_id(text: str) -> bytes:
    """Turn a user-written 24-byte id into bytes.

    Args:
        text: ``hex:`` followed by up to 48 hex digits, or plain text. Both are padded
            with NULs to 24 bytes, as MQ pads ids.

    Raises:
        ConfigError: the id is longer than 24 bytes, the hex is invalid, or the text is
            not UTF-8.
    """
    if text.startswith("hex:"):
        try:
            raw = bytes.fromhex(text[4:])
        except ValueError as exc:
            raise ConfigError("id", f"{text!r} is not valid hex ({exc})") from exc
    else:
        try:
            raw = text.encode("utf-8")
        except UnicodeEncodeError:  # bytes a terminal gave that are not UTF-8
            raise ConfigError("id", f"{text!r} is not UTF-8 text; give it as hex:") from None
    if len(raw) > ID_LENGTH:
        raise ConfigError("id", f"{text!r} is {len(raw)} bytes; MQ ids are at most {ID_LENGTH}")
    return raw.ljust(ID_LENGTH, b"\x00")


def format_id(value: bytes) -> str:
    """The canonical text form of an id: ``hex:`` and 48 hex digits."""
    return "hex:" + value.hex()


def id_text(value: bytes) -> str | None:
    """An id as the text an MQ tool shows, when it is printable ASCII once the NUL
    padding is dropped (``ORDER-42``); None for a binary id."""
    text = value.rstrip(b"\x00")
    if text and all(0x20 <= b < 0x7F for b in text):
        return text.decode("ascii")
    return None


_TAG_TYPES = {tag: kind for kind, tag in _PROPERTY_TAGS.items()}

#: Non-finite float64 values travel as these names (JSON has no literal for them).
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
#: Tag of a string that is not valid Unicode text (lone surrogates, as undecodable bytes
#: become under ``surrogateescape``): its UTF-8 bytes with surrogates passed, in base64.
_RAW_STRING = "string-raw"


def _float_text(value: float) -> float | str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def encode_properties(props: dict[str, PropertyValue]) -> dict[str, dict[str, Any]]:
    """Tag each property with its MQ type so that JSON keeps bool/int/float/str/bytes/null
    apart. Lossless: NaN and infinities, and strings that are not valid Unicode, survive."""
    out: dict[str, dict[str, Any]] = {}
    for name, value in props.items():
        tag = _PROPERTY_TAGS[type(value)]
        encoded: Any = value
        if isinstance(value, bytes):
            encoded = base64.b64encode(value).decode()
        elif isinstance(value, float):
            encoded = _float_text(value)
        elif isinstance(value, str) and not _is_text(value):
            tag = _RAW_STRING
            encoded = base64.b64encode(value.encode("utf-8", "surrogatepass")).decode()
        out[name] = {"type": tag, "value": encoded}
    return out


def _decode_one(name: str, tag: Any, value: Any) -> PropertyValue:
    if tag == "bytes" or tag == _RAW_STRING:
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, TypeError, ValueError) as exc:
            raise ValueError(f"property {name!r}: {tag} value is not base64") from exc
        return raw if tag == "bytes" else raw.decode("utf-8", "surrogatepass")
    if tag == "float64":
        if isinstance(value, str) and value in _NON_FINITE:
            return _NON_FINITE[value]
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise ValueError(f"property {name!r}: float64 value {value!r} is not a number")
    if tag not in _PROPERTY_TAGS.values():
        raise ValueError(f"property {name!r}: unknown type {tag!r}")
    if type(value) is not _TAG_TYPES[tag]:
        raise ValueError(f"property {name!r}: {tag} value {value!r} has the wrong type")
    return cast(PropertyValue, value)


def decode_properties(data: dict[str, Any]) -> dict[str, PropertyValue]:
    """Inverse of :func:`encode_properties`; plain (untagged) values are taken as they are.

    Raises:
        ValueError: a tagged value does not fit its type, naming the property.
    """
    out: dict[str, PropertyValue] = {}
    for name, item in data.items():
        if isinstance(item, dict) and set(item) == {"type", "value"}:
            out[name] = _decode_one(name, item["type"], item["value"])
        else:
            out[name] = item
    return out


def _hex_id(value: Any) -> Any:
    """Accept ``hex:`` text for an id; other input is left to pydantic (bytes, base64 JSON)."""
    if isinstance(value, str) and value.startswith("hex:"):
        return parse_id(value)
    return value


def _check_id(value: bytes, field: str) -> bytes:
    if len(value) > ID_LENGTH:
        raise ValueError(f"{field} is {len(value)} bytes; MQ ids are at most {ID_LENGTH}")
    return bytes(value).ljust(ID_LENGTH, b"\x00")


class MQMessage(BaseModel):
    """One MQ message: the MQMD fields mqgather uses, named properties and the body.

    Ids are 24 bytes (shorter values are NUL-padded); every number is an MQLONG.
    ``expiry`` is in tenths of a second, as MQ keeps it; on a got message it is the time
    that was left. The context fields (identity: ``user_identifier``,
    ``accounting_token``, ``appl_identity_data``; origin: ``put_appl_type``,
    ``put_appl_name``, ``put_date_time``, ``appl_origin_data``) are set by the queue
    manager on a put, and kept as given only when the put sets all context, as
    forwarding does.
    """

    model_config = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")

    msg_id: bytes = NONE_ID
    correl_id: bytes = NONE_ID
    group_id: bytes = NONE_ID
    msg_seq_number: int = Field(default=1, ge=1, le=MQLONG_MAX)
    msg_flags: int = Field(default=0, ge=MQLONG_MIN, le=MQLONG_MAX)
    offset: int = Field(
        default=0,
        ge=MQLONG_MIN,
        le=MQLONG_MAX,
        description="Offset: where a segment's data begins in its logical message",
    )
    original_length: int = Field(
        default=MQOL_UNDEFINED,
        ge=MQLONG_MIN,
        le=MQLONG_MAX,
        description="OriginalLength: a segment's length (MQOL_UNDEFINED for no segment)",
    )
    format: str = Field(default=MQFMT_STRING, max_length=8)
    coded_char_set_id: int = Field(
        default=CCSID_UTF8, ge=0, le=MQLONG_MAX, description="CodedCharSetId"
    )
    encoding: int = Field(default=MQENC_NATIVE, ge=0, le=MQLONG_MAX, description="Encoding")
    persistence: int = Field(default=MQPER_PERSISTENT, ge=MQLONG_MIN, le=MQLONG_MAX)
    priority: int = Field(default=0, ge=0, le=9)
    expiry: int = Field(default=MQEI_UNLIMITED, ge=MQLONG_MIN, le=MQLONG_MAX)
    reply_to_q: str = Field(default="", max_length=48)
    reply_to_qmgr: str = Field(default="", max_length=48)
    put_appl_name: str = Field(default="", max_length=28)
    put_date_time: datetime | None = None
    user_identifier: str = Field(default="", max_length=12, description="UserIdentifier")
    accounting_token: bytes = Field(default=MQACT_NONE, description="AccountingToken")
    appl_identity_data: str = Field(default="", max_length=32, description="ApplIdentityData")
    put_appl_type: int = Field(
        default=MQAT_NO_CONTEXT, ge=MQLONG_MIN, le=MQLONG_MAX, description="PutApplType"
    )
    appl_origin_data: str = Field(default="", max_length=4, description="ApplOriginData")
    msg_type: int | None = Field(
        default=None,
        ge=MQLONG_MIN,
        le=MQLONG_MAX,
        description="MsgType; None: REQUEST when there is a ReplyToQ, else DATAGRAM",
    )
    report: int = Field(
        default=MQRO_NONE, ge=MQLONG_MIN, le=MQLONG_MAX, description="Report options, kept as put"
    )
    feedback: int = Field(
        default=MQFB_NONE, ge=MQLONG_MIN, le=MQLONG_MAX, description="Feedback, kept as put"
    )
    backout_count: int = Field(default=0, ge=0, le=MQLONG_MAX)
    properties: dict[str, PropertyValue] = Field(default_factory=dict)
    #: Why some of its properties could not be read on the get (the message carries
    #: those it could): whoever takes it routes it aside with this reason. Not sent on.
    unreadable: str = Field(default="", exclude=True)
    #: Names the connection's own handle on every property MQ gave with the message,
    #: kept (by the IBM MQ adapter) when some could not be read, until the unit of work
    #: ends: put again on that connection, the message carries them all as MQ holds
    #: them, the unreadable ones included. 0: none. Not sent on.
    kept_handle: int = Field(default=0, exclude=True)
    body: bytes = b""

    @field_validator("msg_id", "correl_id", "group_id", mode="before")
    @classmethod
    def _ids_in(cls, value: Any) -> Any:
        return _hex_id(value)

    @field_validator("msg_id", "correl_id", "group_id")
    @classmethod
    def _ids(cls, value: bytes, info: Any) -> bytes:
        return _check_id(value, info.field_name)

    @field_validator("accounting_token")
    @classmethod
    def _token(cls, value: bytes) -> bytes:
        if len(value) > ACCOUNTING_TOKEN_LENGTH:
            raise ValueError(
                f"accounting_token is {len(value)} bytes; MQ's is {ACCOUNTING_TOKEN_LENGTH}"
            )
        return bytes(value).ljust(ACCOUNTING_TOKEN_LENGTH, b"\x00")

    @field_validator("properties", mode="before")
    @classmethod
    def _props_in(cls, value: Any) -> Any:
        if isinstance(value, dict):
            value = decode_properties(value)
            for name, item in value.items():
                if (
                    isinstance(item, int)
                    and not isinstance(item, bool)
                    and not INT64_MIN <= item <= INT64_MAX
                ):
                    raise ValueError(f"property {name!r}: {item} is outside MQ's 64-bit range")
        return value

    @field_serializer("properties", when_used="json")
    def _props_out(self, value: dict[str, PropertyValue]) -> dict[str, dict[str, Any]]:
        return encode_properties(value)

    def text(self, errors: Literal["strict", "replace"] = "replace") -> str:
        """The body decoded as UTF-8."""
        return self.body.decode("utf-8", errors=errors)

    def decoded(self) -> str:
        """The body as text, read in its CodedCharSetId.

        Raises:
            CCSIDError: the body is not text in that character set, or it is unknown.
        """
        return decode(self.body, self.coded_char_set_id)

    @property
    def group_status(self) -> GroupStatus:
        """Whether the message is in a logical group, and the group's last one."""
        return group_status(self.msg_flags)

    def reply_correl_id(self) -> bytes:
        """The CorrelId a reply to this request carries, as its report options ask:
        its CorrelId with MQRO_PASS_CORREL_ID, else its MsgId."""
        return self.correl_id if self.report & MQRO_PASS_CORREL_ID else self.msg_id

    @property
    def message_type(self) -> int:
        """MsgType as put: the one given, else REQUEST with a ReplyToQ, else DATAGRAM."""
        if self.msg_type is not None:
            return self.msg_type
        return MQMT_REQUEST if self.reply_to_q else MQMT_DATAGRAM

    @property
    def in_group(self) -> bool:
        """Whether the message belongs to a logical group (non-group messages are a
        group of one only implicitly: GroupId MQGI_NONE, sequence 1)."""
        return bool(self.msg_flags & GROUP_FLAGS)


#: Hex digits of a message's fingerprint (:func:`fingerprint`).
FINGERPRINT_HEX = 16
#: A fingerprint as a model field holds it: none (a message of an earlier release), or
#: the digits.
FINGERPRINT_PATTERN = rf"^(?:[0-9a-f]{{{FINGERPRINT_HEX}}})?$"


def fingerprint(message: MQMessage) -> str:
    """What tells a message from another that reuses its MsgId (an application may set
    MsgId, or pass the request's on as MQRO_PASS_MSG_ID does): a digest of everything
    MQ keeps when it delivers the same message again, so of all but BackoutCount and
    the Expiry left.

    The fields are listed, not taken from the model, so that a field added later does
    not change the fingerprint of a message a previous release saw.
    """
    m = message
    described: tuple[object, ...] = (
        m.msg_id, m.correl_id, m.group_id, m.msg_seq_number, m.msg_flags, m.format,
        m.coded_char_set_id, m.encoding, m.persistence, m.priority, m.reply_to_q,
        m.reply_to_qmgr, m.put_appl_name, m.put_date_time, m.user_identifier,
        m.accounting_token, m.appl_identity_data, m.put_appl_type, m.appl_origin_data,
        m.msg_type, m.report, m.feedback, sorted(m.properties.items()),
    )  # fmt: skip
    if m.offset or m.original_length != MQOL_UNDEFINED:
        # Only a segment (or a report on one) has them: every other message keeps the
        # fingerprint it had before they were kept.
        described += (m.offset, m.original_length)
    # repr keeps what JSON would blur (NaN against null, bytes against text, 1 against
    # True) and writes a lone surrogate as an escape, so any property value digests.
    digest = hashlib.blake2b(repr(described).encode(), digest_size=FINGERPRINT_HEX // 2)
    digest.update(m.body)
    return digest.hexdigest()


#: PUT and GET of a queue: whether MQPUT / MQGET are allowed (MQQA_PUT_ALLOWED, ...).
Inhibit = Literal["enabled", "disabled"]
#: USAGE of a local queue: NORMAL, or XMITQ (a transmission queue, where messages for
#: another queue manager wait behind an MQXQH).
Usage = Literal["normal", "xmitq"]


def fixed_chars(text: str, size: int) -> bytes:
    """An MQ character field of ``size`` bytes: one byte per character (Latin-1, a
    character it lacks as ``?``), cut or padded with blanks."""
    return text.encode("latin-1", "replace")[:size].ljust(size, b" ")


def chars_text(raw: bytes) -> str:
    """The text of an MQ character field :func:`fixed_chars` wrote: its blanks and NULs
    after the last character dropped."""
    return raw.decode("latin-1").rstrip(" \x00")


def put_date_time(stamp: datetime) -> tuple[str, str]:
    """PutDate and PutTime as MQ writes them: YYYYMMDD and HHMMSSTH, in UTC."""
    at = stamp.astimezone(UTC)
    return at.strftime("%Y%m%d"), at.strftime("%H%M%S") + f"{at.microsecond // 10_000:02d}"


class QueueAddress(NamedTuple):
    """A queue and the queue manager that owns it: blank for the one connected to (MQOD
    ObjectName and ObjectQMgrName)."""

    queue: str
    qmgr: str = ""

    def __str__(self) -> str:
        return f"{self.queue}@{self.qmgr}" if self.qmgr else self.queue


class QueueAttributes(BaseModel):
    """The queue attributes mqgather reads or defines (MQSC names in the docstrings)."""

    name: str = Field(min_length=1, max_length=48)
    maxdepth: int = Field(
        default=DEFAULT_MAXDEPTH, ge=0, le=MAX_QUEUE_DEPTH, description="MAXDEPTH"
    )
    maxmsgl: int = Field(default=DEFAULT_MAXMSGL, ge=0, le=QMGR_MAXMSGL, description="MAXMSGL")
    bothresh: int = Field(
        default=0, ge=0, le=MAX_QUEUE_DEPTH, description="BOTHRESH; 0 means no threshold"
    )
    boqname: str = Field(default="", max_length=48, description="BOQNAME")
    descr: str = Field(default="", max_length=64, description="DESCR")
    put: Inhibit | None = Field(
        default=None,
        description="PUT(ENABLED | DISABLED); on a define, None leaves it as the queue has it "
        "(ENABLED for a new queue)",
    )
    get: Inhibit | None = Field(
        default=None, description="GET(ENABLED | DISABLED), as PUT; browsing is a get too"
    )
    usage: Usage | None = Field(
        default=None,
        description="USAGE(NORMAL | XMITQ); on a define, None leaves it as the queue has it "
        "(NORMAL for a new queue)",
    )
    curdepth: int = Field(default=0, ge=0, description="CURDEPTH (read only)")


class Match(BaseModel):
    """Selection of a get: only messages whose given ids are equal (MQMO_MATCH_*)."""

    model_config = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")

    msg_id: bytes | None = None
    correl_id: bytes | None = None
    group_id: bytes | None = None

    @field_validator("msg_id", "correl_id", "group_id", mode="before")
    @classmethod
    def _ids_in(cls, value: Any) -> Any:
        return _hex_id(value)

    @field_validator("msg_id", "correl_id", "group_id")
    @classmethod
    def _ids(cls, value: bytes | None, info: Any) -> bytes | None:
        return None if value is None else _check_id(value, info.field_name)


class PutOptions(BaseModel):
    """MQPMO choices: syncpoint; whether the caller's context (PutApplName,
    PutDateTime) is kept, as MQPMO_SET_ALL_CONTEXT does when forwarding a message; and
    MQPMO_LOGICAL_ORDER, where the queue manager gives a group's messages their GroupId
    and successive MsgSeqNumbers and the caller marks the last one."""

    syncpoint: bool = True
    set_all_context: bool = False
    logical_order: bool = False


def expiry_tenths(seconds: float) -> int:
    """An MQMD Expiry for a message that must not outlive ``seconds`` from now: tenths of
    a second, rounded up, at least the shortest MQ takes (1) and at most the longest."""
    return min(max(math.ceil(seconds * 10), 1), MAX_EXPIRY_TENTHS)


def wait_refusal(wait_ms: int) -> str | None:
    """Why MQ refuses a get's WaitInterval (MQRC_WAIT_INTERVAL_ERROR), or None: it is a
    number of milliseconds that an MQLONG holds, or -1 (MQWI_UNLIMITED)."""
    if wait_ms == -1 or 0 <= wait_ms <= MQLONG_MAX:
        return None
    return f"WaitInterval {wait_ms} ms: give 0 to {MQLONG_MAX} ms, or -1 (MQWI_UNLIMITED)"


def descriptor_refusal(message: MQMessage) -> tuple[str, str] | None:
    """Why MQ refuses to put ``message`` for its descriptor, as ``(MQRC name, detail)``,
    or None: an Expiry of 0, below MQEI_UNLIMITED or above ``MAX_EXPIRY_TENTHS``
    (MQRC_EXPIRY_ERROR); a Persistence other than MQPER_NOT_PERSISTENT, MQPER_PERSISTENT
    or MQPER_PERSISTENCE_AS_Q_DEF (MQRC_PERSISTENCE_ERROR)."""
    expiry = message.expiry
    if expiry != MQEI_UNLIMITED and not 0 < expiry <= MAX_EXPIRY_TENTHS:
        return "MQRC_EXPIRY_ERROR", (
            f"Expiry {expiry} is not a time MQ keeps: give 1 to {MAX_EXPIRY_TENTHS} tenths "
            f"of a second, or {MQEI_UNLIMITED} (MQEI_UNLIMITED)"
        )
    if message.persistence not in (
        MQPER_NOT_PERSISTENT,
        MQPER_PERSISTENT,
        MQPER_PERSISTENCE_AS_Q_DEF,
    ):
        return "MQRC_PERSISTENCE_ERROR", (
            f"Persistence {message.persistence} is none of 0 (not persistent), 1 "
            "(persistent), 2 (as the queue's DEFPSIST)"
        )
    return _type_refusal(message) or _segment_refusal(message)


def _type_refusal(message: MQMessage) -> tuple[str, str] | None:
    """MQ's checks of what a message is and what it asks for: its MsgType, Feedback and
    Report, and a ReplyToQ wherever a reply or a report may be sent."""
    kind = message.message_type
    if not MQMT_SYSTEM_FIRST <= kind <= MQMT_APPL_LAST:
        return "MQRC_MSG_TYPE_ERROR", (
            f"MsgType {kind} is neither a system type (1 to 65535) nor an application's "
            f"(65536 to {MQMT_APPL_LAST})"
        )
    if message.feedback and not MQFB_SYSTEM_FIRST <= message.feedback <= MQFB_APPL_LAST:
        return "MQRC_FEEDBACK_ERROR", (
            f"Feedback {message.feedback} is neither MQFB_NONE (0) nor in 1 to {MQFB_APPL_LAST}"
        )
    if message.report & MQRO_REJECT_UNSUP_MASK:
        return "MQRC_REPORT_OPTIONS_ERROR", (
            f"Report {message.report:#x} has options MQ does not know "
            f"({message.report & MQRO_REJECT_UNSUP_MASK:#x})"
        )
    if not message.reply_to_q.strip() and (
        kind == MQMT_REQUEST or message.report & MQRO_REPORTS_ASKED
    ):
        asks = "is a request" if kind == MQMT_REQUEST else f"asks for reports ({message.report:#x})"
        return "MQRC_MISSING_REPLY_TO_Q", f"the message {asks} and names no ReplyToQ"
    return None


def _segment_refusal(message: MQMessage) -> tuple[str, str] | None:
    """MQ's checks of a message's flags and, for a segment, its Offset, length and (on a
    report) OriginalLength."""
    flags = message.msg_flags
    if flags & MQMF_REJECT_UNSUP_MASK & ~MQMF_KNOWN:
        return "MQRC_MSG_FLAGS_ERROR", (
            f"MsgFlags {flags:#x} has flags MQ does not know "
            f"({flags & MQMF_REJECT_UNSUP_MASK & ~MQMF_KNOWN:#x})"
        )
    if not 0 <= message.offset <= MAX_SEGMENT_OFFSET:
        return "MQRC_OFFSET_ERROR", f"Offset {message.offset} is not 0 to {MAX_SEGMENT_OFFSET}"
    last = bool(flags & MsgFlags.LAST_SEGMENT)
    if flags & SEGMENT_FLAGS and not last and not message.body:
        return "MQRC_SEGMENT_LENGTH_ZERO", "only the last segment of a message may be empty"
    if flags & SEGMENT_FLAGS and message.message_type == MQMT_REPORT:
        length = message.original_length
        if length < len(message.body) or length < (0 if last else 1):
            return "MQRC_ORIGINAL_LENGTH_ERROR", (
                f"OriginalLength {length} of a report on a segment must be at least its "
                f"data's length ({len(message.body)}), and above 0 unless the last segment"
            )
    return None


def stored_original_length(message: MQMessage) -> int:
    """The OriginalLength MQ keeps for a put message: as given on a report on a segment,
    the data's length on another segment, MQOL_UNDEFINED on any other message."""
    if not message.msg_flags & SEGMENT_FLAGS:
        return MQOL_UNDEFINED
    if message.message_type == MQMT_REPORT:
        return message.original_length
    return len(message.body)


def rfh2_hint(message: MQMessage) -> str:
    """What to add to a reason about a missing property or an unreadable body when the
    body begins with an MQRFH2 header (Format MQHRF2): the properties are in there, not
    given as message properties; ``""`` for any other message."""
    if message.format.strip() != MQFMT_RF_HEADER_2:
        return ""
    return (
        "; its body begins with an MQRFH2 header (Format MQHRF2) holding its properties: "
        "the queue's PROPCTL may be FORCE or V6COMPAT"
    )
