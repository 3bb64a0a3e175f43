"""A whole gather pipeline for a test: queue manager file, worker, bridge, helpers."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, ResetReapplyExcludeType
from temporalio.api.workflowservice.v1 import (
    DeleteWorkflowExecutionRequest,
    ResetWorkflowExecutionRequest,
)
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode

from bridge.fanout import Scattered, scatter
from bridge.inbound import InboundBridge
from bridge.mq.errors import NoMessageAvailable
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import Match, MQMessage, PutOptions, QueueAttributes
from bridge.mq.transport import Transport
from mqgather.config import AggregateSpec, LegSpec, default_queues
from mqgather.runtime.temporal import require_temporal_cli
from workers.worker import build_worker
from workflows.models import GatherResult, gather_id

#: The legs most gathers of the suite expect.
THREE_LEGS = (LegSpec(name="CREDIT", sequence=10), LegSpec(name="STOCK", sequence=20),
              LegSpec(name="TAX", sequence=30))  # fmt: skip


class Pipeline:
    """Handles on a running pipeline; blocking MQ calls run in threads."""

    def __init__(self, client: Client, path: Path, task_queue: str, bridge: InboundBridge):
        self.client = client
        self.path = path
        self.task_queue = task_queue
        self.bridge = bridge
        self.qm = LocalQueueManager(path)  # used from the test's thread only
        self._bridge_stop = asyncio.Event()
        self._bridge_task: asyncio.Task[None] | None = None

    def start_bridge(self) -> None:
        """Run the bridge until :meth:`stop_bridge` (or the pipeline's end)."""
        self._bridge_stop = asyncio.Event()
        self._bridge_task = asyncio.create_task(self.bridge.run(self._bridge_stop))

    async def stop_bridge(self) -> None:
        """Stop the bridge as an operator would: its unit of work ends, it gets no more."""
        self._bridge_stop.set()
        task, self._bridge_task = self._bridge_task, None
        if task is not None:
            await task

    @asynccontextmanager
    async def bridge_stopped(self) -> AsyncIterator[None]:
        """The bridge stopped for the block (so the test's own gets cannot race it), then
        started again."""
        await self.stop_bridge()
        try:
            yield
        finally:
            self.start_bridge()

    def connect(self) -> LocalQueueManager:
        return LocalQueueManager(self.path)

    def put(self, queue: str, message: MQMessage) -> MQMessage:
        return self.qm.put(queue, message, PutOptions(syncpoint=False))

    def reply(
        self, spec: AggregateSpec, correl: bytes, leg: str | None, body: bytes, **props
    ) -> MQMessage:
        properties = dict(props)
        if leg is not None:
            properties[spec.leg_property] = leg
        return self.put(
            spec.reply_queue, MQMessage(correl_id=correl, properties=properties, body=body)
        )

    async def scatter(self, spec: AggregateSpec, **kwargs) -> Scattered:
        return await scatter(self.client, self.qm, spec, task_queue=self.task_queue, **kwargs)

    async def wait_message(
        self, queue: str, timeout: float = 30.0, match: Match | None = None
    ) -> MQMessage:
        """Get (and remove) the next message from a queue, waiting up to ``timeout``."""

        def get() -> MQMessage:
            with LocalQueueManager(self.path) as qm:
                return qm.get(queue, wait_ms=int(timeout * 1000), syncpoint=False, match=match)

        return await asyncio.to_thread(get)

    def messages(self, queue: str) -> list[MQMessage]:
        """Every message on a queue now (browse)."""
        return list(self.qm.browse(queue))

    def depth(self, queue: str) -> int:
        """CURDEPTH, as MQ keeps it: the puts of units of work still open count too."""
        return self.qm.inquire(queue).curdepth

    async def landed(
        self, queues: str | Sequence[str], check: Callable[[int], bool], timeout: float = 20.0
    ) -> int:
        """Await ``check`` on how many messages on ``queues`` a reader could get now.

        CURDEPTH reaches a count while the last put's unit of work is still open, so the
        depth (cheap) is awaited first, then the committed messages, counted by browsing.
        """
        names = [queues] if isinstance(queues, str) else list(queues)

        async def depth() -> int:
            return sum(self.depth(queue) for queue in names)

        async def readable() -> int:
            return sum(len(self.messages(queue)) for queue in names)

        await until(depth, check, timeout)
        return await until(readable, check, timeout)

    def empty(self, queue: str) -> bool:
        try:
            self.qm.get(queue, browse="first")
        except NoMessageAvailable:
            return True
        return False

    def handle(self, spec: AggregateSpec, correl: bytes) -> WorkflowHandle:
        return self.client.get_workflow_handle(
            gather_id(spec.name, correl), result_type=GatherResult
        )

    async def counted(self, spec: AggregateSpec, correl: bytes, count: int) -> WorkflowHandle:
        """A gather of ``spec`` (legs told apart by count) registered for ``count`` legs, as
        a hand-made start would."""
        from mqgather.names import SIGNAL_EXPECT
        from workflows.gather import GatherWorkflow
        from workflows.models import Registration, start_input

        return await self.client.start_workflow(
            GatherWorkflow.run, start_input(spec, correl), id=self.handle(spec, correl).id,
            task_queue=self.task_queue, start_signal=SIGNAL_EXPECT,
            start_signal_args=[Registration(count=count)],
        )  # fmt: skip

    async def partial(
        self, spec: AggregateSpec, correl: bytes, legs: dict[str, bytes], timeout_seconds: float
    ) -> tuple[Scattered, list[MQMessage]]:
        """A gather that times out with exactly ``legs`` received, however slow the machine:
        the replies go first and are held, then the registration starts the timer."""
        put = [self.reply(spec, correl, leg, body) for leg, body in legs.items()]
        handle = self.handle(spec, correl)
        await until(lambda: status(handle), lambda s: s.held == len(legs), 60)
        sent = await self.scatter(spec, correl_id=correl, timeout_seconds=timeout_seconds)
        return sent, put

    async def result(self, spec: AggregateSpec, correl: bytes, timeout: float = 60) -> GatherResult:
        return await asyncio.wait_for(self.handle(spec, correl).result(), timeout)


def prepare_queues(path: Path, extra: Sequence[str] = (), bothresh: int = 3) -> None:
    """Define the default queues (and ``extra``) in a fresh queue manager file."""
    with LocalQueueManager(path) as qm:
        for name, definition in default_queues().items():
            attrs = definition.model_dump()
            if name == "GATHER.IN":
                attrs["bothresh"] = bothresh
            qm.define(QueueAttributes(name=name, **attrs), replace=True)
        for name in extra:
            qm.define(QueueAttributes(name=name, maxdepth=100_000), replace=True)


class CountsLedgerReads(LocalQueueManager):
    """The embedded queue manager, counting the browses begun on the ledger queue."""

    def __init__(self, path: Path, ledger_queue: str) -> None:
        super().__init__(path)
        self.ledger_queue, self.ledger_browses = ledger_queue, 0

    def get(self, queue: str, *args: Any, **kwargs: Any) -> MQMessage:
        if queue == self.ledger_queue and kwargs.get("browse") == "first":
            self.ledger_browses += 1
        return super().get(queue, *args, **kwargs)


@asynccontextmanager
async def pipeline(
    client: Client,
    tmp_path: Path,
    aggregates: Sequence[AggregateSpec],
    *,
    extra_queues: Sequence[str] = (),
    bothresh: int = 3,
    run_worker: bool = True,
    run_bridge: bool = True,
    transport: Callable[[Path], Callable[[], Transport]] | None = None,
    maxumsgs: int | None = None,
    batch_size: int = 100,
) -> AsyncIterator[Pipeline]:
    """Worker and bridge on a unique task queue and a fresh queue manager file.

    ``transport(path)`` gives the connections worker and bridge use (default: the
    embedded queue manager); the test itself reads and writes the file directly.
    ``maxumsgs`` sets the queue manager's MAXUMSGS.
    """
    path = tmp_path / "qm.db"
    leg_queues = [leg.queue() for spec in aggregates for leg in spec.legs]
    prepare_queues(path, [*extra_queues, *leg_queues], bothresh)
    if maxumsgs is not None:
        with LocalQueueManager(path) as admin:
            admin.set_max_uncommitted(maxumsgs)
    task_queue = f"test-{uuid.uuid4().hex[:10]}"

    def embedded() -> Transport:
        return LocalQueueManager(path)

    connect = transport(path) if transport is not None else embedded

    bridge = InboundBridge(
        client, connect, aggregates, task_queue=task_queue, wait_ms=100, batch_size=batch_size
    )
    tasks = []
    worker = build_worker(client, connect, task_queue=task_queue) if run_worker else None
    if worker is not None:
        tasks.append(asyncio.create_task(worker.run()))
    pipe = Pipeline(client, path, task_queue, bridge)
    if run_bridge:
        pipe.start_bridge()
    try:
        yield pipe
    finally:
        stopping = asyncio.create_task(pipe.stop_bridge())
        if worker is not None:
            await worker.shutdown()
        await asyncio.gather(*tasks, stopping, return_exceptions=True)
        pipe.qm.close()


async def status(handle: WorkflowHandle) -> Any:
    """The gather's ``status`` query."""
    from workflows.gather import GatherWorkflow

    return await handle.query(GatherWorkflow.status)


async def taken(handle: WorkflowHandle) -> int:
    """How many legs the gather has taken a reply for, once its workflow has no task in
    flight (-1 before): what it took is then in its history."""
    described = await handle.describe()
    if described.raw_description.HasField("pending_workflow_task"):
        return -1
    return len((await status(handle)).legs_received)


async def until(get: Any, check: Any, timeout: float = 20.0) -> Any:
    """Await a condition on a workflow or a counter (queried, not slept on)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last = None
    while loop.time() < deadline:
        try:
            last = await get()
            if check(last):
                return last
        except RPCError:
            pass  # the workflow has not started yet
        await asyncio.sleep(0.05)
    raise AssertionError(f"condition not met within {timeout}s; last seen {last}")


class ServerExited(AssertionError):
    """The dev server being waited for exited before it answered."""


async def connect_when_up(
    address: str, attempts: int = 300, server: subprocess.Popen[bytes] | None = None
) -> Client:
    """A client (the pydantic converter) of a dev server that may still be starting;
    :class:`ServerExited` as soon as ``server``, when given, has exited."""
    for _ in range(attempts):
        if server is not None and server.poll() is not None:
            raise ServerExited(f"Temporal at {address} exited as it started")
        connecting = asyncio.ensure_future(
            Client.connect(address, data_converter=pydantic_data_converter)
        )
        # Another process listening on the port would hold the connection for as long as
        # the client waits: the server's exit ends the wait.
        while server is not None and not connecting.done():
            await asyncio.wait({connecting}, timeout=0.2)
            if not connecting.done() and server.poll() is not None:
                connecting.cancel()
                raise ServerExited(f"Temporal at {address} exited as it started")
        try:
            return await connecting
        except RuntimeError:
            await asyncio.sleep(0.2)  # the server is starting
    raise AssertionError(f"Temporal at {address} did not start")


def temporal_binary() -> str:
    """The installed Temporal CLI, for every dev server the tests start (given none, the
    SDK would download one); an error saying to run the tests through ``make test``."""
    return require_temporal_cli("run the tests through `make test`")


async def start_dev_server(
    log_dir: Path, args_for: Callable[[list[int]], list[str]], ports: int, tries: int = 3
) -> tuple[subprocess.Popen[bytes], Client, list[int]]:
    """A dev server of its own, ``temporal`` run with ``args_for(ports)`` on ``ports`` free
    ports, and a client of it once it answers.

    A port found free can be taken before the server binds it (the server picks ports of
    its own as it starts), and the server then exits: it is started again on new ports,
    up to ``tries`` times. Its output goes to ``log_dir``, and a failure quotes it.
    """
    cli = temporal_binary()
    log = log_dir / "dev-server-0.log"
    for attempt in range(tries):
        chosen = free_ports(ports)
        log = log_dir / f"dev-server-{attempt}.log"
        with log.open("wb") as out:
            server = subprocess.Popen(
                [cli, *args_for(chosen)], stdout=out, stderr=subprocess.STDOUT
            )
        try:
            client = await connect_when_up(f"localhost:{chosen[0]}", server=server)
        except ServerExited:
            continue  # try again on other ports
        except AssertionError:
            server.kill()
            server.wait(30)
            raise AssertionError(
                f"the dev server did not answer: {log.read_text()[-2000:]}"
            ) from None
        return server, client, chosen
    said = log.read_text()[-2000:]
    raise AssertionError(f"the dev server exited {tries} times as it started: {said}")


def free_port() -> int:
    """A TCP port nothing listens on now."""
    return free_ports(1)[0]


#: Where the kernel takes the ports of outgoing connections and of binds to port 0 from.
EPHEMERAL_PORTS = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: Ports below 1024 need privileges.
FIRST_UNPRIVILEGED_PORT = 1024
#: Unprivileged ports Chromium refuses to load a page from (net::ERR_UNSAFE_PORT): a dev
#: server's UI there cannot be checked in the browser (seen: 4045).
BROWSER_UNSAFE_PORTS = frozenset(
    {1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566, *range(6665, 6670),
     6697, 10080}
)  # fmt: skip


def free_ports(n: int) -> list[int]:
    """``n`` different TCP ports nothing uses now (each held until all are found, so that
    two of them cannot be the same).

    They are chosen at random below the kernel's ephemeral range: a port chosen there
    would be free for the kernel to give to any outgoing connection, or to a server's
    own port-0 bind, in the moment before the server it is for binds it (seen: a dev
    server's UI port taken so, and the server exiting). Where that range leaves too few
    ports below it, the kernel chooses them. None is a port a browser refuses.
    """
    try:
        low = int(EPHEMERAL_PORTS.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = FIRST_UNPRIVILEGED_PORT
    with contextlib.ExitStack() as held:
        ports: list[int] = []
        while len(ports) < n:
            s = held.enter_context(socket.socket())
            port = random.randrange(FIRST_UNPRIVILEGED_PORT, low) if low > 10_000 else 0
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use: choose another
            port = int(s.getsockname()[1])
            if port not in ports and port not in BROWSER_UNSAFE_PORTS:
                ports.append(port)
        return ports


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that contain ``text``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\x00", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(cmdline)
    return found


def with_keys(client: Client, ring: Any) -> Client:
    """A client on the same connection whose payloads go through the codec with ``ring``
    (a KeyRing, or None: the codec seals nothing)."""
    from mqgather.runtime.codec import data_converter

    return Client(client.service_client, namespace=client.namespace,
                  data_converter=data_converter(ring))  # fmt: skip


async def delete_history(client: Client, handle: WorkflowHandle) -> None:
    """Delete a closed workflow's history, as the namespace's retention does, and wait
    until describe no longer finds it (the server deletes it a moment later)."""
    await client.workflow_service.delete_workflow_execution(
        DeleteWorkflowExecutionRequest(namespace=client.namespace,
                                       workflow_execution=WorkflowExecution(workflow_id=handle.id))
    )  # fmt: skip

    async def gone() -> bool:
        try:
            await handle.describe()
        except RPCError as exc:
            return exc.status == RPCStatusCode.NOT_FOUND
        return False

    await until(gone, bool, timeout=60)


async def reset_to_first_task(
    client: Client, handle: WorkflowHandle, *, exclude_signals: bool = False
) -> str:
    """Reset the workflow's latest run to its first workflow task, as an operator does in
    the UI (signals after that point are applied again, unless ``exclude_signals``); the
    new run's id."""
    events = [e async for e in handle.fetch_history_events()]
    first = next(e.event_id for e in events
                 if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)  # fmt: skip
    run_id = (await handle.describe()).run_id
    done = await client.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=handle.id, run_id=run_id),
            reason="operator reset",
            workflow_task_finish_event_id=first,
            request_id=str(uuid.uuid4()),
            reset_reapply_exclude_types=(
                [ResetReapplyExcludeType.RESET_REAPPLY_EXCLUDE_TYPE_SIGNAL]
                if exclude_signals
                else []
            ),
        )
    )
    return done.run_id
