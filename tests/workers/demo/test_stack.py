"""The dev stack's Temporal server: a file that outlives each of its lives."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid

from temporalio import workflow
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from tests.harness import connect_when_up, free_ports, until
from workers.demo.stack import DevStack


@workflow.defn(name="Nothing")
class Nothing:
    @workflow.run
    async def run(self) -> None:
        return None


def _tasks_left(db: str) -> dict[str, int]:
    """The history tasks the server's file still holds: those it redoes when it starts."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return {
            table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("transfer_tasks", "visibility_tasks")
        }


async def test_the_dev_stacks_server_deletes_its_done_tasks_within_seconds(tmp_path):
    # The server deletes done tasks at each queue's checkpoint, 30 s apart by default.
    # The demo's server lives about that long, so every start redid the tasks of every
    # earlier demo: after a day of demos, 5,000 of them, and a latency p50 of 4 s against
    # 0.3. Within 12 s is well inside the default's first checkpoint (25.5 s at least).
    temporal_port, ui_port = free_ports(2)
    stack = DevStack(mq=f"local:{tmp_path / 'qm.db'}", state_dir=tmp_path,
                     temporal_port=temporal_port, ui_port=ui_port)  # fmt: skip
    stack.start_server()
    try:
        client = await connect_when_up(stack.address, server=stack.server)
        task_queue = f"forget-{uuid.uuid4().hex[:10]}"
        async with Worker(client, task_queue=task_queue, workflows=[Nothing],
                          workflow_runner=UnsandboxedWorkflowRunner()):  # fmt: skip
            await asyncio.gather(*(
                client.execute_workflow(Nothing.run, id=f"{task_queue}-{n}", task_queue=task_queue)
                for n in range(20)
            ))  # fmt: skip

        async def left() -> dict[str, int]:
            return _tasks_left(str(tmp_path / "temporal.db"))

        await until(left, lambda counts: not any(counts.values()), timeout=12.0)
    finally:
        stack.stop()
