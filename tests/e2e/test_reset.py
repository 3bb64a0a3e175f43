"""An operator resets a closed gather (the Temporal UI's Reset, ``temporal workflow
reset``): the run after the reset takes replies the closed run never had, and its final
must neither be a second one nor drop them."""

from __future__ import annotations

import uuid

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client, WorkflowHandle

from mqgather.config import AggregateSpec
from tests.conftest import standin_connector
from tests.harness import THREE_LEGS, pipeline, status, until
from workflows.models import GatherResult


async def _reset_to_first_task(client: Client, handle: WorkflowHandle) -> str:
    """Reset the gather's latest run to its first workflow task, as an operator does in
    the UI (signals after that point are applied again); the new run's id."""
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
        )
    )
    return done.run_id


@pytest.mark.parametrize("over", ["embedded", "ibmmq"])
@pytest.mark.parametrize("size", [2, 4096], ids=["inline", "held"])
async def test_a_reply_a_reset_gather_takes_after_its_close_goes_late_not_into_a_second_final(
    temporal_env, tmp_path, size, over
):
    spec = AggregateSpec(name="reset", legs=THREE_LEGS, timeout_seconds=300,
                         inline_reply_bytes=1024)  # fmt: skip
    transport = (lambda path: standin_connector(path)) if over == "ibmmq" else None
    async with pipeline(temporal_env.client, tmp_path, [spec], transport=transport) as p:
        sent = await p.scatter(spec)
        handle = p.handle(spec, sent.correl_id)
        p.reply(spec, sent.correl_id, "CREDIT", b'{"c":1}')
        p.reply(spec, sent.correl_id, "STOCK", b'{"s":1}')
        await until(lambda: status(handle), lambda s: len(s.legs_received) == 2)
        await handle.cancel()  # the partial goes to the timeout queue as CANCELLED
        before = await p.result(spec, sent.correl_id)
        run = await _reset_to_first_task(temporal_env.client, handle)
        after = temporal_env.client.get_workflow_handle(handle.id, run_id=run,
                                                        result_type=GatherResult)  # fmt: skip
        await until(lambda: status(after), lambda s: len(s.legs_received) == 2)
        tax = p.reply(spec, sent.correl_id, "TAX", b'"' + b"t" * size + b'"')
        result = await after.result()
        partial = await p.wait_message("GATHER.TIMEOUT")
        late = await p.wait_message("GATHER.LATE")
        for queue in ("ORDER.RESPONSE", "GATHER.TIMEOUT", "GATHER.LATE", spec.hold_queue,
                      spec.reply_queue, "GATHER.FAILURE"):  # fmt: skip
            assert p.empty(queue), queue
    assert before.state == "CANCELLED" and partial.properties["mqgather_missing"] == "TAX"
    # The reset run took TAX, but the gather had answered: TAX goes where a reply after
    # the close goes, intact, and the gather's outcome stays the one it was answered as.
    assert (late.msg_id, late.body) == (tax.msg_id, tax.body)
    assert result.state == "CANCELLED" and "GATHER.LATE" in result.error


async def test_a_reset_gather_that_ends_as_it_did_still_sends_its_new_reply_late(
    temporal_env, tmp_path
):
    """The same outcome twice: the final's MsgId is the same, and before, the ledger took
    the second for a retry of the first, so the new reply went nowhere."""
    spec = AggregateSpec(name="resetsame", legs=THREE_LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        handle = p.handle(spec, sent.correl_id)
        p.reply(spec, sent.correl_id, "CREDIT", b'{"c":1}')
        await until(lambda: status(handle), lambda s: s.legs_received == ["CREDIT"])
        await handle.cancel()
        await p.result(spec, sent.correl_id)
        run = await _reset_to_first_task(temporal_env.client, handle)
        after = temporal_env.client.get_workflow_handle(handle.id, run_id=run,
                                                        result_type=GatherResult)  # fmt: skip
        await until(lambda: status(after), lambda s: s.legs_received == ["CREDIT"])
        stock = p.reply(spec, sent.correl_id, "STOCK", b'{"s":1}')
        await until(lambda: status(after), lambda s: len(s.legs_received) == 2)
        await after.cancel()
        result = await after.result()
        partial = await p.wait_message("GATHER.TIMEOUT")
        late = await p.wait_message("GATHER.LATE")
        for queue in ("ORDER.RESPONSE", "GATHER.TIMEOUT", "GATHER.LATE", spec.reply_queue):
            assert p.empty(queue), queue
    assert partial.body.count(b'"c"') == 1 and b'"s"' not in partial.body
    assert (late.msg_id, late.body) == (stock.msg_id, stock.body)
    assert result.state == "CANCELLED"


async def test_a_reset_gather_keeping_the_last_reply_leaves_the_one_it_answered_with_in_place(
    temporal_env, tmp_path
):
    """With the policy "last", a second reply after the reset makes the first, which the
    closed gather's partial carried, a duplicate: it is not copied to the duplicate queue
    as well, and the second goes late."""
    spec = AggregateSpec(name="resetlast", legs=THREE_LEGS, timeout_seconds=300,
                         duplicates="last")  # fmt: skip
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        handle = p.handle(spec, sent.correl_id)
        first = p.reply(spec, sent.correl_id, "CREDIT", b'{"c":1}')
        await until(lambda: status(handle), lambda s: s.legs_received == ["CREDIT"])
        await handle.cancel()
        await p.result(spec, sent.correl_id)
        run = await _reset_to_first_task(temporal_env.client, handle)
        after = temporal_env.client.get_workflow_handle(handle.id, run_id=run,
                                                        result_type=GatherResult)  # fmt: skip
        await until(lambda: status(after), lambda s: s.legs_received == ["CREDIT"])
        second = p.reply(spec, sent.correl_id, "CREDIT", b'{"c":2}')
        await until(lambda: status(after), lambda s: s.duplicates == 1)
        await after.cancel()
        result = await after.result()
        partial = await p.wait_message("GATHER.TIMEOUT")
        late = await p.wait_message("GATHER.LATE")
        for queue in ("ORDER.RESPONSE", "GATHER.TIMEOUT", "GATHER.LATE", spec.duplicate_queue):
            assert p.empty(queue), queue
    assert b'"c": 1' in partial.body or b'"c":1' in partial.body
    assert (late.msg_id, late.body) == (second.msg_id, second.body)
    assert first.msg_id != second.msg_id and result.state == "CANCELLED"
