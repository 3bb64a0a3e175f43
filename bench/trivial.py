"""The bare ceiling's workflow: started by signal-with-start, done on its signal."""

from __future__ import annotations

import argparse
import asyncio

from temporalio import workflow
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker


@workflow.defn(name="Trivial")
class TrivialWorkflow:
    """Waits for one signal, then completes."""

    def __init__(self) -> None:
        self.got = False

    @workflow.signal(name="go")
    def go(self, payload: str) -> None:
        """The one signal."""
        self.got = bool(payload) or True

    @workflow.run
    async def run(self) -> bool:
        """Return once signalled."""
        await workflow.wait_condition(lambda: self.got)
        return True


async def _serve(address: str, task_queue: str) -> None:
    client = await Client.connect(address, data_converter=pydantic_data_converter)
    async with Worker(client, task_queue=task_queue, workflows=[TrivialWorkflow]):
        await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--task-queue", required=True)
    ns = parser.parse_args()
    asyncio.run(_serve(ns.address, ns.task_queue))
