"""The COA and COD reports a queue manager generates, as pure functions."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bridge.mq import reports
from bridge.mq.models import (
    MQEI_UNLIMITED,
    MQFMT_NONE,
    MQMT_REPORT,
    MQRO_DISCARD_MSG,
    MQRO_PASS_CORREL_ID,
    MQRO_PASS_DISCARD_AND_EXPIRY,
    MQRO_PASS_MSG_ID,
    MQMessage,
    parse_id,
)

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
NEW_ID = parse_id("NEW")


def _about(report: int, **fields) -> MQMessage:
    return MQMessage(msg_id=parse_id("M"), correl_id=parse_id("C"), report=report,
                     reply_to_q="R", body=bytes(range(256)) * 2, **fields)  # fmt: skip


@pytest.mark.parametrize(
    ("report", "feedback", "asked"),
    [
        (reports.MQRO_COA, reports.MQFB_COA, True),
        (reports.MQRO_COA_WITH_FULL_DATA, reports.MQFB_COA, True),
        (reports.MQRO_COD_WITH_DATA, reports.MQFB_COA, False),
        (reports.MQRO_COD_WITH_DATA, reports.MQFB_COD, True),
        (MQRO_PASS_CORREL_ID | MQRO_PASS_MSG_ID, reports.MQFB_COD, False),
    ],
)
def test_asks(report, feedback, asked):
    assert reports.asks(_about(report), feedback) is asked


@pytest.mark.parametrize(
    ("report", "feedback", "length"),
    [
        (reports.MQRO_COA, reports.MQFB_COA, 0),
        (reports.MQRO_COA_WITH_DATA, reports.MQFB_COA, 100),
        (reports.MQRO_COA_WITH_FULL_DATA, reports.MQFB_COA, 512),
        (reports.MQRO_COD, reports.MQFB_COD, 0),
        (reports.MQRO_COD_WITH_DATA, reports.MQFB_COD, 100),
        (reports.MQRO_COD_WITH_FULL_DATA, reports.MQFB_COD, 512),
        # Asking for a COA with data and a COD without: each report takes its own.
        (reports.MQRO_COA_WITH_DATA | reports.MQRO_COD, reports.MQFB_COD, 0),
    ],
)
def test_a_report_carries_none_the_first_100_or_all_of_the_data(report, feedback, length):
    about = _about(report, format="MQSTR", coded_char_set_id=37, encoding=785)  # EBCDIC
    sent = reports.confirmation(about, feedback, qmgr_name="QM1", msg_id=NEW_ID, now=NOW)
    assert sent.body == about.body[:length]
    assert (sent.coded_char_set_id, sent.encoding) == (37, 785)  # its data as it was
    assert sent.format == ("MQSTR" if length else MQFMT_NONE)
    assert (sent.msg_type, sent.feedback) == (MQMT_REPORT, feedback)


def test_ids_are_new_and_copied_unless_passed_on():
    plain = reports.confirmation(
        _about(reports.MQRO_COA), reports.MQFB_COA, qmgr_name="QM1", msg_id=NEW_ID, now=NOW
    )
    assert (plain.msg_id, plain.correl_id) == (NEW_ID, parse_id("M"))
    passed = reports.confirmation(
        _about(reports.MQRO_COA | MQRO_PASS_MSG_ID | MQRO_PASS_CORREL_ID),
        reports.MQFB_COA, qmgr_name="QM1", msg_id=NEW_ID, now=NOW,
    )  # fmt: skip
    assert (passed.msg_id, passed.correl_id) == (parse_id("M"), parse_id("C"))


def test_expiry_and_discard_only_when_passed_on_and_context_of_the_queue_manager():
    about = _about(
        reports.MQRO_COD | MQRO_DISCARD_MSG, expiry=300, priority=7, persistence=0,
        user_identifier="alice", appl_identity_data="id", put_appl_name="app",
    )  # fmt: skip
    kept = reports.confirmation(about, reports.MQFB_COD, qmgr_name="QM1", msg_id=NEW_ID, now=NOW)
    assert (kept.expiry, kept.report) == (MQEI_UNLIMITED, 0)
    assert (kept.priority, kept.persistence) == (7, 0)
    assert (kept.user_identifier, kept.appl_identity_data) == ("alice", "id")
    assert (kept.put_appl_name, kept.put_appl_type, kept.put_date_time) == (
        "QM1", reports.MQAT_QMGR, NOW,
    )  # fmt: skip
    assert (kept.reply_to_q, kept.reply_to_qmgr) == ("", "QM1")
    passing = about.model_copy(update={"report": about.report | MQRO_PASS_DISCARD_AND_EXPIRY})
    passed = reports.confirmation(
        passing, reports.MQFB_COD, qmgr_name="QM1", msg_id=NEW_ID, now=NOW
    )
    assert (passed.expiry, passed.report) == (300, MQRO_DISCARD_MSG)
