"""The worker's parts measured alone: the merge and PUT runs as a worker runs it (each call
commits within its attempt's time) and costs more than the floor's activity."""

from __future__ import annotations

from bench.worker_parts import activity_cpu, floor_activity_cpu
from mqgather.config import AggregateSpec, LegSpec
from tests.activities.test_mq import reply
from workflows.models import PutResponseInput, ReceivedLeg


def test_the_merge_and_put_is_measured_through_commits_that_go_through():
    leg = LegSpec(name="CREDIT", sequence=10)
    inp = PutResponseInput(
        aggregate=AggregateSpec(name="parts", legs=(leg,)), gather_id="gather:parts:1",
        correl_id=b"C" * 24, outcome="COMPLETE",
        legs=[ReceivedLeg(leg=leg, replies=[reply(1)])], missing=[],
    )  # fmt: skip
    assert activity_cpu([inp], 5) > floor_activity_cpu(5) > 0
