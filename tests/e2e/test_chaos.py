"""Chaos: worker, bridge and Temporal server each killed with SIGKILL while gathers run,
and a requester that takes every response the instant it lands. Every reply ends in
exactly one place and every gather PUTs exactly one response."""

from __future__ import annotations

import asyncio
import os

import pytest

from bridge.mq.local_qm import LocalQueueManager
from tests.chaos import LEGS, SPEC, Requester, Stack, connect, put_replies, scatter_retrying
from tests.harness import prepare_queues
from workflows.models import GatherResult, gather_id

GATHERS = 200
#: After how many gathers each part is killed.
KILLS = {50: "worker", 100: "bridge", 150: "server"}


@pytest.mark.timeout(600)
async def test_kills_of_worker_bridge_and_server_lose_nothing_and_repeat_nothing(tmp_path):
    path = tmp_path / "qm.db"
    prepare_queues(path, [leg.queue() for leg in LEGS], bothresh=5)
    spec = SPEC
    stack = Stack(tmp_path, path)
    requester = Requester(path, spec.response_queue)
    put: dict[bytes, list[bytes]] = {}
    try:
        stack.start("server")
        client = await connect(f"localhost:{stack.port}")
        stack.start("worker")
        stack.start("bridge")
        with LocalQueueManager(path) as qm:
            for i in range(GATHERS):
                if i in KILLS:
                    stack.kill(KILLS[i])
                    stack.start(KILLS[i])
                correl = os.urandom(20) + bytes(4)
                await scatter_retrying(client, qm, correl, stack.task_queue)
                put[correl] = put_replies(qm, correl)
        deadline = asyncio.get_running_loop().time() + 240
        while len({m.correl_id for m in requester.taken}) < GATHERS:
            assert asyncio.get_running_loop().time() < deadline, (
                f"{len(requester.taken)} responses of {GATHERS}"
            )
            await asyncio.sleep(0.2)  # the requester thread collects
        results = {}
        for correl in put:
            handle = client.get_workflow_handle(gather_id(spec.name, correl),
                                                result_type=GatherResult)  # fmt: skip
            results[correl] = await handle.result()
        # Every PUT of a gather happens before its result is recorded, so from here on
        # any response, a repeated one included, is either taken or still on the queue.
    finally:
        requester.stop()
        stack.stop()
    taken = requester.taken
    assert len(taken) == GATHERS, f"{len(taken) - GATHERS} duplicate responses"
    assert {m.correl_id for m in taken} == set(put)
    with LocalQueueManager(path) as qm:
        for queue in ("GATHER.IN", "GATHER.LATE", "GATHER.DUPLICATE", "GATHER.UNKNOWN",
                      "GATHER.FAILURE", "GATHER.BACKOUT", "SYSTEM.DEAD.LETTER.QUEUE",
                      spec.response_queue):  # fmt: skip
            assert qm.inquire(queue).curdepth == 0, queue
    for correl, msg_ids in put.items():
        result = results[correl]
        assert result.state == "COMPLETE" and result.duplicates == 0
        assert {m.hex() for m in msg_ids} <= set(result.consumed_msg_ids)
