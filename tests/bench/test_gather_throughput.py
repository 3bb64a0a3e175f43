"""The gather bench's floor runs on the same transport as the gathers it is set against,
and at a level of open gathers holds as many open workflows of its own."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from bench.figures import ENV_RECORD, read
from bench.gather_throughput import (
    FLOOR_OPEN_PREFIX,
    FLOOR_STAGES,
    STAGES,
    CoreWaits,
    Level,
    _collections,
    _start_trivial,
    _wait_rows,
    floor_stages,
    open_floor,
    record_level,
    threads_scheduled,
    trivial_worker,
    waits_per_run,
)
from bench.trivial import TrivialLocalWorkflow, nothing
from mqgather.constants import DEFAULT_MAX_CACHED_GATHERS
from mqgather.names import ENV_GRPC_COMPRESSION
from tests.harness import until


def test_the_floors_worker_compresses_grpc_as_mqgathers_clients_do(monkeypatch):
    monkeypatch.delenv(ENV_GRPC_COMPRESSION, raising=False)
    args = trivial_worker("localhost:7233")
    assert args[args.index("--grpc-compression") + 1] == "none"
    monkeypatch.setenv(ENV_GRPC_COMPRESSION, "gzip")
    args = trivial_worker("localhost:7233", sandbox=True)
    assert args[args.index("--grpc-compression") + 1] == "gzip"
    assert args[-1] == "--sandbox"


def test_the_floors_worker_takes_the_compression_it_is_given():
    # Its own parser accepts exactly the settings mqgather's clients know.
    run = [sys.executable, "-m", "bench.trivial", "--address", "x", "--task-queue", "q"]
    refused = subprocess.run([*run, "--grpc-compression", "zstd"], capture_output=True, text=True)
    assert refused.returncode == 2 and "invalid choice: 'zstd'" in refused.stderr


def test_the_floors_worker_keeps_as_many_workflows_as_the_gathers_worker_keeps_gathers():
    def cached(args: list[str]) -> str:
        return args[args.index("--max-cached") + 1]

    assert cached(trivial_worker("localhost:7233", cached=250)) == "250"
    assert cached(trivial_worker("localhost:7233")) == str(DEFAULT_MAX_CACHED_GATHERS)


async def test_the_floors_open_workflows_wait_past_their_first_task(temporal_env):
    client = temporal_env.client
    queue = f"floor-open-{uuid.uuid4()}"
    handles = [client.get_workflow_handle(f"{FLOOR_OPEN_PREFIX}{queue}-{i}") for i in range(5)]

    async def running() -> list[WorkflowExecutionStatus | None]:
        return [(await h.describe()).status for h in handles[:3]]

    # With no worker on the queue the first three start, yet none is past its first task,
    # so the opening is still waiting.
    opening = asyncio.create_task(open_floor(client, 0, 3, queue))
    await until(running, lambda s: s == [WorkflowExecutionStatus.RUNNING] * 3)
    assert not opening.done()
    # A cache of two: the level's workflows are evicted as an open gather level's are.
    async with Worker(
        client, task_queue=queue, workflows=[TrivialLocalWorkflow], activities=[nothing],
        activity_executor=ThreadPoolExecutor(1), max_cached_workflows=2,
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):  # fmt: skip
        await asyncio.wait_for(opening, 60)
        # The next level adds to the first (a workflow started twice would be refused).
        await open_floor(client, 3, 5, queue)
        for handle in handles:
            assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
            events = [e.event_type async for e in handle.fetch_history_events()]
            assert EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED in events
            # Waiting for its signal: no activity ran, nothing closed it.
            assert EventType.EVENT_TYPE_MARKER_RECORDED not in events


async def test_a_floor_workflows_span_splits_into_the_stages_a_gathers_is_set_against(
    temporal_env,
):
    client = temporal_env.client
    queue = f"floor-stages-{uuid.uuid4()}"
    async with Worker(
        client, task_queue=queue, workflows=[TrivialLocalWorkflow], activities=[nothing],
        activity_executor=ThreadPoolExecutor(1), workflow_runner=UnsandboxedWorkflowRunner(),
    ):  # fmt: skip
        handle = await _start_trivial(client, "TrivialLocal", f"stages-{queue}", queue)
        await handle.result()
    stages = await floor_stages(handle)
    assert list(stages) == list(FLOOR_STAGES)
    assert all(ms >= 0 for ms in stages.values())
    # Together they are the span from the signal at the server to the marker's task.
    at = {e.event_type: e.event_time.ToNanoseconds() async for e in handle.fetch_history_events()}
    signalled = at[EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]
    span = (at[EventType.EVENT_TYPE_MARKER_RECORDED] - signalled) / 1e6
    assert abs(sum(stages.values()) - span) < 0.01


def test_a_gathers_stages_are_cut_as_the_floors_are():
    # The breakdown's last two stages (merge and PUT, the commit) are one of the floor's.
    gather = {name: [float(i + 1), 10.0 * (i + 1)] for i, name in enumerate(STAGES)}
    floor = {name: [1.0, 2.0] for name in FLOOR_STAGES}
    level = Level(0, 1, 1, {}, [], [], gather, 0, floor, 0, {}, {})
    cut = level.gather_stages()
    assert list(cut) == list(FLOOR_STAGES)
    assert cut == {
        "workflow task pickup": [3.0, 30.0],
        "workflow code": [4.0, 40.0],
        "activity + commit": [11.0, 110.0],
    }
    assert level.in_temporal() == [18.0, 180.0]
    assert level.floor_ms == [3.0, 6.0]


def test_a_measure_reports_its_full_collections_and_the_longest() -> None:
    assert _collections([]) == "0"
    assert _collections([39.2, 176.4, 88.0]) == "3, 176 ms"


def test_a_process_threads_time_on_a_core_is_read_per_thread() -> None:
    def spin() -> None:
        end = time.thread_time() + 0.05
        while time.thread_time() < end:
            pass

    before = threads_scheduled(os.getpid())
    spin()
    after = threads_scheduled(os.getpid())
    main = str(threading.get_native_id())
    assert after[main][0] - before[main][0] >= 40  # ms on a core, this thread's spin
    assert all(run >= 0 and waited >= 0 for run, waited in after.values())


def test_waits_are_per_ms_run_over_the_threads_alive_at_both_readings_or_started_between() -> None:
    before = [{"1": (100.0, 50.0), "2": (10.0, 10.0)}, {"9": (0.0, 0.0)}]
    after = [
        # Thread 2 ended between the readings; thread 3 started: it counts from its start.
        {"1": (140.0, 70.0), "3": (20.0, 30.0)},
        {"9": (40.0, 20.0)},
    ]
    assert waits_per_run(before, after) == (20 + 30 + 20) / (40 + 20 + 40)
    # Nothing ran (or no schedstat): not measured, so the table shows a dash, not 0.00.
    assert waits_per_run([{}], [{}]) is None
    assert waits_per_run([{"1": (5.0, 5.0)}], [{"1": (5.0, 9.0)}]) is None


async def test_a_group_that_did_not_run_between_the_readings_is_left_out_not_shown_as_zero() -> (
    None
):
    asleep = subprocess.Popen(["sleep", "30"])
    try:
        stat = Path(f"/proc/{asleep.pid}/stat")

        async def state() -> str:
            return stat.read_text().rsplit(")", 1)[1].split()[0]

        await until(state, lambda s: s == "S", timeout=10)  # asleep, done starting
        waiting = CoreWaits({"busy": [os.getpid()], "idle": [asleep.pid]})
        end = time.thread_time() + 0.02
        while time.thread_time() < end:
            pass
        waits = waiting.stop()
    finally:
        asleep.kill()
        asleep.wait()
    assert set(waits) == {"busy"}
    assert waits["busy"] >= 0


def test_the_floor_table_shows_each_wait_and_a_dash_where_none_was_measured() -> None:
    level = Level(0, 1.0, 1.0, {}, [], [], {}, 1.0, {}, 1.0, {}, {},
                  waits={"server (c)": 0.72, "server (d)": 0.6, "workers (c)": 1.8,
                         "floor (d)": 1.7, "bridges (c)": 1.234})  # fmt: skip
    older = Level(0, 1.0, 1.0, {}, [], [], {}, 1.0, {}, 1.0, {}, {})
    rows = _wait_rows([level, older])
    assert rows["queued per ms run, server (c)"] == ["0.72", "-"]
    assert rows["queued per ms run, floor (d)"] == ["1.70", "-"]
    assert rows["queued per ms run, bridge (c)"] == ["1.23", "-"]


def test_the_workers_cpu_at_full_speed_is_set_beside_the_floors_at_full_speed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gather = {name: [1.0, 2.0] for name in STAGES}
    floor = {name: [1.0, 2.0] for name in FLOOR_STAGES}
    level = Level(0, 50.0, 60.0, {"workers": 6.0, "bridges": 1.0, "server": 12.0}, [], [], gather,
                  4.0, floor, 6.5, {"floor": 55.0, "visible": 52.0},
                  {"ceiling": 10.0, "floor": 11.0, "visible": 12.0},
                  floor_full_cpu={"floor": 4.0, "visible": 5.0})  # fmt: skip
    out = tmp_path / "figures.jsonl"
    monkeypatch.setenv(ENV_RECORD, str(out))
    record_level(level, 1000)
    full = [f for f in read(out) if f.name.startswith("worker CPU ms per gather at full speed")]
    assert [(f.value, f.floor, f.floor_name) for f in full] == [
        (6.0, 4.0, "floor's worker at full speed (e)"),
        (6.0, 5.0, "visible floor's worker at full speed (e)"),
    ]
    assert full[0].ratio == 1.5
