"""Rolling out new workflow code: worker deployments keep open gathers on their version;
collectors, which never end, follow the current version.

The new code (``GatherV2``) issues a timer before anything else, so it cannot replay a
history written by the current code. With versioned workers the open gathers finish
on v1 while new ones run v2; with plain workers the same change breaks them.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.common import WorkerDeploymentVersion

from bridge.mq.local_qm import LocalQueueManager
from mqgather import names
from mqgather.config import AggregateSpec, LegSpec
from mqgather.runtime.deployments import describe
from tests.collecting import collecting
from tests.harness import pipeline, status, until
from tests.workers.gather_v2 import GatherV2
from workers.worker import build_worker, default_build_id
from workflows.collect_models import collector_id

LEGS = (LegSpec(name="CREDIT", sequence=10), LegSpec(name="STOCK", sequence=20),
        LegSpec(name="TAX", sequence=30))  # fmt: skip


def spec(name: str) -> AggregateSpec:
    return AggregateSpec(name=name, legs=LEGS, timeout_seconds=600, response_queue="ROLL.RESP")


def cli(client, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, names.ENV_TEMPORAL_ADDRESS: client.service_client.config.target_host}
    return subprocess.run(
        [sys.executable, "-m", "mqgather.cli", *args], env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


async def known(client, deployment: str, build: str) -> None:
    """Wait until a worker of that version has polled, so the server knows it."""

    async def builds() -> set[str]:
        try:
            return {v.build_id for v in (await describe(client, deployment)).versions}
        except Exception:  # noqa: BLE001 - the deployment appears with its first poll
            return set()

    await until(builds, lambda b: build in b, 30)


async def open_two_of_three(p, s: AggregateSpec, n: int) -> list[bytes]:
    correls = []
    for _ in range(n):
        g = await p.scatter(s)
        p.reply(s, g.correl_id, "CREDIT", b'{"c":1}')
        p.reply(s, g.correl_id, "STOCK", b'{"s":1}')
        correls.append(g.correl_id)
    for correl in correls:
        await until(lambda c=correl: status(p.handle(s, c)), lambda st: len(st.legs_received) == 2)
    return correls


async def events(p, s: AggregateSpec, correl: bytes):
    return (await p.handle(s, correl).fetch_history()).events


def build_ids(history_events) -> set[str]:
    return {
        e.workflow_task_completed_event_attributes.deployment_version.build_id
        for e in history_events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    }


async def test_open_gathers_finish_on_their_version_while_new_ones_run_the_new_code(
    temporal_env, tmp_path
):
    client = temporal_env.client
    deployment = f"roll-{uuid.uuid4().hex[:8]}"
    s = spec("rollout")
    async with pipeline(client, tmp_path, [s], extra_queues=["ROLL.RESP"], run_worker=False) as p:

        def connect() -> LocalQueueManager:
            return LocalQueueManager(p.path)

        v1 = build_worker(client, connect, task_queue=p.task_queue,
                          version=WorkerDeploymentVersion(deployment, "v1"))  # fmt: skip
        v1_task = asyncio.create_task(v1.run())
        await known(client, deployment, "v1")
        done = cli(client, "deploy", "promote", "v1", "--deployment", deployment)
        assert done.returncode == 0, done.stderr
        old = await open_two_of_three(p, s, 20)

        v2 = build_worker(client, connect, task_queue=p.task_queue, workflow_class=GatherV2,
                          version=WorkerDeploymentVersion(deployment, "v2"))  # fmt: skip
        v2_task = asyncio.create_task(v2.run())
        await known(client, deployment, "v2")
        ramped = cli(client, "deploy", "promote", "v2", "--ramp", "50", "--deployment", deployment)
        assert ramped.returncode == 0 and "ramping at 50 %" in ramped.stdout, ramped
        shown = json.loads(cli(client, "deploy", "status", "--deployment", deployment,
                               "--json").stdout)  # fmt: skip
        assert (shown["current"], shown["ramping"], shown["ramp_percent"]) == ("v1", "v2", 50)
        busy = cli(client, "deploy", "drain-check", "v2", "--deployment", deployment)
        assert busy.returncode == 1 and "new gathers still start on it" in busy.stdout, busy
        done = cli(client, "deploy", "promote", "v2", "--deployment", deployment)
        assert done.returncode == 0, done.stderr
        check = cli(client, "deploy", "drain-check", "v1", "--deployment", deployment)
        assert check.returncode == 1 and "20 open gather(s)" in check.stdout, check

        shown = json.loads(cli(client, "deploy", "status", "--deployment", deployment,
                               "--json").stdout)  # fmt: skip
        by_build = {v["build_id"]: v for v in shown["versions"]}
        assert shown["current"] == "v2" and by_build["v1"]["open_gathers"] == 20
        assert by_build["v1"]["status"] == "draining"

        # New gathers start on v2: they run its timer, and only v2 completed their tasks.
        new = []
        for _ in range(3):
            g = await p.scatter(s)
            for leg in ("CREDIT", "STOCK", "TAX"):
                p.reply(s, g.correl_id, leg, b"{}")
            new.append(g.correl_id)
        for correl in new:
            assert (await p.result(s, correl)).state == "COMPLETE"
            history = await events(p, s, correl)
            assert build_ids(history) == {"v2"}
            assert any(e.event_type == EventType.EVENT_TYPE_TIMER_STARTED for e in history)

        # The open ones finish on v1, one response each, with no task failure.
        for correl in old:
            p.reply(s, correl, "TAX", b'{"t":1}')
        for correl in old:
            assert (await p.result(s, correl)).state == "COMPLETE"
            history = await events(p, s, correl)
            assert build_ids(history) == {"v1"}
            assert not any(
                e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED for e in history
            )
        responses = [m.correl_id for m in p.messages("ROLL.RESP")]
        assert len(responses) == len(old) + len(new)
        assert len(set(responses)) == len(responses)

        async def drain_check() -> int:
            return cli(client, "deploy", "drain-check", "v1", "--deployment",
                       deployment).returncode  # fmt: skip

        await until(drain_check, lambda code: code == 0, 30)
        await v1.shutdown()
        await v2.shutdown()
        await asyncio.gather(v1_task, v2_task)


async def test_the_same_change_without_versioning_breaks_open_gathers(temporal_env, tmp_path):
    client = temporal_env.client
    s = spec("unversioned")
    async with pipeline(client, tmp_path, [s], extra_queues=["ROLL.RESP"], run_worker=False) as p:

        def connect() -> LocalQueueManager:
            return LocalQueueManager(p.path)

        old_worker = build_worker(client, connect, task_queue=p.task_queue)
        async with old_worker:
            old = await open_two_of_three(p, s, 3)
        new_worker = build_worker(client, connect, task_queue=p.task_queue,
                                  workflow_class=GatherV2)  # fmt: skip
        async with new_worker:
            for correl in old:
                p.reply(s, correl, "TAX", b"{}")

            def nondeterministic(history_events) -> bool:
                return any(
                    e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
                    and e.workflow_task_failed_event_attributes.cause
                    == WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR
                    for e in history_events
                )

            for correl in old:
                await until(lambda c=correl: events(p, s, c), nondeterministic, 60)
        for correl in old:
            await p.handle(s, correl).terminate("test over")
        with LocalQueueManager(p.path) as qm:
            assert qm.inquire("ROLL.RESP").curdepth == 0  # none of them could respond


def test_default_build_id_follows_the_gather_code():
    first = default_build_id()
    assert first == default_build_id()
    version, digest = first.rsplit("-", 1)
    assert len(digest) == 12 and version


async def test_a_collector_moves_to_the_new_version_and_never_holds_the_old(temporal_env, tmp_path):
    """Collectors never end: they auto-upgrade, so the old version drains with one open
    and its next batch is built and PUT by the new version's worker alone."""
    client = temporal_env.client
    deployment = f"roll-{uuid.uuid4().hex[:8]}"
    v1 = WorkerDeploymentVersion(deployment, "v1")
    async with collecting(client, tmp_path, version=v1) as c:
        await known(client, deployment, "v1")
        assert cli(client, "deploy", "promote", "v1", "--deployment", deployment).returncode == 0
        c.rule("Roll", "CMAOUT.FR", max_messages=2, max_delay_seconds=600)
        c.send("Roll", b"<a/>")
        await until(lambda: c.status("Roll"), lambda s: s.open_messages == 1)

        v2 = build_worker(client, c.connect, task_queue=c.task_queue,
                          version=WorkerDeploymentVersion(deployment, "v2"))  # fmt: skip
        async with v2:
            await known(client, deployment, "v2")
            assert cli(client, "deploy", "promote", "v2", "--deployment",
                       deployment).returncode == 0  # fmt: skip
            check = cli(client, "deploy", "drain-check", "v1", "--deployment", deployment)
            assert check.returncode == 0, check.stdout  # the open collector does not hold v1
            assert c.worker is not None
            await c.worker.shutdown()  # v1 is gone: only v2 can take the next task
            c.send("Roll", b"<b/>")
            batch = await c.take("CMAOUT.FR")
        handle = client.get_workflow_handle(collector_id(c.spec.name, "Roll"))
        history = (await handle.fetch_history()).events
        await handle.terminate("test over")
    assert batch.body.count(b"<a/>") == 1 and batch.body.count(b"<b/>") == 1
    assert build_ids(history) == {"v1", "v2"}
    assert not any(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED for e in history)
