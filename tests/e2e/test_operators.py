"""What an operator sees and does: status, search attributes, release, extend, cancel,
and the two timer modes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from datetime import timedelta

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError

from bridge.mq.models import Match, MQMessage, QueueAttributes
from mqgather.config import AggregateSpec, LegSpec
from mqgather.names import GATHER_STATE, PROP_REASON, UPDATE_EXTEND
from tests.harness import THREE_LEGS, pipeline, status, until
from tests.stalls import Hung
from workflows.gather import GatherWorkflow
from workflows.models import CancelInput, ExtendInput, Registration, ReleaseInput

LEGS = (LegSpec(name="CREDIT", sequence=10), LegSpec(name="STOCK", sequence=20),
        LegSpec(name="TAX", sequence=30))  # fmt: skip


async def test_release_puts_what_is_there_now(temporal_env, tmp_path):
    spec = AggregateSpec(name="rel", legs=LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        p.reply(spec, sent.correl_id, "CREDIT", b'{"c":1}')
        handle = p.handle(spec, sent.correl_id)
        await until(lambda: status(handle), lambda s: s.legs_received == ["CREDIT"])
        done = await handle.execute_update(GatherWorkflow.release, ReleaseInput(reason="ops"))
        response = await p.wait_message("ORDER.RESPONSE")
        result = await p.result(spec, sent.correl_id)
    assert done.accepted
    doc = json.loads(response.body)
    assert doc["state"] == "RELEASED" and doc["missing"] == ["stock", "tax"]
    assert result.state == "RELEASED"


async def test_get_disabled_on_the_reply_queue_keeps_replies_there_until_enabled(
    temporal_env, tmp_path
):
    """An operator sets the reply queue GET(DISABLED) with replies on it: the bridge takes
    nothing and so backs nothing out (no BackoutCount rises toward BOTHRESH), looks
    again every second, and takes them at GET(ENABLED): the gather completes."""
    spec = AggregateSpec(name="inhibit-get", mode="static", legs=LEGS, timeout_seconds=60)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        attrs = p.qm.inquire(spec.reply_queue)
        p.qm.define(attrs.model_copy(update={"get": "disabled"}), replace=True)
        correl = b"INHIBITED".ljust(24, b"\0")
        for leg in ("CREDIT", "STOCK", "TAX"):
            p.reply(spec, correl, leg, b"{}")
        # Three looks at the queue, or a backout (which must not come).
        stats = await until(lambda: asyncio.sleep(0, p.bridge.stats),
                            lambda st: st.rollbacks > 0 or st.inhibited_waits >= 3)  # fmt: skip
        assert stats.rollbacks == 0 and p.depth(spec.reply_queue) == 3
        p.qm.define(attrs.model_copy(update={"get": "enabled"}), replace=True)
        response = await p.wait_message("ORDER.RESPONSE")
        result = await p.result(spec, correl)
        assert p.bridge.stats.rollbacks == 0 and p.empty(spec.reply_queue)
    assert result.state == "COMPLETE" and response.properties["mqgather_state"] == "COMPLETE"


async def test_extend_moves_the_deadline_and_cancel_ends(temporal_env, tmp_path):
    spec = AggregateSpec(name="ext", legs=LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        slow, stopped = await p.scatter(spec), await p.scatter(spec)
        handle = p.handle(spec, slow.correl_id)
        before = await until(lambda: status(handle), lambda s: s.deadline is not None)
        moved = await handle.execute_update(GatherWorkflow.extend, ExtendInput(seconds=0.5))
        assert moved.accepted and moved.deadline < before.deadline
        partial = await p.wait_message("GATHER.TIMEOUT")
        assert json.loads(partial.body)["state"] == "TIMEOUT"
        cancelled = await p.handle(spec, stopped.correl_id).execute_update(
            GatherWorkflow.cancel, CancelInput(reason="order withdrawn")
        )
        gone = await p.wait_message("GATHER.TIMEOUT")
        result = await p.result(spec, stopped.correl_id)
        with pytest.raises(RPCError):  # a closed gather takes no more updates
            await p.handle(spec, stopped.correl_id).execute_update(
                GatherWorkflow.release, ReleaseInput()
            )
    assert cancelled.accepted and result.state == "CANCELLED"
    assert json.loads(gone.body)["state"] == "CANCELLED" and gone.correl_id == stopped.correl_id
    assert partial.correl_id == slow.correl_id


@pytest.mark.parametrize("seconds", [1e300, 1e15])
async def test_an_extend_no_timer_keeps_is_refused_and_the_gather_goes_on(
    temporal_env, tmp_path, seconds
):
    # As the Web UI sends an update: JSON typed by hand, no CLI to check it first. A wait
    # past what a datetime holds used to fail the gather's workflow task on every retry.
    spec = AggregateSpec(name="extfar", legs=LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        handle = p.handle(spec, sent.correl_id)
        before = await until(lambda: status(handle), lambda s: s.deadline is not None)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await asyncio.wait_for(
                handle.execute_update(UPDATE_EXTEND, {"seconds": seconds}), timeout=30
            )
        assert "is not a wait" in str(refused.value.cause)
        after = await status(handle)
        for leg in LEGS:
            p.reply(spec, sent.correl_id, leg.name, b"{}")
        result = await p.result(spec, sent.correl_id)
    assert after.deadline == before.deadline
    assert result.state == "COMPLETE"


async def test_a_reason_too_long_to_carry_is_refused_and_the_gather_goes_on(temporal_env, tmp_path):
    spec = AggregateSpec(name="longwhy", legs=LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        handle = p.handle(spec, sent.correl_id)
        await until(lambda: status(handle), lambda s: s.deadline is not None)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(
                GatherWorkflow.release, ReleaseInput(reason="why " * 100_000)
            )
        done = await handle.execute_update(GatherWorkflow.release, ReleaseInput(reason="ops"))
        response = await p.wait_message("ORDER.RESPONSE")
    assert "reason: 400,000 characters" in str(refused.value.cause)
    assert done.accepted and response.properties[PROP_REASON] == "ops"


@pytest.mark.parametrize(("mode", "moves"), [("first", False), ("restart", True)])
async def test_timer_modes(temporal_env, tmp_path, mode, moves):
    spec = AggregateSpec(name=f"timer{mode}", legs=LEGS, timeout_seconds=600, timer=mode)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        handle = p.handle(spec, sent.correl_id)
        first = await until(lambda: status(handle), lambda s: s.deadline is not None)
        await handle.signal(GatherWorkflow.expect, Registration())
        second = await until(lambda: status(handle), lambda s: s.registrations == 2)
    assert (second.deadline > first.deadline) is moves
    assert (second.deadline == first.deadline) is (not moves)


async def test_operator_finds_a_gather_by_correl_id_and_status_cli(temporal_env, tmp_path):
    spec = AggregateSpec(name="findme", legs=LEGS, timeout_seconds=300)
    client = temporal_env.client
    async with pipeline(client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        p.reply(spec, sent.correl_id, "TAX", b"{}")
        handle = p.handle(spec, sent.correl_id)
        await until(lambda: status(handle), lambda s: s.state == "PARTIAL")

        async def search():
            query = f'CorrelId = "{sent.correl_id.hex()}" AND GatherState = "PARTIAL"'
            return [w async for w in client.list_workflows(query)]

        found = await until(search, lambda rows: len(rows) == 1, 30)
        env = dict(os.environ, TEMPORAL_ADDRESS=client.service_client.config.target_host)
        out = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "mqgather.cli", "status", f"hex:{sent.correl_id.hex()}",
             "--aggregate", "findme", "--json"],
            capture_output=True, env=env, timeout=60,
        )  # fmt: skip
        await handle.execute_update(GatherWorkflow.cancel, CancelInput())
    assert found[0].id == handle.id
    assert found[0].typed_search_attributes is not None
    shown = json.loads(out.stdout)
    assert out.returncode == 0, out.stderr
    assert shown["state"] == "PARTIAL" and shown["legs_received"] == ["TAX"]
    assert shown["legs_missing"] == ["CREDIT", "STOCK"] and shown["running"] is True


async def test_release_before_registration_puts_the_held_replies_with_the_reason(
    temporal_env, tmp_path
):
    spec = AggregateSpec(name="relheld", legs=LEGS, unknown_timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        from bridge.mq.models import parse_id

        correl = parse_id("HELD-1")
        p.reply(spec, correl, "CREDIT", b'{"c":1}')
        p.reply(spec, correl, "STOCK", b'{"s":1}')
        handle = p.handle(spec, correl)
        await until(lambda: status(handle), lambda s: s.held == 2)
        done = await handle.execute_update(GatherWorkflow.release, ReleaseInput(reason="ops 42"))
        response = await p.wait_message("ORDER.RESPONSE")
        result = await p.result(spec, correl)
        assert p.empty("GATHER.UNKNOWN")
    assert done.accepted and done.state == "RELEASED"
    doc = json.loads(response.body)
    assert doc["state"] == "RELEASED" and doc["legs"] == {"credit": {"c": 1}, "stock": {"s": 1}}
    assert response.properties["mqgather_reason"] == "ops 42"
    assert result.state == "RELEASED" and result.legs_received == ["CREDIT", "STOCK"]


async def test_extend_before_registration_keeps_the_held_replies_waiting(temporal_env, tmp_path):
    spec = AggregateSpec(name="extheld", legs=LEGS, unknown_timeout_seconds=2)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        from bridge.mq.models import parse_id

        correl = parse_id("HELD-2")
        p.reply(spec, correl, "CREDIT", b"{}")
        handle = p.handle(spec, correl)
        first = await until(lambda: status(handle), lambda s: s.held == 1)
        moved = await handle.execute_update(GatherWorkflow.extend, ExtendInput(seconds=300))
        # Past the 2 s unknown timeout (time itself is what is awaited here), the reply
        # is still held and the registration finds it.
        await asyncio.sleep(3)
        before = await status(handle)
        sent = await p.scatter(spec, correl_id=correl)
        p.reply(spec, sent.correl_id, "STOCK", b"{}")
        p.reply(spec, sent.correl_id, "TAX", b"{}")
        response = await p.wait_message("ORDER.RESPONSE")
    assert moved.accepted and moved.deadline > first.started_at + timedelta(seconds=200)
    assert before.state == "OPEN" and not before.registered
    assert json.loads(response.body)["state"] == "COMPLETE"


async def cli(client, *args: str) -> subprocess.CompletedProcess:
    """An ``mqgather`` command as an operator runs it."""
    env = dict(os.environ, TEMPORAL_ADDRESS=client.service_client.config.target_host)
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "mqgather.cli", *args],
        capture_output=True, env=env, timeout=60,
    )  # fmt: skip


async def cli_status(client, spec: AggregateSpec | None, correl_text: str) -> dict:
    """``mqgather status --json``; without ``spec`` the gather is found in any aggregate."""
    where = ["--aggregate", spec.name] if spec is not None else []
    out = await cli(client, "status", correl_text, *where, "--json")
    assert out.returncode == 0 and b"Traceback" not in out.stderr, out.stderr
    return json.loads(out.stdout)


async def test_a_temporal_cancel_puts_the_partial_and_status_answers_on_closed_gathers(
    temporal_env, tmp_path
):
    spec = AggregateSpec(name="tcancel", legs=LEGS, timeout_seconds=300)
    client = temporal_env.client
    async with pipeline(client, tmp_path, [spec]) as p:
        sent, ended = await p.scatter(spec), await p.scatter(spec)
        p.reply(spec, sent.correl_id, "CREDIT", b'{"c":1}')
        handle = p.handle(spec, sent.correl_id)
        await until(lambda: status(handle), lambda s: s.legs_received == ["CREDIT"])
        await handle.cancel()  # what the UI's "Request Cancellation" sends
        partial = await p.wait_message("GATHER.TIMEOUT")
        result = await p.result(spec, sent.correl_id)
        described = await handle.describe()
        terminated = p.handle(spec, ended.correl_id)
        await until(lambda: status(terminated), lambda s: s.deadline is not None)
        await terminated.terminate(reason="stuck")
        shown = await cli_status(client, spec, f"hex:{sent.correl_id.hex()}")
        gone = await cli_status(client, spec, f"hex:{ended.correl_id.hex()}")
        assert p.empty("ORDER.RESPONSE")
    doc = json.loads(partial.body)
    assert doc["state"] == "CANCELLED" and doc["legs"] == {"credit": {"c": 1}}
    assert doc["missing"] == ["stock", "tax"] and partial.correl_id == sent.correl_id
    assert partial.properties[PROP_REASON] == "cancel requested through Temporal"
    assert result.state == "CANCELLED"
    assert described.typed_search_attributes.get(GATHER_STATE) == "CANCELLED"
    assert (shown["state"], shown["workflow_status"]) == ("CANCELLED", "COMPLETED")
    assert (gone["workflow_status"], gone["state"], gone["running"]) == ("TERMINATED", "OPEN",
                                                                         False)  # fmt: skip


async def test_a_failing_put_shows_its_mq_reason_in_status_and_details_until_it_goes(
    temporal_env, tmp_path
):
    spec = AggregateSpec(name="qfull", legs=LEGS[:1], delivery_attempts=100, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        p.qm.define(QueueAttributes(name="ORDER.RESPONSE", maxdepth=1), replace=True)
        blocker = p.put("ORDER.RESPONSE", MQMessage(body=b"in the way"))
        sent = await p.scatter(spec)
        p.reply(spec, sent.correl_id, "CREDIT", b'{"c":1}')
        handle = p.handle(spec, sent.correl_id)
        failing = await until(lambda: status(handle), lambda s: "MQRC_Q_FULL" in s.last_error, 30)
        meta = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        p.qm.get("ORDER.RESPONSE", match=Match(msg_id=blocker.msg_id), syncpoint=False)
        response = await p.wait_message("ORDER.RESPONSE")
        result = await p.result(spec, sent.correl_id)
    assert "PUT of the response" in failing.last_error and "ORDER.RESPONSE" in failing.last_error
    assert "MQRC_Q_FULL" in meta.current_details and "failing since" in meta.current_details
    assert result.state == "COMPLETE" and json.loads(response.body)["legs"] == {"credit": {"c": 1}}


async def test_a_gather_is_found_by_its_text_correl_id_and_shows_a_summary(temporal_env, tmp_path):
    spec = AggregateSpec(name="bytext", legs=LEGS, timeout_seconds=300)
    client = temporal_env.client
    text = f"ORDER-{uuid.uuid4().hex[:8]}"
    async with pipeline(client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec, correl_id=text.encode())
        p.reply(spec, sent.correl_id, "CREDIT", b"{}")
        handle = p.handle(spec, sent.correl_id)
        await until(lambda: status(handle), lambda s: s.state == "PARTIAL")

        async def search(query: str) -> list:
            return [w.id async for w in client.list_workflows(query)]

        by_text = await until(lambda: search(f'CorrelIdText = "{text}"'), lambda r: r, 30)
        missing = await until(
            lambda: search(f'CorrelIdText = "{text}" AND LegsMissing = "STOCK" '
                           f'AND GatherDeadline > "2020-01-01T00:00:00Z"'),
            lambda r: r, 30,
        )  # fmt: skip
        described = await handle.describe()
        forms = [text, sent.correl_id.hex().upper(), f"X'{sent.correl_id.hex()}'", handle.id]
        shown = [await cli_status(client, None, form) for form in forms]
        released = await cli(client, "release", text, "--reason", "supplier down")
        help_text = (await cli(client, "release", "--help")).stdout.decode()
    assert by_text == missing == [handle.id]
    assert await described.static_summary() == (
        f"bytext: CorrelId '{text}' hex:{sent.correl_id.hex()}"
    )
    assert {s["gather_id"] for s in shown} == {handle.id}
    assert all(s["legs_missing"] == ["STOCK", "TAX"] for s in shown)
    assert released.returncode == 0, released.stderr
    assert released.stdout.decode().strip() == f"{handle.id}: now RELEASED; deadline " + (
        f"{shown[0]['deadline'][:19].replace('T', ' ')} UTC; reason: supplier down"
    )
    assert "--reason" in help_text and "--seconds" not in help_text


async def test_status_without_an_aggregate_says_what_to_do_when_nothing_matches(temporal_env):
    out = await cli(temporal_env.client, "status", f"NOBODY-{uuid.uuid4().hex[:8]}")
    assert out.returncode != 0 and b"Traceback" not in out.stderr
    assert b"no gather has CorrelId" in out.stderr and b"--aggregate" in out.stderr


async def test_a_cancel_while_the_responses_put_hangs_still_answers_once(temporal_env, tmp_path):
    """An operator cancels a gather whose response is being PUT, the PUT hanging in its
    queue manager. The gather had closed as COMPLETE, so the cancel sends that response
    again, as a new attempt, and cancels the hung one: once its call returns, it backs
    out at its commit. The requester gets one response."""
    spec = AggregateSpec(name="cancel-putting", legs=THREE_LEGS, timeout_seconds=300)
    hung = Hung("ORDER.RESPONSE", until_cancelled=True)

    def hanging(path):
        return lambda: hung.transport(path)

    async with pipeline(temporal_env.client, tmp_path, [spec], transport=hanging) as p:
        sent = await p.scatter(spec)
        for leg in ("CREDIT", "STOCK", "TAX"):
            p.reply(spec, sent.correl_id, leg, json.dumps({leg: 1}).encode())
        assert await asyncio.to_thread(hung.putting.wait, 30)
        # The worker holds the gather's workflow task while the PUT runs: the cancel
        # reaches the gather with its next task, when the SDK renews the task (8 s).
        await p.handle(spec, sent.correl_id).cancel()
        response = await p.wait_message("ORDER.RESPONSE", timeout=60)
        result = await p.result(spec, sent.correl_id)
        assert p.empty("ORDER.RESPONSE")  # no second response
        assert all(p.empty(q) for q in (spec.timeout_queue, spec.late_queue, spec.failure_queue))
    assert hung.ended == ["backed out"]
    assert result.state == json.loads(response.body)["state"] == "COMPLETE"
