"""bench.evictions counts what is left in reference cycles, and only that, and leaves the
collector as it found it; run to their end, the workflows are counted once their worker
has dropped each."""

from __future__ import annotations

import asyncio
import gc
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from bench.evictions import (
    COMPLETED,
    NotSettled,
    count,
    cyclic_garbage,
    dropped_workflows,
    live_objects,
    openers,
    report,
)
from bench.trivial import TrivialLocalWorkflow, nothing
from mqgather.config import AggregateSpec, LegSpec


class Node:
    """An object of a type no other code makes, in a cycle of its own."""

    def __init__(self) -> None:
        self.me = self


class Leaf:
    """An object of a type no other code makes, in no cycle."""


async def test_objects_left_in_cycles_are_counted_by_type_and_the_rest_are_not() -> None:
    kept: list[Node] = []

    async def leave_garbage() -> None:
        for _ in range(40):
            Node()  # a cycle: only a collection frees it
        for _ in range(25):
            leaf = Leaf()  # freed at once by its count of references
        del leaf
        kept.extend(Node() for _ in range(5))  # in cycles, but still reachable

    found = await cyclic_garbage(leave_garbage)
    assert found[f"{Node.__module__}.{Node.__qualname__}"] == 40
    assert found[f"{Leaf.__module__}.{Leaf.__qualname__}"] == 0
    assert len(kept) == 5


async def test_the_collector_is_left_as_it_was() -> None:
    async def nothing() -> None:
        assert not gc.isenabled()  # off while the workflows open

    assert gc.isenabled()
    await cyclic_garbage(nothing)
    assert gc.isenabled() and gc.get_debug() == 0 and gc.garbage == []
    gc.disable()
    try:
        await cyclic_garbage(nothing)
        assert not gc.isenabled()
    finally:
        gc.enable()


async def test_the_count_waits_until_what_it_waits_for_has_been_freed() -> None:
    later: list[Node] = []

    async def run() -> None:
        later.extend(Node() for _ in range(7))  # reachable until the task below lets go

    async def let_go() -> None:
        for _ in range(5):
            await asyncio.sleep(0)  # a few turns of the loop after the run is over
        later.clear()

    def freed(garbage: list[object]) -> bool:
        return sum(isinstance(o, Node) for o in garbage) == 7

    letting_go = asyncio.ensure_future(let_go())
    found = await cyclic_garbage(run, freed)
    await letting_go
    assert found[f"{Node.__module__}.{Node.__qualname__}"] == 7


async def test_a_count_whose_wait_never_ends_says_so_and_leaves_the_collector_as_it_was():
    async def nothing_left() -> None:
        pass

    with pytest.raises(NotSettled, match="did not happen in 0 s"):
        await cyclic_garbage(nothing_left, lambda garbage: False, wait=0.05)
    assert gc.isenabled() and gc.get_debug() == 0 and gc.garbage == []


async def test_workflows_run_to_their_end_are_each_counted_as_dropped_by_their_worker(
    temporal_env,
) -> None:
    # Here the worker drops each closed workflow before the count's first collection, so
    # this shows the completed mode's openers and the drop's detection; that the count
    # waits for a drop that comes later is shown by the wait's own test above.
    client = temporal_env.client
    queue = f"evictions-completed-{uuid.uuid4()}"
    spec = AggregateSpec(name="evictions", legs=(LegSpec(name="CREDIT", sequence=10),))
    open_one = openers(client, spec, queue, completed=True)["floor"]
    tags = [f"{uuid.uuid4().hex[:8]}{i}" for i in range(4)]
    async with Worker(
        client, task_queue=queue, workflows=[TrivialLocalWorkflow], activities=[nothing],
        activity_executor=ThreadPoolExecutor(1), max_cached_workflows=10,
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):  # fmt: skip
        found = await count(open_one, tags, COMPLETED)
    # Each closed workflow's instance, with the cache room to keep it, was dropped by its
    # worker and counted; and each had completed, not waited for its signal.
    assert found["temporalio.worker._workflow_instance._WorkflowInstanceImpl"] == len(tags)
    for tag in tags:
        assert await client.get_workflow_handle(f"floor-{tag}").result() is True


async def test_what_is_kept_alive_is_counted_and_what_is_freed_is_not() -> None:
    kept: list[Node] = []

    async def keep_some() -> None:
        kept.extend(Node() for _ in range(6))  # alive, in cycles of their own
        for _ in range(30):
            Node()  # freed: only a collection does it, and one comes before the count
        Leaf()  # freed at once

    found = await live_objects(keep_some)
    assert found[f"{Node.__module__}.{Node.__qualname__}"] == 6
    assert found[f"{Leaf.__module__}.{Leaf.__qualname__}"] == 0


def test_the_ids_of_dropped_workflows_are_read_from_their_instances_only() -> None:
    class Info:
        workflow_id = "floor-1"

    class _WorkflowInstanceImpl:  # as the SDK names a workflow's instance
        _info = Info()

    class Other:
        _info = Info()

    assert dropped_workflows([_WorkflowInstanceImpl(), Other(), object()]) == {"floor-1"}
    assert dropped_workflows([Other()]) == set()


def test_the_report_sets_each_kind_against_the_floor_and_names_the_gap() -> None:
    found = {
        "gather": Counter({"builtins.frame": 1300, "builtins.list": 2400, "x.Same": 500}),
        "visible floor": Counter({"builtins.list": 900, "x.Same": 500}),
        "floor": Counter({"builtins.list": 800, "x.Same": 500}),
    }
    text = report(found, n=100, top=2)
    assert "gather            42.0   / floor 3.23" in text
    assert "floor             13.0   / floor 1.00" in text
    assert "+16.0  builtins.list" in text and "+13.0  builtins.frame" in text
    assert "x.Same" not in text  # no gap: not among the top two
