"""A stand-in for ``ibmmqc``, the C extension of the ``ibmmq`` package, backed by the
embedded queue manager.

The real ``ibmmq`` Python layer runs unchanged over it: every call receives the MQI
structures packed exactly as that layer packs them for IBM's library, and answers in
the tuples the C extension returns. It keeps IBM MQ's documented rules where the IBM MQ
adapter depends on them, and is never more lenient than IBM MQ on those:

- connection: client channel type and transport, user and password, the CCDT given in
  the MQCNO (never read from the environment), reconnect options recorded; MQDISC
  commits the open unit of work, as a normal disconnect does on IBM MQ. A connection is
  shared between threads as the library asks (MQCNO_HANDLE_SHARE_BLOCK): one MQI call
  at a time, a call from another thread waiting out one under way (a get's wait too).
- open: unknown queues (2085), exclusive input (2042) on DEFSOPT(EXCL) queues or when
  another handle holds it exclusively, context authority (2035) for set/pass all context,
  MAXHANDS open handles per connection (2017).
- put: MsgId generation, CCSID / Encoding / Format / MsgType / context fields kept, the
  unit of work, Q_FULL and MAXMSGL from the queue manager; the descriptor checked as MQ
  checks it on a put (Expiry, Persistence, Priority, and MsgType 2029, Feedback 2014,
  unknown Report options 2061, a request or a report asked for without a ReplyToQ 2027).
- groups and segments: MQMD version 2 carries GroupId / MsgSeqNumber / MsgFlags / Offset /
  OriginalLength (version 1 none); a segment's flags, Offset and length checked on the
  put (2249, 2251, 2252, 2253) and its SegmentStatus reported on the get, segments got
  one by one (MQGMO_COMPLETE_MSG, the queue manager's reassembly, is not modelled);
  MQPMO_LOGICAL_ORDER (GroupId and sequence chosen by the queue manager and returned,
  2241 for a message outside the group mid-group, 2245 for mixed syncpoint, refused on
  MQPUT1); MQGMO_LOGICAL_ORDER and MQGMO_ALL_MSGS_AVAILABLE with GroupStatus reported
  (2247 for a match that is not the group's next message). Group positions are kept per
  connection and queue, where IBM MQ keeps them per object handle: the same while one
  handle per queue and purpose is used, as the adapter does.
- options: MQOPEN's, MQPUT's, MQPUT1's and MQGET's checked as IBM MQ's "rules for
  validating MQI options" state (2046 before anything is opened, got or put); MQGET
  options whose behaviour is not modelled (the queue manager's reassembly of segments,
  locks, the message under the cursor, SYNCPOINT_IF_PERSISTENT, MQRFH2 properties) fail
  loudly, as does a get without a message handle of a message with properties (MQ would
  put them in an MQRFH2 header before the body).
- structure versions: MQ reads only the fields of the version given (an MQGMO before
  version 2 has no MatchOptions, before 4 no MsgHandle; an MQPMO before 3 no handles).
- get: wait, match options, browse cursors per handle, syncpoint (a get naming neither
  MQGMO_SYNCPOINT nor MQGMO_NO_SYNCPOINT is outside the unit of work, as outside z/OS),
  truncation (2080 with the message left on the queue, or 2079 when accepted),
  conversion (MQGMO_CONVERT with a CCSID other than the message's: text formats
  converted, others returned as they are with 2110 / 2119 warnings), properties in a
  message handle.
- message handles: each serves the connection that made it (MQCRTMH) and dies with it; on
  another's MQGET, MQPUT, MQPUT1, MQSETMP, MQINQMP, MQDLTMP or MQDLTMH it fails with 2460
  before anything is got or put, as MQGMO_PROPERTIES_IN_HANDLE without a handle does.
- properties: names as MQSETMP checks them (a Java identifier with inner dots, within
  Unicode's Basic Multilingual Plane; reserved prefixes and keywords, 2442), value
  lengths as MQSETMP defines them (``MQVL_NULL_TERMINATED`` only for
  strings), MQCCSI_APPL meaning the process's own CCSID, buffers: a value longer than the
  caller's buffer fails with 2469 and the length needed, the cursor left on it for
  ``MQIMPO_INQ_PROP_UNDER_CURSOR``; booleans come back as integers, as the C layer
  returns them; names beginning "JMS" other than the five JMS synonyms the MQI may set
  are refused (2442), while a message put by a JMS program shows them to MQINQMP.
- unit of work: MAXUMSGS counts every message got or put under syncpoint, and the COA
  and COD reports they cause (2024 past it, the unit of work left open).
- reports: COA on arrival and COD on a destructive get, as the queue manager generates
  them (to the ReplyToQ at the ReplyToQMgr, in the unit of work of the call).
- queues PUT(DISABLED) / GET(DISABLED) refuse puts (2051) and gets and browses (2016).
- inquire: CURDEPTH, MAXDEPTH, MAXMSGL, BOTHRESH, BOQNAME, PUT, GET, DEADQ, MAXUMSGS.
- PCF: CREATE / CHANGE / COPY / INQUIRE / DELETE Q through SYSTEM.ADMIN.COMMAND.QUEUE with
  a temporary dynamic reply queue, as the command server answers; an INQUIRE matching
  nothing answers 2085; CREATE with REPLACE resets unspecified attributes to defaults.

What it does not prove: IBM's wire protocol, channel exits, TLS, and behaviour of a
real queue manager beyond these documented rules.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import math
import os
import struct
import threading
import time
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

from bridge.mq.errors import MQError, NoMessageAvailable, TruncatedMessage
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import NONE_ID, Match, MQMessage, MsgFlags, PutOptions, QueueAttributes
from bridge.mq.transport import Browse
from mqgather.ccsid import CCSIDError

__version__ = version("ibmmq")
__cmdlevel__ = 940
__mqbuild__ = "stand-in"
__strucversions__ = {"cd": 12, "cno": 8, "csp": 3, "gmo": 4, "od": 4, "pmo": 3, "sco": 7, "sts": 2}

# MQI constants the stand-in needs (values as in cmqc.h / cmqxc.h).
CC_OK, CC_WARNING, CC_FAILED = 0, 1, 2
RC = {
    "NONE": 0,
    "BUFFER_LENGTH_ERROR": 2005,
    "DATA_LENGTH_ERROR": 2010,
    "CONNECTION_BROKEN": 2009,
    "HANDLE_NOT_AVAILABLE": 2017,
    "HCONN_ERROR": 2018,
    "HOBJ_ERROR": 2019,
    "EXPIRY_ERROR": 2013,
    "MD_ERROR": 2026,
    "PERSISTENCE_ERROR": 2047,
    "PRIORITY_EXCEEDS_MAXIMUM": 2049,
    "PRIORITY_ERROR": 2050,
    "NO_MSG_AVAILABLE": 2033,
    "NOT_AUTHORIZED": 2035,
    "NOT_OPEN_FOR_BROWSE": 2036,
    "NOT_OPEN_FOR_INPUT": 2037,
    "NOT_OPEN_FOR_INQUIRE": 2038,
    "NOT_OPEN_FOR_OUTPUT": 2039,
    "OBJECT_IN_USE": 2042,
    "OPTION_NOT_VALID_FOR_TYPE": 2045,
    "OPTIONS_ERROR": 2046,
    "Q_MGR_NAME_ERROR": 2058,
    "Q_MGR_NOT_AVAILABLE": 2059,
    "SELECTOR_ERROR": 2067,
    "TRUNCATED_MSG_ACCEPTED": 2079,
    "TRUNCATED_MSG_FAILED": 2080,
    "UNKNOWN_OBJECT_NAME": 2085,
    "UNKNOWN_REMOTE_Q_MGR": 2087,
    "WAIT_INTERVAL_ERROR": 2090,
    "CONTEXT_HANDLE_ERROR": 2097,
    "FORMAT_ERROR": 2110,
    "NOT_CONVERTED": 2119,
    "CHANNEL_CONFIG_ERROR": 2539,
    "HMSG_ERROR": 2460,
    "PROPERTY_NAME_ERROR": 2442,
    "PROP_VALUE_NOT_CONVERTED": 2466,
    "PROP_NAME_NOT_CONVERTED": 2492,
    "PROPERTY_VALUE_TOO_BIG": 2469,
    "PROPERTY_NOT_AVAILABLE": 2471,
    "PROPERTY_TYPE_ERROR": 2473,
    "UNKNOWN_CHANNEL_NAME": 2540,
    "INCOMPLETE_GROUP": 2241,
    "INCONSISTENT_UOW": 2245,
    "MATCH_OPTIONS_ERROR": 2247,
}
OO_INPUT_AS_Q_DEF, OO_INPUT_SHARED, OO_INPUT_EXCLUSIVE = 0x1, 0x2, 0x4
OO_BROWSE, OO_OUTPUT, OO_INQUIRE = 0x8, 0x10, 0x20
OO_SAVE_ALL_CONTEXT, OO_PASS_ALL_CONTEXT, OO_SET_ALL_CONTEXT = 0x80, 0x200, 0x800
GMO_WAIT, GMO_SYNCPOINT, GMO_NO_SYNCPOINT = 0x1, 0x2, 0x4
GMO_BROWSE_FIRST, GMO_BROWSE_NEXT, GMO_ACCEPT_TRUNCATED = 0x10, 0x20, 0x40
GMO_CONVERT, GMO_NO_PROPERTIES, GMO_PROPERTIES_IN_HANDLE = 0x4000, 0x4000000, 0x8000000
GMO_LOGICAL_ORDER, GMO_ALL_MSGS_AVAILABLE = 0x8000, 0x20000
GMO_COMPLETE_MSG, GMO_ALL_SEGMENTS_AVAILABLE = 0x10000, 0x40000
GS_NOT_IN_GROUP, GS_MSG_IN_GROUP, GS_LAST_MSG_IN_GROUP = ord(" "), ord("G"), ord("L")
MO_MSG_ID, MO_CORREL_ID, MO_GROUP_ID = 0x1, 0x2, 0x4
PMO_SYNCPOINT, PMO_NO_SYNCPOINT, PMO_DEFAULT_CONTEXT = 0x2, 0x4, 0x20
PMO_NEW_MSG_ID, PMO_NEW_CORREL_ID, PMO_PASS_ALL_CONTEXT = 0x40, 0x80, 0x200
PMO_SET_ALL_CONTEXT, PMO_NO_CONTEXT, PMO_LOGICAL_ORDER = 0x800, 0x4000, 0x8000
PMO_PASS_IDENTITY_CONTEXT, PMO_SET_IDENTITY_CONTEXT = 0x100, 0x400
PMO_ALTERNATE_USER_AUTHORITY, PMO_ASYNC_RESPONSE, PMO_SYNC_RESPONSE = 0x1000, 0x10000, 0x20000
OO_SET, OO_PASS_IDENTITY_CONTEXT, OO_SET_IDENTITY_CONTEXT = 0x40, 0x100, 0x400
OO_BIND_ON_OPEN, OO_BIND_NOT_FIXED, OO_BIND_ON_GROUP = 0x4000, 0x8000, 0x400000
OO_CO_OP, OO_NO_READ_AHEAD, OO_READ_AHEAD, OO_NO_MULTICAST = 0x20000, 0x80000, 0x100000, 0x200000
GMO_SET_SIGNAL, GMO_MARK_SKIP_BACKOUT, GMO_SYNCPOINT_IF_PERSISTENT = 0x8, 0x80, 0x1000
GMO_MSG_UNDER_CURSOR, GMO_LOCK, GMO_UNLOCK, GMO_BROWSE_MSG_UNDER_CURSOR = 0x100, 0x200, 0x400, 0x800
GMO_PROPERTIES_FORCE_MQRFH2, GMO_PROPERTIES_COMPATIBILITY = 0x2000000, 0x10000000
GMO_VERSION_2, GMO_VERSION_4, PMO_VERSION_3 = 2, 4, 3
MD_VERSION_2 = 2
EI_UNLIMITED, EI_MAX = -1, 999_999_999
OL_UNDEFINED = -1
SS_SEGMENT, SS_LAST_SEGMENT, SS_NOT_A_SEGMENT = ord("S"), ord("L"), ord(" ")
PER_AS_Q_DEF, PRI_AS_Q_DEF, PRI_MAX = 2, -1, 9
CNO_CLIENT_BINDING = 0x100
CNO_HANDLE_SHARE_BLOCK = 0x40
CHT_CLNTCONN, XPT_TCP = 6, 2
WI_UNLIMITED = -1
VL_NULL_TERMINATED = -1
CCSI_APPL, CCSI_Q_MGR, CCSI_INHERIT = -3, 0, -2
AT_UNIX = 6
TYPE_AS_SET, TYPE_NULL, TYPE_BOOLEAN, TYPE_BYTE_STRING = 0x0, 0x2, 0x4, 0x8
TYPE_INT8, TYPE_INT16, TYPE_INT32, TYPE_INT64 = 0x10, 0x20, 0x40, 0x80
TYPE_FLOAT32, TYPE_FLOAT64, TYPE_STRING = 0x100, 0x200, 0x400
IMPO_INQ_NEXT, IMPO_INQ_PROP_UNDER_CURSOR, IMPO_CONVERT_VALUE = 0x8, 0x10, 0x20
TEXT_FORMATS = {"MQSTR", "MQADMIN"}
#: The context fields of the message model a put may set (MQPMO_SET/PASS_ALL_CONTEXT).
CONTEXT_FIELDS = (
    "user_identifier",
    "accounting_token",
    "appl_identity_data",
    "put_appl_type",
    "appl_origin_data",
    "put_appl_name",
    "put_date_time",
)
COMMAND_QUEUE = "SYSTEM.ADMIN.COMMAND.QUEUE"
MODEL_QUEUES = {"SYSTEM.DEFAULT.MODEL.QUEUE"}
#: A string property set in a CCSID the queue manager cannot convert is kept as its
#: bytes, with its CCSID under this prefix and its name: MQINQMP then answers 2466 with
#: conversion asked for, and without it hands the bytes to the C layer's UTF-8 decoding.
UNCONVERTIBLE = "mqi.ccsid."
#: The JMS synonyms an MQI program may set (MQSETMP); any other name beginning "JMS",
#: and any "usr.JMS…", is refused with MQRC_PROPERTY_NAME_ERROR.
JMS_SETTABLE = {"JMSCorrelationID", "JMSReplyTo", "JMSType", "JMSXGroupID", "JMSXGroupSeq"}


@dataclass
class QueueManagerConfig:
    """One queue manager the stand-in serves, and the rules it enforces."""

    path: Path
    #: user -> password; None accepts any connection without credentials.
    users: dict[str, str] | None = None
    #: Whether connected users hold +setall / +passall on every queue.
    context_authority: bool = True
    #: Queues defined with DEFSOPT(EXCL): INPUT_AS_Q_DEF opens them exclusively.
    exclusive_queues: set[str] = field(default_factory=set)
    #: The CCSID that MQCCSI_APPL stands for: a C-locale process on Linux runs in 819.
    application_ccsid: int = 819
    channel: str = "DEV.APP.SVRCONN"
    #: MAXMSGL of the server-connection channel (4 MB, as DEFINE CHANNEL gives it). A
    #: client may move messages up to the lower of this and its MQCD's MaxMsgLength.
    channel_maxmsgl: int = 4 * 1024 * 1024
    #: The QMNAME of its CCDT entries: a client connecting to "*GROUP" through a CCDT
    #: reaches it, and learns its real name only from MQINQ.
    group: str = ""
    #: MAXHANDS of the queue manager (256 by default): object handles one connection may
    #: hold open at once; one more fails MQOPEN with MQRC_HANDLE_NOT_AVAILABLE.
    maxhands: int = 256


#: Queue managers by name; tests register theirs here.
QUEUE_MANAGERS: dict[str, QueueManagerConfig] = {}
#: What each MQCONNX was given, for tests to inspect (newest last).
CONNECTS: list[dict[str, Any]] = []

_ids = itertools.count(101)
_lock = threading.RLock()


@dataclass
class _Object:
    queue: str
    options: int
    dynamic: bool = False
    #: The queue manager that owns the queue, when another (put through its
    #: transmission queue).
    owner: str = ""
    pending_browse: MQMessage | None = None
    saved_context: MQMessage | None = None
    browsed: bool = False


@dataclass
class _Connection:
    name: str
    config: QueueManagerConfig
    qm: LocalQueueManager
    peek: LocalQueueManager
    user: str
    #: The message length negotiated for the channel: a buffer or a message longer than
    #: this fails with MQRC_DATA_LENGTH_ERROR.
    maxmsgl: int = 4 * 1024 * 1024
    objects: dict[int, _Object] = field(default_factory=dict)
    #: Held through each MQI call on the connection (MQCNO_HANDLE_SHARE_BLOCK: a call
    #: waits while another thread's is under way, a get's wait included).
    busy: threading.RLock = field(default_factory=threading.RLock)


@dataclass
class _Handle:
    hconn: int
    properties: dict[str, Any] = field(default_factory=dict)
    cursor: int = -1


_conns: dict[int, _Connection] = {}
_handles: dict[int, _Handle] = {}
_exclusive: dict[tuple[str, str], int] = {}  # (qmgr path, queue) -> hobj


def _ibmmq() -> Any:
    import ibmmq

    return ibmmq


def _text(raw: bytes) -> str:
    return bytes(raw).rstrip(b"\0 ").decode("latin-1")


def _fields(structure: Any, raw: bytes) -> dict[str, Any]:
    """A packed MQI structure's fields by name, read as the C library reads them.

    ``ibmmq``'s own unpack takes one value for an array field (MQSCO's
    EncryptionPolicySuiteB has four) and shifts every later field.
    """
    layout = structure._MQOpts__list  # (name, default, format[, count])
    fmt = structure._MQOpts__format
    values = struct.unpack(fmt, raw.ljust(struct.calcsize(fmt), b"\0"))
    out: dict[str, Any] = {}
    at = 0
    for entry in layout:
        width = len(entry[1]) if isinstance(entry[1], list) else 1
        out[entry[0]] = values[at] if width == 1 else list(values[at : at + width])
        at += width
    return out


def _ptr_string(ptr: int, length: int) -> str:
    return ctypes.string_at(ptr, length).decode() if ptr and length > 0 else ""


def _fail(reason: str, *extra: Any) -> tuple[Any, ...]:
    return (*extra, CC_FAILED, RC[reason])


def _mq_fail(exc: MQError, *extra: Any) -> tuple[Any, ...]:
    return (*extra, CC_FAILED, exc.code)


# ----------------------------------------------------- options (MQRC_OPTIONS_ERROR)

#: MQGET options whose behaviour the stand-in does not model: a call with any of them
#: fails loudly rather than doing something MQ would not.
GMO_NOT_MODELLED = (
    GMO_COMPLETE_MSG | GMO_ALL_SEGMENTS_AVAILABLE | GMO_SYNCPOINT_IF_PERSISTENT
    | GMO_MARK_SKIP_BACKOUT | GMO_SET_SIGNAL | GMO_MSG_UNDER_CURSOR | GMO_LOCK | GMO_UNLOCK
    | GMO_BROWSE_MSG_UNDER_CURSOR | GMO_PROPERTIES_FORCE_MQRFH2 | GMO_PROPERTIES_COMPATIBILITY
    | 0x01F00000  # the browse marks (MQGMO_MARK_BROWSE_*, MQGMO_UNMARKED_BROWSE_MSG)
)  # fmt: skip


def _several(options: int, *choices: int) -> bool:
    """Whether ``options`` holds more than one of ``choices``."""
    return sum(1 for choice in choices if options & choice) > 1


def _open_options_valid(options: int) -> bool:
    """MQOPEN's options as IBM MQ's rules for validating MQI options take them."""
    inputs = OO_INPUT_AS_Q_DEF | OO_INPUT_SHARED | OO_INPUT_EXCLUSIVE
    binds = OO_BIND_ON_OPEN | OO_BIND_NOT_FIXED | OO_BIND_ON_GROUP
    contexts = (OO_SET_ALL_CONTEXT | OO_SET_IDENTITY_CONTEXT | OO_PASS_ALL_CONTEXT
                | OO_PASS_IDENTITY_CONTEXT)  # fmt: skip
    return not (
        not options & (inputs | binds | OO_BROWSE | OO_INQUIRE | OO_OUTPUT | OO_SET)
        or _several(options, OO_INPUT_AS_Q_DEF, OO_INPUT_SHARED, OO_INPUT_EXCLUSIVE)
        or _several(options, OO_READ_AHEAD, OO_NO_READ_AHEAD)
        or _several(options, OO_BIND_ON_OPEN, OO_BIND_NOT_FIXED, OO_BIND_ON_GROUP)
        or (options & OO_SAVE_ALL_CONTEXT and not options & inputs)
        or (options & contexts and not options & OO_OUTPUT)
        or (options & OO_CO_OP and not options & OO_BROWSE)
        or (options & OO_NO_MULTICAST and not options & OO_OUTPUT)
    )


def _put_options_valid(options: int, put1: bool) -> bool:
    """MQPUT's (or MQPUT1's) put-message options as the same rules take them."""
    return not (
        (options & PMO_SYNCPOINT and options & PMO_NO_SYNCPOINT)
        or _several(
            options,
            PMO_DEFAULT_CONTEXT,
            PMO_NO_CONTEXT,
            PMO_PASS_ALL_CONTEXT,
            PMO_PASS_IDENTITY_CONTEXT,
            PMO_SET_ALL_CONTEXT,
            PMO_SET_IDENTITY_CONTEXT,
        )
        or _several(options, PMO_ASYNC_RESPONSE, PMO_SYNC_RESPONSE)
        # One put has no handle to keep a group's place; MQPUT has its open's authority.
        or (options & PMO_LOGICAL_ORDER and put1)
        or (options & PMO_ALTERNATE_USER_AUTHORITY and not put1)
    )


def _get_options_valid(options: int) -> bool:
    """MQGET's get-message options as the same rules take them."""
    browses = GMO_BROWSE_FIRST | GMO_BROWSE_NEXT | GMO_BROWSE_MSG_UNDER_CURSOR
    return not (
        _several(options, GMO_SYNCPOINT, GMO_NO_SYNCPOINT, GMO_SYNCPOINT_IF_PERSISTENT)
        or _several(
            options,
            GMO_BROWSE_FIRST,
            GMO_BROWSE_NEXT,
            GMO_BROWSE_MSG_UNDER_CURSOR,
            GMO_MSG_UNDER_CURSOR,
        )
        or (options & GMO_SYNCPOINT and options & (browses | GMO_LOCK | GMO_UNLOCK))
        or (
            options & GMO_SYNCPOINT_IF_PERSISTENT
            and options & (browses | GMO_COMPLETE_MSG | GMO_UNLOCK)
        )
        or (options & GMO_MARK_SKIP_BACKOUT and not options & GMO_SYNCPOINT)
        or (options & GMO_WAIT and options & GMO_SET_SIGNAL)
        or (options & GMO_LOCK and not options & browses)
        or (options & GMO_UNLOCK and options & ~(GMO_UNLOCK | GMO_NO_SYNCPOINT))
        or _several(
            options,
            GMO_PROPERTIES_IN_HANDLE,
            GMO_NO_PROPERTIES,
            GMO_PROPERTIES_FORCE_MQRFH2,
            GMO_PROPERTIES_COMPATIBILITY,
        )
    )


# ------------------------------------------------------------------ connections


def MQCONN(name: Any) -> tuple[Any, ...]:
    """Server bindings are not what a client application uses: refuse like a client."""
    return _fail("Q_MGR_NOT_AVAILABLE", 0)


def MQCONNX(
    name: bytes,
    cno: bytes,
    cd: bytes | None,
    csp: bytes | None,
    sco: bytes | None,
    bno: bytes | None,
) -> tuple[Any, ...]:
    mq = _ibmmq()
    c = mq.CNO()
    c.unpack(cno)
    qmgr = _text(name)
    # Fields past the structure's Version are not looked at, as MQ does not.
    ccdt = _ptr_string(c.CCDTUrl, c._CCDTUrlLength) if c.Version >= 6 else ""
    record: dict[str, Any] = {"qmgr": qmgr, "options": c.Options, "ccdt_url": ccdt}
    CONNECTS.append(record)
    config = QUEUE_MANAGERS.get(qmgr)
    if config is None and qmgr.startswith("*") and record["ccdt_url"]:
        # A queue-sharing group of CCDT entries: the first queue manager of the group.
        qmgr, config = next(
            ((n, c) for n, c in QUEUE_MANAGERS.items() if c.group == qmgr[1:]), (qmgr, None)
        )
    if config is None:
        return _fail("Q_MGR_NAME_ERROR", 0)
    if not c.Options & CNO_HANDLE_SHARE_BLOCK:
        # The library asks for it unless told another: a connection bound to its thread
        # (MQ's own default) or failing calls that overlap is not modelled.
        raise NotImplementedError("the stand-in models MQCNO_HANDLE_SHARE_BLOCK only")
    maxmsgl = config.channel_maxmsgl  # a CCDT's entry is taken to match the server's
    if cd is not None:
        d = mq.CD()
        d.unpack(cd)
        maxmsgl = min(maxmsgl, d.MaxMsgLength)
        record.update(
            channel=_text(d.ChannelName),
            conname=_text(d.ConnectionName),
            channel_type=d.ChannelType,
            transport=d.TransportType,
        )
        if d.ChannelType != CHT_CLNTCONN or d.TransportType != XPT_TCP:
            return _fail("CHANNEL_CONFIG_ERROR", 0)
        if _text(d.ChannelName) != config.channel:
            return _fail("UNKNOWN_CHANNEL_NAME", 0)
    elif not record["ccdt_url"]:
        return _fail("Q_MGR_NOT_AVAILABLE", 0)  # a client with neither MQCD nor CCDT
    if sco is not None:
        t = _fields(mq.SCO(), sco)
        record["key_repository"] = _text(t["KeyRepository"])
        if t["Version"] >= 6:  # MQSCO_VERSION_6: the key repository's password, by pointer
            record["keyrepo_password"] = _ptr_string(
                t["KeyRepoPassword"], t["_KeyRepoPasswordLength"]
            )
    user = ""
    if csp is not None:
        s = mq.CSP()
        s.unpack(csp)
        user = _ptr_string(s.CSPUserId, s._CSPUserIdLength)
        password = _ptr_string(s.CSPPassword, s._CSPPasswordLength)
        record["user"] = user
        if config.users is not None and config.users.get(user) != password:
            return _fail("NOT_AUTHORIZED", 0)
    elif config.users is not None:
        return _fail("NOT_AUTHORIZED", 0)
    qm = LocalQueueManager(config.path, qmgr_name=qmgr)
    with _lock:
        hconn = next(_ids)
        _conns[hconn] = _Connection(qmgr, config, qm, LocalQueueManager(config.path), user, maxmsgl)
    return hconn, CC_OK, 0


def _conn(hconn: int) -> _Connection | None:
    return _conns.get(hconn)


def _one_call_at_a_time(call: Any) -> Any:
    """An MQI call on a shared connection waits while another thread's call on it is
    under way (MQCNO_HANDLE_SHARE_BLOCK), as MQ serialises them: a disconnect or a put
    from another thread waits out a get's wait."""

    @functools.wraps(call)
    def serialised(hconn: int, *args: Any) -> Any:
        conn = _conns.get(hconn)
        if conn is None:
            return call(hconn, *args)
        with conn.busy:
            return call(hconn, *args)

    return serialised


@_one_call_at_a_time
def MQDISC(hconn: int) -> tuple[int, int]:
    conn = _conns.pop(hconn, None)
    if conn is None:
        return CC_FAILED, RC["HCONN_ERROR"]
    try:
        conn.qm.commit()  # a normal disconnect commits the unit of work
    except MQError as exc:
        return CC_FAILED, exc.code
    finally:
        for hobj in list(conn.objects):
            _close_object(conn, hobj)
        # Its message handles go with it (MQDLTMH called implicitly).
        for hmsg in [h for h, handle in _handles.items() if handle.hconn == hconn]:
            del _handles[hmsg]
        conn.qm.close()
        conn.peek.close()
    return CC_OK, 0


def MQBEGIN(hconn: int) -> tuple[int, int]:
    return CC_FAILED, 2121  # MQRC_NO_EXTERNAL_PARTICIPANTS: a client cannot begin a global UOW


def _end_unit(hconn: int, commit: bool) -> tuple[int, int]:
    conn = _conn(hconn)
    if conn is None:
        return CC_FAILED, RC["HCONN_ERROR"]
    try:
        if commit:
            conn.qm.commit()
        else:
            conn.qm.backout()
    except MQError as exc:
        return CC_FAILED, exc.code
    return CC_OK, 0


@_one_call_at_a_time
def MQCMIT(hconn: int) -> tuple[int, int]:
    return _end_unit(hconn, commit=True)


@_one_call_at_a_time
def MQBACK(hconn: int) -> tuple[int, int]:
    return _end_unit(hconn, commit=False)


# ---------------------------------------------------------------------- objects


@_one_call_at_a_time
def MQOPEN(hconn: int, od_bytes: bytes, options: int) -> tuple[Any, ...]:
    mq = _ibmmq()
    conn = _conn(hconn)
    od = mq.OD()
    od.unpack(od_bytes)
    if conn is None:
        return _fail("HCONN_ERROR", 0, od.pack())
    if not _open_options_valid(options):
        return _fail("OPTIONS_ERROR", 0, od.pack())
    name = _text(od.ObjectName)
    owner = _text(od.ObjectQMgrName)
    owner = "" if owner == conn.qm.qmgr_name else owner
    if owner:
        # Name resolution comes first: another queue manager's queue is reached through a
        # transmission queue, and can only be put to.
        if options & (OO_INPUT_AS_Q_DEF | OO_INPUT_SHARED | OO_INPUT_EXCLUSIVE | OO_BROWSE
                      | OO_INQUIRE):  # fmt: skip
            return _fail("OPTION_NOT_VALID_FOR_TYPE", 0, od.pack())
        try:
            conn.qm.route(owner)
        except MQError as exc:
            return _mq_fail(exc, 0, od.pack())
    if options & (OO_SET_ALL_CONTEXT | OO_PASS_ALL_CONTEXT) and not conn.config.context_authority:
        return _fail("NOT_AUTHORIZED", 0, od.pack())
    dynamic = False
    if name in MODEL_QUEUES:
        prefix = _text(od.DynamicQName).rstrip("*") or "AMQ."
        name = f"{prefix}{time.time_ns():X}"[:48]
        conn.qm.define(QueueAttributes(name=name, maxdepth=999_999))
        od.ObjectName = name.encode()
        dynamic = True
    elif name == COMMAND_QUEUE or not name or owner:
        pass
    else:
        try:
            conn.qm.inquire(name)
        except MQError as exc:
            return _mq_fail(exc, 0, od.pack())
    if len(conn.objects) >= conn.config.maxhands:
        return _fail("HANDLE_NOT_AVAILABLE", 0, od.pack())
    exclusive = bool(options & OO_INPUT_EXCLUSIVE) or (
        bool(options & OO_INPUT_AS_Q_DEF) and name in conn.config.exclusive_queues
    )
    wants_input = options & (OO_INPUT_AS_Q_DEF | OO_INPUT_SHARED | OO_INPUT_EXCLUSIVE)
    key = (str(conn.config.path), name)
    with _lock:
        holder = _exclusive.get(key)
        if wants_input and holder is not None:
            return _fail("OBJECT_IN_USE", 0, od.pack())
        if exclusive and any(
            o.queue == name and o.options & (OO_INPUT_AS_Q_DEF | OO_INPUT_SHARED)
            for c in _conns.values()
            if str(c.config.path) == key[0]
            for o in c.objects.values()
        ):
            return _fail("OBJECT_IN_USE", 0, od.pack())
        hobj = next(_ids)
        if exclusive:
            _exclusive[key] = hobj
        conn.objects[hobj] = _Object(name, options, dynamic=dynamic, owner=owner)
    od.ResolvedQName = name.encode()
    return hobj, od.pack(), CC_OK, 0


def _close_object(conn: _Connection, hobj: int) -> None:
    obj = conn.objects.pop(hobj, None)
    if obj is None:
        return
    with _lock:
        key = (str(conn.config.path), obj.queue)
        if _exclusive.get(key) == hobj:
            del _exclusive[key]


@_one_call_at_a_time
def MQCLOSE(hconn: int, hobj: int, options: int) -> tuple[int, int]:
    conn = _conn(hconn)
    if conn is None:
        return CC_FAILED, RC["HCONN_ERROR"]
    if hobj not in conn.objects:
        return CC_FAILED, RC["HOBJ_ERROR"]
    _close_object(conn, hobj)
    return CC_OK, 0


# ------------------------------------------------------------------ put and get


def _message_from(
    conn: _Connection, md: Any, pmo: Any, body: bytes, obj: _Object | None
) -> MQMessage | tuple[int, int]:
    """The message MQPUT stores, with the context the put options give it."""
    opts = pmo.Options
    msg_id = bytes(md.MsgId).ljust(24, b"\0")
    if opts & PMO_NEW_MSG_ID or msg_id == NONE_ID:
        msg_id = NONE_ID  # the queue manager generates one
    correl = bytes(md.CorrelId).ljust(24, b"\0")
    if opts & PMO_NEW_CORREL_ID:
        correl = os.urandom(24)
    ccsid = md.CodedCharSetId
    if ccsid in (CCSI_APPL, CCSI_Q_MGR):
        ccsid = conn.config.application_ccsid if ccsid == CCSI_APPL else 1208
    context: dict[str, Any] = {}
    if opts & PMO_SET_ALL_CONTEXT:
        if obj is None or not obj.options & OO_SET_ALL_CONTEXT:
            return CC_FAILED, RC["OPTIONS_ERROR"]
        from bridge.mq.ibmmq_adapter import _put_time

        context = {
            "user_identifier": _text(md.UserIdentifier),
            "accounting_token": bytes(md.AccountingToken),
            "appl_identity_data": _text(md.ApplIdentityData),
            "put_appl_type": md.PutApplType,
            "appl_origin_data": _text(md.ApplOriginData),
            "put_appl_name": _text(md.PutApplName),
            "put_date_time": _put_time(_text(md.PutDate), _text(md.PutTime)),
        }
    elif opts & PMO_PASS_ALL_CONTEXT:
        source = conn.objects.get(pmo.Context)
        if obj is None or not obj.options & OO_PASS_ALL_CONTEXT:
            return CC_FAILED, RC["OPTIONS_ERROR"]
        if source is None or not source.options & OO_SAVE_ALL_CONTEXT:
            return CC_FAILED, RC["CONTEXT_HANDLE_ERROR"]
        if source.saved_context is not None:
            context = source.saved_context.model_dump(include=set(CONTEXT_FIELDS))
    elif not opts & PMO_NO_CONTEXT:  # default context: who put it, now
        context = {"user_identifier": conn.user[:12], "put_appl_type": AT_UNIX}
        context["put_appl_name"] = "python"
    # The queue manager's checks of the descriptor (the queues' DEFPSIST(NO), DEFPRTY(0)).
    if md.Expiry != EI_UNLIMITED and not 0 < md.Expiry <= EI_MAX:
        return CC_FAILED, RC["EXPIRY_ERROR"]
    if md.Persistence not in (0, 1, PER_AS_Q_DEF):
        return CC_FAILED, RC["PERSISTENCE_ERROR"]
    if md.Priority < PRI_AS_Q_DEF:
        return CC_FAILED, RC["PRIORITY_ERROR"]
    # The group fields exist from MQMD version 2 on; a version 1 MQMD has none.
    grouped = md.Version >= MD_VERSION_2
    return MQMessage(
        msg_id=msg_id,
        correl_id=correl,
        group_id=bytes(md.GroupId).ljust(24, b"\0") if grouped else NONE_ID,
        msg_seq_number=max(1, md.MsgSeqNumber) if grouped else 1,
        msg_flags=md.MsgFlags if grouped else 0,
        offset=md.Offset if grouped else 0,
        original_length=md.OriginalLength if grouped else OL_UNDEFINED,
        format=_text(md.Format),
        coded_char_set_id=ccsid,
        encoding=md.Encoding,
        persistence=0 if md.Persistence == PER_AS_Q_DEF else md.Persistence,
        priority=min(max(md.Priority, 0), PRI_MAX),
        expiry=md.Expiry,
        reply_to_q=_text(md.ReplyToQ),
        reply_to_qmgr=_text(md.ReplyToQMgr),
        msg_type=md.MsgType,
        report=md.Report,
        feedback=md.Feedback,
        body=body,
        **context,
    )


def _put(
    hconn: int,
    conn: _Connection,
    queue: str,
    md_bytes: bytes,
    pmo_bytes: bytes,
    body: bytes,
    obj: _Object | None,
) -> tuple[Any, ...]:
    mq = _ibmmq()
    md, pmo = mq.MD(), mq.PMO()
    md.unpack(md_bytes)
    pmo.unpack(pmo_bytes)
    # The message handles are fields of MQPMO version 3: MQ reads none from an earlier one.
    handles = (pmo.OriginalMsgHandle, pmo.NewMsgHandle) if pmo.Version >= PMO_VERSION_3 else (0, 0)
    for hmsg in handles:
        # A handle serves the connection that made it (MQCRTMH), and one deleted (its
        # connection's MQDISC included) serves none.
        if hmsg and _own_handle(hconn, hmsg) is None:
            return _fail("HMSG_ERROR", md_bytes, pmo_bytes)
    props = _own_handle(hconn, handles[0]) if handles[0] else None
    built = _message_from(conn, md, pmo, body, obj)
    if isinstance(built, tuple):
        return md.pack(), pmo.pack(), *built
    if props is not None:
        built.properties.update(props.properties)
    syncpoint = bool(pmo.Options & PMO_SYNCPOINT)
    if queue == COMMAND_QUEUE:
        from tests.mqi_standin import pcf

        put = built.model_copy(
            update={"msg_id": built.msg_id if built.msg_id != NONE_ID else os.urandom(24)}
        )
        pcf.execute(conn.qm, put)
    else:
        try:
            put = conn.qm.put(
                queue,
                built,
                PutOptions(
                    syncpoint=syncpoint,
                    set_all_context=True,
                    logical_order=bool(pmo.Options & PMO_LOGICAL_ORDER),
                ),
                qmgr=obj.owner if obj is not None else "",
            )
        except MQError as exc:
            return _mq_fail(exc, md.pack(), pmo.pack())
    md.MsgId = put.msg_id
    md.CorrelId = put.correl_id
    if put.in_group and md.Version >= MD_VERSION_2:
        # Output fields: the GroupId the queue manager chose and the sequence it gave.
        md.GroupId, md.MsgSeqNumber = put.group_id, put.msg_seq_number
    if not md.PutApplName.strip(b"\0 "):
        md.PutApplName = (put.put_appl_name or "python").encode()
    if md.Priority > PRI_MAX:
        # Put at the queue manager's MAXPRTY, and told so.
        return md.pack(), pmo.pack(), CC_WARNING, RC["PRIORITY_EXCEEDS_MAXIMUM"]
    return md.pack(), pmo.pack(), CC_OK, 0


@_one_call_at_a_time
def MQPUT(hconn: int, hobj: int, md: bytes, pmo: bytes, body: bytes) -> tuple[Any, ...]:
    conn = _conn(hconn)
    if conn is None:
        return _fail("HCONN_ERROR", md, pmo)
    obj = conn.objects.get(hobj)
    if obj is None:
        return _fail("HOBJ_ERROR", md, pmo)
    if not obj.options & OO_OUTPUT:
        return _fail("NOT_OPEN_FOR_OUTPUT", md, pmo)
    options = _ibmmq().PMO()
    options.unpack(pmo)
    if not _put_options_valid(options.Options, put1=False):
        return _fail("OPTIONS_ERROR", md, pmo)
    if len(body) > conn.maxmsgl:
        return _fail("DATA_LENGTH_ERROR", md, pmo)  # longer than the channel carries
    return _put(hconn, conn, obj.queue, md, pmo, body, obj)


@_one_call_at_a_time
def MQPUT1(hconn: int, od_bytes: bytes, md: bytes, pmo: bytes, body: bytes) -> tuple[Any, ...]:
    conn = _conn(hconn)
    if conn is None:
        return _fail("HCONN_ERROR", md, pmo)
    mq = _ibmmq()
    od, p = mq.OD(), mq.PMO()
    od.unpack(od_bytes)
    p.unpack(pmo)
    if not _put_options_valid(p.Options, put1=True):
        return _fail("OPTIONS_ERROR", md, pmo)
    if len(body) > conn.maxmsgl:
        return _fail("DATA_LENGTH_ERROR", md, pmo)  # longer than the channel carries
    options = OO_OUTPUT | (OO_SET_ALL_CONTEXT if p.Options & PMO_SET_ALL_CONTEXT else 0)
    opened = MQOPEN(hconn, od_bytes, options)
    if opened[-2] != CC_OK:
        return md, pmo, opened[-2], opened[-1]
    try:
        return _put(hconn, conn, _text(od.ObjectName), md, pmo, body, conn.objects[opened[0]])
    finally:
        _close_object(conn, opened[0])


def _convert(message: MQMessage, md: Any, options: int) -> tuple[bytes, int]:
    """MQGMO_CONVERT: text formats to the CCSID asked for; others stay with a warning."""
    want = md.CodedCharSetId
    if not options & GMO_CONVERT or want in (message.coded_char_set_id, CCSI_Q_MGR):
        return message.body, 0
    if message.format not in TEXT_FORMATS:
        return message.body, RC["FORMAT_ERROR"]
    from mqgather.ccsid import codec

    try:
        text = message.body.decode(codec(message.coded_char_set_id))
        return text.encode(codec(want)), 0
    except (ValueError, LookupError, MQError):
        return message.body, RC["NOT_CONVERTED"]


def _fill_md(md: Any, m: MQMessage, ccsid: int) -> None:
    from datetime import UTC

    md.MsgId, md.CorrelId, md.GroupId = m.msg_id, m.correl_id, m.group_id
    md.MsgSeqNumber, md.MsgFlags = m.msg_seq_number, m.msg_flags
    md.Offset, md.OriginalLength = m.offset, m.original_length
    md.Format = m.format.ljust(8).encode("latin-1", "replace")
    md.CodedCharSetId, md.Encoding = ccsid, m.encoding
    md.Persistence, md.Priority, md.Expiry = m.persistence, m.priority, m.expiry
    md.ReplyToQ = m.reply_to_q.encode("latin-1", "replace")
    md.ReplyToQMgr = m.reply_to_qmgr.encode("latin-1", "replace")
    md.PutApplName = m.put_appl_name.encode("latin-1", "replace")
    md.UserIdentifier = m.user_identifier.encode("latin-1", "replace")
    md.AccountingToken = m.accounting_token
    md.ApplIdentityData = m.appl_identity_data.encode("latin-1", "replace")
    md.ApplOriginData = m.appl_origin_data.encode("latin-1", "replace")
    md.PutApplType = m.put_appl_type
    md.BackoutCount = m.backout_count
    if m.put_date_time is not None:
        stamp = m.put_date_time.astimezone(UTC)
        md.PutDate = stamp.strftime("%Y%m%d").encode()
        md.PutTime = (stamp.strftime("%H%M%S") + f"{stamp.microsecond // 10000:02d}").encode()
    md.MsgType, md.Report, md.Feedback = m.message_type, m.report, m.feedback


@_one_call_at_a_time
def MQGET(hconn: int, hobj: int, md_bytes: bytes, gmo_bytes: bytes, length: int) -> tuple[Any, ...]:
    mq = _ibmmq()
    md, gmo = mq.MD(), mq.GMO()
    md.unpack(md_bytes)
    gmo.unpack(gmo_bytes)
    conn = _conn(hconn)
    if conn is None:
        return _fail("HCONN_ERROR", b"", md.pack(), gmo.pack(), 0)
    obj = conn.objects.get(hobj)
    if obj is None:
        return _fail("HOBJ_ERROR", b"", md.pack(), gmo.pack(), 0)
    if length > conn.maxmsgl:
        # A client's buffer may not exceed what the channel negotiated.
        return _fail("DATA_LENGTH_ERROR", b"", md.pack(), gmo.pack(), 0)
    opts = gmo.Options
    if not _get_options_valid(opts):
        return _fail("OPTIONS_ERROR", b"", md.pack(), gmo.pack(), 0)
    if opts & GMO_NOT_MODELLED:
        # A caller relying on one (the queue manager's reassembly of segments, say) would
        # pass here only by being treated as it is not on MQ: refuse loudly instead.
        raise NotImplementedError(f"the stand-in does not model MQGMO options {opts:#x}")
    browse = "first" if opts & GMO_BROWSE_FIRST else "next" if opts & GMO_BROWSE_NEXT else None
    if browse and not obj.options & OO_BROWSE:
        return _fail("NOT_OPEN_FOR_BROWSE", b"", md.pack(), gmo.pack(), 0)
    if not browse and not obj.options & (OO_INPUT_AS_Q_DEF | OO_INPUT_SHARED | OO_INPUT_EXCLUSIVE):
        return _fail("NOT_OPEN_FOR_INPUT", b"", md.pack(), gmo.pack(), 0)
    # MsgHandle is a field of MQGMO version 4. MQGMO_PROPERTIES_IN_HANDLE needs a handle
    # of this connection's (no handle is MQRC_HMSG_ERROR in MQ's own words); without a
    # property option a handle given is filled too. Checked before any message is taken.
    given = gmo.MsgHandle if gmo.Version >= GMO_VERSION_4 else 0
    wants_handle = bool(opts & GMO_PROPERTIES_IN_HANDLE) or bool(
        given and not opts & GMO_NO_PROPERTIES
    )
    handle = _own_handle(hconn, given) if wants_handle else None
    if wants_handle and handle is None:
        return _fail("HMSG_ERROR", b"", md.pack(), gmo.pack(), 0)
    # MatchOptions is a field of MQGMO version 2; before it, MsgId and CorrelId match.
    match_options = gmo.MatchOptions if gmo.Version >= GMO_VERSION_2 else MO_MSG_ID | MO_CORREL_ID

    def wanted(value: bytes, option: int) -> bytes | None:
        # MQMI_NONE / MQCI_NONE / MQGI_NONE (all NULs) match any message, as in MQ.
        chosen = bytes(value).ljust(24, b"\0")
        return chosen if match_options & option and chosen != NONE_ID else None

    match = Match(
        msg_id=wanted(md.MsgId, MO_MSG_ID),
        correl_id=wanted(md.CorrelId, MO_CORREL_ID),
        group_id=wanted(md.GroupId, MO_GROUP_ID),
    )
    wait = 0
    if opts & GMO_WAIT:
        if gmo.WaitInterval < WI_UNLIMITED:
            return _fail("WAIT_INTERVAL_ERROR", b"", md.pack(), gmo.pack(), 0)
        wait = -1 if gmo.WaitInterval == WI_UNLIMITED else gmo.WaitInterval
    # Outside z/OS a get that names neither is outside any unit of work.
    syncpoint = bool(opts & GMO_SYNCPOINT)
    accept = bool(opts & GMO_ACCEPT_TRUNCATED)
    logical = bool(opts & GMO_LOGICAL_ORDER)
    all_available = bool(opts & GMO_ALL_MSGS_AVAILABLE)
    try:
        if browse:
            if browse == "next" and obj.pending_browse is not None:
                message = obj.pending_browse
            else:
                mode: Browse = "next" if browse == "next" and obj.browsed else "first"
                message = conn.qm.get(
                    obj.queue,
                    wait_ms=wait,
                    match=match,
                    browse=mode,
                    logical_order=logical,
                    all_available=all_available,
                )
            obj.pending_browse = None
            obj.browsed = True
            if len(message.body) > length and not accept:
                obj.pending_browse = message  # the cursor stays on it
        elif logical or all_available:
            # The connection's own group position chooses the message; a long one stays
            # where it is, and the position with it (MQRC_TRUNCATED_MSG_FAILED).
            try:
                message = conn.qm.get(
                    obj.queue,
                    wait_ms=wait,
                    syncpoint=syncpoint,
                    match=match,
                    logical_order=logical,
                    all_available=all_available,
                    max_length=None if accept else length,
                )
            except TruncatedMessage as exc:
                _fill_md(md, exc.message, exc.message.coded_char_set_id)
                return _fail(
                    "TRUNCATED_MSG_FAILED", b"", md.pack(), gmo.pack(), len(exc.message.body)
                )
        else:
            deadline = None if wait == -1 else time.monotonic() + wait / 1000
            while True:
                # Rounded up: MQ never returns 2033 before the whole interval has passed.
                left = (
                    -1
                    if deadline is None
                    else max(0, math.ceil((deadline - time.monotonic()) * 1000))
                )
                peek = conn.peek.get(obj.queue, wait_ms=left, match=match, browse="first")
                if len(peek.body) > length and not accept:
                    message = peek  # stays on the queue
                    break
                try:
                    message = conn.qm.get(
                        obj.queue, syncpoint=syncpoint, match=Match(msg_id=peek.msg_id)
                    )
                    break
                except NoMessageAvailable:
                    continue  # another consumer took it first
    except MQError as exc:
        return _mq_fail(exc, b"", md.pack(), gmo.pack(), 0)
    body, warning = _convert(message, md, opts)
    ccsid = (
        md.CodedCharSetId
        if (opts & GMO_CONVERT and not warning and md.CodedCharSetId != CCSI_Q_MGR)
        else message.coded_char_set_id
    )
    _fill_md(md, message, ccsid)
    gmo.GroupStatus = {
        "last-in-group": GS_LAST_MSG_IN_GROUP,
        "in-group": GS_MSG_IN_GROUP,
        "not-in-group": GS_NOT_IN_GROUP,
    }[message.group_status]
    gmo.SegmentStatus = (
        SS_LAST_SEGMENT
        if message.msg_flags & MsgFlags.LAST_SEGMENT
        else SS_SEGMENT
        if message.msg_flags & MsgFlags.SEGMENT
        else SS_NOT_A_SEGMENT
    )
    if md.Version < MD_VERSION_2:
        md.GroupId, md.MsgSeqNumber, md.MsgFlags = NONE_ID, 1, 0
        md.Offset, md.OriginalLength = 0, OL_UNDEFINED
    if obj.options & OO_SAVE_ALL_CONTEXT and not browse:
        obj.saved_context = message
    if handle is not None:
        handle.properties = dict(message.properties)
        handle.cursor = -1
    elif message.properties and not opts & GMO_NO_PROPERTIES:
        # MQ would hand them over in an MQRFH2 header before the body (a queue's default
        # PROPCTL, COMPATIBILITY, for names in the usr folder), which the stand-in does
        # not build: refuse loudly rather than return a body MQ would not.
        raise NotImplementedError("the stand-in does not put properties in an MQRFH2 header")
    gmo.ReturnedLength = min(len(body), length)
    if len(body) > length:
        reason = "TRUNCATED_MSG_ACCEPTED" if accept else "TRUNCATED_MSG_FAILED"
        code = CC_WARNING if accept else CC_FAILED
        return body[:length], md.pack(), gmo.pack(), len(body), code, RC[reason]
    if warning:
        return body, md.pack(), gmo.pack(), len(body), CC_WARNING, warning
    return body, md.pack(), gmo.pack(), len(body), CC_OK, 0


# -------------------------------------------------------------------- inquire

MQIA_CURRENT_Q_DEPTH, MQIA_MAX_Q_DEPTH, MQIA_MAX_MSG_LENGTH = 3, 15, 13
MQIA_BACKOUT_THRESHOLD, MQCA_BACKOUT_REQ_Q_NAME, MQCA_DEAD_LETTER_Q_NAME = 22, 2019, 2006
MQCA_Q_MGR_NAME, MQIA_Q_TYPE, MQCA_Q_NAME = 2015, 20, 2016
MQIA_MAX_UNCOMMITTED_MSGS = 33
MQIA_INHIBIT_GET, MQIA_INHIBIT_PUT, MQIA_USAGE = 9, 10, 12


@_one_call_at_a_time
def MQINQ(
    hconn: int,
    hobj: int,
    selectors: list[int],
    int_attrs: list[int],
    int_count: int,
    char_count: int,
    char_len: int,
) -> tuple[Any, ...]:
    conn = _conn(hconn)
    if conn is None:
        return _fail("HCONN_ERROR", [], b"")
    obj = conn.objects.get(hobj)
    if obj is None:
        return _fail("HOBJ_ERROR", [], b"")
    if not obj.options & OO_INQUIRE:
        return _fail("NOT_OPEN_FOR_INQUIRE", [], b"")
    ints: list[int] = []
    chars = b""
    try:
        attrs = conn.qm.inquire(obj.queue) if obj.queue else None
    except MQError as exc:
        return _mq_fail(exc, [], b"")
    for selector in selectors:
        if attrs is not None and selector in (
            MQIA_CURRENT_Q_DEPTH,
            MQIA_MAX_Q_DEPTH,
            MQIA_MAX_MSG_LENGTH,
            MQIA_BACKOUT_THRESHOLD,
            MQIA_Q_TYPE,
            MQIA_INHIBIT_GET,
            MQIA_INHIBIT_PUT,
            MQIA_USAGE,
        ):
            ints.append(
                {
                    MQIA_CURRENT_Q_DEPTH: attrs.curdepth,
                    MQIA_MAX_Q_DEPTH: attrs.maxdepth,
                    MQIA_MAX_MSG_LENGTH: attrs.maxmsgl,
                    MQIA_BACKOUT_THRESHOLD: attrs.bothresh,
                    MQIA_Q_TYPE: 1,
                    # MQQA_GET_INHIBITED / MQQA_PUT_INHIBITED are 1, ..._ALLOWED 0.
                    MQIA_INHIBIT_GET: int(attrs.get == "disabled"),
                    MQIA_INHIBIT_PUT: int(attrs.put == "disabled"),
                    # MQUS_TRANSMISSION is 1, MQUS_NORMAL 0.
                    MQIA_USAGE: int(attrs.usage == "xmitq"),
                }[selector]
            )
        elif attrs is not None and selector in (MQCA_BACKOUT_REQ_Q_NAME, MQCA_Q_NAME):
            value = attrs.boqname if selector == MQCA_BACKOUT_REQ_Q_NAME else attrs.name
            chars += value.encode().ljust(48)
        elif attrs is None and selector == MQIA_MAX_UNCOMMITTED_MSGS:
            ints.append(conn.qm.max_uncommitted())
        elif attrs is None and selector == MQCA_DEAD_LETTER_Q_NAME:
            chars += conn.qm.dead_letter_queue().encode().ljust(48)
        elif attrs is None and selector == MQCA_Q_MGR_NAME:
            chars += conn.name.encode().ljust(48)
        else:
            return _fail("SELECTOR_ERROR", [], b"")
    return ints, chars, CC_OK, 0


# ------------------------------------------------------------------ properties


@_one_call_at_a_time
def MQCRTMH(hconn: int, cmho: bytes) -> tuple[Any, ...]:
    if hconn not in _conns:
        return _fail("HCONN_ERROR", 0)
    with _lock:
        hmsg = next(_ids)
        _handles[hmsg] = _Handle(hconn)
    return hmsg, CC_OK, 0


def _own_handle(hconn: int, hmsg: int) -> _Handle | None:
    """The message handle ``hmsg`` when ``hconn`` made it: a handle serves the connection
    that created it only (MQRC_HMSG_ERROR on another's)."""
    handle = _handles.get(hmsg)
    return handle if handle is not None and handle.hconn == hconn else None


@_one_call_at_a_time
def MQDLTMH(hconn: int, hmsg: int, dmho: bytes) -> tuple[int, int]:
    if _own_handle(hconn, hmsg) is None:
        return CC_FAILED, RC["HMSG_ERROR"]
    del _handles[hmsg]
    return CC_OK, 0


def live_message_handles() -> int:
    """How many message handles exist now (tests check that none leak)."""
    return len(_handles)


def most_open_objects() -> int:
    """The most object handles any live connection holds open now."""
    return max((len(c.objects) for c in _conns.values()), default=0)


def live_connections() -> int:
    """How many connections are open now."""
    return len(_conns)


def _codec_of(ccsid: int, config: QueueManagerConfig) -> str:
    from mqgather.ccsid import codec

    return codec(config.application_ccsid if ccsid == CCSI_APPL else ccsid)


def _name_in(conn: _Connection, raw: bytes) -> str | None:
    """A property name the caller passed: the C layer's MQCHARV leaves its VSCCSID at
    MQCCSI_APPL, so MQ reads the bytes in the application's CCSID (None if they are not
    of it)."""
    try:
        return raw.decode(_codec_of(CCSI_APPL, conn.config))
    except UnicodeDecodeError:
        return None


def _name_out(conn: _Connection, name: str) -> str | None:
    """A property name MQINQMP returns: MQ writes it in the application's CCSID (None if
    it has no such characters: MQRC_PROP_NAME_NOT_CONVERTED), and the C layer makes a str
    of those bytes as UTF-8, failing as Python does on bytes that are not."""
    try:
        raw = name.encode(_codec_of(CCSI_APPL, conn.config))
    except UnicodeEncodeError:
        return None
    return raw.decode("utf-8")


#: Names MQ keeps for its selectors (in any case, alone or after "usr.").
SQL_KEYWORDS = {"NULL", "TRUE", "FALSE", "NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS",
                "ESCAPE"}  # fmt: skip


def _java_identifier_with_dots(name: str) -> bool:
    """Whether ``name`` is a Java identifier in which dots may stand (not first), made of
    characters of the Basic Multilingual Plane only, as MQ's property names are."""
    import unicodedata

    def kind(char: str) -> str:
        return unicodedata.category(char)

    if not name or any(ord(c) > 0xFFFF for c in name):
        return False
    head, tail = name[0], name[1:]
    if not (head.isalpha() or kind(head) in ("Nl", "Sc", "Pc")):
        return False
    for char in tail:
        if (
            char == "."
            or char.isalpha()
            or kind(char) in ("Nd", "Nl", "Sc", "Pc", "Mn", "Mc", "Cf")
        ):
            continue
        code = ord(char)  # the controls Java ignores inside an identifier
        if not (code <= 0x08 or 0x0E <= code <= 0x1B or 0x7F <= code <= 0x9F):
            return False
    return True


def _settable_name(name: str) -> bool:
    """MQSETMP's name rules (MQRC_PROPERTY_NAME_ERROR otherwise)."""
    if not _java_identifier_with_dots(name):
        return False
    if (name.startswith("JMS") and name not in JMS_SETTABLE) or name.startswith("usr.JMS"):
        return False
    if name.removeprefix("usr.").upper() in SQL_KEYWORDS:
        return False
    if name.startswith(("Body", "Root")) and not name.startswith("Root.MQMD."):
        return False
    if ".." in name or name.endswith("."):
        return False
    lowered = name.lower()
    return not (lowered.startswith("mq") and not lowered.startswith("mq_usr")
                and name.count(".") > 1)  # fmt: skip


@_one_call_at_a_time
def MQSETMP(
    hconn: int,
    hmsg: int,
    smpo: bytes,
    name: bytes,
    pd: bytes,
    kind: int,
    value: Any,
    value_length: int,
) -> tuple[int, int]:
    handle = _own_handle(hconn, hmsg)
    conn = _conn(hconn)
    if handle is None or conn is None:
        return CC_FAILED, RC["HMSG_ERROR"]
    mq = _ibmmq()
    s = mq.SMPO()
    s.unpack(smpo)
    key = _name_in(conn, name)
    if key is None or not _settable_name(key):
        return CC_FAILED, RC["PROPERTY_NAME_ERROR"]
    if kind == TYPE_STRING:
        # The C layer hands over the text encoded as UTF-8; MQ reads it in ValueCCSID.
        raw = value.encode("utf-8", "ignore")
        # MQVL_NULL_TERMINATED: up to the first NUL; else exactly the length given.
        nul_ended = value_length == VL_NULL_TERMINATED
        raw = raw.split(b"\0", 1)[0] if nul_ended else raw[:value_length]
        try:
            stored: Any = raw.decode(_codec_of(s.ValueCCSID, conn.config))
        except CCSIDError:
            handle.properties[UNCONVERTIBLE + key.removeprefix("usr.")] = s.ValueCCSID
            stored = raw
    elif kind == TYPE_BYTE_STRING:
        if value_length < 0:  # MQVL_NULL_TERMINATED is for strings only
            return CC_FAILED, RC["BUFFER_LENGTH_ERROR"]
        stored = bytes(value)[:value_length]
    elif kind == TYPE_BOOLEAN:
        stored = bool(value)
    elif kind in (TYPE_INT8, TYPE_INT16, TYPE_INT32, TYPE_INT64):
        stored = int(value)
    elif kind in (TYPE_FLOAT32, TYPE_FLOAT64):
        stored = float(value)
    elif kind == TYPE_NULL:
        stored = None
    else:
        return CC_FAILED, RC["PROPERTY_TYPE_ERROR"]
    handle.properties[key.removeprefix("usr.")] = stored
    return CC_OK, 0


def _type_of(value: Any) -> int:
    if value is None:
        return TYPE_NULL
    if isinstance(value, bool):
        return TYPE_BOOLEAN
    if isinstance(value, int):
        return TYPE_INT64
    if isinstance(value, float):
        return TYPE_FLOAT64
    if isinstance(value, bytes):
        return TYPE_BYTE_STRING
    return TYPE_STRING


@_one_call_at_a_time
def MQINQMP(
    hconn: int, hmsg: int, impo_bytes: bytes, name: bytes, pd: bytes, kind: int, value_length: int
) -> tuple[Any, ...]:
    handle = _own_handle(hconn, hmsg)
    conn = _conn(hconn)
    if handle is None or conn is None:
        return None, 0, "", CC_FAILED, RC["HMSG_ERROR"]
    mq = _ibmmq()
    impo = mq.IMPO()
    impo.unpack(impo_bytes)
    wanted = _name_in(conn, name)
    if wanted is None:
        return None, 0, "", CC_FAILED, RC["PROPERTY_NOT_AVAILABLE"]
    names = [n for n in handle.properties if not n.startswith(UNCONVERTIBLE)]
    if wanted.endswith("%"):
        prefix = wanted[:-1].removeprefix("usr.")
        matching = [i for i, n in enumerate(names) if n.startswith(prefix)]
        if impo.Options & IMPO_INQ_PROP_UNDER_CURSOR:
            position = handle.cursor
        elif impo.Options & IMPO_INQ_NEXT:
            position = next((i for i in matching if i > handle.cursor), -1)
        else:
            position = matching[0] if matching else -1
        if position < 0 or position >= len(names):
            return None, 0, "", CC_FAILED, RC["PROPERTY_NOT_AVAILABLE"]
        returned = names[position]
    else:
        returned = wanted.removeprefix("usr.")
        if returned not in handle.properties:
            return None, 0, "", CC_FAILED, RC["PROPERTY_NOT_AVAILABLE"]
        position = names.index(returned)
    handle.cursor = position
    value = handle.properties[returned]
    label = returned
    if wanted.endswith("%"):
        shown = _name_out(conn, returned)  # may raise, as the C layer does (cursor moved)
        if shown is None:
            return None, 0, "", CC_WARNING, RC["PROP_NAME_NOT_CONVERTED"]
        label = shown
    if UNCONVERTIBLE + returned in handle.properties:
        if impo.Options & IMPO_CONVERT_VALUE:
            # Returned unconverted with a warning (the cursor moved on to it).
            return value, len(value), label, CC_WARNING, RC["PROP_VALUE_NOT_CONVERTED"]
        return value.decode("utf-8"), len(value), label, CC_OK, 0  # strict, as in C
    actual = _type_of(value)
    if kind not in (TYPE_AS_SET, actual):
        return None, 0, label, CC_FAILED, RC["PROPERTY_TYPE_ERROR"]
    if actual == TYPE_STRING:
        requested = impo.RequestedCCSID if impo.Options & IMPO_CONVERT_VALUE else 1208
        raw = value.encode(_codec_of(requested, conn.config), "replace")
        if len(raw) > value_length:
            return (
                raw[:value_length].decode("utf-8", "replace"),
                len(raw),
                label,
                CC_FAILED,
                RC["PROPERTY_VALUE_TOO_BIG"],
            )
        # The C layer builds the str from the bytes as UTF-8 (and fails if they are not).
        return raw.decode("utf-8"), len(raw), label, CC_OK, 0
    if actual == TYPE_BYTE_STRING:
        if len(value) > value_length:
            return (
                value[:value_length],
                len(value),
                label,
                CC_FAILED,
                RC["PROPERTY_VALUE_TOO_BIG"],
            )
        return value, len(value), label, CC_OK, 0
    if actual == TYPE_BOOLEAN:
        return int(value), 4, label, CC_OK, 0  # the C layer returns MQBOOL as an int
    if actual == TYPE_NULL:
        return None, 0, label, CC_OK, 0
    return value, 8, label, CC_OK, 0


@_one_call_at_a_time
def MQDLTMP(hconn: int, hmsg: int, dmpo: bytes, name: bytes) -> tuple[int, int]:
    handle = _own_handle(hconn, hmsg)
    conn = _conn(hconn)
    if handle is None or conn is None:
        return CC_FAILED, RC["HMSG_ERROR"]
    key = (_name_in(conn, name) or "").removeprefix("usr.")
    if not key or key not in handle.properties or key.startswith(UNCONVERTIBLE):
        return CC_FAILED, RC["PROPERTY_NOT_AVAILABLE"]
    del handle.properties[key]  # a null-valued one too
    handle.properties.pop(UNCONVERTIBLE + key, None)
    return CC_OK, 0


# ------------------------------------------------------- what the layer calls at import


def MQCBINIT(callback: Any) -> None:
    """The callback registration ``ibmmq`` makes at import; asynchronous consume is unused."""


def MQLOGCF(level: int, filename: str | None = None) -> None:
    """Logging configuration of the C layer: nothing to configure here."""
