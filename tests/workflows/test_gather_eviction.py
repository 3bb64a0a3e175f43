"""A gather evicted from its worker's cache while it waits under its durable timer
leaves none of its coroutines' frames for the garbage collector, nor the SDK's that ran
them (``run`` ends on a cancellation the SDK drops while it evicts, instead of raising
again its refusal to cancel the timer, which the run task would keep), nor its
state: what only the state holds is freed when the gather is evicted. Nor its aggregate's
spec: the gathers of one aggregate share one. A gather that completes lets go of its state
at the eviction that follows its close."""

import asyncio
import contextlib
import gc
import sys
import types
from collections.abc import Iterator

from mqgather.config import AggregateSpec, LegSpec
from tests.harness import pipeline, status, until
from workers.worker import build_worker
from workflows.gather import GatherWorkflow, evicting, unwound
from workflows.models import GatherState, Reply

#: Modules whose frames an evicted gather left when its run task kept an error.
WORKFLOW_MODULES = ("workflows.gather", "temporalio.worker._workflow_instance")
LEGS = (LegSpec(name="CREDIT", sequence=10), LegSpec(name="STOCK", sequence=20),
        LegSpec(name="TAX", sequence=30))  # fmt: skip


@contextlib.contextmanager
def collector_saving_garbage() -> Iterator[list]:
    """The collector off, and what each collection inside would free kept in the list
    yielded (``gc.garbage``) instead; the collector as it was afterwards."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def _raised_during_another() -> BaseException:
    try:
        try:
            raise asyncio.CancelledError
        except asyncio.CancelledError as first:
            raise KeyboardInterrupt from first
    except KeyboardInterrupt as exc:
        return exc


def test_unwound_is_the_same_exception_without_its_traceback_or_what_it_was_raised_during():
    exc = _raised_during_another()
    assert exc.__traceback__ is not None and exc.__context__ is not None
    assert exc.__cause__ is not None
    assert unwound(exc) is exc
    assert exc.__traceback__ is None and exc.__context__ is None and exc.__cause__ is None


def test_evicting_knows_the_sdks_refusal_while_it_evicts_and_nothing_else():
    # Pins the SDK's class by name: an upgrade that renames it fails here, not quietly.
    from temporalio.worker._workflow_instance import _WorkflowBeingEvictedError

    assert evicting(_WorkflowBeingEvictedError("Ignoring a command while evicting"))
    look_alike = type("_WorkflowBeingEvictedError", (BaseException,), {})
    assert not evicting(look_alike())
    assert not evicting(asyncio.CancelledError())
    assert not evicting(GeneratorExit())


async def test_an_evicted_gather_leaves_no_frame_of_its_coroutines_nor_its_state(
    temporal_env, tmp_path
):
    spec = AggregateSpec(name="evicted", legs=LEGS, timeout_seconds=3600)
    async with pipeline(temporal_env.client, tmp_path, [spec], run_worker=False) as p:
        # Room for one gather: each gather opened evicts the one before it while it waits
        # under its timer for two legs.
        worker = build_worker(temporal_env.client, p.connect, task_queue=p.task_queue,
                              max_cached_gathers=1, sandboxed=False)  # fmt: skip
        async with worker:
            gathers = []
            with collector_saving_garbage() as garbage:
                for _ in range(4):
                    g = await p.scatter(spec)
                    p.reply(spec, g.correl_id, "CREDIT", b"{}")
                    await until(lambda g=g: status(p.handle(spec, g.correl_id)),
                                lambda s: len(s.legs_received) == 1)  # fmt: skip
                    gathers.append(g)
                gc.collect()
                frames = [o for o in garbage if isinstance(o, types.FrameType)]
                states = [o for o in garbage if isinstance(o, GatherState | Reply)]
                specs = [o for o in garbage if isinstance(o, AggregateSpec | LegSpec)]
            for g in gathers:
                await p.handle(spec, g.correl_id).terminate("test over")
    left = {f.f_code.co_name for f in frames if f.f_code.co_filename in _workflow_files()}
    # None of the gather's coroutines (the waits, the timer's cancel), nor the SDK's that
    # ran it: the run task ends on a cancellation the SDK ignores while it evicts, so no
    # error with their frames stays with that task.
    assert not left, left
    # Each evicted gather held its state and the CREDIT reply in it; neither waited for
    # the collector.
    assert not states, [type(o).__name__ for o in states]
    # Each gather's start input was decoded apart, its spec equal to the others': the
    # one shared spec stays, none is left to the collector.
    assert not specs, [type(o).__name__ for o in specs]


async def test_a_completed_gather_lets_go_of_its_state_when_evicted(temporal_env, tmp_path):
    spec = AggregateSpec(name="completed", legs=LEGS, timeout_seconds=3600)
    async with pipeline(temporal_env.client, tmp_path, [spec], run_worker=False) as p:
        worker = build_worker(temporal_env.client, p.connect, task_queue=p.task_queue,
                              sandboxed=False)  # fmt: skip
        async with worker:
            with collector_saving_garbage() as garbage:
                ids = set()
                for _ in range(3):
                    g = await p.scatter(spec)
                    for leg in LEGS:
                        p.reply(spec, g.correl_id, leg.name, b"{}")
                    assert (await p.result(spec, g.correl_id)).state == "COMPLETE"
                    ids.add(g.gather_id)

                async def dropped() -> set[str]:
                    # The SDK drops a closed gather's instance at its eviction; with the
                    # collector off, the collection here keeps what it would free.
                    gc.collect()
                    return {o.id for o in garbage if isinstance(o, GatherWorkflow)}

                # The eviction itself, whatever the gather does at it, is awaited.
                await until(dropped, lambda left: ids <= left)
                states = [o for o in garbage if isinstance(o, GatherState | Reply)]
    # Each gather held its state and three replies until the end; the queries that may
    # reach it before the eviction read them, the collector never has to.
    assert not states, [type(o).__name__ for o in states]


def _workflow_files() -> set[str]:
    """The gather's source, and the SDK's that runs a workflow instance."""
    return {sys.modules[m].__file__ or "" for m in WORKFLOW_MODULES}
