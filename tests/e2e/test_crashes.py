"""Crashes and outages: nothing is lost and nothing is counted twice."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import signal
import subprocess
import sys

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from bridge.inbound import InboundBridge
from bridge.mq.local_qm import LocalQueueManager
from mqgather.config import AggregateSpec, LegSpec
from mqgather.names import PROP_REASON
from mqgather.runtime.temporal import dev_server_args
from tests.harness import (
    free_ports,
    pipeline,
    processes_mentioning,
    start_dev_server,
    status,
    until,
)

LEGS = (LegSpec(name="CREDIT", sequence=10), LegSpec(name="STOCK", sequence=20),
        LegSpec(name="TAX", sequence=30))  # fmt: skip
CTX = mp.get_context("spawn")


def mqgather_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "mqgather.cli", *args]


async def test_worker_killed_mid_gather_completes_with_one_response(temporal_env, tmp_path):
    spec = AggregateSpec(name="killworker", legs=LEGS, timeout_seconds=120)
    address = temporal_env.client.service_client.config.target_host
    async with pipeline(temporal_env.client, tmp_path, [spec], run_worker=False) as p:
        env = dict(os.environ, TEMPORAL_ADDRESS=address, MQGATHER_MQ=f"local:{p.path}")
        args = mqgather_cmd("worker", "--task-queue", p.task_queue)
        worker = subprocess.Popen(args, env=env, stderr=subprocess.DEVNULL)
        try:
            sent = await p.scatter(spec)
            p.reply(spec, sent.correl_id, "CREDIT", b"{}")
            p.reply(spec, sent.correl_id, "STOCK", b"{}")
            handle = p.handle(spec, sent.correl_id)
            await until(lambda: status(handle), lambda s: len(s.legs_received) == 2, 60)
            worker.send_signal(signal.SIGKILL)
            worker.wait(10)
            p.reply(spec, sent.correl_id, "TAX", b"{}")
            worker = subprocess.Popen(args, env=env, stderr=subprocess.DEVNULL)
            result = await p.result(spec, sent.correl_id, timeout=120)
        finally:
            worker.kill()
            worker.wait(10)
        assert result.state == "COMPLETE"
        responses = p.messages("ORDER.RESPONSE")
    assert len(responses) == 1 and responses[0].correl_id == sent.correl_id


class _CrashAfterSignals(InboundBridge):
    """Dies by SIGKILL after Temporal accepted the signals and before MQCMIT."""

    async def _process(self, *args, **kwargs):
        await super()._process(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)


def _run_crashing_bridge(address: str, path: str, spec_json: str, task_queue: str) -> None:
    async def main() -> None:
        client = await Client.connect(address, data_converter=pydantic_data_converter)
        spec = AggregateSpec.model_validate_json(spec_json)
        bridge = _CrashAfterSignals(
            client, lambda: LocalQueueManager(path), [spec], task_queue=task_queue
        )
        await bridge.run(asyncio.Event())

    asyncio.run(main())


async def test_bridge_killed_between_signal_and_commit_counts_nothing_twice(temporal_env, tmp_path):
    spec = AggregateSpec(name="killbridge", legs=LEGS, timeout_seconds=120)
    address = temporal_env.client.service_client.config.target_host
    async with pipeline(temporal_env.client, tmp_path, [spec], run_bridge=False) as p:
        still_open = await p.scatter(spec)
        finished = await p.scatter(spec)
        p.reply(spec, still_open.correl_id, "CREDIT", b"{}")
        p.reply(spec, still_open.correl_id, "STOCK", b"{}")
        for leg in ("CREDIT", "STOCK", "TAX"):
            p.reply(spec, finished.correl_id, leg, b"{}")
        crash = CTX.Process(
            target=_run_crashing_bridge,
            args=(address, str(p.path), spec.model_dump_json(), p.task_queue),
        )
        crash.start()
        crash.join(60)
        assert crash.exitcode == -signal.SIGKILL
        # The killed bridge signalled but never committed: the gather already finished.
        done = await p.result(spec, finished.correl_id)
        assert done.state == "COMPLETE"
        stop = asyncio.Event()
        bridge = InboundBridge(
            temporal_env.client, p.connect, [spec], task_queue=p.task_queue, wait_ms=100
        )
        task = asyncio.create_task(bridge.run(stop))
        try:
            handle = p.handle(spec, still_open.correl_id)
            await until(lambda: status(handle), lambda s: s.redeliveries == 2)
            await until(
                lambda: asyncio.sleep(0, bridge.stats), lambda s: s.redeliveries_dropped == 3
            )
            p.reply(spec, still_open.correl_id, "TAX", b"{}")
            result = await p.result(spec, still_open.correl_id)
        finally:
            stop.set()
            await task
        assert result.state == "COMPLETE"
        assert (result.redeliveries, result.duplicates) == (2, 0)
        assert done.duplicates == 0
        assert len(p.messages("ORDER.RESPONSE")) == 2
        assert p.empty("GATHER.LATE") and p.empty("GATHER.IN") and p.empty("GATHER.DUPLICATE")


async def test_message_backed_out_bothresh_times_goes_to_boqname(temporal_env, tmp_path):
    spec = AggregateSpec(name="poison", legs=LEGS)
    async with pipeline(temporal_env.client, tmp_path, [spec], run_bridge=False) as p:
        sent = p.reply(spec, b"R-POISON", "CREDIT", b'{"poison":true}')
        with LocalQueueManager(p.path) as qm:
            for _ in range(3):  # as if three bridges died on it
                qm.get("GATHER.IN")
                qm.backout()
        stop = asyncio.Event()
        bridge = InboundBridge(temporal_env.client, p.connect, [spec], task_queue=p.task_queue)
        task = asyncio.create_task(bridge.run(stop))
        try:
            moved = await p.wait_message("GATHER.BACKOUT")
        finally:
            stop.set()
            await task
    assert moved.msg_id == sent.msg_id and moved.body == b'{"poison":true}'
    assert moved.backout_count == 0  # a new message on the backout queue
    assert moved.properties["mqgather_backout_count"] == 3
    assert "BOTHRESH 3" in str(moved.properties[PROP_REASON])


async def test_temporal_stopped_while_replies_arrive_loses_nothing(tmp_path):
    def args_for(ports: list[int]) -> list[str]:
        return [*dev_server_args(str(tmp_path / "t.db"), *ports), "--headless"]

    server, client, ports = await start_dev_server(tmp_path, args_for, 2)
    server_args = [server.args[0], *args_for(ports)]
    try:
        spec = AggregateSpec(name="outage", legs=LEGS, timeout_seconds=300)
        async with pipeline(client, tmp_path, [spec], bothresh=5) as p:
            gathers = [await p.scatter(spec) for _ in range(3)]
            server.send_signal(signal.SIGTERM)
            server.wait(30)
            for g in gathers:
                for leg in ("CREDIT", "STOCK", "TAX"):
                    p.reply(spec, g.correl_id, leg, b"{}")
            await until(lambda: asyncio.sleep(0, p.bridge.stats), lambda s: s.rollbacks >= 1, 60)
            assert p.depth("ORDER.RESPONSE") == 0
            server = subprocess.Popen(
                server_args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            responses = [await p.wait_message("ORDER.RESPONSE", 120) for _ in gathers]
            assert {r.correl_id for r in responses} == {g.correl_id for g in gathers}
            for queue in ("GATHER.IN", "GATHER.FAILURE", "GATHER.BACKOUT", "GATHER.LATE"):
                assert p.empty(queue), queue
    finally:
        server.terminate()
        server.wait(30)


@pytest.mark.timeout(400)
def test_demo_from_a_shell(tmp_path):
    from mqgather.config import default_aggregates
    from workers.demo.driver import Rates, expected_counts, plan_requests, retrying_legs

    state = tmp_path / "state"
    demo_port, demo_ui = free_ports(2)
    out = subprocess.run(
        mqgather_cmd("demo", "--requests", "200", "--json", "--port", str(demo_port),
                     "--ui-port", str(demo_ui), "--state-dir", str(state)),
        cwd=tmp_path, capture_output=True, timeout=360,
        env={k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "MQGATHER_"))},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    figures = __import__("json").loads(out.stdout.decode().strip().splitlines()[-1])
    rates = Rates()
    spec = default_aggregates()["orders"]
    plans = plan_requests(200, spec, rates)
    expected = expected_counts(
        plans, round(200 * rates.unknown), round(200 * rates.poison), retrying_legs(spec)
    )
    assert expected["rerequested"] >= round(200 * rates.lost)  # the demo shows one at least
    assert figures["completed"] + figures["timed_out"] == 200
    for key, value in expected.items():
        assert figures[key] == value, key
    assert set(figures["latency_ms"]) == {"p50", "p95", "p99"}
    assert 0 < figures["latency_ms"]["p50"] <= figures["latency_ms"]["p99"]
    assert processes_mentioning(str(state)) == [], "the demo left processes behind"
