"""A worker cut off from Temporal while its MQ call hangs: another worker takes the gather
(or the collector) over and PUTs; the first worker's call then returns, and its attempt
backs out instead of committing a second time."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from bridge.mq.models import MQMessage
from mqgather.config import AggregateSpec
from tests.harness import THREE_LEGS, pipeline
from tests.relay import Relay
from tests.stalls import Hung
from workers.worker import build_worker


@contextlib.asynccontextmanager
async def cut_off_client(client: Client) -> AsyncIterator[tuple[Client, Relay]]:
    """A client of the same server through a relay the test can cut."""
    relay = Relay(*client.service_client.config.target_host.rsplit(":", 1))
    through = await Client.connect(await relay.start(), data_converter=pydantic_data_converter)
    try:
        yield through, relay
    finally:
        relay.mend()  # for the first worker to stop
        await relay.close()


async def taken_over(
    hung: Hung, relay: Relay, second: Callable[[], Worker], take: Callable[[], Awaitable[MQMessage]]
) -> MQMessage:
    """Once the first worker hangs in its PUT: cut it off from Temporal, run ``second``
    until what it put is taken (``take``), then let the first worker's call return."""
    assert await asyncio.to_thread(hung.putting.wait, 30)
    relay.cut()  # the first worker's network to Temporal goes; its MQ call hangs on
    try:
        async with second():
            taken = await take()
            relay.mend()
            hung.release.set()  # the hung call returns, within the attempt's minute
            await _until(lambda: hung.ended, 30)
    finally:
        hung.release.set()
    return taken


async def test_a_worker_that_lost_its_gathers_task_mid_put_backs_out_after_another_puts(
    temporal_env, tmp_path
):
    spec = AggregateSpec(name="takeover", legs=THREE_LEGS, timeout_seconds=300)
    hung = Hung("ORDER.RESPONSE")
    async with (
        cut_off_client(temporal_env.client) as (through, relay),
        pipeline(temporal_env.client, tmp_path, [spec], run_worker=False) as p,
    ):
        first = build_worker(through, lambda: hung.transport(p.path), task_queue=p.task_queue)
        async with first:
            sent = await p.scatter(spec)
            for leg in ("CREDIT", "STOCK", "TAX"):
                p.reply(spec, sent.correl_id, leg, json.dumps({leg: 1}).encode())
            response = await taken_over(
                hung, relay,
                lambda: build_worker(p.client, p.connect, task_queue=p.task_queue),
                lambda: p.wait_message("ORDER.RESPONSE", timeout=90),
            )  # fmt: skip
            assert p.empty("ORDER.RESPONSE")  # no second response
            assert hung.ended == ["backed out"]
            result = await p.result(spec, sent.correl_id)
            assert result.state == json.loads(response.body)["state"] == "COMPLETE"


async def test_a_worker_that_lost_its_collectors_task_mid_put_backs_out_after_another_puts(
    temporal_env, tmp_path
):
    from tests.collecting import collecting, order

    hung = Hung("CMAOUT.FR")
    async with (
        cut_off_client(temporal_env.client) as (through, relay),
        collecting(temporal_env.client, tmp_path, worker_qm=hung.transport,
                   worker_client=through) as c,
    ):  # fmt: skip
        c.rule("France", "CMAOUT.FR", max_messages=1)
        c.send("France", order("A"))
        batch = await taken_over(
            hung, relay,
            lambda: build_worker(c.client, c.connect, task_queue=c.task_queue),
            lambda: c.take("CMAOUT.FR", timeout=90),
        )  # fmt: skip
        assert c.depth("CMAOUT.FR") == 0  # no second batch
        assert hung.ended == ["backed out"]
        assert b"<Test>A</Test>" in batch.body


async def _until(check, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)
