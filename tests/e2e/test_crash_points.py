"""A bridge killed after every step of one batch, one step per run: each write its queue
manager connection commits to the file and each answer it has from Temporal. Whichever
step it died after, the next bridge takes the batch over, and every message of it ends in
exactly one place, intact, and every gather counts each reply once. A requester killed
so while it scatters a request is answered once when it starts again.

The batch holds one of each path a reply can take: a gather's three legs (it completes)
and a duplicate of one (NaN and infinite properties), a leg held on the hold queue (a
property of a megabyte), a late reply (in EBCDIC), a reply nobody registered, a report,
a reply with no CorrelId, one with no leg and one whose property name is not text.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.client import Client
from temporalio.service import RPCError

from bridge.collect import CollectorBridge
from bridge.fanout import scatter
from bridge.inbound import InboundBridge, QueueBridge
from bridge.mq.errors import NoMessageAvailable
from bridge.mq.models import MQMT_REPORT, Match, MQMessage, PutOptions, parse_id
from bridge.mq.transport import Transport
from mqgather.collector_config import CollectorSpec
from mqgather.config import AggregateSpec
from tests.activities.test_mq import drain
from tests.collecting import Collecting, collecting
from tests.crashing import (
    COMMIT,
    TRANSPORTS,
    Steps,
    connector,
    counted_client,
    kill_points,
    run_to_death,
    step_names,
)
from tests.harness import THREE_LEGS, Pipeline, pipeline, status, until
from workflows.redelivery import msg_id_of

#: Where a message may end; the reply queue is where none may stay.
ENDS = ("GATHER.FAILURE", "GATHER.LATE", "GATHER.UNKNOWN", "GATHER.DUPLICATE",
        "GATHER.REPORT", "GATHER.BACKOUT", "SYSTEM.DEAD.LETTER.QUEUE", "GATHER.HOLD")  # fmt: skip
#: MQFB_COA: a confirm-on-arrival report.
COA = 259


def _bridge_dying_after(
    kind: str, address: str, transport: str, path: str, spec_json: str, task_queue: str,
    die_after: int | None, record: str,
) -> None:  # fmt: skip
    """A gather bridge (``kind`` "gather") or a collector's, dying after step ``die_after``."""
    steps = Steps(die_after, record)
    connect = connector(transport, path, steps)

    async def main() -> None:
        client = await counted_client(address, steps)
        bridge: QueueBridge
        if kind == "gather":
            spec = AggregateSpec.model_validate_json(spec_json)
            bridge = InboundBridge(client, connect, [spec], task_queue=task_queue, wait_ms=100)
        else:
            collector = CollectorSpec.model_validate_json(spec_json)
            bridge = CollectorBridge(client, connect, collector, task_queue=task_queue, wait_ms=100)
        await bridge.run(asyncio.Event())

    asyncio.run(main())


async def _die(
    kind: str, client: Client, transport: str, path: Path, spec: BaseModel, task_queue: str,
    die_after: int | None, record: Path,
) -> str:  # fmt: skip
    """Run a bridge that dies after step ``die_after``; which step that was, said."""
    address = client.service_client.config.target_host
    args = (kind, address, transport, str(path), spec.model_dump_json(), task_queue)
    return await asyncio.to_thread(run_to_death, _bridge_dying_after, args, die_after, record)


@dataclass
class _Batch:
    """One run's messages, and where each must end: "merged" into the gather, "held" for
    the gather that took it, or a queue."""

    complete: bytes = b""
    partial: bytes = b""
    sent: dict[bytes, MQMessage] = field(default_factory=dict)
    ends: dict[bytes, str] = field(default_factory=dict)


async def _load(p: Pipeline, spec: AggregateSpec, transport: str) -> _Batch:
    """Every message of one batch on the reply queue, each path once; the late reply's
    gather timed out first."""
    batch = _Batch()
    closed = await p.scatter(spec, timeout_seconds=0.2)
    batch.complete = (await p.scatter(spec)).correl_id
    batch.partial = (await p.scatter(spec)).correl_id
    await p.result(spec, closed.correl_id)

    def put(where: str, correl: bytes, leg: str | None, body: bytes = b"{}", **fields: Any):
        properties = dict(fields.pop("properties", {}))
        if leg is not None:
            properties["leg"] = leg
        message = MQMessage(correl_id=correl, properties=properties, body=body, **fields)
        done = p.qm.put(spec.reply_queue, message, PutOptions(syncpoint=False))
        batch.sent[done.msg_id], batch.ends[done.msg_id] = done, where

    for leg in ("CREDIT", "STOCK", "TAX"):
        put("merged", batch.complete, leg, f'{{"leg": "{leg}"}}'.encode())
    nan = {"score": math.nan, "limit": math.inf}
    put("GATHER.DUPLICATE", batch.complete, "CREDIT", b'{"again": true}', properties=nan)
    put("held", batch.partial, "CREDIT", properties={"blob": "y" * 1_000_000})
    # In EBCDIC (CCSID 37): "LATE".
    put("GATHER.LATE", closed.correl_id, "TAX", b"\xd3\xc1\xe3\xc5", coded_char_set_id=37,
        encoding=273)  # fmt: skip
    put("GATHER.UNKNOWN", parse_id("NOBODY" + os.urandom(4).hex()), "TAX")
    put("GATHER.REPORT", batch.complete, None, b"", msg_type=MQMT_REPORT, feedback=COA)
    put("GATHER.FAILURE", b"\x00" * 24, "TAX")
    put("GATHER.FAILURE", batch.partial, None)
    # A name that is not text (IBM MQ holds none; the adapter cannot read it back).
    put("GATHER.FAILURE", batch.partial, "STOCK", properties={"k\udcff": 1})
    return batch


async def _run(
    p: Pipeline, spec: AggregateSpec, transport: str, die_after: int | None, record: Path
) -> None:
    """One run: the batch loaded, a bridge that dies after step ``die_after`` of it, then
    a bridge that takes over until every message has ended somewhere; every check."""
    batch = await _load(p, spec, transport)
    where = await _die("gather", p.client, transport, p.path, spec, p.task_queue, die_after,
                       record)  # fmt: skip

    elsewhere = {m: q for m, q in batch.ends.items() if q not in ("merged", "held")}

    def ended() -> dict[bytes, list[str]]:
        found: dict[bytes, list[str]] = {m: [] for m in batch.sent}
        for queue in (*ENDS, spec.reply_queue):
            for message in p.messages(queue):
                if message.msg_id in found:
                    found[message.msg_id].append(queue)
        return found

    stop = asyncio.Event()
    connect = connector(transport, p.path)
    bridge = InboundBridge(p.client, connect, [spec], task_queue=p.task_queue, wait_ms=100)
    task = asyncio.create_task(bridge.run(stop))
    try:
        result = await p.result(spec, batch.complete)
        await until(
            lambda: asyncio.to_thread(ended),
            lambda found: all(found[m] == [q] for m, q in elsewhere.items()),
            30,
        )
        partial = await status(p.handle(spec, batch.partial))
    except (TimeoutError, AssertionError) as exc:
        raise AssertionError(f"{where}: never settled ({exc or 'no result'})") from None
    finally:
        stop.set()
        await task
    found = ended()
    assert result.state == "COMPLETE", where
    taken = {bytes.fromhex(msg_id_of(k)) for k in result.consumed_msg_ids}
    mine = ("merged", "GATHER.DUPLICATE")
    assert taken == {m for m, q in batch.ends.items() if q in mine}, where
    assert result.duplicates == 1, where
    assert partial.legs_received == ["CREDIT"], where
    for msg_id, end in batch.ends.items():
        expected = {"merged": [], "held": ["GATHER.HOLD"]}.get(end, [end])
        assert found[msg_id] == expected, (where, batch.sent[msg_id].properties, found[msg_id])
    for queue in {*elsewhere.values(), spec.hold_queue}:
        for copy in p.messages(queue):
            original = batch.sent.get(copy.msg_id)
            if original is None:
                continue
            assert _whole(copy) == _whole(original), (where, queue)
    responses = [m for m in p.messages(spec.response_queue) if m.correl_id == batch.complete]
    assert len(responses) == 1, where
    legs = json.loads(responses[0].body)["legs"]
    assert legs == {leg.lower(): {"leg": leg} for leg in ("CREDIT", "STOCK", "TAX")}, where


async def _every_step(
    tmp_path: Path, run: Callable[[int | None, Path], Awaitable[None]], least: int
) -> None:
    """A first run that dies after its commit, naming at least ``least`` steps on the
    way; then a run killed after each of them in turn."""
    steps = tmp_path / "steps.txt"
    await run(None, steps)
    names = step_names(steps)
    assert names[-1] == COMMIT and len(names) >= least, names
    for step in kill_points(names):
        await run(step, tmp_path / f"step-{step}.txt")


def _whole(message: MQMessage) -> tuple[Any, ...]:
    """What a message that ends elsewhere keeps: its ids, CCSID, Encoding and body, and
    its properties (written out, so that a NaN equals a NaN), but for mqgather's own."""
    kept = {k: v for k, v in message.properties.items() if not k.startswith("mqgather_")}
    ids = (message.msg_id, message.correl_id, message.coded_char_set_id, message.encoding)
    return (*ids, message.body, json.dumps(kept, sort_keys=True))


@pytest.mark.timeout(900)
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_bridge_killed_after_any_step_of_a_batch_loses_nothing_and_counts_nothing_twice(
    temporal_env, tmp_path, transport
):
    spec = AggregateSpec(name="steps", legs=THREE_LEGS, timeout_seconds=600,
                         unknown_timeout_seconds=1, inline_reply_bytes=30_000)  # fmt: skip
    over = functools.partial(connector, transport)
    async with pipeline(temporal_env.client, tmp_path, [spec], run_bridge=False, bothresh=5,
                        transport=over) as p:  # fmt: skip
        await _every_step(tmp_path, functools.partial(_run, p, spec, transport), 10)


async def _collect_run(c: Collecting, transport: str, die_after: int | None, record: Path) -> None:
    """One run of a collector's bridge: a batch that closes (two messages), one left
    open, one too large for its rule; killed after step ``die_after``, then taken over."""
    run = die_after or 0
    full, open_, tiny = (f"{name}-{run}" for name in ("full", "open", "tiny"))
    c.rule(full, "CMAOUT.JSON", max_messages=2, format="json")
    c.rule(open_, "CMAOUT.FR", max_messages=100, max_delay_seconds=600)
    c.rule(tiny, "CMAOUT.FR", max_bytes=10)
    pair = [c.send(full, json.dumps({"run": run, "n": n}).encode(), n=n) for n in (1, 2)]
    c.send(open_, b"<Test>kept</Test>")
    big = c.send(tiny, b"x" * 11, note="keep me")
    where = await _die("collector", c.client, transport, c.path, c.spec, c.task_queue,
                       die_after, record)  # fmt: skip
    c.start_bridge(connect=connector(transport, c.path))
    try:
        batch = await c.take("CMAOUT.JSON")
        failed = await c.take(c.spec.failure_queue)
        left = await until(lambda: c.status(open_), lambda s: s.open_messages >= 1)
    except (TimeoutError, AssertionError, NoMessageAvailable) as exc:
        raise AssertionError(f"{where}: never settled ({exc!r})") from None
    finally:
        c.stop.set()
        await asyncio.gather(*c.tasks[1:], return_exceptions=True)
        del c.tasks[1:]
        c.stop.clear()
    assert json.loads(batch.body) == [json.loads(m.body) for m in pair], where
    assert (failed.msg_id, failed.body, failed.properties["note"]) == (
        big.msg_id, big.body, "keep me"
    ), where  # fmt: skip
    assert left.open_messages == 1, where
    assert (c.depth("CMAOUT.JSON"), c.depth(c.spec.failure_queue)) == (0, 0), where
    assert c.depth(c.spec.input_queue) == 0, where


@pytest.mark.timeout(600)
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_collectors_bridge_killed_after_any_step_of_a_batch_loses_nothing_and_puts_once(
    temporal_env, tmp_path, transport
):
    def worker_qm(path: Path) -> Transport:
        return connector(transport, path)()

    async with collecting(temporal_env.client, tmp_path, run_bridge=False,
                          worker_qm=worker_qm) as c:  # fmt: skip
        await _every_step(tmp_path, functools.partial(_collect_run, c, transport), 4)


#: Where the requester's own requests arrive, taken in the unit of work of its scatter.
REQUESTS = "ORDER.REQUEST"


def _requester_dying_after(
    transport: str, address: str, path: str, spec_json: str, task_queue: str,
    die_after: int | None, record: str,
) -> None:  # fmt: skip
    """A requester that takes one request and scatters it, dying after step ``die_after``."""
    steps = Steps(die_after, record)

    async def main() -> None:
        client = await counted_client(address, steps)
        spec = AggregateSpec.model_validate_json(spec_json)
        await _serve_request(client, connector(transport, path, steps)(), spec, task_queue)

    asyncio.run(main())


async def _serve_request(
    client: Client, transport: Transport, spec: AggregateSpec, task_queue: str
) -> bool:
    """What a requester does with a request: get it under syncpoint and scatter it, its
    MsgId the gather's CorrelId, in one unit of work. False when there was none."""
    try:
        request = transport.get(REQUESTS, syncpoint=True)
    except NoMessageAvailable:
        return False
    await scatter(client, transport, spec, task_queue=task_queue, correl_id=request.msg_id,
                  request=request)  # fmt: skip
    return True


async def _request_run(
    p: Pipeline, spec: AggregateSpec, transport: str, die_after: int | None, record: Path
) -> None:
    """One run: a request that a requester dies scattering, after step ``die_after``; the
    requester started again; the back ends answering every request they got."""
    request = p.put(REQUESTS, MQMessage(reply_to_q=spec.response_queue, body=b"order"))
    args = (transport, p.client.service_client.config.target_host, str(p.path),
            spec.model_dump_json(), p.task_queue)  # fmt: skip
    where = await asyncio.to_thread(run_to_death, _requester_dying_after, args, die_after,
                                    record)  # fmt: skip
    again = connector(transport, p.path)()
    try:
        scattered_again = await _serve_request(p.client, again, spec, p.task_queue)
    finally:
        again.close()
    # The back ends answer every request they got.
    asked = {leg.name: drain(p.qm, leg.queue()) for leg in THREE_LEGS}
    for leg, requests in asked.items():
        for got in requests:
            p.reply(spec, got.correl_id, leg, json.dumps({"leg": leg}).encode())
    try:
        result = await p.result(spec, request.msg_id)
        response = await p.wait_message(spec.response_queue, match=Match(correl_id=request.msg_id))
    except (TimeoutError, NoMessageAvailable, RPCError) as exc:
        raise AssertionError(f"{where}: never answered ({exc!r})") from None
    assert {leg: len(got) for leg, got in asked.items()} == dict.fromkeys(asked, 1), where
    # Dead before its commit, it got the request back; after, it had none.
    assert scattered_again == (die_after is not None), where
    assert result.state == "COMPLETE", where
    assert json.loads(response.body)["legs"] == {leg.lower(): {"leg": leg} for leg in asked}, where
    assert p.empty(REQUESTS) and p.empty(spec.response_queue), where


@pytest.mark.timeout(600)
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_requester_killed_after_any_step_of_its_scatter_is_answered_once(
    temporal_env, tmp_path, transport
):
    """Its request, the legs' requests and the registration are one unit of work, but for
    the registration, which Temporal keeps: started again, the requester scatters the
    request MQ gave back under the same CorrelId, and the gather takes the registration
    again. Each back end gets one request; the requester one response."""
    spec = AggregateSpec(name="asks", legs=THREE_LEGS, timeout_seconds=600)
    async with pipeline(temporal_env.client, tmp_path, [spec], extra_queues=[REQUESTS],
                        transport=functools.partial(connector, transport)) as p:  # fmt: skip
        await _every_step(tmp_path, functools.partial(_request_run, p, spec, transport), 4)
