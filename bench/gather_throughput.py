"""Gather throughput: the whole pipeline against the bare Temporal ceiling.

In one run against one dev server (SQLite file, WAL), with worker and bridge as their
own processes:

(a) end-to-end gathers/s: 3 legs of 1 KB per gather put on GATHER.IN, bridge, worker,
    merge and PUT, until every response is on ORDER.RESPONSE;
(b) the ceiling: trivial workflows created by signal-with-start, no MQ at all;
(c) latency from the last reply's PUT to the response's PUT at half the ceiling rate;
(d) worker RSS with 1,000 and 5,000 open gathers.

    python bench/gather_throughput.py [--gathers N] [--open N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage, PutOptions
from mqgather.names import GATHER_WORKFLOW, LEGS_RECEIVED
from mqgather.runtime.temporal import dev_server_args, ensure_search_attributes
from tests.harness import prepare_queues

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


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Bench:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.port = _port()
        self.address = f"localhost:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []
        binary = shutil.which("temporal")
        assert binary, "run through `make bench` so the temporal CLI is on PATH"
        self.spawn([binary, *dev_server_args(str(tmp / "t.db"), self.port, _port()), "--headless"])
        self.qm_path = tmp / "qm.db"
        prepare_queues(self.qm_path, bothresh=0)
        (tmp / "bench.toml").write_text(CONFIG)
        self.env = dict(
            os.environ,
            TEMPORAL_ADDRESS=self.address,
            MQGATHER_MQ=f"local:{self.qm_path}",
            MQGATHER_CONFIG=str(tmp / "bench.toml"),
        )

    def spawn(self, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    async def client(self) -> Client:
        for _ in range(300):
            try:
                return await Client.connect(self.address, data_converter=pydantic_data_converter)
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


async def ceiling(bench: Bench, client: Client, n: int) -> float:
    bench.spawn([sys.executable, "-m", "bench.trivial", "--address", bench.address,
                 "--task-queue", "trivial"])  # fmt: skip
    gate = asyncio.Semaphore(64)
    run = f"{time.time_ns()}"

    async def one(i: int) -> None:
        async with gate:
            handle = await client.start_workflow(
                "Trivial", id=f"trivial-{run}-{i}", task_queue="trivial",
                start_signal="go", start_signal_args=["x"],
            )  # fmt: skip
        await handle.result()

    await one(-1)  # warm up the worker
    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return n / (time.perf_counter() - start)


def put_gathers(qm: LocalQueueManager, prefix: str, n: int, legs: tuple[str, ...]) -> None:
    for i in range(n):
        for leg in legs:
            qm.put("GATHER.IN", MQMessage(correl_id=f"{prefix}{i}".encode(),
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


async def pipeline(bench: Bench, qm: LocalQueueManager, n: int) -> float:
    start = time.perf_counter()
    put_gathers(qm, "E2E-", n, LEGS)
    await wait_depth(qm, "ORDER.RESPONSE", n)
    return n / (time.perf_counter() - start)


async def latency(qm: LocalQueueManager, n: int, rate: float) -> list[float]:
    """ms from the last reply's PUT to the response's PUT, gathers paced at ``rate``."""
    last_put: dict[bytes, datetime] = {}
    base = qm.inquire("ORDER.RESPONSE").curdepth
    start = time.monotonic()
    for i in range(n):
        await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))  # pacing
        for leg in LEGS:
            reply = MQMessage(correl_id=f"LAT-{i}".encode(), properties={"leg": leg}, body=BODY)
            done = qm.put("GATHER.IN", reply, PutOptions(syncpoint=False))
        assert done.put_date_time is not None
        last_put[done.correl_id] = done.put_date_time
    await wait_depth(qm, "ORDER.RESPONSE", base + n)
    out = []
    for m in qm.browse("ORDER.RESPONSE"):
        if m.correl_id in last_put and m.put_date_time:
            out.append((m.put_date_time - last_put[m.correl_id]).total_seconds() * 1000)
    return out


async def open_rss(client: Client, qm: LocalQueueManager, worker: int, sizes: list[int]) -> dict:
    rss = {}
    opened = 0
    for size in sizes:
        put_gathers(qm, "OPEN-", size - opened, ("CREDIT",)) if opened == 0 else None
        if opened:
            for i in range(opened, size):
                qm.put("GATHER.IN", MQMessage(correl_id=f"OPEN-{i}".encode(),
                                              properties={"leg": "CREDIT"}, body=BODY))  # fmt: skip
                if i % 100 == 99:
                    qm.commit()
            qm.commit()
        opened = size
        query = (
            f'WorkflowType = "{GATHER_WORKFLOW}" AND ExecutionStatus = "Running" '
            f"AND {LEGS_RECEIVED.name} = 1"
        )
        deadline = time.monotonic() + 900
        while (await client.count_workflows(query)).count < size:
            if time.monotonic() > deadline:
                raise TimeoutError("gathers did not open")
            await asyncio.sleep(0.5)
        rss[size] = _rss_mb(worker)
    return rss


async def main(n: int, open_max: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp))
        try:
            client = await bench.client()
            await ensure_search_attributes(client)
            me = [sys.executable, "-m", "mqgather.cli"]
            prof = (
                ["-m", "cProfile", "-o", os.environ["BENCH_PROFILE"]]
                if os.environ.get("BENCH_PROFILE")
                else []
            )
            worker = bench.spawn([sys.executable, *prof, "-m", "mqgather.cli", "worker"], bench.env)
            bridge = bench.spawn([*me, "bridge"], bench.env)
            parts = {"server": bench.procs[0].pid, "worker": worker.pid, "bridge": bridge.pid}
            qm = LocalQueueManager(bench.qm_path)
            print("warming up …", flush=True)
            await pipeline(bench, qm, 20)
            print(f"(b) ceiling: {n} trivial signal-with-start workflows …", flush=True)
            bare = await ceiling(bench, client, n)
            print(f"(a) pipeline: {n} gathers of 3 legs …", flush=True)
            before = {k: _cpu_seconds(pid) for k, pid in parts.items()}
            cpu_start = time.process_time()
            e2e = await pipeline(bench, qm, n)
            cpu = {k: _cpu_seconds(pid) - before[k] for k, pid in parts.items()}
            cpu["bench (puts)"] = time.process_time() - cpu_start
            print(f"(c) latency at {bare / 2:.0f} gathers/s …", flush=True)
            lat = await latency(qm, min(n, 300), bare / 2)
            print("(d) worker RSS with open gathers …", flush=True)
            rss = await open_rss(client, qm, worker.pid, [1000, open_max])
            qm.close()
        finally:
            bench.close()
    q = statistics.quantiles(lat, n=100, method="inclusive")
    print()
    print(f"(a) end-to-end gathers/s           {e2e:8.1f}")
    print(f"(b) bare signal-with-start wf/s    {bare:8.1f}")
    print(f"    ratio (a)/(b)                  {e2e / bare:8.2f}")
    print("    CPU ms per gather during (a)   " +
          "  ".join(f"{k} {1000 * v / n:.1f}" for k, v in cpu.items()))  # fmt: skip
    print(f"(c) last reply -> response, ms     p50 {q[49]:.0f}  p99 {q[98]:.0f}  "
          f"(at {bare / 2:.0f} gathers/s)")  # fmt: skip
    sizes = sorted(rss)
    print("(d) worker RSS MB                  " +
          "  ".join(f"{s} open: {rss[s]:.0f}" for s in sizes) +
          f"  (change {100 * (rss[sizes[-1]] / rss[sizes[0]] - 1):+.0f} %)")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gathers", type=int, default=1000)
    parser.add_argument("--open", type=int, default=5000)
    ns = parser.parse_args()
    asyncio.run(main(ns.gathers, ns.open))
