"""The worker's options: its gather cache (``--max-cached-gathers``: a gather pushed out
of it is replayed from its history at its next task, and still completes exactly once)
and the workflow sandbox (on in the suite, off in production unless asked)."""

from __future__ import annotations

import uuid

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig
from temporalio.worker import UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from mqgather.config import AggregateSpec, LegSpec
from mqgather.constants import DEFAULT_MAX_CACHED_GATHERS
from tests.harness import pipeline, status, until
from workers.worker import build_worker

LEGS = (LegSpec(name="CREDIT", sequence=10), LegSpec(name="STOCK", sequence=20),
        LegSpec(name="TAX", sequence=30))  # fmt: skip


async def cache_figures(env, spec: AggregateSpec, cached: int, tmp_path) -> tuple[int, int]:
    """Open gathers A and B, then finish A, on a worker that keeps ``cached`` gathers:
    the most gathers it held at once, and how many it pushed out to make room."""
    buffer = MetricBuffer(100_000)
    runtime = Runtime(telemetry=TelemetryConfig(metrics=buffer))
    client = await Client.connect(env.client.service_client.config.target_host,
                                  data_converter=pydantic_data_converter,
                                  runtime=runtime)  # fmt: skip
    async with pipeline(client, tmp_path, [spec], run_worker=False) as p:
        worker = build_worker(client, p.connect, task_queue=p.task_queue,
                              max_cached_gathers=cached)  # fmt: skip
        async with worker:
            a, b = await p.scatter(spec), await p.scatter(spec)
            for g in (a, b):  # A is in the cache, then B takes its place when it holds one
                p.reply(spec, g.correl_id, "CREDIT", b"{}")
                await until(lambda g=g: status(p.handle(spec, g.correl_id)),
                            lambda s: len(s.legs_received) == 1)  # fmt: skip
            p.reply(spec, a.correl_id, "STOCK", b"{}")
            p.reply(spec, a.correl_id, "TAX", b"{}")
            assert (await p.result(spec, a.correl_id)).state == "COMPLETE"
            response = await p.wait_message(spec.response_queue)
            assert response.correl_id == a.correl_id and p.depth(spec.response_queue) == 0
        await p.handle(spec, b.correl_id).terminate("test over")
    updates = buffer.retrieve_updates()
    held = max(int(u.value) for u in updates if u.metric.name.endswith("sticky_cache_size"))
    evicted = sum(
        int(u.value)
        for u in updates
        if u.metric.name.endswith("sticky_cache_total_forced_eviction")
    )
    return held, evicted


async def test_a_gather_out_of_the_cache_is_replayed_and_completes_once(temporal_env, tmp_path):
    spec = AggregateSpec(name="cache", legs=LEGS, timeout_seconds=600)
    # With room for one, B pushes A out; A's last replies replay it from its history.
    held, evicted = await cache_figures(temporal_env, spec, 1, tmp_path / "one")
    assert held == 1 and evicted >= 1
    # With the default, both stay in memory.
    held, evicted = await cache_figures(
        temporal_env, spec, DEFAULT_MAX_CACHED_GATHERS, tmp_path / "default"
    )
    assert held >= 2 and evicted == 0


async def test_the_suite_runs_the_workflows_sandboxed_and_production_need_not(temporal_env):
    from click.testing import CliRunner

    from mqgather.cli.processes import worker

    def connect():
        raise AssertionError("not connected in this test")

    default = build_worker(temporal_env.client, connect, task_queue=f"unused-{uuid.uuid4()}")
    bare = build_worker(temporal_env.client, connect, task_queue=f"unused-{uuid.uuid4()}",
                        sandboxed=False)  # fmt: skip
    assert isinstance(default.config()["workflow_runner"], SandboxedWorkflowRunner)
    assert isinstance(bare.config()["workflow_runner"], UnsandboxedWorkflowRunner)
    shown = CliRunner().invoke(worker, ["--help"], terminal_width=200).output
    assert "--sandbox / --no-sandbox" in shown and "[default: no-sandbox]" in shown
