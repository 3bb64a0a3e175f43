"""Leg identification: property, CorrelId layout, count-only; and bad input."""

from __future__ import annotations

import pytest

from bridge.identify import IdentificationError, gather_correl_id, identify, leg_correl_id
from bridge.mq.models import MQMessage, parse_id
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
