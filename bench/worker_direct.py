"""The worker alone: driven straight by signal-with-start, against the floor's worker.

No bridge and no MQ input: each gather is started as the bridge starts it (its input,
its search attributes, summary and details, its three replies of 1 KB in one signal),
and the real worker (``mqgather worker``, sandbox off as shipped) merges and PUTs it on
the embedded queue manager. Beside it, on the same dev server, ``bench.trivial``'s worker
runs the visible floor (the floor's shape with a gather's visibility) and the floor.
Each round runs N of each kind at RATE a second, one kind after the other, and takes the
CPU its worker spent per workflow; the figures are medians over the rounds, with their
range.

With ``--trace DIR`` both workers run under a tracer that counts every call
(:mod:`bench.traced`), and the report adds, per area of code, the calls and own CPU time
per workflow of each kind, then the functions where a gather spends most beyond a
visible floor workflow. Traced times are inflated (short functions most) and are
comparable only with each other; the untraced rounds give the real CPU.

    python -m bench.worker_direct [--workflows N] [--rate R] [--rounds K] [--trace DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time
import tomllib
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from temporalio.client import Client, WorkflowHandle

from bench.figures import Figure, exclusive, record
from bench.gather_throughput import (
    BODY,
    CONFIG,
    LEGS,
    Bench,
    _start_trivial,
    cpu_times,
    paced,
)
from bridge.mq.models import MQMessage
from mqgather.config import AggregateSpec, parse_config
from mqgather.names import SIGNAL_REPLIES, TASK_QUEUE
from mqgather.runtime.temporal import ensure_search_attributes
from workflows.gather import GatherWorkflow
from workflows.models import Reply, ReplyBatch, gather_id, start_input, start_options

KINDS = ("gather", "visible floor", "floor")
ROOT = str(Path(__file__).resolve().parent.parent) + "/"
#: Areas of the project's own code, by the folder a function's file is in.
PROJECT_AREAS = {
    "workflows": "mqgather: workflows/",
    "activities": "mqgather: activities/",
    "bridge": "mqgather: the MQ layer (bridge/, SQLite's C code)",
    "mqgather": "mqgather: mqgather/",
    "bench": "the floor's workflows (bench/)",
}
#: Areas of the libraries, by a mark in the path of a function's file (the first that
#: matches).
LIBRARY_AREAS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("SDK (temporalio)", ("/temporalio/",)),
    ("pydantic", ("/pydantic",)),
    ("protobuf", ("/google/protobuf/",)),
    ("json (stdlib)", ("/json/",)),
    ("asyncio, threads (stdlib)", ("/asyncio/", "/threading.py", "/concurrent/", "/queue.py")),
)
OTHER = "other"


def area(function: str) -> str:
    """The area of code a traced function (``file:line:name``) is in."""
    where = function.rsplit(":", 2)[0]
    if where.startswith(ROOT) and "/site-packages/" not in where:
        return PROJECT_AREAS.get(where[len(ROOT) :].split("/", 1)[0], OTHER)
    return next((name for name, marks in LIBRARY_AREAS if any(m in where for m in marks)), OTHER)


@dataclass
class Traced:
    """One kind's traced calls and own CPU seconds by function, and how many workflows."""

    workflows: int
    calls: Counter[str] = field(default_factory=Counter)
    seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))

    @classmethod
    def read(cls, path: Path, workflows: int) -> Traced:
        """What :mod:`bench.traced` wrote to ``path`` for ``workflows`` workflows."""
        traced = cls(workflows)
        for line in path.read_text().splitlines():
            calls, seconds, function = line.split("\t", 2)
            traced.calls[function] += int(calls)
            traced.seconds[function] += float(seconds)
        return traced

    def per_area(self) -> dict[str, tuple[float, float]]:
        """Calls and own ms per workflow by area."""
        calls: Counter[str] = Counter()
        ms: defaultdict[str, float] = defaultdict(float)
        for function, n in self.calls.items():
            calls[area(function)] += n
            ms[area(function)] += 1000 * self.seconds[function]
        return {a: (calls[a] / self.workflows, ms[a] / self.workflows) for a in calls}


def area_table(traced: dict[str, Traced]) -> str:
    """Calls and own ms per workflow by area, for each kind, and the gather's difference
    from the visible floor."""
    areas = {kind: t.per_area() for kind, t in traced.items()}
    names = sorted({a for rows in areas.values() for a in rows},
                   key=lambda a: -areas["gather"].get(a, (0, 0))[1])  # fmt: skip
    head = "".join(f"{kind:>22}" for kind in traced) + f"{'gather - visible':>22}"
    lines = [f"{'calls / traced own ms per workflow':<52}{head}"]
    for name in [*names, "total"]:
        cells = []
        for kind in traced:
            rows = areas[kind].values() if name == "total" else [areas[kind].get(name, (0, 0))]
            calls, ms = sum(r[0] for r in rows), sum(r[1] for r in rows)
            cells.append((calls, ms))
        gather, visible = cells[0], cells[list(traced).index("visible floor")]
        cells.append((gather[0] - visible[0], gather[1] - visible[1]))
        lines.append(f"{name[:51]:<52}" + "".join(f"{c:>10.0f} / {m:>7.2f}  " for c, m in cells))
    return "\n".join(lines)


def top_functions(gather: Traced, visible: Traced, n: int = 20) -> str:
    """The functions where a gather spends most own time beyond a visible floor workflow."""
    rows = []
    for function in set(gather.seconds) | set(visible.seconds):
        extra = (gather.seconds.get(function, 0.0) / gather.workflows
                 - visible.seconds.get(function, 0.0) / visible.workflows)  # fmt: skip
        calls = gather.calls[function] / gather.workflows
        rows.append((1000 * extra, calls, function))
    rows.sort(reverse=True)
    return "\n".join(
        f"  {ms:+7.3f} ms  {calls:6.1f} calls  {fn.replace(ROOT, '').split('site-packages/')[-1]}"
        for ms, calls, fn in rows[:n]
    )


def _replies(correl: bytes, tag: str) -> ReplyBatch:
    now = datetime.now(UTC)
    return ReplyBatch(
        replies=[
            Reply(
                message=MQMessage(
                    msg_id=f"{tag}{leg}".encode()[-24:],
                    correl_id=correl,
                    properties={"leg": leg},
                    body=BODY,
                ),
                leg=leg,
                source_queue="GATHER.IN",
                received_at=now,
                size=len(BODY),
            )
            for leg in LEGS
        ]
    )


def starters(
    client: Client, spec: AggregateSpec
) -> dict[str, Callable[[str], Awaitable[WorkflowHandle]]]:
    """For each kind, how one workflow of it starts (given a unique tag of 12 characters
    or fewer)."""

    def correl(tag: str) -> bytes:
        return tag.encode().ljust(24, b"\0")

    async def gather(tag: str) -> WorkflowHandle:
        # As the bridge starts a gather (bridge/inbound.py).
        return await client.start_workflow(
            GatherWorkflow.run,
            start_input(spec, correl(tag)),
            id=gather_id(spec.name, correl(tag)),
            task_queue=TASK_QUEUE,
            start_signal=SIGNAL_REPLIES,
            start_signal_args=[_replies(correl(tag), tag)],
            **start_options(spec, correl(tag)),
        )

    def visible(tag: str) -> Awaitable[WorkflowHandle]:
        options = start_options(spec, correl(tag))
        return _start_trivial(client, "TrivialVisible", f"visible-{tag}", **options)

    def floor(tag: str) -> Awaitable[WorkflowHandle]:
        return _start_trivial(client, "TrivialLocal", f"floor-{tag}")

    return {"gather": gather, "visible floor": visible, "floor": floor}


async def drive(
    start: Callable[[str], Awaitable[WorkflowHandle]], pid: int, n: int, rate: float, tag: str
) -> tuple[float, float]:
    """Start ``n`` workflows at ``rate``/s and wait for each; ms of CPU that ``pid``
    spent per workflow, and of it in the kernel."""
    user, system = cpu_times(pid)
    handles = [await start(f"{tag}{i}") async for i in paced(n, rate)]
    await asyncio.gather(*(h.result() for h in handles))
    # The worker's last task completions reach the server after the results do.
    await asyncio.sleep(0.5)
    user_after, system_after = cpu_times(pid)
    total = user_after + system_after - user - system
    return 1000 * total / n, 1000 * (system_after - system) / n


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f} to {max(values):.2f})"


async def main(n: int, rate: float, rounds: int, trace: Path | None) -> None:
    """Run the rounds and print the report."""
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp))
        try:
            client = await bench.client()
            spec = parse_config(tomllib.loads(CONFIG), "bench").aggregates["bench"]
            await ensure_search_attributes(client)
            python = [sys.executable, "-m"]
            worker = ["mqgather.cli", "worker", "--no-sandbox"]
            floor = ["bench.trivial", "--address", bench.address, "--task-queue", "trivial"]
            dumps: dict[str, Path] = {}
            if trace is not None:
                trace.mkdir(parents=True, exist_ok=True)
                dumps = {"gather": trace / "gather.tsv", "floor": trace / "floor.tsv"}
                worker = ["bench.traced", str(dumps["gather"]), *worker]
                floor = ["bench.traced", str(dumps["floor"]), *floor]
            pids = {"gather": bench.spawn([*python, *worker], bench.env).pid}
            pids["floor"] = pids["visible floor"] = bench.spawn([*python, *floor]).pid
            start = starters(client, spec)
            run = f"{time.time_ns() % 10**6:06d}"
            print(f"warming up; then {rounds} round(s) of {n} workflows of each kind at "
                  f"{rate:g}/s{', traced' if trace else ''} …", flush=True)  # fmt: skip
            for kind in KINDS:
                await drive(start[kind], pids[kind], 30, 15, f"w{run}{kind[0]}")
            cpu: dict[str, list[float]] = {kind: [] for kind in KINDS}
            kernel: dict[str, list[float]] = {kind: [] for kind in KINDS}
            traced: dict[str, Traced] = {}
            for r in range(rounds):
                for kind in KINDS:
                    if trace is not None:
                        os.kill(pids[kind], signal.SIGUSR2)
                    ms, system = await drive(start[kind], pids[kind], n, rate,
                                             f"{r}{run}{kind[0]}")  # fmt: skip
                    cpu[kind].append(ms)
                    kernel[kind].append(system)
                    print(f"  round {r + 1}: {kind:<14} {ms:6.2f} ms of worker CPU per "
                          f"workflow, {system:.2f} of it in the kernel", flush=True)  # fmt: skip
                    if trace is not None and r == 0:
                        path = dumps["gather" if kind == "gather" else "floor"]
                        path.unlink(missing_ok=True)
                        os.kill(pids[kind], signal.SIGUSR1)
                        while not path.exists():
                            await asyncio.sleep(0.1)
                        await asyncio.sleep(0.5)  # written whole
                        traced[kind] = Traced.read(path, n)
                        path.rename(trace / f"{kind.replace(' ', '-')}.tsv")
        finally:
            bench.close()
    traced_note = " (traced: the tracer's cost included)" if trace is not None else ""
    print(f"\nworker CPU ms per workflow, median (range), and of it in the kernel{traced_note}:")
    for kind in KINDS:
        print(f"  {kind:<14} {_spread(cpu[kind])}; {_spread(kernel[kind])}")
    for a, b in (("gather", "floor"), ("gather", "visible floor"), ("visible floor", "floor")):
        ratios = [x / y for x, y in zip(cpu[a], cpu[b], strict=True)]
        print(f"  {a} / {b}: {_spread(ratios)}")
        if trace is None:
            name = f"worker CPU ms per {'gather' if a == 'gather' else 'visible floor workflow'}"
            for x, y in zip(cpu[a], cpu[b], strict=True):
                record(Figure("worker_direct", f"{name}, driven directly", x, "ms", y,
                              f"{b}'s worker"))  # fmt: skip
    if traced:
        print("\ntraced (the first round), by area of code:")
        print(area_table(traced))
        print("\nwhere a gather spends most beyond a visible floor workflow (traced own ms):")
        print(top_functions(traced["gather"], traced["visible floor"]))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workflows", type=int, default=300, help="per kind and round")
    parser.add_argument("--rate", type=float, default=30.0, help="workflows started a second")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trace", type=Path, metavar="DIR",
                        help="trace both workers and write their counts here")  # fmt: skip
    ns = parser.parse_args()
    with exclusive():
        asyncio.run(main(ns.workflows, ns.rate, ns.rounds, ns.trace))
