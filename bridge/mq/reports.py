"""The reports a queue manager itself generates: confirm on arrival (COA) and confirm on
delivery (COD); and how a report that a message was not delivered is recognised.

A message asks for them in its MQMD Report. The queue manager that owns the destination
queue sends a COA when the message is placed there, and a COD when an application gets
it off that queue destructively (a browse confirms nothing). Both go to the message's
ReplyToQ at its ReplyToQMgr; under syncpoint they belong to the unit of work of the put
or get that caused them, so a backout sends none, and they count toward MAXUMSGS.

An exception report (MQRO_EXCEPTION) comes from whatever could not deliver the message,
a channel's message channel agent on the way to another queue manager, say: its
Feedback is the MQRC reason. An expiration report (MQFB_EXPIRATION) says it expired
unread.
"""

from __future__ import annotations

from datetime import datetime

from bridge.mq.errors import feedback_name
from bridge.mq.models import (
    MQEI_UNLIMITED,
    MQFMT_NONE,
    MQMT_REPORT,
    MQRO_DISCARD_MSG,
    MQRO_NONE,
    MQRO_PASS_CORREL_ID,
    MQRO_PASS_DISCARD_AND_EXPIRY,
    MQRO_PASS_MSG_ID,
    MQMessage,
)

#: Report options for a COA: without data, with the first 100 bytes, with all of them.
MQRO_COA, MQRO_COA_WITH_DATA, MQRO_COA_WITH_FULL_DATA = 0x100, 0x300, 0x700
#: Report options for a COD: without data, with the first 100 bytes, with all of them.
MQRO_COD, MQRO_COD_WITH_DATA, MQRO_COD_WITH_FULL_DATA = 0x800, 0x1800, 0x3800
#: Feedback of a COA and of a COD.
MQFB_COA, MQFB_COD = 259, 260
#: Report option asking for an exception report without data, and the Feedback of an
#: expiration report.
MQRO_EXCEPTION, MQFB_EXPIRATION = 0x01000000, 258
#: The MQRC reason codes an exception report carries as its Feedback.
MQRC_FIRST, MQRC_LAST = 2001, 6999
#: PutApplType of a message the queue manager puts itself.
MQAT_QMGR = 7
#: Bytes of the original's data a report "with data" carries.
REPORT_DATA_LENGTH = 100

#: Per Feedback, the Report bits that ask for it: (any form, with data, with full data).
_ASKED = {
    MQFB_COA: (MQRO_COA, MQRO_COA_WITH_DATA, MQRO_COA_WITH_FULL_DATA),
    MQFB_COD: (MQRO_COD, MQRO_COD_WITH_DATA, MQRO_COD_WITH_FULL_DATA),
}


def undelivered(message: MQMessage) -> str | None:
    """Why the message a report is about was not delivered, or None when the report says
    nothing of the kind (a COA, a COD, a PAN, an application's own Feedback ...).

    Args:
        message: a report (MsgType MQMT_REPORT).
    """
    if message.msg_type != MQMT_REPORT:
        return None
    feedback = message.feedback
    if feedback == MQFB_EXPIRATION:
        return "expired unread (MQFB_EXPIRATION)"
    if MQRC_FIRST <= feedback <= MQRC_LAST:
        return feedback_name(feedback)
    return None


def asks(message: MQMessage, feedback: int) -> bool:
    """Whether ``message`` asks for the report with this Feedback (MQFB_COA, MQFB_COD)."""
    return bool(message.report & _ASKED[feedback][0])


def _data(message: MQMessage, feedback: int) -> bytes | None:
    """What of the original's data the report carries: all, the first 100 bytes, or
    None for none."""
    _, with_data, full = _ASKED[feedback]
    if message.report & full == full:
        return message.body
    if message.report & with_data == with_data:
        return message.body[:REPORT_DATA_LENGTH]
    return None


def confirmation(
    message: MQMessage, feedback: int, *, qmgr_name: str, msg_id: bytes, now: datetime
) -> MQMessage:
    """The COA or COD report the queue manager ``qmgr_name`` sends about ``message``.

    Its MsgId is ``msg_id`` (a new one) unless the original asked for its own to be
    passed on (MQRO_PASS_MSG_ID); its CorrelId is the original's MsgId unless the
    original asked for its CorrelId to be passed on (MQRO_PASS_CORREL_ID). It keeps the
    original's Priority, Persistence and identity context, and its Expiry and
    MQRO_DISCARD_MSG only when asked (MQRO_PASS_DISCARD_AND_EXPIRY). It asks for no
    report and names no ReplyToQ; its origin context is the queue manager's.

    Args:
        message: the original as it stands on its queue (ReplyToQMgr filled in).
        feedback: MQFB_COA or MQFB_COD.
        qmgr_name: the queue manager sending it.
        msg_id: the MsgId to give it unless the original's is passed on.
        now: when it is sent.
    """
    report = message.report
    data = _data(message, feedback)
    passed = report & MQRO_PASS_DISCARD_AND_EXPIRY
    return MQMessage(
        msg_id=message.msg_id if report & MQRO_PASS_MSG_ID else msg_id,
        correl_id=message.correl_id if report & MQRO_PASS_CORREL_ID else message.msg_id,
        msg_type=MQMT_REPORT,
        feedback=feedback,
        report=report & MQRO_DISCARD_MSG if passed else MQRO_NONE,
        expiry=message.expiry if passed else MQEI_UNLIMITED,
        priority=message.priority,
        persistence=message.persistence,
        format=message.format if data is not None else MQFMT_NONE,
        coded_char_set_id=message.coded_char_set_id,
        encoding=message.encoding,
        body=data or b"",
        reply_to_qmgr=qmgr_name,
        user_identifier=message.user_identifier,
        accounting_token=message.accounting_token,
        appl_identity_data=message.appl_identity_data,
        put_appl_type=MQAT_QMGR,
        put_appl_name=qmgr_name[:28],
        put_date_time=now,
    )
