"""The bare workflows the pipeline is measured against, and their worker.

``Trivial`` is started by signal-with-start and done on its signal: the ceiling.
``TrivialLocal`` is the gather's shape without MQ and without mqgather's code: started
by signal-with-start, one local activity that does nothing, then done. Its worker CPU
and latency are the floor the SDK and the server set for one gather.
``TrivialVisible`` is that shape with the gather's visibility: started with a gather's
search attributes, summary and details, it upserts at its close the search attributes a
gather of three legs upserts at its own. What it costs the server beyond
``TrivialLocal`` is the price of the operators' view, which no gather goes without.

The gather and worker benchmarks start the worker themselves, beside the gathers':

    python -m bench.trivial --address HOST:PORT --task-queue QUEUE
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import GrpcCompression
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from bench.figures import command_line
from mqgather import names

#: The floor's task queue, on the floor's worker (``--task-queue``) and for its starters.
FLOOR_TASK_QUEUE = "trivial"


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


@activity.defn(name="nothing")
def nothing(payload: str) -> str:
    """A local activity with no work in it, run on a thread as the gather's PUT is."""
    return payload


@workflow.defn(name="TrivialLocal")
class TrivialLocalWorkflow(TrivialWorkflow):
    """Waits for one signal, runs one local activity that does nothing, completes."""

    async def _signalled_and_done(self) -> None:
        await workflow.wait_condition(lambda: self.got)
        await workflow.execute_local_activity(
            nothing, "x", start_to_close_timeout=timedelta(seconds=30)
        )

    @workflow.run
    async def run(self) -> bool:
        """Return once signalled and the local activity is done."""
        await self._signalled_and_done()
        return True


@workflow.defn(name="TrivialVisible")
class TrivialVisibleWorkflow(TrivialLocalWorkflow):
    """``TrivialLocal`` that shows itself as a gather does when it closes."""

    @workflow.run
    async def run(self) -> bool:
        """Return once signalled, the local activity done and the state shown."""
        await self._signalled_and_done()
        # What a gather of three legs, all in its first task, upserts at its close.
        workflow.upsert_search_attributes(
            [
                names.GATHER_STATE.value_set("COMPLETE"),
                names.LEGS_PENDING.value_set(0),
                names.LEGS_RECEIVED.value_set(3),
            ]
        )
        return True


async def _serve(
    address: str, task_queue: str, sandbox: bool, compression: str, cached: int
) -> None:
    # The setting arrives by name (from mqgather.runtime.temporal in the bench), so that
    # the floor's process loads none of mqgather's runtime: its start-up objects would be
    # the garbage collector's to walk.
    client = await Client.connect(
        address,
        data_converter=pydantic_data_converter,
        grpc_compression=getattr(GrpcCompression, compression.upper()),
    )
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[TrivialWorkflow, TrivialLocalWorkflow, TrivialVisibleWorkflow],
        activities=[nothing],
        activity_executor=ThreadPoolExecutor(8),
        max_cached_workflows=cached,
        workflow_runner=SandboxedWorkflowRunner() if sandbox else UnsandboxedWorkflowRunner(),
    ):
        await asyncio.Event().wait()


if __name__ == "__main__":
    parser = command_line(__doc__)
    parser.add_argument("--address", required=True, help="Temporal's address")
    parser.add_argument("--task-queue", required=True, help="the floor's task queue")
    parser.add_argument("--sandbox", action="store_true", help="as the gather workers run")
    parser.add_argument("--grpc-compression", choices=("none", "gzip"), default="gzip",
                        help="as the gather's clients send (default: the SDK's gzip)")  # fmt: skip
    parser.add_argument("--max-cached", type=int, default=1000,
                        help="workflows kept between tasks, as the gathers' worker keeps "
                             "gathers (default: the SDK's 1000)")  # fmt: skip
    ns = parser.parse_args()
    asyncio.run(_serve(ns.address, ns.task_queue, ns.sandbox, ns.grpc_compression, ns.max_cached))
