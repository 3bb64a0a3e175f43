"""Gather throughput: the whole pipeline against the bare Temporal ceiling, with open
gathers in the background.

In one run against one dev server (SQLite file, WAL), with workers and bridges as their
own processes, at each level of open gathers (each holding 1 of its 3 legs; as many of
the floor's workflows wait on the floor's worker, which keeps as many in its cache as
the gathers' worker keeps gathers, so that at a level both workers hold and evict alike):

(a) end-to-end gathers/s: 3 legs of 1 KB per gather put on GATHER.IN, bridges, workers,
    merge and PUT, until every response is on ORDER.RESPONSE; CPU ms per gather of each
    process, and the workers' RSS;
(b) the ceiling at the same open count: trivial workflows created by signal-with-start,
    no MQ at all;
(c) latency from the last reply's PUT to the response's PUT at half the ceiling rate,
    and where it goes: bridge wake-up and get, the signal reaching the server, workflow
    task pickup, workflow code, the local activity's merge and PUT, then (after the
    response is on its queue) the commit and the task's completion;
(d) the floor at the same rate: workflows of the gather's shape without MQ and without
    mqgather's code (signal-with-start, one local activity that does nothing, done), their
    worker's CPU per workflow and their time from the signal at the server to the task's
    completion, the same span as stages 3 to 6 of the gather; for (c) and (d), the full
    garbage collections that stopped each worker meanwhile, and the longest (the workers
    run under ``bench.gcwatch``), and how long each process waited for a core per ms it
    ran on one (the kernel's schedstat): the two measures share two cores with the
    server, and what mqgather's processes add lengthens every process's waits;
(e) the floor's shape as fast as the server takes it, then again with the gather's
    visibility (its search attributes, summary and details at start, the upsert of its
    close): with the ceiling, what the platform alone can do for a gather the operators
    can see, and the server's CPU per workflow for each.

With ``--encrypt`` the whole run is made twice, on fresh servers: payloads plain, then
sealed by the codec (a key ring of one key), and a last table sets the two side by side.

    python -m bench.gather_throughput [--gathers N] [--open 0,1000,10000,50000]
        [--workers N] [--bridges M] [--max-cached-gathers N] [--encrypt]
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter

from bench import gcwatch, worker_parts
from bench.figures import RUN_THROUGH_MAKE, Figure, command_line, exclusive, record
from bench.figures import percentile as _q
from bench.profile import Sampler, table
from bench.trivial import FLOOR_TASK_QUEUE
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage
from mqgather.config import AggregateSpec, parse_config
from mqgather.constants import DEFAULT_MAX_CACHED_GATHERS
from mqgather.names import ENV_KEYS, GATHER_WORKFLOW, LEGS_RECEIVED, SIGNAL_REPLIES
from mqgather.runtime.codec import KeyRing, PayloadCipher, new_key, open_all
from mqgather.runtime.temporal import (
    dev_server_args,
    ensure_search_attributes,
    grpc_compression,
    grpc_compression_name,
    require_temporal_cli,
)
from tests.harness import prepare_queues
from workflows.models import ReplyBatch, gather_id, start_options

CONVERTER = pydantic_data_converter.payload_converter

BODY = b'{"pad":"' + b"x" * 1000 + b'"}'
LEGS = ("CREDIT", "STOCK", "TAX")
CONFIG = """
[aggregates.bench]
mode = "static"
timeout_seconds = 3600
legs = [{name = "CREDIT", sequence = 10}, {name = "STOCK", sequence = 20},
        {name = "TAX", sequence = 30}]
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_times(pid: int) -> tuple[float, float]:
    """CPU seconds ``pid`` has spent in user mode and in the kernel."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _cpu_seconds(pid: int) -> float:
    return sum(cpu_times(pid))


#: A process's threads: per thread id, ms it has run on a core and ms it has waited
#: runnable for one (the kernel's schedstat).
Threads = dict[str, tuple[float, float]]


def threads_scheduled(pid: int) -> Threads:
    """Per thread of ``pid`` alive now, ms on a core and ms waiting for one."""
    found: Threads = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            on, waited, _ = (task / "schedstat").read_text().split()
        except (OSError, ValueError):
            continue  # the thread ended while the others were read
        found[task.name] = (int(on) / 1e6, int(waited) / 1e6)
    return found


def waits_per_run(before: list[Threads], after: list[Threads]) -> float | None:
    """ms the processes' threads waited for a core per ms they ran on one, between two
    readings of each process (:func:`threads_scheduled`). A thread started in between
    counts from its start; one that ended in between is left out. None when no thread
    ran at all between the readings (or the kernel keeps no schedstat): nothing to
    divide, shown as not measured rather than as no wait."""
    run = waited = 0.0
    for was, now in zip(before, after, strict=True):
        for tid, (on, queued) in now.items():
            on0, queued0 = was.get(tid, (0.0, 0.0))
            run += on - on0
            waited += queued - queued0
    return waited / run if run > 0 else None


def wait_key(who: str, measure: str) -> str:
    """The key in :attr:`Level.waits` of ``who``'s waits during ``measure`` ("c": the
    gathers' paced measure, "d": the floor's)."""
    return f"{who} ({measure})"


class CoreWaits:
    """:func:`waits_per_run` of each group of processes, from now until :meth:`stop`."""

    def __init__(self, groups: dict[str, list[int]]) -> None:
        self.groups = groups
        self.before = {who: [threads_scheduled(p) for p in pids] for who, pids in groups.items()}

    def stop(self) -> dict[str, float]:
        """Per group, ms its processes' threads waited for a core per ms on one; a group
        none of whose threads ran is left out (:func:`waits_per_run`)."""
        waits = {
            who: waits_per_run(self.before[who], [threads_scheduled(p) for p in pids])
            for who, pids in self.groups.items()
        }
        return {who: w for who, w in waits.items() if w is not None}


async def settle(pid: int, below: float = 0.15, limit: float = 180) -> None:
    """Wait until the server's CPU stays under ``below`` of a core for 2 s (or ``limit``
    s pass), so that no level is measured while the server still works off the opening
    of its gathers. (Here it has been idle within 2 s; this is a guard.)"""
    began = time.monotonic()
    while time.monotonic() - began < limit:
        before = _cpu_seconds(pid)
        await asyncio.sleep(2)
        if _cpu_seconds(pid) - before < 2 * below:
            break
    print(f"    server settled after {time.monotonic() - began:.0f} s", flush=True)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Bench:
    def __init__(
        self, tmp: Path, server_args: list[str] | None = None, ring: KeyRing | None = None
    ) -> None:
        self.ring = ring
        self.tmp = tmp
        self.port = _port()
        self.address = f"localhost:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []
        binary = require_temporal_cli(RUN_THROUGH_MAKE)
        server = dev_server_args(str(tmp / "t.db"), self.port, _port())
        self.spawn([binary, *server, "--headless", *(server_args or [])])
        self.qm_path = tmp / "qm.db"
        prepare_queues(self.qm_path, bothresh=0)
        (tmp / "bench.toml").write_text(CONFIG)
        self.env = dict(
            os.environ,
            TEMPORAL_ADDRESS=self.address,
            MQGATHER_MQ=f"local:{self.qm_path}",
            MQGATHER_CONFIG=str(tmp / "bench.toml"),
        )
        if ring is not None:
            self.env[ENV_KEYS] = ring.to_file_model().model_dump_json()

    def spawn(self, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    async def client(self) -> Client:
        for _ in range(300):
            try:
                # The ceiling and floor are the platform alone: their payloads stay plain,
                # sent as mqgather's clients send theirs (compressed or not).
                return await Client.connect(
                    self.address,
                    data_converter=pydantic_data_converter,
                    grpc_compression=grpc_compression(),
                )
            except RuntimeError:
                await asyncio.sleep(0.2)
        raise RuntimeError("the dev server did not start")

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


def trivial_worker(
    address: str, sandbox: bool = False, cached: int = DEFAULT_MAX_CACHED_GATHERS
) -> list[str]:
    """The module and arguments of the floor's worker (``bench.trivial``), its client
    compressing gRPC as mqgather's clients do, and keeping ``cached`` workflows between
    tasks as the gathers' worker keeps gathers."""
    return ["bench.trivial", "--address", address, "--task-queue", FLOOR_TASK_QUEUE,
            "--grpc-compression", grpc_compression_name(), "--max-cached", str(cached),
            *(["--sandbox"] if sandbox else [])]  # fmt: skip


async def _start_trivial(
    client: Client,
    workflow: str,
    workflow_id: str,
    task_queue: str = FLOOR_TASK_QUEUE,
    **options: Any,
) -> WorkflowHandle:
    """Start one of ``bench.trivial``'s workflows by signal-with-start."""
    return await client.start_workflow(
        workflow,
        id=workflow_id,
        task_queue=task_queue,
        start_signal="go",
        start_signal_args=["x"],
        **options,
    )


async def paced(n: int, rate: float) -> AsyncIterator[int]:
    """0 to ``n`` - 1, each at its time when ``rate`` of them start per second."""
    start = time.monotonic()
    for i in range(n):
        await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
        yield i


async def as_fast(n: int, start: Callable[[int], Awaitable[WorkflowHandle]]) -> float:
    """Workflows/s when ``n`` of them, each started by ``start(i)``, run as fast as the
    server takes them."""
    gate = asyncio.Semaphore(64)

    async def one(i: int) -> None:
        # The wait for the result is inside the gate: the server limits the long polls
        # open at once per namespace.
        async with gate:
            await (await start(i)).result()

    await one(-1)  # warm up the worker
    began = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return n / (time.perf_counter() - began)


async def ceiling(client: Client, n: int) -> float:
    """(b): trivial workflows by signal-with-start, as fast as the server takes them."""
    run = f"{time.time_ns()}"
    return await as_fast(n, lambda i: _start_trivial(client, "Trivial", f"trivial-{run}-{i}"))


async def full_speed(client: Client, spec: AggregateSpec | None, n: int) -> float:
    """(e): the floor's shape as fast as the server takes it; with ``spec``, with the
    visibility of that aggregate's gathers (their search attributes, summary and details
    at start, their upsert at the close)."""
    run = f"{time.time_ns()}"

    def start(i: int) -> Awaitable[WorkflowHandle]:
        if spec is None:
            return _start_trivial(client, "TrivialLocal", f"full-floor-{run}-{i}")
        correl = f"VIS-{run}-{i}".encode().ljust(24, b"\0")
        return _start_trivial(
            client, "TrivialVisible", f"visible-{run}-{i}", **start_options(spec, correl)
        )

    return await as_fast(n, start)


def _at(event: HistoryEvent) -> float:
    """When the server recorded ``event``, epoch seconds."""
    return event.event_time.ToDatetime(UTC).timestamp()


#: The floor's span from the signal at the server to its task's completion, in the stages
#: the gather's breakdown also has (its last two, the merge and PUT and the commit, as one:
#: the floor's activity leaves no mark of its end).
FLOOR_STAGES = ("workflow task pickup", "workflow code", "activity + commit")


def _activity_marks(event: HistoryEvent) -> tuple[float, float] | None:
    """For a local activity's marker: when the activity was scheduled, and when the task
    that ran it completed (the marker's own time); None for another marker."""
    details = event.marker_recorded_event_attributes.details
    if "data" not in details:
        return None
    data = CONVERTER.from_payloads(details["data"].payloads)[0]
    return _seconds(data["original_schedule_time"]), _at(event)


async def floor_stages(handle: WorkflowHandle) -> dict[str, float]:
    """ms per stage of one floor workflow, read from its history."""
    signal_at = started = scheduled = marker = None
    for e in (await handle.fetch_history()).events:
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            signal_at = _at(e)
        elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED and started is None:
            started = _at(e)
        elif e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            scheduled, marker = _activity_marks(e) or (scheduled, marker)
    marks = (signal_at, started, scheduled, marker)
    if None in marks:
        raise RuntimeError(f"floor workflow {handle.id}: its history lacks a stage's event")
    return {
        name: (b - a) * 1000  # type: ignore[operator]
        for name, (a, b) in zip(FLOOR_STAGES, itertools.pairwise(marks), strict=True)
    }


async def floor(
    client: Client,
    pid: int,
    n: int,
    rate: float,
    keep: int = 0,
    watch: dict[str, list[int]] | None = None,
) -> tuple[float, dict[str, list[float]], list[WorkflowHistory], dict[str, float]]:
    """Start ``n`` TrivialLocal workflows at ``rate``/s: their worker's CPU ms per workflow,
    per stage the ms of each from the signal at the server to the task's completion
    (:data:`FLOOR_STAGES`), the histories of the first ``keep``, and the :class:`CoreWaits`
    of the ``watch`` processes while the workflows ran."""
    run = f"{time.time_ns()}"

    async def one(i: int) -> WorkflowHandle:
        handle = await _start_trivial(client, "TrivialLocal", f"floor-{run}-{i}")
        await handle.result()
        return handle

    before = _cpu_seconds(pid)
    waiting = CoreWaits(watch or {})
    runs = [asyncio.create_task(one(i)) async for i in paced(n, rate)]
    handles = await asyncio.gather(*runs)
    waits = waiting.stop()
    cpu_ms = 1000 * (_cpu_seconds(pid) - before) / n
    # Read once every run is done, as the gathers' are: reading would slow the server.
    spans = [await floor_stages(handle) for handle in handles]
    stages = {name: [span[name] for span in spans] for name in FLOOR_STAGES}
    return cpu_ms, stages, [await h.fetch_history() for h in handles[:keep]], waits


def put_gathers(
    qm: LocalQueueManager, prefix: str, n: int, legs: tuple[str, ...], queue: str = "GATHER.IN"
) -> None:
    for i in range(n):
        for leg in legs:
            qm.put(queue, MQMessage(correl_id=f"{prefix}{i}".encode(),
                                          properties={"leg": leg}, body=BODY))  # fmt: skip
        if i % 30 == 29:
            qm.commit()
    qm.commit()


async def wait_depth(qm: LocalQueueManager, queue: str, depth: int, limit: float = 900) -> None:
    deadline = time.monotonic() + limit
    while qm.inquire(queue).curdepth < depth:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{queue} stayed below {depth}")
        await asyncio.sleep(0.05)


async def pipeline(bench: Bench, qm: LocalQueueManager, prefix: str, n: int) -> float:
    base = qm.inquire("ORDER.RESPONSE").curdepth
    start = time.perf_counter()
    put_gathers(qm, prefix, n, LEGS)
    await wait_depth(qm, "ORDER.RESPONSE", base + n)
    return n / (time.perf_counter() - start)


async def latency(qm: LocalQueueManager, prefix: str, n: int, rate: float) -> dict[bytes, float]:
    """Put ``n`` gathers' 3 replies at ``rate`` gathers/s; the PUT time (epoch s) of each
    gather's last reply, by CorrelId, once every response is there."""
    last_put: dict[bytes, float] = {}
    base = qm.inquire("ORDER.RESPONSE").curdepth
    async for i in paced(n, rate):
        # A gather's replies in one unit of work, as in (a): one signal, one workflow task,
        # the floor's shape, so that the worker's CPU here compares with the floor's.
        for leg in LEGS:
            reply = MQMessage(correl_id=f"{prefix}{i}".encode(), properties={"leg": leg}, body=BODY)
            done = qm.put("GATHER.IN", reply)
        qm.commit()
        assert done.put_date_time is not None
        last_put[done.correl_id] = done.put_date_time.timestamp()
    await wait_depth(qm, "ORDER.RESPONSE", base + n)
    return last_put


#: Gathers of each measure whose histories are read for their shape.
SHAPE_SAMPLE = 50


async def shapes(
    client: Client, prefix: str, n: int
) -> tuple[dict[str, float], list[WorkflowHistory]]:
    """Per gather of a measure (a sample), the mean count of its signals, workflow
    tasks and history events (more tasks than the floor's one means more work), and the
    sample's histories."""
    counts: dict[str, list[int]] = {"signals": [], "workflow tasks": [], "events": []}
    histories: list[WorkflowHistory] = []
    for i in range(0, n, max(1, n // SHAPE_SAMPLE)):
        correl = f"{prefix}{i}".encode().ljust(24, b"\0")  # as MQ pads a CorrelId
        handle = client.get_workflow_handle(gather_id("bench", correl))
        histories.append(await handle.fetch_history())
        events = histories[-1].events
        kinds = [e.event_type for e in events]
        counts["signals"].append(kinds.count(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED))
        counts["workflow tasks"].append(kinds.count(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED))
        counts["events"].append(len(events))
    return {k: round(statistics.fmean(v), 2) for k, v in counts.items()}, histories


def save_histories(directory: Path, histories: list[WorkflowHistory]) -> None:
    """Write ``histories`` as JSON files into ``directory``, as ``bench.worker_parts``
    reads them."""
    directory.mkdir(parents=True, exist_ok=True)
    for i, history in enumerate(histories):
        (directory / f"{i:04d}.json").write_text(history.to_json())


#: The stages of last reply -> response, in order, as the breakdown names them.
STAGES = (
    "bridge wake-up + get",
    "bridge -> signal at server",
    "workflow task pickup",
    "workflow code",
    "merge + PUT (local activity)",
    "commit, task completes",
)


def _seconds(stamp: dict) -> float:
    return float(stamp["seconds"]) + float(stamp.get("nanos", 0)) / 1e9


async def breakdown(
    client: Client, qm: LocalQueueManager, last_put: dict[bytes, float], cipher: PayloadCipher
) -> tuple[list[float], dict[str, list[float]]]:
    """ms from the last reply's PUT to the response's PUT per gather, and per stage: read
    from each gather's history, its replies' receipt times and the PUT's marker."""
    responses = {
        m.correl_id: m.put_date_time.timestamp()
        for m in qm.browse("ORDER.RESPONSE")
        if m.correl_id in last_put and m.put_date_time is not None
    }
    totals: list[float] = []
    stages: dict[str, list[float]] = {name: [] for name in STAGES}
    for correl, put in last_put.items():
        if correl not in responses:
            continue
        totals.append((responses[correl] - put) * 1000)
        events = (
            await client.get_workflow_handle(gather_id("bench", correl)).fetch_history()
        ).events
        signal_at = received = started = scheduled = completed = None
        for e in events:
            open_all(e, cipher)
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
                attrs = e.workflow_execution_signaled_event_attributes
                if attrs.signal_name == SIGNAL_REPLIES:
                    batch = CONVERTER.from_payloads(attrs.input.payloads, [ReplyBatch])[0]
                    received = max(r.received_at.timestamp() for r in batch.replies)
                    signal_at, started = _at(e), None
            elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED and started is None:
                started = _at(e)
            elif e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
                # The marker is written when the task that ran the PUT completes.
                scheduled, completed = _activity_marks(e) or (scheduled, completed)
        if None in (signal_at, received, started, scheduled, completed):
            continue
        marks = (put, received, signal_at, started, scheduled, responses[correl], completed)
        for name, (a, b) in zip(STAGES, itertools.pairwise(marks), strict=True):
            stages[name].append((b - a) * 1000)  # type: ignore[operator]
    return totals, stages


#: Gathers put ahead of those the server shows open. Putting them all at once let the
#: bridge start them faster than the dev server completes their first tasks: above about
#: 10,000 the tasks piled up in its store and opening all but stopped.
OPEN_WINDOW = 500


async def open_to(client: Client, qm: LocalQueueManager, opened: int, level: int) -> None:
    """Open gathers until ``level`` hold one leg each (the first ``opened`` are open)."""
    query = (
        f'WorkflowType = "{GATHER_WORKFLOW}" AND ExecutionStatus = "Running" '
        f"AND {LEGS_RECEIVED.name} = 1"
    )
    deadline = time.monotonic() + 3 * 3600
    shown = began = time.monotonic()
    last = count = put = opened
    while count < level:
        for i in range(put, min(level, count + OPEN_WINDOW)):
            qm.put("GATHER.IN", MQMessage(correl_id=f"OPEN-{i}".encode(),
                                          properties={"leg": "CREDIT"}, body=BODY))  # fmt: skip
            put = i + 1
            if put % 100 == 0:
                qm.commit()
        qm.commit()
        await asyncio.sleep(1)
        count = (await client.count_workflows(query)).count
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {count} of {level} gathers opened")
        if time.monotonic() - shown > 30:
            rate = (count - last) / (time.monotonic() - shown)
            print(f"    {count:,} of {level:,} open, {rate:.0f} opened/s …", flush=True)
            shown, last = time.monotonic(), count
    print(f"    {level:,} open after {time.monotonic() - began:.0f} s", flush=True)


#: The floor's own open workflows: ``TrivialLocal`` started without its signal.
FLOOR_OPEN_PREFIX = "floor-open-"


async def _first_task_done(handle: WorkflowHandle) -> bool:
    """Whether the workflow's first task has been completed by its worker."""
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            return True
    return False


async def open_floor(
    client: Client, opened: int, level: int, task_queue: str = FLOOR_TASK_QUEUE
) -> None:
    """Open floor workflows until ``level`` wait on the floor's worker (the first
    ``opened`` wait already), each past its first task as an open gather is. At a level
    the floor's worker then holds as many workflows as the gathers' worker holds gathers,
    and evicts as many from a cache of the same size; without them it would be measured
    with nothing open at every level."""
    gate = asyncio.Semaphore(64)

    async def one(i: int) -> None:
        async with gate:
            handle = await client.start_workflow(
                "TrivialLocal", id=f"{FLOOR_OPEN_PREFIX}{task_queue}-{i}", task_queue=task_queue
            )
        while True:
            async with gate:
                if await _first_task_done(handle):
                    return
            await asyncio.sleep(0.2)

    began = shown = time.monotonic()
    for first in range(opened, level, OPEN_WINDOW):
        await asyncio.wait_for(
            asyncio.gather(*(one(i) for i in range(first, min(level, first + OPEN_WINDOW)))),
            timeout=600,
        )
        if time.monotonic() - shown > 30:
            done = min(level, first + OPEN_WINDOW)
            print(f"    {done:,} of {level:,} floor workflows open …", flush=True)
            shown = time.monotonic()
    print(f"    {level:,} floor workflows open after {time.monotonic() - began:.0f} s", flush=True)


@dataclass
class Level:
    """The figures at one number of open gathers."""

    open: int
    e2e: float
    bare: float
    cpu: dict[str, float]
    rss: list[float]
    totals: list[float]
    stages: dict[str, list[float]]
    floor_cpu: float
    #: Per stage of :data:`FLOOR_STAGES`, ms per floor workflow.
    floor_stages: dict[str, list[float]]
    #: Worker CPU ms per gather in (c), at the floor's rate and shape.
    paced_cpu: float
    #: (e): workflows/s of the floor's shape at full speed, without ("floor") and with
    #: ("visible") the gather's visibility.
    speeds: dict[str, float]
    #: The server's CPU ms per workflow in (b) ("ceiling") and (e) ("floor", "visible").
    server: dict[str, float]
    #: The pauses (ms) of the full garbage collections of the gathers' workers during
    #: (c) ("gather") and of the floor's worker during (d) ("floor").
    full_collections: dict[str, list[float]] = field(default_factory=dict)
    #: ms waiting for a core per ms on one (:func:`waits_per_run`): during (c) the
    #: server's, the workers' and the bridges' ("server (c)"...), during (d) the server's
    #: and the floor's worker's ("server (d)", "floor (d)").
    waits: dict[str, float] = field(default_factory=dict)
    #: (e): the floor's worker's CPU ms per workflow at full speed, as ``speeds``.
    floor_full_cpu: dict[str, float] = field(default_factory=lambda: {"floor": 0.0, "visible": 0.0})

    def in_temporal(self) -> list[float]:
        """Per gather, ms from the signal at the server to the task's completion."""
        spans = [self.stages[name] for name in STAGES[2:]]
        return [sum(parts) for parts in zip(*spans, strict=True)]

    @property
    def floor_ms(self) -> list[float]:
        """Per floor workflow, ms from the signal at the server to the task's completion."""
        spans = [self.floor_stages[name] for name in FLOOR_STAGES]
        return [sum(parts) for parts in zip(*spans, strict=True)]

    def gather_stages(self) -> dict[str, list[float]]:
        """The gather's stages from the signal at the server on, as the floor's are cut."""
        merged = zip(self.stages[STAGES[4]], self.stages[STAGES[5]], strict=True)
        return {
            FLOOR_STAGES[0]: self.stages[STAGES[2]],
            FLOOR_STAGES[1]: self.stages[STAGES[3]],
            FLOOR_STAGES[2]: [a + b for a, b in merged],
        }


async def main(
    n: int,
    levels: list[int],
    workers: int,
    bridges: int,
    cache: int,
    sandbox: bool,
    server_args: list[str] | None = None,
    ring: KeyRing | None = None,
    profile: Path | None = None,
    repeat: int = 1,
    histories: Path | None = None,
) -> list[Level]:
    results: list[Level] = []
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp), server_args, ring)
        try:
            client = await bench.client()
            spec = parse_config(tomllib.loads(CONFIG), "bench").aggregates["bench"]
            await ensure_search_attributes(client)
            me = [sys.executable, "-m", "mqgather.cli"]
            server_pid = bench.procs[0].pid
            roles: dict[str, list[int]] = {"server": [server_pid], "workers": [], "bridges": []}
            # The workers run under bench.gcwatch: each measure reports the full garbage
            # collections that stopped them while it ran.
            logs = Path(tmp) / "gc"
            logs.mkdir()
            worker_logs = [logs / f"worker-{i}.log" for i in range(workers)]
            floor_log = logs / "floor.log"
            for log in worker_logs:
                args = [sys.executable, "-m", "bench.gcwatch", str(log), "mqgather.cli", "worker",
                        "--max-cached-gathers", str(cache),
                        "--sandbox" if sandbox else "--no-sandbox"]  # fmt: skip
                roles["workers"].append(bench.spawn(args, bench.env).pid)
            for _ in range(bridges):
                roles["bridges"].append(bench.spawn([*me, "bridge"], bench.env).pid)
            watched = [sys.executable, "-m", "bench.gcwatch", str(floor_log)]
            trivial = bench.spawn([*watched, *trivial_worker(bench.address, sandbox, cache)]).pid
            qm = LocalQueueManager(bench.qm_path)
            print(f"{workers} worker(s), {bridges} bridge(s), cache {cache} gathers, "
                  f"sandbox {'on' if sandbox else 'off'}, payloads "
                  f"{'sealed' if ring else 'plain'}; warming up …", flush=True)  # fmt: skip
            await pipeline(bench, qm, "WARM-", 20)
            await ceiling(client, 20)
            await full_speed(client, None, 20)
            await full_speed(client, spec, 20)
            opened = 0
            for level in sorted(levels):
                if level > opened:
                    print(f"opening gathers up to {level:,} …", flush=True)
                    await open_to(client, qm, opened, level)
                    print(f"opening floor workflows up to {level:,} …", flush=True)
                    await open_floor(client, opened, level)
                    await settle(roles["server"][0])
                    opened = level
                for run in range(repeat):
                    print(f"[{level:,} open] (b) ceiling: {n} trivial workflows …", flush=True)
                    was = _cpu_seconds(server_pid)
                    bare = await ceiling(client, n)
                    server = {"ceiling": 1000 * (_cpu_seconds(server_pid) - was) / n}
                    print(f"[{level:,} open] (a) pipeline: {n} gathers …", flush=True)
                    pids = [pid for group in roles.values() for pid in group]
                    samplers = {
                        (role, pid): Sampler(pid, profile / f"{role}-{pid}-{level}-{run}.txt")
                        for role in ("workers", "bridges")
                        for pid in roles[role]
                        if profile
                    }
                    before = {pid: _cpu_seconds(pid) for pid in pids}
                    e2e = await pipeline(bench, qm, f"E2E-{level}-{run}-", n)
                    cpu = {
                        role: sum(_cpu_seconds(pid) - before[pid] for pid in group)
                        for role, group in roles.items()
                    }
                    for (role, pid), sampler in samplers.items():
                        per_gather = 1000 * cpu[role] / n / len(roles[role])
                        print(f"[{level:,} open] where {role[:-1]} {pid}'s CPU went "
                              f"({per_gather:.2f} ms per gather):\n"
                              + table(sampler.stop(), per_gather, 1000 / sampler.rate / n),
                              flush=True)  # fmt: skip
                    shape, sample = await shapes(client, f"E2E-{level}-{run}-", n)
                    print(f"[{level:,} open] per gather (mean of {SHAPE_SAMPLE}): " + ", ".join(
                        f"{v:g} {k}" for k, v in shape.items()), flush=True)  # fmt: skip
                    print(f"[{level:,} open] (c) latency at {bare / 2:.0f} gathers/s …", flush=True)
                    workers_before = sum(_cpu_seconds(pid) for pid in roles["workers"])
                    paced_n = min(n, 300)
                    paced_from = time.time()
                    # How long the processes wait for a core while the gathers are paced:
                    # the two cores are shared by the server, mqgather's processes and
                    # this bench.
                    waiting = CoreWaits(roles)
                    last_put = await latency(qm, f"LAT-{level}-{run}-", paced_n, bare / 2)
                    waits = {wait_key(who, "c"): w for who, w in waiting.stop().items()}
                    paced_to = time.time()
                    totals, stages = await breakdown(client, qm, last_put, PayloadCipher(ring))
                    paced_cpu = (
                        1000
                        * (sum(_cpu_seconds(pid) for pid in roles["workers"]) - workers_before)
                        / paced_n
                    )
                    print(f"[{level:,} open] (d) floor at {bare / 2:.0f} workflows/s …", flush=True)
                    floor_sampler = (
                        Sampler(trivial, profile / f"floor-{level}-{run}.txt") if profile else None
                    )
                    floor_n = min(n, 300)
                    # The worker's parts are measured once per level, with plain payloads.
                    parts_due = run == 0 and not ring
                    floor_from = time.time()
                    floor_cpu, floor_spans, floor_sample, floor_waits = await floor(
                        client,
                        trivial,
                        floor_n,
                        bare / 2,
                        SHAPE_SAMPLE if parts_due else 0,
                        watch={"server": [server_pid], "floor": [trivial]},
                    )
                    waits.update({wait_key(who, "d"): w for who, w in floor_waits.items()})
                    full_collections = {
                        "gather": [p for log in worker_logs
                                   for p in gcwatch.pauses(log, paced_from, paced_to)],
                        "floor": gcwatch.pauses(floor_log, floor_from, time.time()),
                    }  # fmt: skip
                    if floor_sampler:
                        print(f"[{level:,} open] where the floor's worker CPU went "
                              f"({floor_cpu:.2f} ms per workflow):\n"
                              + table(floor_sampler.stop(), floor_cpu,
                                      1000 / floor_sampler.rate / floor_n),
                              flush=True)  # fmt: skip
                    if parts_due and histories:
                        save_histories(histories / f"gathers-{level}", sample)
                        save_histories(histories / f"floor-{level}", floor_sample)
                    if parts_due:
                        # In this process while the others idle: the worker's two parts,
                        # each against the floor's, free of the pipeline's contention.
                        parts = await worker_parts.measure(sample, floor_sample)
                        for line in parts.lines():
                            print(f"[{level:,} open] {line}", flush=True)
                        record_parts(parts, level)
                    speeds: dict[str, float] = {}
                    floor_full: dict[str, float] = {}
                    for kind, of in (("floor", None), ("visible", spec)):
                        print(f"[{level:,} open] (e) {kind} at full speed: {n} workflows …",
                              flush=True)  # fmt: skip
                        was, was_floor = _cpu_seconds(server_pid), _cpu_seconds(trivial)
                        speeds[kind] = await full_speed(client, of, n)
                        server[kind] = 1000 * (_cpu_seconds(server_pid) - was) / n
                        floor_full[kind] = 1000 * (_cpu_seconds(trivial) - was_floor) / n
                    rss = [_rss_mb(pid) for pid in roles["workers"]]
                    results.append(
                        Level(
                            level,
                            e2e,
                            bare,
                            cpu,
                            rss,
                            totals,
                            stages,
                            floor_cpu,
                            floor_spans,
                            paced_cpu,
                            speeds,
                            server,
                            full_collections,
                            waits,
                            floor_full,
                        )
                    )
                    print(f"[{level:,} open] " + row(results[-1], results[0].e2e, n), flush=True)
                    record_level(results[-1], n)
            qm.close()
        finally:
            bench.close()
    report(results, n, f"{workers} worker(s) x {bridges} bridge(s), --max-cached-gathers "
           f"{cache}, sandbox {'on' if sandbox else 'off'}, payloads "
           f"{'sealed' if ring else 'plain'}, {n} gathers per measure")  # fmt: skip
    return results


#: The issue's targets, each a ratio to what the platform alone does in the same run.
TARGET_CPU = 1.2
TARGET_P99 = 1.1
TARGET_E2E = 0.9
#: The bridge has no floor of its own: ms of CPU per gather.
TARGET_BRIDGE_MS = 1.5


def record_level(r: Level, n: int) -> None:
    """One measure's headline figures, each beside its floor, for `make bench`'s table."""
    at = f"{r.open:,} open"
    record(Figure("gather", f"worker CPU ms per gather at the floor's rate, {at}", r.paced_cpu,
                  "ms", r.floor_cpu, "floor's worker", target=TARGET_CPU))  # fmt: skip
    for kind, floor_name in (("floor", "floor's worker at full speed (e)"),
                             ("visible", "visible floor's worker at full speed (e)")):  # fmt: skip
        record(Figure("gather", f"worker CPU ms per gather at full speed (a), {at}",
                      1000 * r.cpu["workers"] / n, "ms", r.floor_full_cpu[kind],
                      floor_name))  # fmt: skip
    record(Figure("gather", f"signal -> done p99 ms, {at}", _q(r.in_temporal(), 99), "ms",
                  _q(r.floor_ms, 99), "floor", target=TARGET_P99))  # fmt: skip
    record(Figure("gather", f"end to end gathers/s, {at}", r.e2e, "/s", r.bare, "ceiling",
                  better="higher", target=TARGET_E2E))  # fmt: skip
    # Where the p99's gap to the floor's sits: each stage's p50 beside the floor's.
    gather = r.gather_stages()
    for name in FLOOR_STAGES:
        record(Figure("gather", f"{name} p50 ms, {at}", _q(gather[name], 50), "ms",
                      _q(r.floor_stages[name], 50), "floor's"))  # fmt: skip
    # How crowded the two cores were: each process's wait for a core, gathers' measure
    # beside the floor's.
    for who, in_gathers, in_floor in (
        ("server", "server", "server"),
        ("worker", "workers", "floor"),
    ):
        paced, floor_ = wait_key(in_gathers, "c"), wait_key(in_floor, "d")
        if paced in r.waits and floor_ in r.waits:
            record(Figure("gather", f"{who}'s ms waiting for a core per ms run, {at}",
                          r.waits[paced], "ms/ms", r.waits[floor_], "floor's measure"))  # fmt: skip
    record(Figure("gather", f"bridge CPU ms per gather, {at}", 1000 * r.cpu["bridges"] / n,
                  "ms", target=TARGET_BRIDGE_MS))  # fmt: skip
    # Where end to end's gap to the ceiling goes: the floor's local activity, the server's
    # price of the operators' view, then what mqgather's processes add to the two.
    record(Figure("gather", f"floor workflows/s at full speed, {at}", r.speeds["floor"], "/s",
                  r.bare, "ceiling", better="higher"))  # fmt: skip
    record(Figure("gather", f"visible floor workflows/s, {at}", r.speeds["visible"], "/s",
                  r.speeds["floor"], "floor at full speed", better="higher"))  # fmt: skip
    record(Figure("gather", f"end to end gathers/s, {at}", r.e2e, "/s", r.speeds["visible"],
                  "visible floor", better="higher"))  # fmt: skip
    record(Figure("gather", f"server CPU ms per visible floor workflow, {at}",
                  r.server["visible"], "ms", r.server["ceiling"], "ceiling's"))  # fmt: skip
    record(Figure("gather", f"server CPU ms per gather (a), {at}", 1000 * r.cpu["server"] / n,
                  "ms", r.server["visible"], "visible floor's"))  # fmt: skip


def record_parts(parts: worker_parts.Parts, level: int) -> None:
    """The worker's two parts, measured in one process, each beside the floor's."""
    at = f"{level:,} open"
    record(Figure("gather", f"worker's workflow side ms per gather (replayed), {at}",
                  parts.workflow, "ms", parts.workflow_floor, "floor's, replayed"))  # fmt: skip
    record(Figure("gather", f"worker's merge and PUT ms per gather (in-process), {at}",
                  parts.activity, "ms", parts.activity_floor, "floor's activity"))  # fmt: skip


def compare(plain: list[Level], sealed: list[Level], n: int) -> None:
    """Encryption's cost: the same measures with payloads plain and sealed."""
    print()
    print("encryption: payloads plain vs sealed (AES-256-GCM), same run")
    print(f"{'open':>7} {'worker CPU ms':>17} {'bridge CPU ms':>17} {'p50 ms':>13} "
          f"{'p99 ms':>13} {'p99 ratio':>9}")  # fmt: skip
    for a, b in zip(plain, sealed, strict=True):
        worker = f"{1000 * a.cpu['workers'] / n:.1f} -> {1000 * b.cpu['workers'] / n:.1f}"
        bridge = f"{1000 * a.cpu['bridges'] / n:.1f} -> {1000 * b.cpu['bridges'] / n:.1f}"
        p50 = f"{_q(a.totals, 50):.0f} -> {_q(b.totals, 50):.0f}"
        p99 = f"{_q(a.totals, 99):.0f} -> {_q(b.totals, 99):.0f}"
        ratio = _q(b.totals, 99) / max(_q(a.totals, 99), 1e-9)
        print(f"{a.open:>7,} {worker:>17} {bridge:>17} {p50:>13} {p99:>13} {ratio:>9.2f}")


def row(r: Level, base: float, n: int) -> str:
    """One level's line of the table."""
    cpu = "  ".join(f"{k} {1000 * v / n:.1f}" for k, v in r.cpu.items())
    rss = "+".join(f"{x:.0f}" for x in r.rss)
    return (f"{r.open:>7,} {r.e2e:>7.1f} {r.bare:>7.1f} {r.e2e / r.bare:>6.2f} "
            f"{r.e2e / base:>9.2f} {_q(r.totals, 50):>7.0f} {_q(r.totals, 99):>7.0f} "
            f"{rss:>14}  {cpu}")  # fmt: skip


def report(results: list[Level], n: int, title: str) -> None:
    """The tables: per level, then the stage breakdown per level."""
    print()
    print(title)
    print(f"{'open':>7} {'e2e/s':>7} {'bare/s':>7} {'ratio':>6} {'vs 0 open':>9} "
          f"{'p50 ms':>7} {'p99 ms':>7} {'worker RSS MB':>14}  CPU ms per gather")  # fmt: skip
    for r in results:
        print(row(r, results[0].e2e, n))
    print()
    print("last reply -> response, per stage (ms, p50 / p99):")
    print(f"{'stage':<30}" + "".join(f"{f'{r.open:,} open':>16}" for r in results))
    for name in STAGES:
        cells = "".join(
            f"{f'{_q(r.stages[name], 50):.1f} / {_q(r.stages[name], 99):.1f}':>16}" for r in results
        )
        print(f"{name:<30}{cells}")
    _table(
        results,
        "floor: the gather's shape without MQ and without mqgather's code (signal-with-start,\n"
        "one local activity that does nothing), at the same rate:",
        {
            "worker CPU ms, gather (a)": [f"{1000 * r.cpu['workers'] / n:.1f}" for r in results],
            "worker CPU ms, gather (c)": [f"{r.paced_cpu:.1f}" for r in results],
            "worker CPU ms, floor": [f"{r.floor_cpu:.1f}" for r in results],
            "signal -> done, gather": [
                f"{_q(r.in_temporal(), 50):.0f} / {_q(r.in_temporal(), 99):.0f}" for r in results
            ],
            "signal -> done, floor": [
                f"{_q(r.floor_ms, 50):.0f} / {_q(r.floor_ms, 99):.0f}" for r in results
            ],
            **_stage_rows(results),
            **{
                f"full collections, {who}": [
                    _collections(r.full_collections.get(who, [])) for r in results
                ]
                for who in ("gather", "floor")
            },
            **_wait_rows(results),
        },
    )
    _table(
        results,
        "at full speed, per workflow: the floor, and the visible floor (the floor's shape with\n"
        "the gather's search attributes, summary and details at start, its upsert at close):",
        {
            "workflows/s: ceiling": [f"{r.bare:.1f}" for r in results],
            "workflows/s: floor": [f"{r.speeds['floor']:.1f}" for r in results],
            "workflows/s: visible floor": [f"{r.speeds['visible']:.1f}" for r in results],
            "gathers/s: end to end (a)": [f"{r.e2e:.1f}" for r in results],
            "server CPU ms: ceiling": [f"{r.server['ceiling']:.1f}" for r in results],
            "server CPU ms: floor": [f"{r.server['floor']:.1f}" for r in results],
            "server CPU ms: visible floor": [f"{r.server['visible']:.1f}" for r in results],
            "server CPU ms: gather (a)": [f"{1000 * r.cpu['server'] / n:.1f}" for r in results],
            "worker CPU ms: floor": [f"{r.floor_full_cpu['floor']:.1f}" for r in results],
            "worker CPU ms: visible floor": [f"{r.floor_full_cpu['visible']:.1f}" for r in results],
            "worker CPU ms: gather (a)": [f"{1000 * r.cpu['workers'] / n:.1f}" for r in results],
        },
    )


#: The rows of :func:`_wait_rows`: label, and the key in :attr:`Level.waits`.
_WAIT_ROWS = tuple(
    (f"queued per ms run, {label} ({measure})", wait_key(who, measure))
    for label, who, measure in (("server", "server", "c"), ("server", "server", "d"),
                                ("worker", "workers", "c"), ("floor", "floor", "d"),
                                ("bridge", "bridges", "c"))
)  # fmt: skip


def _wait_rows(results: list[Level]) -> dict[str, list[str]]:
    """ms each process waited for a core per ms it ran on one: in the gathers' measure
    (c) the server, the gathers' workers and the bridges; in the floor's (d) the server
    and the floor's worker."""
    return {
        label: [f"{r.waits[key]:.2f}" if key in r.waits else "-" for r in results]
        for label, key in _WAIT_ROWS
    }


def _collections(pauses: list[float]) -> str:
    """How many full collections stopped a worker during a measure, and the longest."""
    return f"{len(pauses)}, {max(pauses):.0f} ms" if pauses else "0"


def _stage_rows(results: list[Level]) -> dict[str, list[str]]:
    """The floor's stages, p50 / p99 ms, each beside the gather's."""
    rows: dict[str, list[str]] = {}
    for name in FLOOR_STAGES:
        for who, of in (("gather", [r.gather_stages() for r in results]),
                        ("floor", [r.floor_stages for r in results])):  # fmt: skip
            rows[f"{name}, {who}"] = [f"{_q(o[name], 50):.1f} / {_q(o[name], 99):.1f}" for o in of]
    return rows


def _table(results: list[Level], title: str, rows: dict[str, list[str]]) -> None:
    """A titled table with a column per level and a row per figure."""
    print()
    print(title)
    print(f"{'':<30}" + "".join(f"{f'{r.open:,} open':>16}" for r in results))
    for label, values in rows.items():
        print(f"{label:<30}" + "".join(f"{v:>16}" for v in values))


if __name__ == "__main__":
    parser = command_line(__doc__)
    parser.add_argument("--gathers", type=int, default=1000, help="gathers per measure")
    # 50,000 is the target level; the dev server here opens about 40 gathers/s, so opening
    # that many takes some 20 minutes.
    parser.add_argument("--open", default="0,1000,10000",
                        help="levels of open gathers, comma-separated (e.g. "
                             "0,1000,10000,50000)")  # fmt: skip
    parser.add_argument("--workers", type=int, default=1, help="gather worker processes")
    parser.add_argument("--bridges", type=int, default=1, help="bridge processes")
    parser.add_argument("--max-cached-gathers", type=int, default=DEFAULT_MAX_CACHED_GATHERS,
                        help="gathers each worker keeps between tasks")  # fmt: skip
    parser.add_argument("--sandbox", action="store_true", help="workers run the sandbox")
    parser.add_argument("--encrypt", action="store_true",
                        help="run plain, then with payloads sealed, and compare")  # fmt: skip
    parser.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                        help="one more argument of `temporal server start-dev` (repeat it), "
                             "e.g. --server-arg=--dynamic-config-value "
                             "--server-arg=KEY=VALUE")  # fmt: skip
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="sample the workers and bridges with py-spy during (a) and print "
                             "where their CPU went; the raw samples go to DIR")  # fmt: skip
    parser.add_argument("--histories", type=Path, metavar="DIR",
                        help="keep the sampled gather and floor histories as JSON in "
                             "DIR/gathers-<level> and DIR/floor-<level>, to measure the "
                             "worker's parts again (python -m bench.worker_parts)")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="measure each level N times (the table gives each; make bench "
                             "their median and range)")  # fmt: skip
    ns = parser.parse_args()
    if ns.profile:
        ns.profile.mkdir(parents=True, exist_ok=True)
    levels = [int(x) for x in ns.open.split(",") if x.strip()]
    options = (ns.gathers, levels, ns.workers, ns.bridges, ns.max_cached_gathers, ns.sandbox,
               ns.server_arg)  # fmt: skip
    with exclusive():
        plain = asyncio.run(
            main(*options, profile=ns.profile, repeat=ns.repeat, histories=ns.histories)
        )
        if ns.encrypt:
            ring = KeyRing("bench", {"bench": new_key()})
            sealed = asyncio.run(main(*options, ring=ring, repeat=ns.repeat))
            compare(plain, sealed, ns.gathers)
