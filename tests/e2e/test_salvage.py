"""An operator terminates a gather before it answered (the Temporal UI's Terminate): the
replies it took had left the reply queue. ``mqgather salvage`` sends each where it
belongs, intact and once; what the gather's final carried stays where it is."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import re
import threading
from datetime import UTC, datetime

import pytest
from temporalio.api.enums.v1 import EventType

from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage
from mqgather.config import AggregateSpec
from mqgather.names import PROP_REASON
from tests.conftest import standin_connector
from tests.e2e.test_operators import cli
from tests.harness import THREE_LEGS, pipeline, status, until
from workers.salvage import salvage, unplaced_runs

QUEUES = ("ORDER.RESPONSE", "GATHER.TIMEOUT", "GATHER.LATE", "GATHER.UNKNOWN",
          "GATHER.DUPLICATE", "GATHER.FAILURE")  # fmt: skip


async def _salvage(p, spec: AggregateSpec, correl: bytes, *more: str, connect=None) -> list[dict]:
    """``mqgather salvage`` as an operator runs it; over ``connect`` (the IBM MQ adapter
    over the stand-in, which lives in this process) the same code, called here."""
    if connect is not None:
        done, send = [], "--dry-run" not in more
        for ended in await unplaced_runs(p.client, p.handle(spec, correl)):
            done += await asyncio.to_thread(salvage, ended.found, connect, send=send,
                                            run_id=ended.run_id)  # fmt: skip
        return [dataclasses.asdict(item) for item in done]
    out = await cli(p.client, "salvage", f"hex:{correl.hex()}", "--aggregate", spec.name,
                    "--mq", f"local:{p.path}", "--json", *more)  # fmt: skip
    assert out.returncode == 0 and b"Traceback" not in out.stderr, out.stderr
    return [json.loads(line) for line in out.stdout.decode().splitlines()]


async def _terminated(handle, reason: str) -> None:
    """Terminate the run once no workflow task waits for it: the gather has taken what
    came (a run ended with one waiting is read too: the tests that end one so)."""

    async def last() -> EventType:
        return [e async for e in handle.fetch_history_events()][-1].event_type

    waiting = (EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
               EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED)  # fmt: skip
    await until(last, lambda kind: kind not in waiting)
    await handle.terminate(reason=reason)


async def _terminated_with_credit(p, spec: AggregateSpec):
    """A gather that took its CREDIT reply, then terminated by hand: (what scatter sent,
    the reply, the gather's handle)."""
    sent = await p.scatter(spec)
    credit = p.reply(spec, sent.correl_id, "CREDIT", b'{"c":1}')
    handle = p.handle(spec, sent.correl_id)
    await until(lambda: status(handle), lambda s: s.legs_received == ["CREDIT"])
    await _terminated(handle, "by hand")
    return sent, credit, handle


async def _listed_as_terminated(client, handle) -> None:
    """Wait until visibility lists the run as terminated (it may a moment after the end)."""

    async def listed() -> int:
        query = f"WorkflowId = '{handle.id}' AND ExecutionStatus = 'Terminated'"
        return len([run async for run in client.list_workflows(query)])

    await until(listed, lambda n: n == 1)


async def _signals(handle) -> int:
    """How many signals the run's history holds."""
    signalled = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    return len([e async for e in handle.fetch_history_events() if e.event_type == signalled])


def _collector_salvage(c, destination: str) -> tuple[str, ...]:
    """``mqgather collector salvage`` of a destination, as JSON."""
    return ("collector", "salvage", c.spec.name, destination, "--mq", f"local:{c.path}", "--json")


async def _collector_terminated_holding_a(c):
    """France's collector, its open batch holding order A, terminated by hand and listed
    so; its handle."""
    from tests.collecting import order
    from workflows.collect_models import collector_id

    c.rule("France", "CMAOUT.FR", max_messages=3, max_delay_seconds=300)
    c.send("France", order("A"))
    await until(lambda: c.status("France"), lambda s: s.open_messages == 1, timeout=30)
    handle = c.client.get_workflow_handle(collector_id(c.spec.name, "France"))
    await _terminated(handle, "by hand")
    await _listed_as_terminated(c.client, handle)
    return handle


def _taken(p, queue: str) -> list[MQMessage]:
    taken = []
    while not p.empty(queue):
        taken.append(p.qm.get(queue, syncpoint=False))
    return taken


@pytest.mark.parametrize("over", ["embedded", "ibmmq"])
async def test_a_terminated_gathers_replies_go_late_once_intact(temporal_env, tmp_path, over):
    """CREDIT inline (with a property and an EBCDIC body) and STOCK held: both had left
    the reply queue when the gather was terminated. A dry run sends nothing; salvage puts
    each on the late queue as it came, and a second salvage sends nothing more."""
    spec = AggregateSpec(name="salvage", legs=THREE_LEGS, timeout_seconds=300,
                         inline_reply_bytes=1024)  # fmt: skip
    connect = standin_connector(tmp_path / "qm.db") if over == "ibmmq" else None
    transport = (lambda _: connect) if connect is not None else None
    async with pipeline(temporal_env.client, tmp_path, [spec], transport=transport) as p:
        sent = await p.scatter(spec)
        ebcdic = "Grüße".encode("cp500")
        credit = p.put(spec.reply_queue, MQMessage(
            correl_id=sent.correl_id, coded_char_set_id=500, body=ebcdic,
            properties={spec.leg_property: "CREDIT", "region": "EU"}))  # fmt: skip
        stock = p.reply(spec, sent.correl_id, "STOCK", b'"' + b"s" * 4096 + b'"')
        handle = p.handle(spec, sent.correl_id)
        await until(lambda: status(handle), lambda s: s.legs_received == ["CREDIT", "STOCK"])
        await _terminated(handle, "stuck, by hand")
        dry = await _salvage(p, spec, sent.correl_id, "--dry-run", connect=connect)
        assert all(p.empty(q) for q in QUEUES) and not p.empty(spec.hold_queue)
        done = await _salvage(p, spec, sent.correl_id, connect=connect)
        late = {m.msg_id: m for m in _taken(p, "GATHER.LATE")}
        again = await _salvage(p, spec, sent.correl_id, connect=connect)
        assert all(p.empty(q) for q in (*QUEUES, spec.hold_queue, spec.reply_queue))
    assert sorted((r["leg"], r["held"], r["verdict"]) for r in dry) == [
        ("CREDIT", False, "to send"), ("STOCK", True, "to send")]  # fmt: skip
    assert sorted(r["verdict"] for r in done) == ["sent", "sent"]
    assert {r["queue"] for r in done} == {"GATHER.LATE"}
    assert set(late) == {credit.msg_id, stock.msg_id}
    got = late[credit.msg_id]
    assert (got.body, got.coded_char_set_id, got.correl_id) == (ebcdic, 500, sent.correl_id)
    assert got.properties["region"] == "EU" and "ended without answering" in got.properties[
        PROP_REASON]  # fmt: skip
    assert late[stock.msg_id].body == stock.body
    assert sorted(r["verdict"] for r in again) == ["forwarded to GATHER.LATE"] * 2


async def test_replies_waiting_for_a_registration_go_to_the_unknown_queue(temporal_env, tmp_path):
    spec = AggregateSpec(name="salvage-early", legs=THREE_LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        correl = b"NEVER-REGISTERED".ljust(24, b"\0")
        early = p.reply(spec, correl, "TAX", b'{"t":1}')
        handle = p.handle(spec, correl)
        await until(lambda: status(handle), lambda s: s.held == 1)
        await _terminated(handle, "by hand")
        done = await _salvage(p, spec, correl)
        unknown = _taken(p, "GATHER.UNKNOWN")
        assert all(p.empty(q) for q in QUEUES)
    assert [(r["queue"], r["verdict"]) for r in done] == [("GATHER.UNKNOWN", "sent")]
    assert [(m.msg_id, m.body) for m in unknown] == [(early.msg_id, early.body)]


async def test_what_the_final_carried_stays_there(temporal_env, tmp_path):
    """A gather that answered and waits out its late window is terminated: its replies
    are in its response, and salvage sends none of them again."""
    spec = AggregateSpec(name="salvage-late", legs=THREE_LEGS, timeout_seconds=300,
                         late_window_seconds=300)  # fmt: skip
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        for leg in ("CREDIT", "STOCK", "TAX"):
            p.reply(spec, sent.correl_id, leg, b"{}")
        response = await p.wait_message("ORDER.RESPONSE")
        handle = p.handle(spec, sent.correl_id)
        await _terminated(handle, "by hand, in the late window")
        done = await _salvage(p, spec, sent.correl_id)
        assert all(p.empty(q) for q in QUEUES)
    assert json.loads(response.body)["state"] == "COMPLETE"
    assert [r["verdict"] for r in done] == ["carried by its final"] * 3


async def test_salvage_refuses_a_running_gather_and_says_why(temporal_env, tmp_path):
    spec = AggregateSpec(name="salvage-running", legs=THREE_LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        out = await cli(p.client, "salvage", f"hex:{sent.correl_id.hex()}", "--aggregate",
                        spec.name, "--mq", f"local:{p.path}")  # fmt: skip
    assert out.returncode != 0 and b"Traceback" not in out.stderr
    assert b"is running: it places its replies itself" in out.stderr


async def test_a_terminated_collectors_messages_are_put_back_and_batched_once(
    temporal_env, tmp_path
):
    """A and B wait in the open batch when the collector is terminated by hand. Salvage
    puts both back on the input queue as they came; the destination's next run batches
    them with C, each once, and a second salvage puts nothing back."""
    from tests.collecting import collecting, order
    from workflows.collect_models import collector_id

    async with collecting(temporal_env.client, tmp_path) as c:
        c.rule("France", "CMAOUT.FR", max_messages=3, max_delay_seconds=300)
        for text in ("A", "B"):
            c.send("France", order(text))
        await until(lambda: c.status("France"), lambda s: s.open_messages == 2, timeout=30)
        handle = c.client.get_workflow_handle(collector_id(c.spec.name, "France"))
        await _terminated(handle, "by hand")

        await _listed_as_terminated(c.client, handle)
        args = _collector_salvage(c, "France")
        done = await cli(c.client, *args)
        c.send("France", order("C"))
        batch = await c.take("CMAOUT.FR")
        again = await cli(c.client, *args)
        assert c.depth("CMAOUT.FR") == 0 and c.depth(c.spec.input_queue) == 0
    for out in (done, again):
        assert out.returncode == 0 and b"Traceback" not in out.stderr, out.stderr
    first = [json.loads(line) for line in done.stdout.decode().splitlines()]
    second = [json.loads(line) for line in again.stdout.decode().splitlines()]
    assert [(m["queue"], m["verdict"]) for m in first] == [(c.spec.input_queue, "sent")] * 2
    assert "sent" not in {m["verdict"] for m in second} and len(second) == 2
    texts = sorted(part.split("</Test>")[0] for part in batch.body.decode().split("<Test>")[1:])
    assert texts == ["A", "B", "C"]


async def test_two_terminated_runs_of_a_collector_are_put_back_oldest_first(temporal_env, tmp_path):
    """A and B wait in the first run when it is terminated, C and D in the next run (C
    started it). One salvage puts them back as they first came, A, B, C, D: the destination
    receives its messages in the order it sent them, not the newer run's first."""
    from tests.collecting import collecting, order
    from workflows.collect_models import collector_id

    async with collecting(temporal_env.client, tmp_path) as c:
        c.rule("France", "CMAOUT.FR", max_messages=5, max_delay_seconds=300)
        handle = c.client.get_workflow_handle(collector_id(c.spec.name, "France"))
        sent = []
        for pair in (("A", "B"), ("C", "D")):
            for text in pair:
                sent.append("hex:" + c.send("France", order(text)).msg_id.hex())
            await until(lambda: c.status("France"), lambda s: s.open_messages == 2, timeout=30)
            await _terminated(handle, "by hand")

        async def listed() -> int:
            query = f"WorkflowId = '{handle.id}' AND ExecutionStatus = 'Terminated'"
            return len([run async for run in c.client.list_workflows(query)])

        await until(listed, lambda n: n == 2)
        done = await cli(c.client, *_collector_salvage(c, "France"))
        c.send("France", order("E"))
        batch = await c.take("CMAOUT.FR")
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
    put_back = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert [m["verdict"] for m in put_back] == ["sent"] * 4
    assert [m["msg_id"] for m in put_back] == sent
    texts = [part.split("</Test>")[0] for part in batch.body.decode().split("<Test>")[1:]]
    assert texts == ["A", "B", "C", "D", "E"]


async def test_properties_that_plain_json_cannot_carry_are_salvaged_as_they_came(
    temporal_env, tmp_path
):
    """NaN, infinities and text that is not UTF-8 travel through the gather's history and
    salvage's query, and reach the late queue as MQ gave them."""
    spec = AggregateSpec(name="salvage-odd", legs=THREE_LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        credit = p.reply(spec, sent.correl_id, "CREDIT", b'{"c":1}', score=math.nan,
                         hi=math.inf, lo=-math.inf, name="caf\udce9")  # fmt: skip
        handle = p.handle(spec, sent.correl_id)
        await until(lambda: status(handle), lambda s: s.legs_received == ["CREDIT"])
        await _terminated(handle, "by hand")
        done = await _salvage(p, spec, sent.correl_id)
        late = _taken(p, "GATHER.LATE")
        assert all(p.empty(q) for q in QUEUES)
    assert [(r["leg"], r["verdict"]) for r in done] == [("CREDIT", "sent")]
    assert [(m.msg_id, m.body) for m in late] == [(credit.msg_id, credit.body)]
    props = late[0].properties
    assert math.isnan(props["score"]) and (props["hi"], props["lo"]) == (math.inf, -math.inf)
    assert props["name"] == "caf\udce9"


async def test_a_terminated_collectors_held_message_is_put_back_whole_and_batched_once(
    temporal_env, tmp_path
):
    """B is larger than the collector carries in a signal: it waits on the hold queue for
    its batch. Salvage moves it back to the input queue whole, in the unit of work that
    records it, and the next run batches it with A and C."""
    from tests.collecting import SPEC, collecting, order
    from workflows.collect_models import collector_id

    spec = SPEC.model_copy(update={"inline_bytes": 1024})
    async with collecting(temporal_env.client, tmp_path, spec=spec) as c:
        c.rule("France", "CMAOUT.FR", max_messages=3, max_delay_seconds=300)
        c.send("France", order("A"))
        c.send("France", order("B" * 4096), score=math.nan)
        await until(lambda: c.status("France"), lambda s: s.open_messages == 2, timeout=30)
        assert c.depth(c.spec.hold_queue) == 1
        handle = c.client.get_workflow_handle(collector_id(c.spec.name, "France"))
        await _terminated(handle, "by hand")

        await _listed_as_terminated(c.client, handle)
        args = _collector_salvage(c, "France")
        done = await cli(c.client, *args)
        assert c.depth(c.spec.hold_queue) <= 1  # the bridge may have held it again
        c.send("France", order("C"))
        batch = await c.take("CMAOUT.FR")
        again = await cli(c.client, *args)
        assert c.depth("CMAOUT.FR") == 0 and c.depth(c.spec.input_queue) == 0
        assert c.depth(c.spec.hold_queue) == 0
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
    first = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert sorted((m["held"], m["verdict"]) for m in first) == [(False, "sent"), (True, "sent")]
    assert "sent" not in {
        json.loads(line)["verdict"] for line in again.stdout.decode().splitlines()
    }
    texts = sorted(part.split("</Test>")[0] for part in batch.body.decode().split("<Test>")[1:])
    assert texts == ["A", "B" * 4096, "C"]


@pytest.mark.parametrize("worker_back", [True, False])
async def test_a_gather_ended_while_its_task_waited_is_salvaged_whole(
    temporal_env, tmp_path, worker_back
):
    """The workers are down when STOCK comes: its task waits to start, and an operator
    terminates the stuck gather. The server replays no such run for a query, so salvage
    replays its history itself, STOCK handed over as the next task would have: both
    replies go late, whether a worker is back or not."""
    from workers.worker import build_worker

    spec = AggregateSpec(name="salvage-waiting", legs=THREE_LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec], run_worker=False) as p:
        worker = build_worker(p.client, p.connect, task_queue=p.task_queue)
        running = asyncio.create_task(worker.run())
        sent = await p.scatter(spec)
        credit = p.reply(spec, sent.correl_id, "CREDIT", b'{"c":1}')
        handle = p.handle(spec, sent.correl_id)
        await until(lambda: status(handle), lambda s: s.legs_received == ["CREDIT"])
        await worker.shutdown()
        await running
        stock = p.reply(spec, sent.correl_id, "STOCK", b'{"s":1}')

        await until(
            lambda: _signals(handle), lambda n: n == 3
        )  # the registration, CREDIT, then STOCK
        assert p.empty(spec.reply_queue)  # STOCK left the reply queue, for the history
        await handle.terminate(reason="stuck while the workers were down")
        if worker_back:
            worker = build_worker(p.client, p.connect, task_queue=p.task_queue)
            running = asyncio.create_task(worker.run())
        try:
            dry = await _salvage(p, spec, sent.correl_id, "--dry-run")
            done = await _salvage(p, spec, sent.correl_id)
            late = {m.msg_id: m for m in _taken(p, "GATHER.LATE")}
            again = await _salvage(p, spec, sent.correl_id)
            assert all(p.empty(q) for q in QUEUES)
        finally:
            if worker_back:
                await worker.shutdown()
                await running
    assert sorted((r["leg"], r["verdict"]) for r in dry) == [
        ("CREDIT", "to send"), ("STOCK", "to send")]  # fmt: skip
    assert sorted(r["verdict"] for r in done) == ["sent", "sent"]
    assert {k: m.body for k, m in late.items()} == {credit.msg_id: credit.body,
                                                    stock.msg_id: stock.body}  # fmt: skip
    assert sorted(r["verdict"] for r in again) == ["forwarded to GATHER.LATE"] * 2


async def test_a_collector_ended_while_its_task_waited_puts_back_what_came_last_too(
    temporal_env, tmp_path
):
    """The workers are down when C comes, the third of a batch of three: the task that
    would close the batch waits, and the collector is terminated. Salvage reads C too,
    puts A, B and C back, and the next run batches them once."""
    from tests.collecting import collecting, order
    from workers.worker import build_worker
    from workflows.collect_models import collector_id

    async with collecting(temporal_env.client, tmp_path) as c:
        c.rule("France", "CMAOUT.FR", max_messages=3, max_delay_seconds=300)
        for text in ("A", "B"):
            c.send("France", order(text))
        await until(lambda: c.status("France"), lambda s: s.open_messages == 2, timeout=30)
        assert c.worker is not None
        await c.worker.shutdown()
        handle = c.client.get_workflow_handle(collector_id(c.spec.name, "France"))
        c.send("France", order("C"))

        await until(
            lambda: _signals(handle), lambda n: n >= 2
        )  # A and B may have come in one signal
        await until(lambda: asyncio.to_thread(c.depth, c.spec.input_queue), lambda n: n == 0)
        await handle.terminate(reason="stuck while the workers were down")

        await _listed_as_terminated(c.client, handle)
        args = _collector_salvage(c, "France")
        done = await cli(c.client, *args)
        worker = build_worker(c.client, c.connect, task_queue=c.task_queue)
        running = asyncio.create_task(worker.run())
        try:
            batch = await c.take("CMAOUT.FR")
            assert c.depth("CMAOUT.FR") == 0 and c.depth(c.spec.input_queue) == 0
        finally:
            await worker.shutdown()
            await running
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
    first = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert [m["verdict"] for m in first] == ["sent"] * 3
    texts = sorted(part.split("</Test>")[0] for part in batch.body.decode().split("<Test>")[1:])
    assert texts == ["A", "B", "C"]


async def test_a_history_that_does_not_replay_here_is_asked_of_a_worker(
    temporal_env, tmp_path, monkeypatch
):
    """A gather run by another release may not replay against this one's code: its own
    worker is asked instead; with neither, the error names both and what to do."""
    import workers.salvage as salvaging
    from mqgather.errors import MQGatherError

    async def other_release(handle, result_type):
        raise MQGatherError(f"{handle.id}: its history did not replay against this release")

    monkeypatch.setattr(salvaging, "replayed_answer", other_release)
    spec = AggregateSpec(name="salvage-asked", legs=THREE_LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        _, credit, handle = await _terminated_with_credit(p, spec)
        (asked,) = await unplaced_runs(p.client, handle)
    # The pipeline's worker has stopped: nobody answers the query now.
    monkeypatch.setattr(salvaging, "QUERY_SECONDS", 1.0)
    with pytest.raises(MQGatherError) as refused:
        await unplaced_runs(p.client, handle)
    assert [r.message.msg_id for r in asked.found.legs] == [credit.msg_id]
    assert "did not replay against this release" in str(refused.value)
    assert "start a worker of the release that ran it" in str(refused.value)


async def test_replies_a_reset_left_in_the_run_it_ended_go_late_once_the_new_run_answered(
    temporal_env, tmp_path
):
    """An operator resets a running gather to its first task without applying signals
    again: CREDIT, which came after that point, stays in the run the reset ended. The new
    run takes STOCK and TAX and answers without CREDIT. Salvage refuses while it runs;
    then it finds the ended run and sends CREDIT late, once, and nothing the final carried."""
    from tests.harness import reset_to_first_task
    from workflows.models import GatherResult

    spec = AggregateSpec(name="salvage-reset", legs=THREE_LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        handle = p.handle(spec, sent.correl_id)
        await until(lambda: status(handle), lambda s: s.legs_expected == ["CREDIT", "STOCK", "TAX"])
        credit = p.reply(spec, sent.correl_id, "CREDIT", b'{"c":1}')
        await until(lambda: status(handle), lambda s: s.legs_received == ["CREDIT"])
        run = await reset_to_first_task(p.client, handle, exclude_signals=True)
        after = p.client.get_workflow_handle(handle.id, run_id=run, result_type=GatherResult)
        assert (await status(after)).legs_received == []
        running = await cli(p.client, "salvage", f"hex:{sent.correl_id.hex()}", "--aggregate",
                            spec.name, "--mq", f"local:{p.path}")  # fmt: skip
        for leg in ("STOCK", "TAX"):
            p.reply(spec, sent.correl_id, leg, b"{}")
        await until(lambda: status(after), lambda s: s.legs_received == ["STOCK", "TAX"])
        await after.cancel()
        result = await after.result()
        partial = await p.wait_message("GATHER.TIMEOUT")
        done = await _salvage(p, spec, sent.correl_id)
        late = _taken(p, "GATHER.LATE")
        again = await _salvage(p, spec, sent.correl_id)
        assert all(p.empty(q) for q in QUEUES)
    assert running.returncode != 0 and b"is running" in running.stderr
    assert result.state == "CANCELLED" and partial.properties["mqgather_missing"] == "CREDIT"
    assert [(r["leg"], r["verdict"], r["run_id"] != run) for r in done] == [
        ("CREDIT", "sent", True)]  # fmt: skip
    assert [(m.msg_id, m.body) for m in late] == [(credit.msg_id, credit.body)]
    assert [r["verdict"] for r in again] == ["forwarded to GATHER.LATE"]


async def test_salvage_all_takes_every_gather_that_ended_so_and_leaves_the_others(
    temporal_env, tmp_path
):
    """After an outage an operator terminated two stuck gathers; a third still runs and a
    fourth answered. ``salvage --all`` sends the two's replies late, says how far it got,
    and a second pass sends nothing."""
    spec = AggregateSpec(name="salvage-all", legs=THREE_LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        stuck = [await p.scatter(spec) for _ in range(2)]
        running, answered = await p.scatter(spec), await p.scatter(spec)
        sent = {p.reply(spec, s.correl_id, "CREDIT", b'{"c":1}').msg_id for s in stuck}
        p.reply(spec, running.correl_id, "CREDIT", b"{}")
        for leg in ("CREDIT", "STOCK", "TAX"):
            p.reply(spec, answered.correl_id, leg, b"{}")
        await p.wait_message("ORDER.RESPONSE")
        for s in (*stuck, running):
            handle = p.handle(spec, s.correl_id)
            await until(lambda h=handle: status(h), lambda st: st.legs_received == ["CREDIT"])
        for s in stuck:
            await _terminated(p.handle(spec, s.correl_id), "stuck in the outage")

        async def listed() -> int:
            query = "ExecutionStatus = 'Terminated' AND WorkflowType = 'Gather'"
            return len([run async for run in p.client.list_workflows(query)
                        if run.id.startswith(f"gather:{spec.name}:")])  # fmt: skip

        await until(listed, lambda n: n == 2)
        where = ("--aggregate", spec.name, "--mq", f"local:{p.path}")
        done = await cli(p.client, "salvage", "--all", *where, "--json")
        late = _taken(p, "GATHER.LATE")
        again = await cli(p.client, "salvage", "--all", *where)
        assert all(p.empty(q) for q in QUEUES)
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
    rows = [json.loads(line) for line in done.stdout.decode().splitlines()]
    ids = {p.handle(spec, s.correl_id).id for s in stuck}
    assert sorted((r["gather_id"] in ids, r["verdict"]) for r in rows) == [(True, "sent")] * 2
    assert {m.msg_id for m in late} == sent
    assert re.findall(r"\[(\d)/2\]", done.stderr.decode()) == ["1", "2"]  # its progress
    assert again.returncode == 0, again.stderr
    assert "2 gather(s) ended without answering" in again.stdout.decode()
    assert "0 sent, 2 in a place already" in again.stdout.decode()


async def test_a_gather_past_the_ledgers_memory_is_salvaged_only_when_forced(
    temporal_env, tmp_path
):
    """Past ``ledger_hours`` the ledger no longer tells whether an earlier salvage sent a
    reply: salvage says so and sends nothing, unless forced."""
    spec = AggregateSpec(name="salvage-old", legs=THREE_LEGS, timeout_seconds=300,
                         ledger_hours=0.0005)  # fmt: skip
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent, credit, handle = await _terminated_with_credit(p, spec)
        ended = (await handle.describe()).close_time
        assert ended is not None

        async def past() -> bool:  # ledger_hours is 1.8 s
            return (datetime.now(UTC) - ended).total_seconds() > 2.0

        await until(past, bool)
        where = (f"hex:{sent.correl_id.hex()}", "--aggregate", spec.name, "--mq", f"local:{p.path}")
        refused = await cli(p.client, "salvage", *where)
        assert all(p.empty(q) for q in QUEUES)
        forced = await cli(p.client, "salvage", *where, "--force")
        late = _taken(p, "GATHER.LATE")
        both = await cli(p.client, "salvage", "--all", "--force", "--aggregate", spec.name)
    assert refused.returncode != 0 and b"Traceback" not in refused.stderr
    assert b"ended more than ledger_hours (0.0005) ago" in refused.stderr
    assert b"--force" in refused.stderr
    assert forced.returncode == 0, forced.stderr
    assert [m.msg_id for m in late] == [credit.msg_id]
    assert both.returncode == 2 and b"name its CORRELID" in both.stderr


async def test_a_collector_run_past_the_ledgers_memory_is_put_back_only_when_forced(
    temporal_env, tmp_path
):
    from tests.collecting import SPEC, collecting, order

    spec = SPEC.model_copy(update={"ledger_hours": 0.0005})  # 1.8 s
    async with collecting(temporal_env.client, tmp_path, spec=spec) as c:
        handle = await _collector_terminated_holding_a(c)
        ended = (await handle.describe()).close_time
        assert ended is not None

        async def past() -> bool:
            return (datetime.now(UTC) - ended).total_seconds() > 2.0

        await until(past, bool)
        left = await cli(c.client, *_collector_salvage(c, "France"))
        assert c.depth(c.spec.input_queue) == 0
        forced = await cli(c.client, *_collector_salvage(c, "France"), "--force")
        c.send("France", order("B"))
        c.send("France", order("C"))
        batch = await c.take("CMAOUT.FR")
    assert left.returncode == 0 and left.stdout == b"", left.stderr
    assert b"1 run(s) that ended longer ago than ledger_hours left out" in left.stderr
    assert forced.returncode == 0, forced.stderr
    assert [json.loads(line)["verdict"] for line in forced.stdout.decode().splitlines()] == ["sent"]
    texts = sorted(part.split("</Test>")[0] for part in batch.body.decode().split("<Test>")[1:])
    assert texts == ["A", "B", "C"]


async def test_one_salvage_of_a_gather_at_a_time(temporal_env, tmp_path):
    """Another salvage holds the gather's lease (on another machine, say): salvage is
    refused, saying whose lease and how to end it, and sends nothing; ``--all`` leaves the
    gather, saying why; a dry run still lists. Once the lease is given back, salvage
    sends, once, and its own lease stays in Temporal as a record of what it did."""
    from temporalio.client import WorkflowExecutionStatus

    from workers.lease import lease_id, salvage_lease

    spec = AggregateSpec(name="salvage-lease", legs=THREE_LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent, credit, handle = await _terminated_with_credit(p, spec)
        await _listed_as_terminated(p.client, handle)
        mq = ("--mq", f"local:{p.path}")
        where = (f"hex:{sent.correl_id.hex()}", "--aggregate", spec.name, *mq)
        async with salvage_lease(p.client, handle.id):
            refused = await cli(p.client, "salvage", *where)
            every = await cli(p.client, "salvage", "--all", "--aggregate", spec.name, *mq)
            dry = await cli(p.client, "salvage", *where, "--dry-run", "--json")
            assert all(p.empty(q) for q in QUEUES)
        done = await cli(p.client, "salvage", *where, "--json")
        late = _taken(p, "GATHER.LATE")
        record = p.client.get_workflow_handle(lease_id(handle.id))
        ended = [e async for e in record.fetch_history_events()][-1]
        status_now = (await record.describe()).status
    assert refused.returncode != 0 and b"Traceback" not in refused.stderr
    said = refused.stderr.decode()
    assert f"another salvage of {handle.id} is running" in said and "lapsing" in said
    assert f"temporal workflow terminate --workflow-id '{lease_id(handle.id)}'" in said
    assert every.returncode == 0, every.stderr
    assert f"left: another salvage of {handle.id}" in every.stderr.decode()
    assert [json.loads(line)["verdict"] for line in dry.stdout.decode().splitlines()] == ["to send"]
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["verdict"] for line in done.stdout.decode().splitlines()] == ["sent"]
    assert [m.msg_id for m in late] == [credit.msg_id]
    assert status_now == WorkflowExecutionStatus.TERMINATED
    assert ended.workflow_execution_terminated_event_attributes.reason == "salvage done: 1 sent"


async def test_the_lease_of_a_salvage_killed_midway_lapses(temporal_env, tmp_path):
    """A salvage killed while it held its lease never gives it back: the lease keeps
    others out until its timeout, then lapses, and the next salvage goes ahead."""
    from temporalio.client import WorkflowExecutionStatus

    from workers.lease import LeaseHeld, lease_id, salvage_lease

    spec = AggregateSpec(name="salvage-killed", legs=THREE_LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent, credit, handle = await _terminated_with_credit(p, spec)
        # Taken and never given back, as by a process killed with it (kept, since a
        # context manager let go of would give it back when collected).
        killed = salvage_lease(p.client, handle.id, seconds=3)
        await killed.__aenter__()
        with pytest.raises(LeaseHeld, match="another salvage"):
            await salvage_lease(p.client, handle.id).__aenter__()
        lease = p.client.get_workflow_handle(lease_id(handle.id))
        await until(lambda: lease.describe(),
                    lambda d: d.status == WorkflowExecutionStatus.TIMED_OUT)  # fmt: skip
        where = (f"hex:{sent.correl_id.hex()}", "--aggregate", spec.name, "--mq", f"local:{p.path}")
        done = await cli(p.client, "salvage", *where)
        late = _taken(p, "GATHER.LATE")
    assert done.returncode == 0, done.stderr
    assert [m.msg_id for m in late] == [credit.msg_id]
    del killed


async def test_one_salvage_of_a_collector_at_a_time(temporal_env, tmp_path):
    from tests.collecting import collecting
    from workers.lease import salvage_lease

    async with collecting(temporal_env.client, tmp_path) as c:
        handle = await _collector_terminated_holding_a(c)
        async with salvage_lease(c.client, handle.id):
            refused = await cli(c.client, *_collector_salvage(c, "France"))
            assert c.depth(c.spec.input_queue) == 0
        done = await cli(c.client, *_collector_salvage(c, "France"))
    assert refused.returncode != 0 and b"Traceback" not in refused.stderr
    assert f"another salvage of {handle.id} is running".encode() in refused.stderr
    assert [json.loads(line)["verdict"] for line in done.stdout.decode().splitlines()] == ["sent"]


@pytest.mark.parametrize("over", ["embedded", "ibmmq"])
async def test_a_flood_and_a_megabyte_reply_are_salvaged_whole_and_once(
    temporal_env, tmp_path, over
):
    """The workers are down while a back end floods one CorrelId with 1,000 CREDIT
    replies and STOCK answers with a megabyte (held on the hold queue); the operator
    terminates the stuck gather. Salvage sends every one where the gather would have:
    the first CREDIT and STOCK late, the 999 duplicates to the duplicate queue, each
    intact and once; a second salvage sends nothing."""
    from workers.worker import build_worker

    spec = AggregateSpec(name="salvage-flood", legs=THREE_LEGS, timeout_seconds=300)
    flood = 1000
    connect = standin_connector(tmp_path / "qm.db") if over == "ibmmq" else None
    transport = (lambda _: connect) if connect is not None else None
    async with pipeline(temporal_env.client, tmp_path, [spec], run_worker=False,
                        transport=transport) as p:  # fmt: skip
        worker = build_worker(p.client, p.connect, task_queue=p.task_queue)
        running = asyncio.create_task(worker.run())
        sent = await p.scatter(spec)
        handle = p.handle(spec, sent.correl_id)
        await until(lambda: _signals(handle), lambda n: n == 1)  # the registration
        await until(lambda: status(handle), lambda s: s.legs_received == [])
        await worker.shutdown()
        await running
        credits = [p.reply(spec, sent.correl_id, "CREDIT", b'{"n":%d}' % n) for n in range(flood)]
        big = bytes(range(256)) * 4096  # 1 MiB, every byte value
        stock = p.reply(spec, sent.correl_id, "STOCK", big)

        async def drained() -> bool:  # the bridge took every reply, for the history
            # STOCK came last: held, its batch committed, every batch before it too.
            return p.empty(spec.reply_queue) and not p.empty(spec.hold_queue)

        await until(drained, bool, timeout=120)
        await handle.terminate(reason="flooded while the workers were down")
        done = await _salvage(p, spec, sent.correl_id, connect=connect)
        late = {m.msg_id: m for m in _taken(p, "GATHER.LATE")}
        duplicates = {m.msg_id: m.body for m in _taken(p, "GATHER.DUPLICATE")}
        again = await _salvage(p, spec, sent.correl_id, connect=connect)
        assert all(p.empty(q) for q in (*QUEUES, spec.hold_queue, spec.reply_queue))
    assert len(done) == flood + 1 and {r["verdict"] for r in done} == {"sent"}
    assert set(late) == {credits[0].msg_id, stock.msg_id}
    assert late[stock.msg_id].body == big and late[credits[0].msg_id].body == b'{"n":0}'
    assert duplicates == {m.msg_id: m.body for m in credits[1:]}
    assert len(again) == flood + 1 and "sent" not in {r["verdict"] for r in again}


def _told_to_wait_for_its_mq_work(out) -> None:
    """Salvage refused, saying why and when to run again."""
    assert out.returncode != 0 and b"Traceback" not in out.stderr
    said = out.stderr.decode()
    assert "with its MQ work under way" in said and "run salvage again in" in said


class _PutStalls(LocalQueueManager):
    """The worker's queue manager: a unit of work that PUTs to ``QUEUE`` does not commit
    until released (a queue manager that stalls mid-PUT)."""

    QUEUE = "ORDER.RESPONSE"

    def __init__(self, path, committing: threading.Event, release: threading.Event) -> None:
        super().__init__(path)
        self._committing, self._release, self._responding = committing, release, False

    def put(self, queue, message, options=None, **kw):
        self._responding |= queue == self.QUEUE
        return super().put(queue, message, options, **kw)

    def commit(self) -> None:
        if self._responding:
            self._responding = False
            self._committing.set()
            assert self._release.wait(60)
        super().commit()


async def test_a_gather_ended_with_its_put_under_way_is_salvaged_only_once_it_cannot_commit(
    temporal_env, tmp_path
):
    """Terminated while its merge and PUT hang in a worker: that attempt may yet commit
    the response with every reply in it, so salvage refuses to send them elsewhere
    until the attempt's timeout is over (past it, the attempt backs out), and says when
    to run again."""
    spec = AggregateSpec(name="salvage-putting", legs=THREE_LEGS, timeout_seconds=300)
    committing, release = threading.Event(), threading.Event()

    def stalls(path):
        return lambda: _PutStalls(path, committing, release)

    async with pipeline(temporal_env.client, tmp_path, [spec], transport=stalls) as p:
        sent = await p.scatter(spec)
        for leg in ("CREDIT", "STOCK", "TAX"):
            p.reply(spec, sent.correl_id, leg, b"{}")
        assert await asyncio.to_thread(committing.wait, 30)
        handle = p.handle(spec, sent.correl_id)
        await handle.terminate(reason="stuck in its PUT")
        try:
            refused = await cli(p.client, "salvage", f"hex:{sent.correl_id.hex()}",
                                "--aggregate", spec.name, "--mq", f"local:{p.path}")  # fmt: skip
            assert all(p.empty(q) for q in QUEUES)
        finally:
            release.set()
        response = await p.wait_message("ORDER.RESPONSE")  # it committed, within its time
    _told_to_wait_for_its_mq_work(refused)
    assert json.loads(response.body)["state"] == "COMPLETE"


async def test_a_collector_ended_with_its_put_under_way_is_salvaged_only_once_it_cannot_commit(
    temporal_env, tmp_path
):
    """Terminated while a batch's PUT hangs in a worker: that attempt may yet commit the
    batch, so collector salvage puts nothing back until the attempt's timeout is over."""
    from tests.collecting import collecting, order
    from workflows.collect_models import collector_id

    committing, release = threading.Event(), threading.Event()

    class BatchStalls(_PutStalls):
        QUEUE = "CMAOUT.FR"

    def stalls(path):
        return BatchStalls(path, committing, release)

    async with collecting(temporal_env.client, tmp_path, worker_qm=stalls) as c:
        c.rule("France", "CMAOUT.FR", max_messages=1, max_delay_seconds=300)
        c.send("France", order("A"))
        assert await asyncio.to_thread(committing.wait, 30)
        handle = c.client.get_workflow_handle(collector_id(c.spec.name, "France"))
        await handle.terminate(reason="stuck in its PUT")
        await _listed_as_terminated(c.client, handle)
        try:
            refused = await cli(c.client, *_collector_salvage(c, "France"))
            assert c.depth(c.spec.input_queue) == 0
        finally:
            release.set()
        batch = await c.take("CMAOUT.FR")  # it committed, within its time
    _told_to_wait_for_its_mq_work(refused)
    assert "<Test>A</Test>" in batch.body.decode()
