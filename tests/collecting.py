"""A collector on the real dev server and the embedded queue manager, for tests: rules,
input, the output queues, and its workflows' status."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from temporalio.common import WorkerDeploymentVersion
from temporalio.worker import Worker

from bridge.collect import CollectorBridge
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage, PutOptions, QueueAttributes
from bridge.mq.transport import Transport
from mqgather.collector_config import CollectorRule, CollectorSpec
from mqgather.runtime.rules import RuleStore
from tests.harness import prepare_queues
from workers.worker import build_worker
from workflows.collect_models import collector_id
from workflows.collector import CollectorWorkflow

OUT = ("CMAOUT.FR", "CMAOUT.UK", "CMAOUT.SP", "CMAOUT.JSON", "CMAOUT.GRP")
SPEC = CollectorSpec(name="cma", input_queue="CMAIN")


def order(text: str) -> bytes:
    return f'<?xml version="1.0" encoding="utf-8"?>\n<Test>{text}</Test>'.encode()


class Collecting:
    """A collector under test: its worker, its bridges (started on demand), its rules and
    queues."""

    def __init__(self, client, path: Path, spec: CollectorSpec, task_queue: str,
                 worker: Worker | None = None) -> None:  # fmt: skip
        self.client, self.path, self.spec, self.task_queue = client, path, spec, task_queue
        self.qm = LocalQueueManager(path)
        self.store = RuleStore(spec.rules_db)
        self.worker = worker
        self.stop = asyncio.Event()
        # Without a worker here, the test runs its own (in processes, say).
        self.tasks = [asyncio.create_task(worker.run())] if worker else []

    def connect(self) -> LocalQueueManager:
        return LocalQueueManager(self.path)

    def start_bridge(
        self,
        kind: type[CollectorBridge] = CollectorBridge,
        connect: Callable[[], Transport] | None = None,
    ) -> None:
        """Start a bridge (of ``kind``, over ``connect``, by default the embedded queue
        manager) for the collector (one more when one runs)."""
        bridge = kind(self.client, connect or self.connect, self.spec, task_queue=self.task_queue,
                      wait_ms=100)  # fmt: skip
        self.tasks.append(asyncio.create_task(bridge.run(self.stop)))

    def rule(self, destination: str, queue: str, **changes) -> None:
        self.store.set(
            self.spec.name, CollectorRule(destination=destination, target_queue=queue, **changes)
        )

    def send(self, destination: str | None, body: bytes, **props) -> MQMessage:
        if destination is not None:
            props["destination"] = destination
        message = MQMessage(properties=props, body=body)
        return self.qm.put(self.spec.input_queue, message, PutOptions(syncpoint=False))

    async def take(self, queue: str, timeout: float = 30) -> MQMessage:
        def get() -> MQMessage:
            with LocalQueueManager(self.path) as qm:
                return qm.get(queue, wait_ms=int(timeout * 1000), syncpoint=False)

        return await asyncio.to_thread(get)

    def depth(self, queue: str) -> int:
        return self.qm.inquire(queue).curdepth

    async def status(self, destination: str):
        handle = self.client.get_workflow_handle(collector_id(self.spec.name, destination))
        return await handle.query(CollectorWorkflow.status)


@asynccontextmanager
async def collecting(
    client,
    tmp_path: Path,
    *,
    spec: CollectorSpec = SPEC,
    refresh: float = 0.5,
    run_bridge: bool = True,
    version: WorkerDeploymentVersion | None = None,
    rules_db: str | None = None,
    extra_queues: tuple[str, ...] = (),
    maxumsgs: int | None = None,
    worker_qm: Callable[[Path], Transport] = LocalQueueManager,
    worker_client=None,
) -> AsyncIterator[Collecting]:
    """A collector with a worker (of ``version``, when given) and, unless told otherwise,
    its bridge; its name is made unique, since collector workflows never end. Its rules
    are in a fresh SQLite file unless ``rules_db`` names a database; ``maxumsgs`` sets
    the queue manager's MAXUMSGS; ``worker_qm(path)`` opens the worker's connections,
    and the worker reaches Temporal through ``worker_client`` (default: ``client``)."""
    path = tmp_path / "qm.db"
    # Collector workflows never end: a name of its own keeps each test's apart.
    spec = spec.model_copy(
        update={
            "name": f"{spec.name}-{uuid.uuid4().hex[:6]}",
            "rules_db": rules_db or str(tmp_path / "rules.db"),
            "rule_refresh_seconds": refresh,
        }
    )
    prepare_queues(path, [*OUT, *extra_queues, spec.failure_queue, spec.default_queue])
    with LocalQueueManager(path) as qm:
        qm.define(QueueAttributes(name=spec.input_queue, maxdepth=100_000, bothresh=3))
        if maxumsgs is not None:
            qm.set_max_uncommitted(maxumsgs)
    task_queue = f"collect-{uuid.uuid4().hex[:10]}"
    worker = build_worker(worker_client or client, lambda: worker_qm(path), task_queue=task_queue,
                          version=version)  # fmt: skip
    c = Collecting(client, path, spec, task_queue, worker)
    if run_bridge:
        c.start_bridge()
    try:
        yield c
    finally:
        c.stop.set()
        await worker.shutdown()
        await asyncio.gather(*c.tasks, return_exceptions=True)
        c.qm.close()
