"""What an operator sees and does: status, search attributes, release, extend, cancel,
and the two timer modes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import timedelta

import pytest
from temporalio.service import RPCError

from mqgather.config import AggregateSpec, LegSpec
from tests.harness import pipeline, status, until
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
