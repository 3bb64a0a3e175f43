"""A worker cut off from Temporal while its MQ call hangs: another worker takes the gather
over and PUTs its response; the first worker's call then returns, and its attempt backs
out instead of committing a second response."""

from __future__ import annotations

import asyncio
import json
import threading

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from bridge.mq.local_qm import LocalQueueManager
from mqgather.config import AggregateSpec
from tests.harness import THREE_LEGS, pipeline
from tests.relay import Relay
from workers.worker import build_worker


class _PutHangs(LocalQueueManager):
    """A queue manager whose PUT to ``ORDER.RESPONSE`` hangs until released; it tells how
    the unit of work then ended."""

    def __init__(self, path, putting: threading.Event, release: threading.Event,
                 ended: list[str]) -> None:  # fmt: skip
        super().__init__(path)
        self._putting, self._release, self._ended = putting, release, ended
        self._responding = False

    def put(self, queue, message, options=None, **kw):
        if queue == "ORDER.RESPONSE" and not self._putting.is_set():
            self._responding = True
            self._putting.set()
            assert self._release.wait(120)
        return super().put(queue, message, options, **kw)

    def commit(self) -> None:
        super().commit()
        self._end("committed")

    def backout(self) -> None:
        super().backout()
        self._end("backed out")

    def _end(self, how: str) -> None:
        if self._responding:
            self._responding = False
            self._ended.append(how)


async def test_a_worker_that_lost_its_workflow_task_mid_put_backs_out_after_another_puts(
    temporal_env, tmp_path
):
    spec = AggregateSpec(name="takeover", legs=THREE_LEGS, timeout_seconds=300)
    putting, release, ended = threading.Event(), threading.Event(), []
    relay = Relay(*temporal_env.client.service_client.config.target_host.rsplit(":", 1))
    cut_client = await Client.connect(await relay.start(), data_converter=pydantic_data_converter)
    async with pipeline(temporal_env.client, tmp_path, [spec], run_worker=False) as p:
        first = build_worker(
            cut_client, lambda: _PutHangs(p.path, putting, release, ended),
            task_queue=p.task_queue,
        )  # fmt: skip
        first_running = asyncio.create_task(first.run())
        second = None
        try:
            sent = await p.scatter(spec)
            for leg in ("CREDIT", "STOCK", "TAX"):
                p.reply(spec, sent.correl_id, leg, json.dumps({leg: 1}).encode())
            assert await asyncio.to_thread(putting.wait, 30)
            relay.cut()  # the first worker's network to Temporal goes; its MQ call hangs on
            second = build_worker(temporal_env.client, p.connect, task_queue=p.task_queue)
            second_running = asyncio.create_task(second.run())
            response = await p.wait_message("ORDER.RESPONSE", timeout=90)
            result = await p.result(spec, sent.correl_id)
            relay.mend()
            release.set()  # the hung call returns, within the attempt's minute
            await _until(lambda: ended, 30)
            assert p.empty("ORDER.RESPONSE")  # no second response
            assert ended == ["backed out"]
            assert result.state == json.loads(response.body)["state"] == "COMPLETE"
        finally:
            release.set()
            relay.mend()
            await first.shutdown()
            await asyncio.gather(first_running, return_exceptions=True)
            if second is not None:
                await second.shutdown()
                await asyncio.gather(second_running, return_exceptions=True)
            await relay.close()


async def _until(check, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)
