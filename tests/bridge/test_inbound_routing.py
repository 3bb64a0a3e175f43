"""Where the bridge sends bad replies when several aggregates share one reply queue."""

from __future__ import annotations

from bridge.mq.models import MQMessage
from mqgather.config import AggregateSpec, LegSpec
from mqgather.names import PROP_REASON
from tests.harness import pipeline

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
