"""The bridge against its floor: the CPU the bridge spends per gather, beside what the
platform alone spends moving the same messages into Temporal, in one run.

On one dev server and one embedded queue manager, with no worker (every workflow started
stays open, so the server does the same for both), each round puts ``--gathers`` gathers'
three replies of 1 KB on a queue and takes the CPU of the process that drains it:

- the bridge (``mqgather bridge``), from GATHER.IN, as in the gather bench;
- the floor (``python -m bench.bridge_floor serve``), from FLOOR.IN: the bridge's
  platform work and nothing else. It gets the messages under syncpoint in units of work
  of the bridge's size, starts one workflow per CorrelId by signal-with-start with that
  CorrelId's messages as plain JSON and a gather's search attributes, summary and
  details, and commits once Temporal took them all. No identification, no validation,
  no duplicate or redelivery checks, no holding, no models of mqgather's.

Each CPU figure runs from the process idle to the process idle again, so it holds the
whole of its work and none of its start-up. The two alternate, round by round.

    python -m bench.bridge_floor [--gathers 600] [--rounds 3]
"""

from __future__ import annotations

import asyncio
import functools
import statistics
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import GrpcCompression

from bench.figures import Figure, command_line, exclusive, record
from bench.gather_throughput import (
    CONFIG,
    LEGS,
    Bench,
    _cpu_seconds,
    put_gathers,
)
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage, QueueAttributes
from mqgather.config import parse_config
from mqgather.constants import BRIDGE_BATCH_SIZE, GATHER_IN
from mqgather.runtime.temporal import ensure_search_attributes, grpc_compression_name
from workflows.models import start_options

FLOOR_QUEUE = "FLOOR.IN"
#: The floor's workflows go to a task queue no worker polls: they stay open, as the
#: bridge's gathers do here.
FLOOR_TASK_QUEUE = "bridge-floor"
#: A process is idle once its CPU grows by less than this between two looks.
IDLE_CPU_SECONDS = 0.002
IDLE_LOOK_SECONDS = 0.25
FLOOR_NAME = "floor: MQ gets and signal-with-start alone"


def by_correl_id(batch: Iterable[MQMessage]) -> dict[bytes, list[dict[str, Any]]]:
    """The batch's messages by CorrelId, in the order they came, each as plain JSON
    values (what the floor signals)."""
    groups: dict[bytes, list[dict[str, Any]]] = {}
    for message in batch:
        groups.setdefault(message.correl_id, []).append(message.model_dump(mode="json"))
    return groups


async def serve(address: str, qm_path: Path, queue: str, compression: str) -> None:
    """The floor: drain ``queue`` into Temporal until killed."""
    client = await Client.connect(
        address,
        data_converter=pydantic_data_converter,
        grpc_compression=getattr(GrpcCompression, compression.upper()),
    )
    spec = parse_config(tomllib.loads(CONFIG), "bench").aggregates["bench"]
    # One thread for every call on the queue manager's connection, as the bridge has.
    pool = ThreadPoolExecutor(1)
    loop = asyncio.get_running_loop()

    async def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await loop.run_in_executor(pool, functools.partial(fn, *args, **kwargs))

    qm = await call(LocalQueueManager, qm_path)
    while True:
        batch = await call(qm.get_batch, queue, BRIDGE_BATCH_SIZE, wait_ms=500)
        if not batch:
            continue
        await asyncio.gather(
            *(
                client.start_workflow(
                    "TrivialVisible",
                    id=f"bridge-floor-{correl.hex()}",
                    task_queue=FLOOR_TASK_QUEUE,
                    start_signal="go",
                    start_signal_args=[messages],
                    **start_options(spec, correl),
                )
                for correl, messages in by_correl_id(batch).items()
            )
        )
        await call(qm.commit)


async def idle(pid: int, limit: float = 600) -> float:
    """The CPU seconds of ``pid`` once it is idle (its CPU still between two looks)."""
    deadline = time.monotonic() + limit
    last = _cpu_seconds(pid)
    while time.monotonic() < deadline:
        await asyncio.sleep(IDLE_LOOK_SECONDS)
        now = _cpu_seconds(pid)
        if now - last < IDLE_CPU_SECONDS:
            return now
        last = now
    raise TimeoutError(f"process {pid} stayed busy for {limit:.0f} s")


async def drained_cpu(qm: LocalQueueManager, pid: int, queue: str, prefix: str, n: int) -> float:
    """ms of CPU ``pid`` spends per gather taking ``n`` gathers' replies off ``queue``."""
    before = await idle(pid)
    put_gathers(qm, prefix, n, LEGS, queue)
    while qm.inquire(queue).curdepth:  # the bridge took them; idle() waits for its commit
        await asyncio.sleep(IDLE_LOOK_SECONDS)
    return 1000 * (await idle(pid) - before) / n


async def main(n: int, rounds: int) -> None:
    """``rounds`` rounds of ``n`` gathers through the bridge and ``n`` through the floor."""
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp))
        try:
            client = await bench.client()
            await ensure_search_attributes(client)
            qm = LocalQueueManager(bench.qm_path)
            qm.define(QueueAttributes(name=FLOOR_QUEUE, maxdepth=100_000), replace=True)
            pids = {
                "bridge": bench.spawn([sys.executable, "-m", "mqgather.cli", "bridge",
                                       "--batch-size", str(BRIDGE_BATCH_SIZE)], bench.env).pid,
                "floor": bench.spawn([sys.executable, "-m", "bench.bridge_floor", "serve",
                                      "--address", bench.address, "--qm", str(bench.qm_path),
                                      "--grpc-compression", grpc_compression_name()]).pid,
            }  # fmt: skip
            queues = {"bridge": GATHER_IN, "floor": FLOOR_QUEUE}
            run = f"{time.time_ns() % 10**6:06d}"
            print(f"warming up; then {rounds} round(s) of {n} gathers each way …", flush=True)
            for kind, pid in pids.items():
                await drained_cpu(qm, pid, queues[kind], f"W{run}{kind[0]}-", 20)
            ms: dict[str, list[float]] = {kind: [] for kind in pids}
            for i in range(rounds):
                for kind, pid in pids.items():
                    prefix = f"R{run}{kind[0]}{i}-"
                    ms[kind].append(await drained_cpu(qm, pid, queues[kind], prefix, n))
                print(f"round {i + 1}: bridge {ms['bridge'][-1]:.2f} ms per gather, floor "
                      f"{ms['floor'][-1]:.2f} ms, ratio {ms['bridge'][-1] / ms['floor'][-1]:.2f}",
                      flush=True)  # fmt: skip
                record(Figure("bridge", "bridge CPU ms per gather", ms["bridge"][-1], "ms",
                              ms["floor"][-1], FLOOR_NAME))  # fmt: skip
            qm.close()
        finally:
            bench.close()
    ratios = [b / f for b, f in zip(ms["bridge"], ms["floor"], strict=True)]
    print(f"\nbridge {statistics.median(ms['bridge']):.2f} ms per gather, floor "
          f"{statistics.median(ms['floor']):.2f} ms: ratio {statistics.median(ratios):.2f} "
          f"({min(ratios):.2f}-{max(ratios):.2f}), median (range) of {rounds} "
          "round(s)")  # fmt: skip


if __name__ == "__main__":
    parser = command_line(__doc__)
    sub = parser.add_subparsers(dest="command")
    floor = sub.add_parser("serve", help="run the floor's loop (the bench starts it)")
    floor.add_argument("--address", required=True, help="Temporal's address")
    floor.add_argument("--qm", type=Path, required=True,
                       help="the embedded queue manager's file")  # fmt: skip
    floor.add_argument("--grpc-compression", default="none",
                       help="as the bridge's client sends (none or gzip)")  # fmt: skip
    parser.add_argument("--gathers", type=int, default=600, help="gathers per round and side")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each side, alternated")
    ns = parser.parse_args()
    if ns.command == "serve":
        asyncio.run(serve(ns.address, ns.qm, FLOOR_QUEUE, ns.grpc_compression))
    else:
        with exclusive():
            asyncio.run(main(ns.gathers, ns.rounds))
