"""How a bridge asks a running workflow which messages it took: by key, and by MsgId a
workflow of an earlier release that knows no keys."""

from __future__ import annotations

import uuid

from temporalio import workflow
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from bridge.inbound import InboundBridge, message_key
from bridge.mq.models import MQMessage
from mqgather.config import AggregateSpec, LegSpec
from mqgather.names import QUERY_CONSUMED
from workflows.gather import GatherWorkflow

TAKEN = MQMessage(msg_id=b"T" * 24, body=b"taken")
TWIN = MQMessage(msg_id=b"T" * 24, body=b"another")
OTHER = MQMessage(msg_id=b"O" * 24, body=b"other")


@workflow.defn(name="EarlierGather")
class EarlierGather:
    """A gather of an earlier release: it took TAKEN's MsgId and knows no ``taken`` query."""

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.query(name=QUERY_CONSUMED)
    def consumed(self, msg_ids: list[str]) -> list[str]:
        return [m for m in msg_ids if m == TAKEN.msg_id.hex()]


async def test_a_workflow_that_knows_no_keys_is_asked_by_msg_id(temporal_env):
    client = temporal_env.client
    task_queue = f"earlier-{uuid.uuid4().hex[:10]}"
    spec = AggregateSpec(name="q", legs=(LegSpec(name="CREDIT", sequence=10),))
    bridge = InboundBridge(client, lambda: None, [spec], task_queue=task_queue)  # type: ignore[arg-type,return-value]
    keys = [message_key(m) for m in (TAKEN, TWIN, OTHER)]
    # Unsandboxed: the workflow is a stand-in, and this module imports the bridge.
    runner = UnsandboxedWorkflowRunner()
    async with Worker(client, task_queue=task_queue, workflows=[EarlierGather],
                      workflow_runner=runner):  # fmt: skip
        handle = await client.start_workflow(
            EarlierGather.run, id=f"earlier-{uuid.uuid4().hex}", task_queue=task_queue
        )
        taken = await bridge._ask_taken(handle, GatherWorkflow.taken, GatherWorkflow.consumed, keys)
        await handle.terminate()
    # It decided by MsgId, so both messages with TAKEN's MsgId count as taken: the
    # answer it would have given the bridge of its own release.
    assert taken == {keys[0], keys[1]}
