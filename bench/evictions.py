"""What an open workflow leaves for the garbage collector when its worker evicts it:
gathers against the floor's workflows.

At 10,000 open gathers every new gather evicts an open one from the worker's cache. What
the evicted workflow leaves in reference cycles only a full collection frees, and each
full collection stops the worker for as long as it walks the worker's objects (see
docs/performance.md, "Full collections at 10,000 open"). In this process, against a dev
server, each kind's worker runs with a cache of ``--cache`` workflows while ``-n`` of
them are opened, each past its first task and then evicted by the ones after it:

- gathers holding one leg of three (started as the bridge starts them: their input,
  search attributes, summary and details, one reply in the start signal), on the
  gathers' worker with the data converter every mqgather process uses;
- the visible floor's workflows (the floor's shape with a gather's search attributes,
  summary and details), started without their signal, so they wait;
- the floor's workflows, started without their signal, so they wait.

With ``--completed`` each workflow instead runs to its end before the next starts (a
gather with all three replies in its start signal, a floor workflow with its signal), and
the count waits until the worker has dropped every one of them: what a closed workflow
leaves at the eviction that follows its close, which every paced gather adds to the open
one it evicted.

The collector is switched off while they open; then one collection frees what they left,
and every object it frees is counted by type. Per workflow: the objects, the ratio to the
floor's, and the types where a gather leaves most beyond the floor.

With ``--live`` the workers cache every workflow opened, and what is counted is what each
open workflow keeps alive among the objects the collector tracks: what every full
collection walks, for each gather the cache holds.

    python -m bench.evictions [-n 300] [--cache 10] [--completed | --live]
"""

from __future__ import annotations

import asyncio
import functools
import gc
import tempfile
import time
import tomllib
from collections import Counter
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from temporalio.client import Client, WorkflowHandle
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from bench.figures import Figure, command_line, exclusive, record
from bench.gather_throughput import CONFIG, Bench, _first_task_done
from bench.trivial import TrivialLocalWorkflow, TrivialVisibleWorkflow, nothing
from bench.worker_direct import correl_of, starters
from bridge.mq.local_qm import LocalQueueManager
from mqgather.config import AggregateSpec, parse_config
from mqgather.runtime.codec import data_converter
from mqgather.runtime.temporal import ensure_search_attributes, grpc_compression
from workers.worker import build_worker
from workflows.models import start_options

KINDS = ("gather", "visible floor", "floor")

#: What is counted: what an evicted open workflow leaves in cycles, what a completed one
#: leaves there, what an open cached one keeps alive.
EVICTED, COMPLETED, LIVE = "evicted", "completed", "live"

#: Per mode, what the report and the figure call the count.
COUNTED = {
    EVICTED: "objects left in cycles per evicted",
    COMPLETED: "objects left in cycles per completed",
    LIVE: "objects kept alive, and walked by each full collection, per open cached",
}

#: How long a count waits for what it waits for (each closed workflow dropped).
EVICTION_WAIT_SECONDS = 60.0


class NotSettled(RuntimeError):
    """What the count waited for did not happen in time."""


async def cyclic_garbage(
    run: Callable[[], Awaitable[None]],
    settled: Callable[[list[object]], bool] | None = None,
    wait: float = EVICTION_WAIT_SECONDS,
) -> Counter[str]:
    """The objects in reference cycles that ``run`` leaves unreachable, by type
    (``module.qualname``): the collector is off while it runs, and the collection after
    it keeps what it frees for counting. With ``settled``, collections are repeated
    (each keeping what it frees) until ``settled`` holds for all that was kept, for at
    most ``wait`` seconds. The collector's state is restored."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        await run()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        deadline = time.monotonic() + wait
        while settled is not None and not settled(gc.garbage):
            if time.monotonic() > deadline:
                raise NotSettled(f"what the count waits for did not happen in {wait:.0f} s")
            await asyncio.sleep(0.02)
            gc.collect()
        found = by_type(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()
    return found


def by_type(objects: list[object]) -> Counter[str]:
    """How many of ``objects`` there are of each type (``module.qualname``)."""
    return Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in objects)


async def live_objects(run: Callable[[], Awaitable[None]]) -> Counter[str]:
    """The objects the collector tracks that ``run`` adds and keeps alive, by type (a
    type of which ``run`` leaves fewer counts below zero): a collection before and after
    it, so that what it freed, cycles too, is not counted."""
    gc.collect()
    before = by_type(gc.get_objects())
    await run()
    gc.collect()
    found = by_type(gc.get_objects())
    found.subtract(before)
    return found


def dropped_workflows(garbage: list[object]) -> set[str]:
    """The IDs of the workflows whose instances are among ``garbage``: those their
    worker has dropped from its cache."""
    return {
        o._info.workflow_id
        for o in garbage
        if type(o).__name__ == "_WorkflowInstanceImpl" and hasattr(o, "_info")
    }


def openers(
    client: Client, spec: AggregateSpec, task_queue: str, completed: bool = False
) -> dict[str, Callable[[str], Awaitable[WorkflowHandle]]]:
    """For each kind, how one workflow of it opens (given a tag of 12 characters or
    fewer); with ``completed``, started with what it needs to run to its end."""
    if completed:
        return starters(client, spec, task_queue, trivial_queue=task_queue)

    async def visible(tag: str) -> WorkflowHandle:
        return await client.start_workflow(
            "TrivialVisible",
            id=f"visible-{tag}",
            task_queue=task_queue,
            **start_options(spec, correl_of(tag)),
        )

    async def floor(tag: str) -> WorkflowHandle:
        # As the bench opens the floor's level: started without its signal, it waits.
        return await client.start_workflow("TrivialLocal", id=f"floor-{tag}", task_queue=task_queue)

    # A gather as the bridge starts it, with one reply of its three legs: it waits.
    gather = starters(client, spec, task_queue, legs=("CREDIT",))["gather"]
    return {"gather": gather, "visible floor": visible, "floor": floor}


async def open_all(open_one: Callable[[str], Awaitable[WorkflowHandle]], tags: list[str]) -> None:
    """Open a workflow per tag, each past its first task before the next opens."""
    for tag in tags:
        handle = await open_one(tag)
        while not await _first_task_done(handle):
            await asyncio.sleep(0.02)


async def complete_all(
    open_one: Callable[[str], Awaitable[WorkflowHandle]], tags: list[str]
) -> set[str]:
    """Run a workflow per tag to its end, each before the next starts; their IDs."""
    ids = set()
    for tag in tags:
        handle = await open_one(tag)
        await handle.result()
        ids.add(handle.id)
    return ids


async def count(
    open_one: Callable[[str], Awaitable[WorkflowHandle]], tags: list[str], mode: str
) -> Counter[str]:
    """What the workflows of ``tags`` leave in cycles (opened and evicted by those after
    them, or run to their end and dropped by their worker), or keep alive, by ``mode``."""
    if mode == LIVE:
        return await live_objects(functools.partial(open_all, open_one, tags))
    if mode == EVICTED:
        return await cyclic_garbage(functools.partial(open_all, open_one, tags))
    ids: set[str] = set()

    async def run() -> None:
        ids.update(await complete_all(open_one, tags))

    # The worker drops a closed workflow after the result is out: each drop is awaited.
    return await cyclic_garbage(run, lambda garbage: ids <= dropped_workflows(garbage))


def per_workflow(found: dict[str, Counter[str]], n: int) -> dict[str, float]:
    """Objects left per workflow of each kind, from the counts of ``n`` of each."""
    return {kind: sum(c.values()) / n for kind, c in found.items()}


def report(found: dict[str, Counter[str]], n: int, top: int = 12, mode: str = EVICTED) -> str:
    """Objects per workflow of each kind, the ratio to the floor's, and where the
    gather's differ most from the floor's."""
    per = per_workflow(found, n)
    lines = [f"{COUNTED[mode]} workflow:"]
    for kind, objects in per.items():
        lines.append(f"  {kind:<14} {objects:7.1f}   / floor {objects / per['floor']:.2f}")
    gap = Counter({t: found["gather"][t] - found["floor"][t] for t in found["gather"]})
    lines.append(f"\nwhere a gather leaves more than a floor workflow (per workflow, top {top}):")
    for name, extra in gap.most_common(top):
        lines.append(f"  {extra / n:+7.1f}  {name}")
    return "\n".join(lines)


async def main(n: int, cache: int, mode: str = EVICTED) -> None:
    """Open ``n`` workflows of each kind (run to their end, by ``mode``) on a worker
    caching ``cache`` (all of them, ``live``), and report."""
    if mode == LIVE:
        cache = n + 3 * cache  # room for the warm-up and the count: none is evicted
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp))
        try:
            client = await bench.client()
            # The gathers' worker converts as every mqgather process does.
            worker_client = await Client.connect(
                bench.address, data_converter=data_converter(None),
                grpc_compression=grpc_compression(),
            )  # fmt: skip
            spec = parse_config(tomllib.loads(CONFIG), "bench").aggregates["bench"]
            await ensure_search_attributes(client)
            run = f"{time.time_ns() % 10**6:06d}"
            found: dict[str, Counter[str]] = {}
            for kind in KINDS:
                queue = f"evictions-{kind.replace(' ', '-')}-{run}"
                if kind == "gather":
                    worker = build_worker(
                        worker_client, lambda: LocalQueueManager(bench.qm_path),
                        task_queue=queue, max_cached_gathers=cache, sandboxed=False,
                    )  # fmt: skip
                else:
                    worker = Worker(
                        client, task_queue=queue,
                        workflows=[TrivialLocalWorkflow, TrivialVisibleWorkflow],
                        activities=[nothing], activity_executor=ThreadPoolExecutor(4),
                        max_cached_workflows=cache, workflow_runner=UnsandboxedWorkflowRunner(),
                    )  # fmt: skip
                open_one = openers(client, spec, queue, mode == COMPLETED)[kind]
                warm_up = [f"w{run}{i}" for i in range(2 * cache if mode != LIVE else 10)]
                async with worker:
                    # Warm-up: the worker has run workflows of its kind before the count,
                    # and (unless live) the cache has filled and evicting started. Live,
                    # nothing reads a census of the warm-up's workflows: they are opened.
                    if mode == LIVE:
                        await open_all(open_one, warm_up)
                    else:
                        await count(open_one, warm_up, mode)
                    tags = [f"{run}{kind[0]}{i}" for i in range(n)]
                    found[kind] = await count(open_one, tags, mode)
                print(f"  {kind}: {per_workflow(found, n)[kind]:.1f} objects per workflow",
                      flush=True)  # fmt: skip
        finally:
            bench.close()
    print()
    print(report(found, n, mode=mode))
    per = per_workflow(found, n)
    for kind in ("visible floor", "floor"):
        record(Figure("evictions", f"{COUNTED[mode]} gather", per["gather"],
                      "objects", per[kind], f"a {kind} workflow"))  # fmt: skip


if __name__ == "__main__":
    parser = command_line(__doc__)
    parser.add_argument("-n", type=int, default=300, help="workflows of each kind counted")
    parser.add_argument("--cache", type=int, default=10, help="workflows each worker caches")
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument(
        "--completed", action="store_const", dest="mode", const=COMPLETED, default=EVICTED,
        help="run each workflow to its end and count what it leaves when its worker drops it",
    )  # fmt: skip
    modes.add_argument(
        "--live", action="store_const", dest="mode", const=LIVE,
        help="cache every workflow opened and count what each keeps alive",
    )  # fmt: skip
    ns = parser.parse_args()
    with exclusive():
        asyncio.run(main(ns.n, ns.cache, ns.mode))
