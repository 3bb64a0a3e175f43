"""New gather and collector code whose first command differs from today's: a short timer
before it starts. It cannot replay a history the current code wrote (it is its own module
so the workflow sandbox imports nothing else of the tests)."""

# No `from __future__ import annotations`: the SDK compares the run and init parameter
# annotations of GatherV2 with the real types GatherWorkflow declares.
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from mqgather import names
    from workflows.collect_models import CollectorInput
    from workflows.collector import CollectorWorkflow
    from workflows.gather import GatherWorkflow
    from workflows.models import GatherInput, GatherResult


@workflow.defn(name=names.GATHER_WORKFLOW)
class GatherV2(GatherWorkflow):
    """The gather with one timer more at its start."""

    @workflow.run
    async def run(self, inp: GatherInput) -> GatherResult:
        """Sleep 10 ms, then gather as before."""
        await workflow.sleep(timedelta(milliseconds=10))
        return await super().run(inp)


@workflow.defn(name=names.COLLECT_WORKFLOW)
class CollectorV2(CollectorWorkflow):
    """The collector with one timer more at its start."""

    @workflow.run
    async def run(self, inp: CollectorInput) -> None:
        """Sleep 10 ms, then collect as before."""
        await workflow.sleep(timedelta(milliseconds=10))
        await super().run(inp)
