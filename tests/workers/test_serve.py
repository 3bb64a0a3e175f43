"""How a worker process ends: when asked, within its grace, and when it fails on its own
with the reason named (a worker that hangs instead is never restarted by its supervisor)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from tests.harness import until
from workers.worker import WorkerStopped, serve

#: Set by the activity once it runs; the activity then waits for :data:`RELEASE`.
STARTED = threading.Event()
RELEASE = threading.Event()


@activity.defn
def hold() -> None:
    """Runs until the test releases it, like a PUT to a queue manager that does not answer."""
    STARTED.set()
    RELEASE.wait(60)


@workflow.defn
class Holding:
    @workflow.run
    async def run(self) -> None:
        await workflow.execute_activity(hold, start_to_close_timeout=timedelta(seconds=60))


def _worker(client: Client, task_queue: str) -> Worker:
    return Worker(
        client, task_queue=task_queue, workflows=[Holding], activities=[hold],
        activity_executor=ThreadPoolExecutor(2), workflow_runner=UnsandboxedWorkflowRunner(),
    )  # fmt: skip


async def test_asked_to_stop_the_worker_shuts_down(temporal_env):
    worker = _worker(temporal_env.client, f"serve-{uuid.uuid4()}")
    stop = asyncio.Event()
    serving = asyncio.create_task(serve(worker, stop))

    async def running() -> bool:
        return worker.is_running

    await until(running, bool)
    stop.set()
    await serving
    assert worker.is_shutdown


async def test_a_worker_that_cannot_start_is_reported_with_the_cause(temporal_env):
    namespace = f"missing-{uuid.uuid4().hex[:8]}"
    client = await Client.connect(
        temporal_env.client.service_client.config.target_host, namespace=namespace
    )
    with pytest.raises(WorkerStopped, match="stopped on its own") as raised:
        await serve(_worker(client, f"serve-{uuid.uuid4()}"), asyncio.Event())
    assert namespace in str(raised.value)


async def test_an_activity_that_outlasts_the_grace_does_not_keep_the_process(temporal_env):
    STARTED.clear()
    RELEASE.clear()
    task_queue = f"serve-{uuid.uuid4()}"
    worker = _worker(temporal_env.client, task_queue)
    stop = asyncio.Event()
    serving = asyncio.create_task(serve(worker, stop, grace=0.5))
    handle = await temporal_env.client.start_workflow(
        Holding.run, id=task_queue, task_queue=task_queue
    )
    try:
        await asyncio.to_thread(STARTED.wait, 60)
        stop.set()
        with pytest.raises(WorkerStopped, match=r"had not stopped 0.5s after"):
            await serving
        assert not worker.is_shutdown  # still waiting for the activity: serve did not
    finally:
        RELEASE.set()
        await worker.shutdown()
        await handle.terminate("test over")


class _Cuttable:
    """A TCP proxy to the Temporal server that can be cut: then it closes what it carries
    and holds every new connection without a byte, like a server that went away."""

    def __init__(self, target: str) -> None:
        self.host, port = target.rsplit(":", 1)
        self.port = int(port)
        self.cut = False
        self.held = asyncio.Event()
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *_: object) -> None:
        self.sever()
        self._server.close()

    def sever(self) -> None:
        self.cut = True
        for writer in self._writers:
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        if self.cut:
            self.held.set()
            return
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        self._writers.append(up_writer)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except ConnectionError:
        pass  # the other side was cut
    finally:
        sink.close()


async def test_asked_to_stop_while_the_server_is_away_it_ends_at_once(temporal_env):
    """At start the worker checks its namespace, retrying while the server is away; a
    stop then has nothing to shut down and must not wait for those retries."""
    proxy = _Cuttable(temporal_env.client.service_client.config.target_host)
    async with proxy as address:
        client = await Client.connect(address)
        proxy.sever()  # the server goes away after the connect, before the worker starts
        worker = _worker(client, f"serve-{uuid.uuid4()}")
        stop = asyncio.Event()
        serving = asyncio.create_task(serve(worker, stop))
        await asyncio.wait_for(proxy.held.wait(), 30)  # the worker is asking for its namespace
        stop.set()
        await asyncio.wait_for(serving, 10)  # its retries alone would go on far longer
        assert not worker.is_running
