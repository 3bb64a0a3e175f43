"""Whether a worker still holds a gather's workflow task, read from the real server's
history (asked from a thread, as an activity asks)."""

from __future__ import annotations

import asyncio

from mqgather.config import AggregateSpec
from tests.harness import THREE_LEGS, pipeline, status, until
from workers.tasks import PAGE, TaskWatch
from workers.worker import build_worker


async def test_a_worker_holds_a_waiting_gathers_task_until_another_takes_it_or_it_ends(
    temporal_env, tmp_path
):
    spec = AggregateSpec(name="tasks", legs=THREE_LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec], run_worker=False) as p:
        worker = build_worker(p.client, p.connect, task_queue=p.task_queue)
        identity = worker.config()["identity"]
        assert identity and identity.startswith(f"{p.client.identity}/")
        ours, another = TaskWatch(p.client, identity), TaskWatch(p.client, "elsewhere")
        async with worker:
            sent = await p.scatter(spec)
            p.reply(spec, sent.correl_id, "CREDIT", b"{}")
            handle = p.handle(spec, sent.correl_id)
            await until(lambda: status(handle), lambda s: s.legs_received == ["CREDIT"])
            run_id = (await handle.describe()).run_id
            # Its last task, started by this worker, completed; no other began since.
            assert await asyncio.to_thread(ours.lost, handle.id, run_id) is None
            taken = await asyncio.to_thread(another.lost, handle.id, run_id)
            assert taken is not None and f"worker {identity!r} took its workflow task" in taken
            for leg in ("STOCK", "TAX"):
                p.reply(spec, sent.correl_id, leg, b"{}")
            await p.result(spec, sent.correl_id)
        ended = await asyncio.to_thread(ours.lost, handle.id, run_id)
        assert ended is not None and ended.startswith("its run ended (completed) at ")
        missing = await asyncio.to_thread(ours.lost, "gather:none", run_id)
        assert missing is not None and missing.startswith("Temporal could not be asked")


async def test_the_newest_task_is_found_behind_pages_of_later_events(temporal_env, tmp_path):
    """A flood of signals after its worker's last task: the history is read back page by
    page until that task's start."""
    spec = AggregateSpec(name="tasks-flood", legs=THREE_LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec], run_worker=False) as p:
        worker = build_worker(p.client, p.connect, task_queue=p.task_queue)
        async with worker:
            sent = await p.scatter(spec)
            handle = p.handle(spec, sent.correl_id)
            await until(lambda: status(handle), lambda s: s.state == "OPEN")
        for n in range(3 * PAGE):  # no worker takes them: each stays an event of its own
            await handle.signal(f"unheard-{n}")
        run_id = (await handle.describe()).run_id
        ours = TaskWatch(p.client, worker.config()["identity"] or "")
        assert await asyncio.to_thread(ours.lost, handle.id, run_id) is None
        taken = await asyncio.to_thread(TaskWatch(p.client, "elsewhere").lost, handle.id, run_id)
        assert taken is not None and "took its workflow task" in taken
        await handle.terminate(reason="test over")


def test_a_watch_made_outside_an_event_loop_cannot_confirm_a_task(temporal_env):
    watch = TaskWatch(temporal_env.client, "me")
    assert "outside an event loop" in (watch.lost("gather:a", "r") or "")


def test_a_watch_whose_worker_stopped_cannot_confirm_a_task(temporal_env):
    loop = asyncio.new_event_loop()
    watch = loop.run_until_complete(_watch(temporal_env.client))
    loop.close()
    assert watch.lost("gather:a", "r") == "the worker has stopped, so Temporal cannot be asked"


async def _watch(client) -> TaskWatch:
    return TaskWatch(client, "me")
