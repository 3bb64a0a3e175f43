"""Typed MQ errors. Every transport raises these, carrying the MQ reason name and code."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.mq.models import MQFB_APPL_FIRST, MQFB_APPL_LAST
from mqgather.errors import MQGatherError

if TYPE_CHECKING:
    from bridge.mq.models import MQMessage

# MQ reason codes used by mqgather (values as in cmqc.h).
REASONS: dict[str, int] = {
    "MQRC_BACKED_OUT": 2003,
    "MQRC_CONNECTION_BROKEN": 2009,
    "MQRC_DATA_LENGTH_ERROR": 2010,
    "MQRC_ENVIRONMENT_ERROR": 2012,
    "MQRC_EXPIRY_ERROR": 2013,
    "MQRC_SYNCPOINT_LIMIT_REACHED": 2024,
    "MQRC_FEEDBACK_ERROR": 2014,
    "MQRC_MISSING_REPLY_TO_Q": 2027,
    "MQRC_MSG_TYPE_ERROR": 2029,
    "MQRC_REPORT_OPTIONS_ERROR": 2061,
    "MQRC_PERSISTENCE_ERROR": 2047,
    "MQRC_PRIORITY_ERROR": 2050,
    "MQRC_GET_INHIBITED": 2016,
    "MQRC_HCONN_ERROR": 2018,
    "MQRC_MSG_TOO_BIG_FOR_Q": 2030,
    "MQRC_MSG_TOO_BIG_FOR_Q_MGR": 2031,
    "MQRC_NO_MSG_AVAILABLE": 2033,
    "MQRC_NOT_AUTHORIZED": 2035,
    "MQRC_OPTION_NOT_VALID_FOR_TYPE": 2045,
    "MQRC_PUT_INHIBITED": 2051,
    "MQRC_Q_FULL": 2053,
    "MQRC_Q_MGR_NAME_ERROR": 2058,
    "MQRC_Q_MGR_NOT_AVAILABLE": 2059,
    "MQRC_SECURITY_ERROR": 2063,
    "MQRC_TRUNCATED_MSG_FAILED": 2080,
    "MQRC_UNKNOWN_OBJECT_NAME": 2085,
    "MQRC_UNKNOWN_REMOTE_Q_MGR": 2087,
    "MQRC_XMIT_Q_USAGE_ERROR": 2091,
    "MQRC_WAIT_INTERVAL_ERROR": 2090,
    "MQRC_RESOURCE_PROBLEM": 2102,
    "MQRC_Q_MGR_QUIESCING": 2161,
    "MQRC_Q_MGR_STOPPING": 2162,
    "MQRC_STORAGE_MEDIUM_FULL": 2192,
    "MQRC_UNEXPECTED_ERROR": 2195,
    "MQRC_CONNECTION_QUIESCING": 2202,
    "MQRC_BACKOUT_THRESHOLD_REACHED": 2362,
    "MQRC_SSL_INITIALIZATION_ERROR": 2393,
    "MQRC_PROPERTY_NOT_AVAILABLE": 2471,
    "MQRC_CONNECTION_STOPPING": 2203,
    "MQRC_CHANNEL_NOT_AVAILABLE": 2537,
    "MQRC_HOST_NOT_AVAILABLE": 2538,
    "MQRC_RECONNECT_FAILED": 2548,
    "MQRC_CALL_INTERRUPTED": 2549,
    "MQRC_HOBJ_ERROR": 2019,
    "MQRC_SELECTOR_NOT_FOR_TYPE": 2068,
    "MQRC_OBJECT_IN_USE": 2042,
    "MQRC_PROPERTY_VALUE_TOO_BIG": 2469,
    "MQRC_CHANNEL_CONFIG_ERROR": 2539,
    "MQRC_UNKNOWN_CHANNEL_NAME": 2540,
    "MQRC_OPTIONS_ERROR": 2046,
    "MQRC_INCOMPLETE_GROUP": 2241,
    "MQRC_MSG_FLAGS_ERROR": 2249,
    "MQRC_OFFSET_ERROR": 2251,
    "MQRC_ORIGINAL_LENGTH_ERROR": 2252,
    "MQRC_SEGMENT_LENGTH_ZERO": 2253,
    "MQRC_INCONSISTENT_UOW": 2245,
    "MQRC_MATCH_OPTIONS_ERROR": 2247,
    "MQRC_OBJECT_ALREADY_EXISTS": 4001,
    "MQRCCF_OBJECT_NAME_ERROR": 4008,
    "MQRC_HANDLE_NOT_AVAILABLE": 2017,
    "MQRC_PROPERTY_NAME_ERROR": 2442,
    "MQRC_PROP_VALUE_NOT_CONVERTED": 2466,
}
REASON_NAMES: dict[int, str] = {code: name for name, code in REASONS.items()}

#: The Feedback of the report messages a queue manager or channel sends (cmqc.h); an
#: exception report carries an MQRC reason code there instead, and applications use
#: MQFB_APPL_FIRST to MQFB_APPL_LAST for their own.
FEEDBACK_NAMES: dict[int, str] = {
    0: "MQFB_NONE",
    256: "MQFB_QUIT",
    258: "MQFB_EXPIRATION",
    259: "MQFB_COA",
    260: "MQFB_COD",
    262: "MQFB_CHANNEL_COMPLETED",
    263: "MQFB_CHANNEL_FAIL_RETRY",
    264: "MQFB_CHANNEL_FAIL",
    265: "MQFB_APPL_CANNOT_BE_STARTED",
    266: "MQFB_TM_ERROR",
    267: "MQFB_APPL_TYPE_ERROR",
    268: "MQFB_STOPPED_BY_MSG_EXIT",
    269: "MQFB_ACTIVITY",
    271: "MQFB_XMIT_Q_MSG_ERROR",
    275: "MQFB_PAN",
    276: "MQFB_NAN",
    284: "MQFB_NOT_DELIVERED",
}


def feedback_name(code: int) -> str:
    """How an operator reads a report's Feedback: the MQFB_ or MQRC_ name, else the number.

    Args:
        code: the MQMD Feedback.
    """
    if code in FEEDBACK_NAMES:
        return FEEDBACK_NAMES[code]
    if MQFB_APPL_FIRST <= code <= MQFB_APPL_LAST:
        return f"MQFB_APPL_FIRST + {code - MQFB_APPL_FIRST} (an application's own)"
    if code in REASON_NAMES:
        return f"{REASON_NAMES[code]} ({code})"
    return f"Feedback {code}"


class MQError(MQGatherError):
    """An MQ call failed. ``reason`` is the MQRC_* name, ``code`` its number."""

    reason: str = "MQRC_UNEXPECTED_ERROR"
    #: Reasons after which retrying the same call later can succeed without anyone acting.
    transient: bool = False

    def __init__(self, detail: str = "", *, reason: str | None = None, code: int | None = None):
        if reason is not None:
            self.reason = reason
        self.code = code if code is not None else REASONS.get(self.reason, 0)
        self.detail = detail
        text = f"{self.reason} ({self.code})"
        super().__init__(f"{text}: {detail}" if detail else text)


class NoMessageAvailable(MQError):
    """MQRC_NO_MSG_AVAILABLE: the get's wait interval ended with no matching message."""

    reason = "MQRC_NO_MSG_AVAILABLE"


class QueueFull(MQError):
    """MQRC_Q_FULL: the queue is at MAXDEPTH."""

    reason = "MQRC_Q_FULL"
    transient = True


class MessageTooBig(MQError):
    """MQRC_MSG_TOO_BIG_FOR_Q: the body is longer than the queue's MAXMSGL."""

    reason = "MQRC_MSG_TOO_BIG_FOR_Q"


class UnknownObjectName(MQError):
    """MQRC_UNKNOWN_OBJECT_NAME: no such queue."""

    reason = "MQRC_UNKNOWN_OBJECT_NAME"


class UnknownRemoteQueueManager(MQError):
    """MQRC_UNKNOWN_REMOTE_Q_MGR: a put named another queue manager (MQOD ObjectQMgrName)
    and this one knows no way there: no transmission queue of that name, no queue manager
    alias, no default transmission queue, no cluster route."""

    reason = "MQRC_UNKNOWN_REMOTE_Q_MGR"


class NotAuthorized(MQError):
    """MQRC_NOT_AUTHORIZED: credentials refused or no authority to the object."""

    reason = "MQRC_NOT_AUTHORIZED"


class ConnectionBroken(MQError):
    """MQRC_CONNECTION_BROKEN (and kin): the connection to the queue manager is gone."""

    reason = "MQRC_CONNECTION_BROKEN"
    transient = True


class QueueManagerUnavailable(MQError):
    """MQRC_Q_MGR_NOT_AVAILABLE: the queue manager cannot be reached or opened."""

    reason = "MQRC_Q_MGR_NOT_AVAILABLE"
    transient = True


class UnitOfWorkBackedOut(MQError):
    """MQRC_BACKED_OUT: the queue manager backed the unit of work out (e.g. on a failover);
    what was got is back on its queue, so doing the work again is right."""

    reason = "MQRC_BACKED_OUT"
    transient = True


class ObjectAlreadyExists(MQError):
    """MQRC_OBJECT_ALREADY_EXISTS: a define without replace named an existing queue."""

    reason = "MQRC_OBJECT_ALREADY_EXISTS"


class ObjectNameError(MQError):
    """MQRCCF_OBJECT_NAME_ERROR: a define named a queue (or a backout queue) with a
    character MQ does not allow in an object name."""

    reason = "MQRCCF_OBJECT_NAME_ERROR"


class TruncatedMessage(MQError):
    """MQRC_TRUNCATED_MSG_FAILED: the message is longer than the caller's buffer; it stays
    on the queue. ``message`` is the one that did not fit."""

    reason = "MQRC_TRUNCATED_MSG_FAILED"

    def __init__(self, detail: str, message: MQMessage) -> None:
        super().__init__(detail)
        self.message = message


class QueueInhibited(MQError):
    """MQRC_PUT_INHIBITED or MQRC_GET_INHIBITED: an operator set the queue PUT(DISABLED) or
    GET(DISABLED) (browsing is a get too); the call works again once it is ENABLED."""

    reason = "MQRC_PUT_INHIBITED"


class SyncpointLimitReached(MQError):
    """MQRC_SYNCPOINT_LIMIT_REACHED: the call would take the unit of work past the queue
    manager's MAXUMSGS (messages got and put under syncpoint since it began). The unit of
    work stays open; what it holds must be committed or backed out."""

    reason = "MQRC_SYNCPOINT_LIMIT_REACHED"


class GroupOrderError(MQError):
    """A logical-group rule was broken: a message outside a group while one is being put
    in logical order (MQRC_INCOMPLETE_GROUP), a group's messages in and out of syncpoint
    (MQRC_INCONSISTENT_UOW), or a match that is not the group's next message
    (MQRC_MATCH_OPTIONS_ERROR)."""

    reason = "MQRC_INCOMPLETE_GROUP"


_CLASSES: dict[str, type[MQError]] = {
    cls.reason: cls
    for cls in (
        NoMessageAvailable,
        QueueFull,
        MessageTooBig,
        UnknownObjectName,
        UnknownRemoteQueueManager,
        NotAuthorized,
        ConnectionBroken,
        QueueManagerUnavailable,
        ObjectAlreadyExists,
        UnitOfWorkBackedOut,
        SyncpointLimitReached,
        QueueInhibited,
    )
}
# Several reasons mean the same thing to a caller: the connection is unusable, try again later.
for _name in (
    "MQRC_HCONN_ERROR",
    "MQRC_HOBJ_ERROR",
    "MQRC_CONNECTION_STOPPING",
    "MQRC_CHANNEL_NOT_AVAILABLE",
    "MQRC_RECONNECT_FAILED",
    "MQRC_CALL_INTERRUPTED",
    "MQRC_HOST_NOT_AVAILABLE",
    "MQRC_Q_MGR_QUIESCING",
    "MQRC_Q_MGR_STOPPING",
    "MQRC_CONNECTION_QUIESCING",
):
    _CLASSES[_name] = ConnectionBroken
for _name in ("MQRC_INCONSISTENT_UOW", "MQRC_MATCH_OPTIONS_ERROR"):
    _CLASSES[_name] = GroupOrderError
_CLASSES["MQRC_INCOMPLETE_GROUP"] = GroupOrderError
_CLASSES["MQRC_GET_INHIBITED"] = QueueInhibited
_CLASSES["MQRC_MSG_TOO_BIG_FOR_Q_MGR"] = MessageTooBig
# Over a client channel: the message is longer than the channel's MAXMSGL allows.
_CLASSES["MQRC_DATA_LENGTH_ERROR"] = MessageTooBig
_CLASSES["MQRC_SECURITY_ERROR"] = NotAuthorized


def error_for_reason(code: int, detail: str = "") -> MQError:
    """Build the typed error for an MQ reason code (unknown codes keep their number)."""
    name = REASON_NAMES.get(code, f"MQRC_{code}")
    cls = _CLASSES.get(name, MQError)
    return cls(detail, reason=name, code=code)


def undeliverable(exc: MQError) -> bool:
    """Whether a PUT was refused for where or what it is (unknown queue, Q_FULL, put
    inhibited, too big, not authorized...) rather than because the connection failed:
    such a PUT may be retried a bounded number of times, then must go elsewhere. A unit
    of work past MAXUMSGS is no fault of the destination: the same PUT elsewhere, in the
    same unit of work, fails alike."""
    return not isinstance(exc, ConnectionBroken | QueueManagerUnavailable | SyncpointLimitReached)
