"""Chaos: worker, bridge and Temporal server each killed with SIGKILL while gathers run
(small ones, and large ones whose replies wait on the hold queue), and a requester that
takes every response the instant it lands. Every reply ends in exactly one place, every
gather PUTs exactly one response, and nothing stays on the hold queue."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage
from tests.chaos import (
    LARGE,
    LEGS,
    SPEC,
    Requester,
    Stack,
    put_replies,
    reply_body,
    scatter_retrying,
)
from tests.harness import connect_when_up, prepare_queues
from workflows.models import GatherResult, gather_id
from workflows.redelivery import msg_id_of

GATHERS = 200
#: After how many gathers each part is killed.
KILLS = {50: "worker", 100: "bridge", 150: "server"}


@pytest.mark.timeout(600)
async def test_kills_of_worker_bridge_and_server_lose_nothing_and_repeat_nothing(tmp_path):
    await _chaos(tmp_path, GATHERS, KILLS)


@pytest.mark.timeout(600)
async def test_kills_while_large_gathers_run_leave_the_hold_queue_empty(tmp_path):
    taken = await _chaos(tmp_path, 45, {10: "worker", 20: "bridge", 30: "server"}, LARGE)
    for response in taken:
        legs = json.loads(response.body)["legs"]
        assert {leg: len(json.dumps(body)) for leg, body in legs.items()} == {
            leg.lower(): len(reply_body(leg, size)) for leg, size in LARGE.items()
        }


async def _chaos(
    tmp_path: Path, gathers: int, kills: dict[int, str], sizes: dict[str, int] | None = None
) -> list[MQMessage]:
    """``gathers`` gathers, the parts killed as ``kills`` says; every check of nothing
    lost and nothing twice. The responses the requester took."""
    path = tmp_path / "qm.db"
    prepare_queues(path, [leg.queue() for leg in LEGS], bothresh=5)
    spec = SPEC
    stack = Stack(tmp_path, path)
    requester = Requester(path, spec.response_queue)
    put: dict[bytes, list[bytes]] = {}
    try:
        stack.start("server")
        client = await connect_when_up(f"localhost:{stack.port}")
        stack.start("worker")
        stack.start("bridge")
        with LocalQueueManager(path) as qm:
            for i in range(gathers):
                if i in kills:
                    stack.kill(kills[i])
                    stack.start(kills[i])
                correl = os.urandom(20) + bytes(4)
                await scatter_retrying(client, qm, correl, stack.task_queue)
                put[correl] = put_replies(qm, correl, sizes)
        deadline = asyncio.get_running_loop().time() + 240
        while len({m.correl_id for m in requester.taken}) < gathers:
            assert asyncio.get_running_loop().time() < deadline, (
                f"{len(requester.taken)} responses of {gathers}"
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
    assert len(taken) == gathers, f"{len(taken) - gathers} duplicate responses"
    assert {m.correl_id for m in taken} == set(put)
    with LocalQueueManager(path) as qm:
        for queue in ("GATHER.IN", "GATHER.LATE", "GATHER.DUPLICATE", "GATHER.UNKNOWN",
                      "GATHER.FAILURE", "GATHER.BACKOUT", "SYSTEM.DEAD.LETTER.QUEUE",
                      spec.response_queue, spec.hold_queue):  # fmt: skip
            assert qm.inquire(queue).curdepth == 0, queue
    for correl, msg_ids in put.items():
        result = results[correl]
        assert result.state == "COMPLETE" and result.duplicates == 0
        assert {m.hex() for m in msg_ids} <= {msg_id_of(k) for k in result.consumed_msg_ids}
    return taken
