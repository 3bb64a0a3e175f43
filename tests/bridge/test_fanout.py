"""Scatter: a gather registered with its requests, or nothing sent at all."""

from __future__ import annotations

import pytest

from bridge.fanout import ScatterError, request_expiry
from bridge.mq.models import MQEI_UNLIMITED
from mqgather.config import AggregateSpec, LegSpec
from mqgather.constants import MAX_KEPT_REQUEST_BYTES
from tests.harness import pipeline

LEGS = (LegSpec(name="CREDIT", sequence=10), LegSpec(name="STOCK", sequence=20, retries=1))


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        # The second leg's request is too large to keep for its re-request: the first
        # leg's request was put by then.
        ({"bodies": {"STOCK": b"x" * (MAX_KEPT_REQUEST_BYTES + 1)}}, "keeps a request"),
        # A registration no timer keeps, more legs than a gather holds: refused first.
        ({"timeout_seconds": float("inf")}, "timeout_seconds"),
        ({"timeout_seconds": 1e12}, "timeout_seconds"),
        ({"legs": tuple(LegSpec(name=f"L{i}") for i in range(5001))}, "5,001 of them"),
        ({"legs": (LegSpec(name="CREDIT", retries=10, retry_backoff=10),)}, "re-request"),
        # Legs given here are not the aggregate's, which its model checked.
        ({"legs": (LegSpec(name="CREDIT"), LegSpec(name="CREDIT", sequence=2))}, "named twice"),
        # Where the response would go, MQ would refuse: found now, not at the gather's end.
        ({"reply_to_q": "ORDER RESPONSE"}, "reply_to_q 'ORDER RESPONSE': ' ' cannot stand"),
        ({"reply_to_q": "Q" * 49}, "reply_to_q .*: 49 characters; MQ names are at most 48"),
        ({"reply_to_qmgr": "QM-1"}, "reply_to_qmgr 'QM-1': '-' cannot stand"),
        # A body for a leg not sent is a typo no back end would answer.
        ({"bodies": {"CREDIT": b"{}", "CREDTI": b"{}"}}, "a body for CREDTI, which is not a leg"),
    ],
)
async def test_a_scatter_refused_midway_leaves_no_request_for_a_later_commit(
    temporal_env, tmp_path, kwargs, says
):
    spec = AggregateSpec(name="midway", legs=LEGS, timeout_seconds=30)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        with pytest.raises(ScatterError, match=says):
            await p.scatter(spec, **kwargs)
        # The same connection commits later work: nothing of the refused scatter goes too.
        p.qm.commit()
        depths = {leg.name: p.depth(leg.queue()) for leg in LEGS}
    assert depths == {"CREDIT": 0, "STOCK": 0}


@pytest.mark.parametrize(
    ("expire", "leg_timeout", "timeout", "expiry"),
    [
        (False, 5.0, 30.0, MQEI_UNLIMITED),  # not asked
        (True, None, 30.0, 300),  # the gather's deadline
        (True, 5.0, 30.0, 50),  # the leg's own, sooner
        (True, 50.0, 30.0, 300),  # the gather's, sooner
        (True, None, 0.0, MQEI_UNLIMITED),  # no deadline at all
        (True, 0.01, 0.0, 1),  # a hundredth of a second: the shortest Expiry MQ takes
        (True, 2.34, 0.0, 24),  # rounded up: never before the deadline
    ],
)
def test_a_request_expires_when_nobody_waits_for_its_reply(expire, leg_timeout, timeout, expiry):
    spec = AggregateSpec(name="e", expire_requests=expire)
    leg = LegSpec(name="CREDIT", timeout_seconds=leg_timeout)
    assert request_expiry(spec, leg, timeout) == expiry


async def test_a_start_temporal_refuses_says_why_and_sends_no_request(
    temporal_env, bare_namespace, tmp_path
):
    """On a namespace no worker or bridge has started on, mqgather's search attributes
    are not defined: the start is refused, the requests backed out, and the error says
    what to do."""
    from bridge.fanout import scatter

    spec = AggregateSpec(name="bare", legs=LEGS, timeout_seconds=30)
    async with pipeline(temporal_env.client, tmp_path, [spec], run_bridge=False) as p:
        with pytest.raises(ScatterError) as refused:
            await scatter(bare_namespace, p.qm, spec, task_queue=p.task_queue)
        p.qm.commit()
        depths = {leg.name: p.depth(leg.queue()) for leg in LEGS}
    said = str(refused.value)
    assert "Temporal refused the start (INVALID_ARGUMENT" in said and "search attribute" in said
    assert "a worker or bridge defines mqgather's search attributes as it starts" in said
    assert depths == {"CREDIT": 0, "STOCK": 0}


async def test_a_start_the_server_drops_is_a_retry_not_a_refusal(tmp_path):
    """The server gone (killed, about to restart): the start fails UNAVAILABLE. The
    requests are backed out, and the error is the one that says to try again, not the
    refusal a caller should give up on."""
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.service import RetryConfig

    from bridge.fanout import scatter
    from bridge.mq.local_qm import LocalQueueManager
    from mqgather.runtime.temporal import TemporalUnavailable, dev_server_args
    from tests.harness import prepare_queues, start_dev_server

    def args_for(ports: list[int]) -> list[str]:
        return [*dev_server_args(str(tmp_path / "t.db"), ports[0], ports[1]), "--headless"]

    server, _, (port, _) = await start_dev_server(tmp_path, args_for, 2)
    try:
        # Its own retries off, so that the test does not wait them out.
        client = await Client.connect(f"localhost:{port}", data_converter=pydantic_data_converter,
                                      retry_config=RetryConfig(max_retries=0))  # fmt: skip
    finally:
        server.kill()
        server.wait(30)
    spec = AggregateSpec(name="down", legs=LEGS, timeout_seconds=30)
    path = tmp_path / "qm.db"
    prepare_queues(path, [leg.queue() for leg in LEGS])
    with LocalQueueManager(path) as qm:
        with pytest.raises(TemporalUnavailable) as dropped:
            await scatter(client, qm, spec)
        qm.commit()
        depths = {leg.name: qm.inquire(leg.queue()).curdepth for leg in LEGS}
    said = str(dropped.value)
    assert "dropped the call starting gather gather:down:" in said
    assert "its requests backed out" in said and "UNAVAILABLE" in said
    assert not isinstance(dropped.value, ScatterError)
    assert depths == {"CREDIT": 0, "STOCK": 0}
