"""Chaos: worker, bridge and Temporal server each killed with SIGKILL while gathers run,
and a requester that takes every response the instant it lands. Every reply ends in
exactly one place and every gather PUTs exactly one response."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from bridge.fanout import scatter
from bridge.mq.errors import NoMessageAvailable
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage, PutOptions
from mqgather.config import AggregateSpec, LegSpec
from mqgather.runtime.temporal import dev_server_args
from tests.harness import free_port, prepare_queues
from workflows.models import GatherResult, gather_id

LEGS = (LegSpec(name="CREDIT", sequence=10), LegSpec(name="STOCK", sequence=20),
        LegSpec(name="TAX", sequence=30))  # fmt: skip
GATHERS = 200
#: After how many gathers each part is killed.
KILLS = {50: "worker", 100: "bridge", 150: "server"}


class Requester:
    """Takes every response off the queue as soon as it is there, in its own thread."""

    def __init__(self, path: Path, queue: str) -> None:
        self.taken: list[MQMessage] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(path, queue), daemon=True)
        self._thread.start()

    def _run(self, path: Path, queue: str) -> None:
        with LocalQueueManager(path) as qm:
            while not self._stop.is_set():
                try:
                    self.taken.append(qm.get(queue, wait_ms=100, syncpoint=False))
                except NoMessageAvailable:
                    continue

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


class Stack:
    """The dev server, a worker and a bridge as processes that can be killed."""

    def __init__(self, tmp: Path, path: Path) -> None:
        binary = shutil.which("temporal")
        assert binary
        self.port = free_port()
        self.server_args = [binary, *dev_server_args(str(tmp / "t.db"), self.port, free_port()),
                            "--headless"]  # fmt: skip
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
        config = tmp / "mqgather.toml"
        config.write_text(
            "[aggregates.chaos]\ntimeout_seconds = 600\n"
            'legs = [{name = "CREDIT", sequence = 10}, {name = "STOCK", sequence = 20}, '
            '{name = "TAX", sequence = 30}]\n'
        )
        self.env.update(TEMPORAL_ADDRESS=f"localhost:{self.port}", MQGATHER_MQ=f"local:{path}",
                        MQGATHER_CONFIG=str(config))  # fmt: skip
        self.task_queue = f"chaos-{uuid.uuid4().hex[:8]}"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs = tmp

    def start(self, part: str) -> None:
        if part == "server":
            args = self.server_args
        else:
            args = [sys.executable, "-m", "mqgather.cli", part, "--task-queue", self.task_queue]
        log = open(self.logs / f"{part}.log", "ab")  # noqa: SIM115
        self.procs[part] = subprocess.Popen(args, env=self.env, stdout=log, stderr=log)

    def kill(self, part: str) -> None:
        proc = self.procs[part]
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)


async def _connect(address: str) -> Client:
    for _ in range(300):
        try:
            return await Client.connect(address, data_converter=pydantic_data_converter)
        except RuntimeError:
            await asyncio.sleep(0.2)  # the server is starting
    raise AssertionError(f"Temporal at {address} did not start")


@pytest.mark.timeout(600)
async def test_kills_of_worker_bridge_and_server_lose_nothing_and_repeat_nothing(tmp_path):
    path = tmp_path / "qm.db"
    prepare_queues(path, [leg.queue() for leg in LEGS], bothresh=5)
    spec = AggregateSpec(name="chaos", legs=LEGS, timeout_seconds=600)
    stack = Stack(tmp_path, path)
    requester = Requester(path, spec.response_queue)
    put: dict[bytes, list[bytes]] = {}
    try:
        stack.start("server")
        client = await _connect(f"localhost:{stack.port}")
        stack.start("worker")
        stack.start("bridge")
        with LocalQueueManager(path) as qm:
            for i in range(GATHERS):
                if i in KILLS:
                    stack.kill(KILLS[i])
                    stack.start(KILLS[i])
                correl = os.urandom(20) + bytes(4)
                while True:  # the server may be down: the scatter is backed out, retried
                    try:
                        await scatter(client, qm, spec, correl_id=correl,
                                      task_queue=stack.task_queue)  # fmt: skip
                        break
                    except RuntimeError:
                        await asyncio.sleep(0.2)
                    except Exception as exc:
                        if "already closed" in str(exc):
                            raise
                        await asyncio.sleep(0.2)
                put[correl] = []
                for leg in LEGS:
                    reply = MQMessage(correl_id=correl, properties={"leg": leg.name}, body=b"{}")
                    put[correl].append(qm.put(spec.reply_queue, reply, PutOptions()).msg_id)
                qm.commit()
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
