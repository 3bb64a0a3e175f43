"""Whether a worker still holds a gather's workflow task, read from the real server's
history (asked from a thread, as an activity asks)."""

from __future__ import annotations

import asyncio

from mqgather.config import AggregateSpec
from tests.harness import THREE_LEGS, pipeline, status, until
from workers.tasks import TaskWatch
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
