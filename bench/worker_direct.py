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

With ``--perf DIR`` (Linux ``perf`` on the PATH) the first round of each kind is sampled
by ``perf record`` on every CPU instead, native code and the kernel included, keeping the
worker's samples, and the report splits each kind's CPU per workflow by where it ran: the
Python interpreter, the kernel, the SDK's core, pydantic-core, SQLite, protobuf, the C
library. That split sees what a Python tracer cannot (validators and serialisers in
Rust, the queue manager's C code, page faults and thread switches); sampling every CPU
costs the worker nothing measurable, where sampling the one process cost it a third.

    python -m bench.worker_direct [--workflows N] [--rate R] [--rounds K]
                                  [--trace DIR | --perf DIR]
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import statistics
import subprocess
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

from bench.figures import Figure, command_line, exclusive, record
from bench.gather_throughput import (
    BODY,
    CONFIG,
    LEGS,
    Bench,
    _start_trivial,
    cpu_times,
    paced,
    trivial_worker,
)
from bench.trivial import FLOOR_TASK_QUEUE
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


#: Where sampled CPU ran, by a mark in the name of the shared object (the first that
#: matches); anything else is "other native code".
NATIVE_AREAS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("SDK core (Rust)", ("temporal_sdk_bridge",)),
    ("pydantic-core (Rust)", ("_pydantic_core",)),
    ("SQLite", ("sqlite3",)),
    ("protobuf", ("_message.",)),
    # The interpreter, and the standard library's C modules (_json, _asyncio, ...).
    ("Python interpreter", ("libpython", "python3", ".cpython-3")),
    ("kernel", ("[kernel",)),
    ("C library", ("libc.so", "ld-linux", "[vdso]", "libm.so")),
)
OTHER_NATIVE = "other native code"
_PERF_SAMPLE = re.compile(r"^\s*(\d+)\s+[0-9a-f]+\s*(.*?)\s+\(([^()]*)\)\s*$")
PERF_HZ = 999


def native_area(dso: str) -> str:
    """Where a sample taken in shared object ``dso`` (its path or name) ran."""
    name = dso.rsplit("/", 1)[-1]
    return next((area for area, marks in NATIVE_AREAS if any(m in name for m in marks)),
                OTHER_NATIVE)  # fmt: skip


@dataclass
class Sampled:
    """One process's samples from ``perf script -F pid,ip,sym,dso`` (every CPU's), by
    area and function (``area: symbol``)."""

    samples: Counter[str] = field(default_factory=Counter)

    @classmethod
    def read(cls, script: str, pid: int) -> Sampled:
        """Process ``pid``'s samples in ``script``."""
        sampled = cls()
        for line in script.splitlines():
            row = _PERF_SAMPLE.match(line)
            if row and int(row[1]) == pid:
                symbol = row[2] or "[unknown]"
                sampled.samples[f"{native_area(row[3])}: {symbol}"] += 1
        if not sampled.samples:
            raise ValueError(f"perf took no sample of process {pid}: was it busy while sampled?")
        return sampled

    def ms(self, cpu: float, by_area: bool) -> dict[str, float]:
        """ms per workflow by area (or by function), given ``cpu`` ms per workflow."""
        total = sum(self.samples.values())
        ms: defaultdict[str, float] = defaultdict(float)
        for name, n in self.samples.items():
            ms[name.split(": ", 1)[0] if by_area else name] += cpu * n / total
        return dict(ms)


def native_table(sampled: dict[str, Sampled], cpu: dict[str, float]) -> str:
    """ms of CPU per workflow by area, for each kind (its share of the samples times its
    measured CPU), and the gather's difference from the visible floor."""
    ms = {kind: s.ms(cpu[kind], by_area=True) for kind, s in sampled.items()}

    def extra(name: str) -> float:
        return ms["gather"].get(name, 0.0) - ms["visible floor"].get(name, 0.0)

    names = sorted({a for rows in ms.values() for a in rows}, key=extra, reverse=True)
    head = "".join(f"{kind:>15}" for kind in sampled) + f"{'gather - visible':>18}"
    lines = [f"{'ms of CPU per workflow':<24}{head}"]
    for name in names:
        cells = "".join(f"{rows.get(name, 0.0):>15.2f}" for rows in ms.values())
        lines.append(f"{name:<24}{cells}{extra(name):>+18.2f}")
    totals = {kind: sum(rows.values()) for kind, rows in ms.items()}
    cells = "".join(f"{total:>15.2f}" for total in totals.values())
    lines.append(f"{'total':<24}{cells}{totals['gather'] - totals['visible floor']:>+18.2f}")
    return "\n".join(lines)


def native_top(gather: Sampled, visible: Sampled, cpu: dict[str, float], n: int = 15) -> str:
    """The native functions (and the interpreter's) where a gather spends most beyond a
    visible floor workflow."""
    mine = gather.ms(cpu["gather"], by_area=False)
    theirs = visible.ms(cpu["visible floor"], by_area=False)
    rows = sorted(((mine.get(f, 0.0) - theirs.get(f, 0.0), f) for f in {*mine, *theirs}),
                  reverse=True)  # fmt: skip
    return "\n".join(f"  {ms:+7.3f} ms  {function}" for ms, function in rows[:n])


class Sampler:
    """``perf record`` on every CPU while a block of work runs, then one process's
    samples."""

    def __init__(self, directory: Path) -> None:
        perf = shutil.which("perf")
        if perf is None:
            raise SystemExit("--perf needs Linux perf on the PATH (linux-tools / linux-perf)")
        self.perf, self.directory = perf, directory
        directory.mkdir(parents=True, exist_ok=True)

    def start(self, name: str) -> tuple[subprocess.Popen[bytes], Path]:
        """Start sampling every CPU into ``name``.data."""
        data = self.directory / f"{name.replace(' ', '-')}.data"
        data.unlink(missing_ok=True)
        # Every CPU, not the one process: sampling a process makes the kernel switch its
        # sampler in and out with each of its threads, which costs the worker about a
        # third more CPU; the report keeps the process's samples.
        command = [self.perf, "record", "-q", "-a", "-F", str(PERF_HZ), "-o", str(data)]
        return subprocess.Popen(command, stderr=subprocess.PIPE), data

    def stop(self, sampling: subprocess.Popen[bytes], data: Path, pid: int) -> Sampled:
        """Stop sampling and read process ``pid``'s samples."""
        sampling.send_signal(signal.SIGINT)
        _, err = sampling.communicate(timeout=60)
        if not data.exists():
            raise SystemExit(f"perf record wrote nothing: {err.decode(errors='replace')}"
                             " (is kernel.perf_event_paranoid too strict?)")  # fmt: skip
        samples = subprocess.run(
            [self.perf, "script", "-i", str(data), "-F", "pid,ip,sym,dso"],
            capture_output=True, check=True, text=True,
        )  # fmt: skip
        return Sampled.read(samples.stdout, pid)


def _replies(correl: bytes, tag: str, legs: tuple[str, ...] = LEGS) -> ReplyBatch:
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
            for leg in legs
        ]
    )


def correl_of(tag: str) -> bytes:
    """The CorrelId of the workflow a bench starts for ``tag`` (12 characters or fewer)."""
    return tag.encode().ljust(24, b"\0")


def starters(
    client: Client,
    spec: AggregateSpec,
    task_queue: str = TASK_QUEUE,
    legs: tuple[str, ...] = LEGS,
    trivial_queue: str = FLOOR_TASK_QUEUE,
) -> dict[str, Callable[[str], Awaitable[WorkflowHandle]]]:
    """For each kind, how one workflow of it starts (given a unique tag of 12 characters
    or fewer); a gather on ``task_queue`` with a reply of each of ``legs`` in its start
    signal, the floor's workflows on ``trivial_queue`` with theirs."""

    async def gather(tag: str) -> WorkflowHandle:
        # As the bridge starts a gather (bridge/inbound.py).
        return await client.start_workflow(
            GatherWorkflow.run,
            start_input(spec, correl_of(tag)),
            id=gather_id(spec.name, correl_of(tag)),
            task_queue=task_queue,
            start_signal=SIGNAL_REPLIES,
            start_signal_args=[_replies(correl_of(tag), tag, legs)],
            **start_options(spec, correl_of(tag)),
        )

    def visible(tag: str) -> Awaitable[WorkflowHandle]:
        options = start_options(spec, correl_of(tag))
        return _start_trivial(client, "TrivialVisible", f"visible-{tag}", trivial_queue, **options)

    def floor(tag: str) -> Awaitable[WorkflowHandle]:
        return _start_trivial(client, "TrivialLocal", f"floor-{tag}", trivial_queue)

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


async def main(
    n: int, rate: float, rounds: int, trace: Path | None, perf: Path | None = None
) -> None:
    """Run the rounds and print the report."""
    sampler = Sampler(perf) if perf is not None else None
    sampled: dict[str, Sampled] = {}
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp))
        try:
            client = await bench.client()
            spec = parse_config(tomllib.loads(CONFIG), "bench").aggregates["bench"]
            await ensure_search_attributes(client)
            python = [sys.executable, "-m"]
            worker = ["mqgather.cli", "worker", "--no-sandbox"]
            floor = trivial_worker(bench.address)
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
                    sampling = sampler.start(kind) if sampler and r == 0 else None
                    ms, system = await drive(start[kind], pids[kind], n, rate,
                                             f"{r}{run}{kind[0]}")  # fmt: skip
                    if sampler is not None and sampling is not None:
                        sampled[kind] = sampler.stop(*sampling, pids[kind])
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
    traced_note += " (the first round sampled by perf)" if perf is not None else ""
    print(f"\nworker CPU ms per workflow, median (range), and of it in the kernel{traced_note}:")
    for kind in KINDS:
        print(f"  {kind:<14} {_spread(cpu[kind])}; {_spread(kernel[kind])}")
    for a, b in (("gather", "floor"), ("gather", "visible floor"), ("visible floor", "floor")):
        ratios = [x / y for x, y in zip(cpu[a], cpu[b], strict=True)]
        print(f"  {a} / {b}: {_spread(ratios)}")
        if trace is None and perf is None:
            name = f"worker CPU ms per {'gather' if a == 'gather' else 'visible floor workflow'}"
            for x, y in zip(cpu[a], cpu[b], strict=True):
                record(Figure("worker_direct", f"{name}, driven directly", x, "ms", y,
                              f"{b}'s worker"))  # fmt: skip
    if traced:
        print("\ntraced (the first round), by area of code:")
        print(area_table(traced))
        print("\nwhere a gather spends most beyond a visible floor workflow (traced own ms):")
        print(top_functions(traced["gather"], traced["visible floor"]))
    if sampled:
        first = {kind: cpu[kind][0] for kind in KINDS}
        print("\nsampled by perf (the first round), CPU by where it ran:")
        print(native_table(sampled, first))
        print("\nwhere a gather spends most beyond a visible floor workflow (sampled):")
        print(native_top(sampled["gather"], sampled["visible floor"], first))


if __name__ == "__main__":
    parser = command_line(__doc__)
    parser.add_argument("--workflows", type=int, default=300, help="per kind and round")
    parser.add_argument("--rate", type=float, default=30.0, help="workflows started a second")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each kind")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--trace", type=Path, metavar="DIR",
                     help="trace both workers and write their counts here")  # fmt: skip
    how.add_argument("--perf", type=Path, metavar="DIR",
                     help="sample both workers' first round with perf, native code and "
                     "the kernel included, and keep the samples here")  # fmt: skip
    ns = parser.parse_args()
    with exclusive():
        asyncio.run(main(ns.workflows, ns.rate, ns.rounds, ns.trace, ns.perf))
