"""Leg identification: property, CorrelId layout, count-only; and bad input."""

from __future__ import annotations

import pytest

from bridge.identify import (
    IdentificationError,
    ReportedLeg,
    ReportMessage,
    gather_correl_id,
    identify,
    leg_correl_id,
    reported_leg,
)
from bridge.mq.errors import feedback_name
from bridge.mq.models import MQMT_REPLY, MQMT_REPORT, MQMessage, parse_id
from mqgather.config import AggregateSpec

ORDERS = AggregateSpec(name="orders")
PAYMENTS = AggregateSpec(name="payments")


def test_property_names_the_leg():
    found = identify(MQMessage(correl_id=b"R1", properties={"leg": "CREDIT"}), [ORDERS])
    assert (found.aggregate.name, found.correl_id, found.leg) == (
        "orders",
        parse_id("R1"),
        "CREDIT",
    )


def test_correlid_layout_carries_gather_and_leg_index():
    spec = AggregateSpec(name="o", leg_identification="correlid")
    key = gather_correl_id(b"k" * 20)
    found = identify(MQMessage(correl_id=leg_correl_id(key, 3)), [spec])
    assert found.correl_id == key and found.leg_index == 2


def test_count_only_needs_just_the_correl_id():
    spec = AggregateSpec(name="c", leg_identification="count")
    found = identify(MQMessage(correl_id=b"X"), [spec])
    assert found.leg is None and found.leg_index is None


def test_aggregate_property_picks_among_several():
    found = identify(
        MQMessage(correl_id=b"R", properties={"leg": "A", "aggregate": "payments"}),
        [ORDERS, PAYMENTS],
    )
    assert found.aggregate.name == "payments"


@pytest.mark.parametrize(
    ("message", "candidates", "reason"),
    [
        (MQMessage(properties={"leg": "A"}), [ORDERS], "no CorrelId"),
        (MQMessage(correl_id=b"R", properties={"leg": "A", "aggregate": "x"}), [ORDERS],
         "unknown aggregate 'x'"),
        (MQMessage(correl_id=b"R", properties={"leg": "A"}), [ORDERS, PAYMENTS],
         "unknown aggregate"),
        (MQMessage(correl_id=b"R"), [ORDERS], "no string property 'leg'"),
        (MQMessage(correl_id=b"R", properties={"leg": "A"}, body=b"x" * 300_001),
         [ORDERS.model_copy(update={"max_reply_bytes": 300_000})], "exceeds max_reply_bytes"),
    ],
)  # fmt: skip
def test_bad_input_says_why(message, candidates, reason):
    with pytest.raises(IdentificationError, match=reason):
        identify(message, candidates)


def test_a_reply_whose_properties_are_in_an_rfh2_body_says_so():
    """A queue with PROPCTL(FORCE), or a sender that writes the MQRFH2 itself, leaves the
    leg property inside the body: the reason says where to look."""
    rfh2 = MQMessage(correl_id=b"R", format="MQHRF2", body=b"RFH \x00\x00\x00\x02")
    with pytest.raises(IdentificationError, match=r"'leg' naming its leg; its body begins "
                       r"with an MQRFH2 header \(Format MQHRF2\).*PROPCTL"):  # fmt: skip
        identify(rfh2, [ORDERS])
    with pytest.raises(IdentificationError, match=r"'aggregate' property; its body.*MQRFH2"):
        identify(rfh2, [ORDERS, PAYMENTS])
    with pytest.raises(IdentificationError) as plain:
        identify(MQMessage(correl_id=b"R", format="MQSTR"), [ORDERS])
    assert "MQRFH2" not in str(plain.value)


MQFB_COA, MQFB_APPL_FIRST = 259, 65536


@pytest.mark.parametrize("mode", ["property", "correlid", "count"])
def test_a_report_is_never_a_reply_by_default(mode):
    spec = ORDERS.model_copy(update={"leg_identification": mode})
    # A queue manager's COA: the request's MsgId as CorrelId, and (WITH_DATA) its start.
    report = MQMessage(
        correl_id=leg_correl_id(b"K", 1), msg_type=MQMT_REPORT, feedback=MQFB_COA,
        properties={"leg": "A"}, body=b"{}",
    )  # fmt: skip
    with pytest.raises(ReportMessage, match="Feedback MQFB_COA") as raised:
        identify(report, [spec])
    assert raised.value.aggregate is spec
    assert "reports_are_replies" in str(raised.value)
    # The same message as a reply is one.
    assert identify(report.model_copy(update={"msg_type": MQMT_REPLY}), [spec]).aggregate is spec


def test_a_report_naming_no_aggregate_of_a_shared_queue_goes_to_the_owner():
    report = MQMessage(correl_id=b"R", msg_type=MQMT_REPORT, feedback=2053)
    with pytest.raises(ReportMessage, match=r"MQRC_Q_FULL \(2053\)") as raised:
        identify(report, [PAYMENTS, ORDERS])
    assert raised.value.aggregate.name == min(ORDERS.name, PAYMENTS.name)
    named = report.model_copy(update={"properties": {"aggregate": "payments"}})
    with pytest.raises(ReportMessage) as raised:
        identify(named, [ORDERS, PAYMENTS])
    assert raised.value.aggregate is PAYMENTS


def test_an_aggregate_may_take_reports_as_replies():
    spec = ORDERS.model_copy(update={"reports_are_replies": True})
    report = MQMessage(
        correl_id=b"R", msg_type=MQMT_REPORT, feedback=MQFB_APPL_FIRST + 7,
        properties={"leg": "A"},
    )  # fmt: skip
    assert identify(report, [spec]).leg == "A"


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (259, "MQFB_COA"),
        (258, "MQFB_EXPIRATION"),
        (269, "MQFB_ACTIVITY"),
        (2053, "MQRC_Q_FULL (2053)"),
        (MQFB_APPL_FIRST + 7, "MQFB_APPL_FIRST + 7 (an application's own)"),
        (1234567890, "Feedback 1234567890"),
    ],
)
def test_feedback_is_named_as_an_operator_reads_it(code, name):
    assert feedback_name(code) == name


async def test_scatter_refuses_a_correl_id_that_does_not_fit_the_layout(tmp_path):
    import pytest

    from bridge.fanout import ScatterError, scatter
    from bridge.mq.local_qm import LocalQueueManager
    from mqgather.config import LegSpec

    spec = AggregateSpec(name="cid", leg_identification="correlid",
                         legs=(LegSpec(name="A"), LegSpec(name="B")))  # fmt: skip
    with LocalQueueManager(tmp_path / "qm.db") as qm, pytest.raises(ScatterError) as caught:
        # Refused before anything is put or registered (no Temporal client is needed).
        await scatter(None, qm, spec, correl_id=b"X" * 24)  # type: ignore[arg-type]
    assert "does not end in 4 zero bytes" in str(caught.value)
    assert "hex:" + "58" * 24 in str(caught.value)


async def test_scatter_pads_a_short_correl_id_as_mq_does(temporal_env, tmp_path):
    from bridge.fanout import scatter
    from bridge.mq.local_qm import LocalQueueManager
    from bridge.mq.models import QueueAttributes
    from mqgather.config import LegSpec

    spec = AggregateSpec(name="pad", legs=(LegSpec(name="A"),), timeout_seconds=1)
    with LocalQueueManager(tmp_path / "qm.db") as qm:
        qm.define(QueueAttributes(name="BACKEND.A"))
        sent = await scatter(temporal_env.client, qm, spec, correl_id=b"ORDER-7",
                             task_queue=f"pad-{tmp_path.name}")  # fmt: skip
        request = qm.get("BACKEND.A", syncpoint=False)
    padded = b"ORDER-7" + bytes(17)
    assert sent.correl_id == padded and request.correl_id == padded
    assert sent.gather_id == "gather:pad:" + padded.hex()
    described = await temporal_env.client.get_workflow_handle(sent.gather_id).describe()
    assert described.id == sent.gather_id
    await temporal_env.client.get_workflow_handle(sent.gather_id).terminate()


@pytest.mark.parametrize(
    ("feedback", "said"),
    [
        (2053, "MQRC_Q_FULL (2053)"),
        (2085, "MQRC_UNKNOWN_OBJECT_NAME (2085)"),
        (2999, "Feedback 2999"),  # a reason code this release does not name
        (258, "expired unread (MQFB_EXPIRATION)"),
        (259, None),  # a COA
        (276, None),  # a NAN: the back end answered
        (65536 + 4, None),  # an application's own
    ],
)
def test_a_report_of_an_undelivered_request_names_its_gather_and_leg(feedback, said):
    spec = ORDERS.model_copy(update={"leg_identification": "correlid", "request_reports": True})
    report = MQMessage(correl_id=leg_correl_id(b"K", 2), msg_type=MQMT_REPORT, feedback=feedback)
    leg = reported_leg(report, spec)
    if said is None:
        assert leg is None
        return
    assert leg == ReportedLeg(leg_correl_id(b"K", 0), 1, said)
    # Not asked for, not a report, or no leg in the CorrelId: nothing.
    assert reported_leg(report, spec.model_copy(update={"request_reports": False})) is None
    assert reported_leg(report.model_copy(update={"msg_type": MQMT_REPLY}), spec) is None
    assert (
        reported_leg(report.model_copy(update={"correl_id": leg_correl_id(b"K", 0)}), spec) is None
    )


def test_request_reports_needs_the_correl_id_layout():
    with pytest.raises(ValueError, match='request_reports: needs leg_identification = "correlid"'):
        AggregateSpec(name="r", request_reports=True)
