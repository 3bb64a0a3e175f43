"""Replies larger than a signal carries wait on the hold queue (claim check): gathers of
10 and 20 MB legs, in every arrival order, with duplicates, late and unknown replies of a
held size, on the real dev server and embedded MQ."""

from __future__ import annotations

import asyncio
import itertools
import json
import os

from activities.merge import LegBodies, merge_blob
from bridge.mq.models import MQRO_PASS_CORREL_ID, MQMessage
from mqgather.config import AggregateSpec
from mqgather.constants import GATHER_HOLD
from mqgather.names import PROP_REASON
from tests.harness import THREE_LEGS, pipeline, status, until
from workflows.redelivery import msg_id_of

MB = 1024 * 1024


def _blob(seed: int, size: int) -> bytes:
    """A body of ``size`` bytes that differs from every other seed's (random, so no
    compression anywhere hides a copy)."""
    return seed.to_bytes(4, "big") + os.urandom(size - 4)


def _expected(spec: AggregateSpec, bodies: dict[str, bytes]) -> bytes:
    legs = [LegBodies(name=leg.name, sequence=leg.sequence, bodies=(bodies[leg.name],))
            for leg in spec.legs]  # fmt: skip
    return merge_blob(legs, separator=spec.separator_bytes(), text=False).body


async def _history_bytes(handle) -> int:
    history = await handle.fetch_history()
    return sum(event.ByteSize() for event in history.events)


async def test_three_legs_of_ten_megabytes_complete_from_the_hold_queue(temporal_env, tmp_path):
    spec = AggregateSpec(name="big", merge="blob", legs=THREE_LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        bodies = {leg.name: _blob(i, 10 * MB) for i, leg in enumerate(THREE_LEGS)}
        put = {leg: p.reply(spec, sent.correl_id, leg, body) for leg, body in bodies.items()}
        response = await p.wait_message("ORDER.RESPONSE", timeout=120)
        result = await p.result(spec, sent.correl_id)
        history = await _history_bytes(p.handle(spec, sent.correl_id))
        assert p.empty(GATHER_HOLD) and p.empty("GATHER.IN")
    assert result.state == "COMPLETE"
    assert response.body == _expected(spec, bodies)
    assert history < 64 * 1024, f"history of {history} bytes"
    sizes = {leg.name: (leg.bytes, leg.held) for leg in result.legs}
    assert sizes == {name: (10 * MB, True) for name in bodies}
    taken = sorted(msg_id_of(key) for key in result.consumed_msg_ids)
    assert taken == sorted(m.msg_id.hex() for m in put.values())


async def test_mixed_sizes_in_every_arrival_order(temporal_env, tmp_path):
    spec = AggregateSpec(name="mixed", merge="blob", separator="|", legs=THREE_LEGS,
                         timeout_seconds=300)  # fmt: skip
    sizes = {"CREDIT": 1024, "STOCK": 300 * 1024, "TAX": 20 * MB}
    # One 20 MB body for all six gathers keeps the test's memory small; each gather's
    # small legs tell them apart.
    large = _blob(99, sizes["TAX"])
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        gathers = []
        for number, order in enumerate(itertools.permutations(sizes)):
            sent = await p.scatter(spec)
            bodies = {leg: _blob(number, size) for leg, size in sizes.items() if leg != "TAX"}
            bodies["TAX"] = large
            for leg in order:
                p.reply(spec, sent.correl_id, leg, bodies[leg])
            gathers.append((sent, bodies))
        results = await asyncio.gather(*(p.result(spec, s.correl_id, 180) for s, _ in gathers))
        responses = {}
        for _ in gathers:
            message = await p.wait_message("ORDER.RESPONSE", timeout=60)
            responses[message.correl_id] = message.body
        assert p.empty(GATHER_HOLD)
    assert [r.state for r in results] == ["COMPLETE"] * 6
    for sent, bodies in gathers:
        assert responses[sent.request_msg_id] == _expected(spec, bodies)
    held = {leg.name: leg.held for leg in results[0].legs}
    assert held == {"CREDIT": False, "STOCK": True, "TAX": True}


def _intact(got: MQMessage, put: MQMessage) -> None:
    """A forwarded reply is the one that came: MQMD, properties and body (the reason
    properties added)."""
    assert got.msg_id == put.msg_id and got.correl_id == put.correl_id
    assert got.body == put.body
    assert {k: v for k, v in got.properties.items() if not k.startswith("mqgather_")} == (
        put.properties
    )


async def test_duplicate_and_late_replies_of_a_held_size_end_intact(temporal_env, tmp_path):
    spec = AggregateSpec(name="dups", merge="blob", legs=THREE_LEGS, timeout_seconds=300,
                         inline_reply_bytes=1024)  # fmt: skip
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        handle = p.handle(spec, sent.correl_id)
        first = p.reply(spec, sent.correl_id, "CREDIT", _blob(1, 2 * MB), note="first")
        await until(lambda: status(handle), lambda s: "CREDIT" in s.legs_received, 60)
        second = p.reply(spec, sent.correl_id, "CREDIT", _blob(2, 3 * MB), note="second")
        await until(lambda: status(handle), lambda s: s.duplicates == 1, 60)
        p.reply(spec, sent.correl_id, "STOCK", _blob(3, 5000))
        p.reply(spec, sent.correl_id, "TAX", b"small")
        response = await p.wait_message("ORDER.RESPONSE", timeout=60)
        duplicate = await p.wait_message("GATHER.DUPLICATE", timeout=60)
        await p.result(spec, sent.correl_id)
        late = p.reply(spec, sent.correl_id, "TAX", _blob(4, 4 * MB), note="late")
        got_late = await p.wait_message("GATHER.LATE", timeout=60)
        assert p.empty(GATHER_HOLD)
    assert response.body.startswith(first.body)
    _intact(duplicate, second)
    _intact(got_late, late)
    assert "already" in str(got_late.properties[PROP_REASON])


async def test_held_replies_nobody_registers_go_to_the_unknown_queue(temporal_env, tmp_path):
    spec = AggregateSpec(name="nobody", legs=THREE_LEGS, unknown_timeout_seconds=1,
                         inline_reply_bytes=0)  # fmt: skip
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        put = p.reply(spec, b"NOBODY-ASKED", "CREDIT", json.dumps({"x": 1}).encode(), n=7)
        got = await p.wait_message("GATHER.UNKNOWN", timeout=60)
        assert p.empty(GATHER_HOLD)
    _intact(got, put)


async def test_a_held_leg_that_is_not_json_goes_to_the_failure_queue_intact(temporal_env, tmp_path):
    spec = AggregateSpec(name="badjson", legs=THREE_LEGS[:2], inline_reply_bytes=100)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        bad = p.reply(spec, sent.correl_id, "CREDIT", b"{" + b"x" * 200_000)
        good = p.reply(spec, sent.correl_id, "STOCK", json.dumps({"ok": "y" * 500}).encode())
        result = await p.result(spec, sent.correl_id)
        failed = {m.msg_id: m for m in p.messages("GATHER.FAILURE")}
        assert p.empty(GATHER_HOLD) and p.empty("ORDER.RESPONSE")
    assert result.state == "FAILED"
    _intact(failed[bad.msg_id], bad)
    _intact(failed[good.msg_id], good)


async def test_held_replies_that_share_msg_id_and_correl_id_each_merge_their_own_body(
    temporal_env, tmp_path
):
    # Back ends that pass the request's MsgId and CorrelId on: three held replies the
    # hold queue can tell apart only by body, waiting there in another order than the
    # merge takes them.
    spec = AggregateSpec(name="twins", merge="blob", legs=THREE_LEGS, timeout_seconds=300,
                         inline_reply_bytes=0)  # fmt: skip
    shared = b"REQUEST-1".ljust(24, b"\x00")
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        bodies = {leg.name: _blob(i, 4096) for i, leg in enumerate(THREE_LEGS)}
        for leg in ("TAX", "CREDIT", "STOCK"):
            message = MQMessage(msg_id=shared, correl_id=sent.correl_id,
                                properties={"leg": leg}, body=bodies[leg])  # fmt: skip
            p.put(spec.reply_queue, message)
        response = await p.wait_message("ORDER.RESPONSE", timeout=60)
        result = await p.result(spec, sent.correl_id)
        assert p.empty(GATHER_HOLD) and p.empty("GATHER.IN") and p.empty("GATHER.FAILURE")
    assert result.state == "COMPLETE" and result.redeliveries == 0
    assert response.body == _expected(spec, bodies)


#: Report options a sender sets: COA and COD, and its CorrelId passed on.
ASKS = 0x100 | 0x800 | MQRO_PASS_CORREL_ID


async def test_a_held_reply_is_kept_as_the_gathers_and_forwarded_as_it_came(temporal_env, tmp_path):
    # Its sender gave it an expiry and no persistence, and the bridge got it in time:
    # from then on it is the gather's, and waiting on the hold queue for the other legs
    # must neither expire it nor leave it to a queue manager restart (which discards
    # non-persistent messages). Its arrival and delivery were confirmed on the reply
    # queue, so on the hold queue it asks for no report: its sender hears of it once
    # each. A copy forwarded elsewhere goes as it came, so its sender hears of its
    # arrival there too, and of its delivery when the operator takes it.
    spec = AggregateSpec(name="expiring", merge="blob", legs=THREE_LEGS, timeout_seconds=300,
                         inline_reply_bytes=0, late_window_seconds=60)  # fmt: skip
    bodies = {"CREDIT": b"credit", "STOCK": b"stock", "TAX": b"tax"}
    queues = ["PROBE", "APP.REPORTS"]
    async with pipeline(temporal_env.client, tmp_path, [spec], extra_queues=queues) as p:
        sent = await p.scatter(spec)
        handle = p.handle(spec, sent.correl_id)
        for queue, props in ((spec.reply_queue, {"leg": "CREDIT"}), ("PROBE", {})):
            message = MQMessage(correl_id=sent.correl_id, properties=props, expiry=5,
                                persistence=0, body=bodies["CREDIT"], report=ASKS,
                                reply_to_q="APP.REPORTS")  # fmt: skip
            p.put(queue, message)  # half a second to live, on the reply queue and beside it
        await until(lambda: status(handle), lambda s: s.legs_received == ["CREDIT"])
        # The hold put commits with the GET, after the gather took the signal: awaited.
        held_now = await until(lambda: asyncio.to_thread(p.messages, GATHER_HOLD), bool)
        (held,) = held_now
        # Until its twin beside it has expired: the time MQ gave it has passed.
        await until(lambda: asyncio.to_thread(p.messages, "PROBE"), lambda left: not left)
        p.reply(spec, sent.correl_id, "STOCK", bodies["STOCK"])
        p.reply(spec, sent.correl_id, "TAX", bodies["TAX"])
        response = await p.wait_message("ORDER.RESPONSE", timeout=60)
        late = MQMessage(correl_id=sent.correl_id, properties={"leg": "TAX"}, expiry=600_000,
                         persistence=0, body=b"late", report=ASKS,
                         reply_to_q="APP.REPORTS")  # fmt: skip
        late = p.put(spec.reply_queue, late)
        late_copy = await p.wait_message("GATHER.LATE")
        assert p.empty(GATHER_HOLD)
        confirmations = p.messages("APP.REPORTS")
    assert (held.persistence, held.expiry, held.report) == (1, -1, MQRO_PASS_CORREL_ID)
    assert response.body == _expected(spec, bodies)
    # The expiry it came with, less the time it spent, and its persistence.
    assert late_copy.msg_id == late.msg_id and 0 < late_copy.expiry <= 600_000
    assert late_copy.persistence == 0 and late_copy.report == ASKS
    # Arrivals: CREDIT's and TAX's on the reply queue, the twin's beside it, TAX's on the
    # late queue; deliveries: CREDIT's and TAX's to the bridge, TAX's off the late queue.
    assert all(m.correl_id == sent.correl_id for m in confirmations)
    assert sorted(m.feedback for m in confirmations) == [259] * 4 + [260] * 3
