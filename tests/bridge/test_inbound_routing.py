"""Where the bridge sends bad replies when several aggregates share one reply queue, and
a MAXUMSGS no unit of work fits in."""

from __future__ import annotations

import asyncio

import pytest

from bridge.collect import CollectorBridge
from bridge.inbound import InboundBridge, QueueBridge
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage, QueueAttributes
from mqgather.config import AggregateSpec, LegSpec
from mqgather.errors import MQGatherError
from mqgather.names import PROP_REASON
from mqgather.routing import Destination
from tests.collecting import SPEC
from tests.harness import pipeline, prepare_queues

LEGS = (LegSpec(name="CREDIT", sequence=10),)


async def test_failures_on_a_shared_queue_go_to_a_documented_aggregate(temporal_env, tmp_path):
    # Listed so that the first in the list is not the owner: the owner is "alpha",
    # the aggregate whose name sorts first.
    beta = AggregateSpec(name="beta", legs=LEGS, failure_queue="FAIL.BETA")
    alpha = AggregateSpec(name="alpha", legs=LEGS, failure_queue="FAIL.ALPHA")
    async with pipeline(
        temporal_env.client, tmp_path, [beta, alpha], extra_queues=["FAIL.ALPHA", "FAIL.BETA"],
        run_worker=False,
    ) as p:  # fmt: skip
        nameless = p.put("GATHER.IN", MQMessage(correl_id=b"X", properties={"leg": "CREDIT"}))
        no_leg = p.put(
            "GATHER.IN", MQMessage(correl_id=b"Y", properties={"aggregate": "beta"}, body=b"b")
        )
        to_owner = await p.wait_message("FAIL.ALPHA")
        to_beta = await p.wait_message("FAIL.BETA")
        assert p.empty("FAIL.ALPHA") and p.empty("FAIL.BETA") and p.empty("GATHER.FAILURE")
    assert to_owner.msg_id == nameless.msg_id
    assert "several share this queue" in str(to_owner.properties[PROP_REASON])
    assert to_beta.msg_id == no_leg.msg_id and to_beta.body == b"b"
    assert "naming its leg" in str(to_beta.properties[PROP_REASON])


@pytest.mark.parametrize("kind", ["gathers", "collector"])
async def test_a_bridge_refuses_a_maxumsgs_no_unit_of_work_fits_in(temporal_env, tmp_path, kind):
    """A reply needs its get, its move and the COD and COA they may cause (4); a
    collector's batch of one up to 5. Below that every unit of work would fail and be
    backed out for ever: the bridge stops at once, naming MAXUMSGS and what to do."""
    path = tmp_path / "qm.db"
    prepare_queues(path, [SPEC.input_queue])
    with LocalQueueManager(path) as admin:
        admin.set_max_uncommitted(3 if kind == "gathers" else 4)
    connect = lambda: LocalQueueManager(path)  # noqa: E731
    if kind == "gathers":
        bridge: QueueBridge = InboundBridge(temporal_env.client, connect,
                                            [AggregateSpec(name="one", legs=LEGS)])  # fmt: skip
    else:
        bridge = CollectorBridge(temporal_env.client, connect, SPEC)
    least = 4 if kind == "gathers" else 5
    with pytest.raises(MQGatherError, match=rf"MAXUMSGS\(\d\).*may need {least}.*ALTER QMGR"):
        await asyncio.wait_for(bridge.run(asyncio.Event()), 10)


@pytest.mark.parametrize(
    ("bothresh", "boqname", "threshold", "count", "expected"),
    [
        (3, "BACK.Q", 5, 2, None),
        (3, "BACK.Q", 5, 3, ("BACK.Q", "BOTHRESH 3 of IN.Q")),
        (3, "", 5, 4, ("DEAD.Q", "BOTHRESH 3 of IN.Q")),
        (0, "", 5, 4, None),
        (0, "", 5, 5, ("DEAD.Q", "IN.Q has BOTHRESH(0): the bridge's --backout-threshold 5")),
        (0, "BACK.Q", 2, 2, ("BACK.Q", "--backout-threshold 2")),
        (0, "", 0, 1000, None),  # the bridge told to keep none: backed out for ever
    ],
)
def test_a_message_backed_out_to_the_threshold_goes_aside(
    bothresh, boqname, threshold, count, expected
):
    bridge = InboundBridge(None, lambda: None, [], backout_threshold=threshold)  # type: ignore[arg-type]
    attrs = QueueAttributes(name="IN.Q", bothresh=bothresh, boqname=boqname)
    message = MQMessage(body=b"x", backout_count=count)
    move = bridge.backed_out_too_often("IN.Q", attrs, "DEAD.Q", message)
    if expected is None:
        assert move is None
        return
    assert move is not None and move.queue == expected[0] and move.message is message
    assert expected[1] in move.reason and f"backed out {count} times" in move.reason
    assert move.kind is (Destination.BACKOUT if boqname else Destination.DEAD_LETTER)


def test_a_message_at_the_threshold_with_nowhere_to_go_stays_and_is_named(caplog):
    # No BOQNAME and no DEADQ: the move to no queue failed (MQRC_UNKNOWN_OBJECT_NAME for
    # queue ''), backing the batch out with an error that said nothing of why.
    bridge = InboundBridge(None, lambda: None, [])  # type: ignore[arg-type]
    attrs = QueueAttributes(name="IN.Q", bothresh=2)
    message = MQMessage(body=b"x", backout_count=2)
    with caplog.at_level("ERROR", logger="mqgather"):
        for _ in range(2):
            assert bridge.backed_out_too_often("IN.Q", attrs, "", message) is None
    [said] = [r.getMessage() for r in caplog.records]
    assert "no BOQNAME" in said and "no DEADQ" in said and "BOTHRESH 2 of IN.Q" in said
