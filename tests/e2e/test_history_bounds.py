"""Gathers whose replies outgrow what one history takes: the server ends a workflow whose
history passes its limit (50 MB by default), and a gather ended so has taken its replies
off the reply queue. Run on a dev server of its own whose limits are a tenth of the
default, so a few megabytes of replies show what fifty would."""

from __future__ import annotations

import math

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from bridge.mq.models import MQFMT_STRING, MQMessage
from mqgather.names import SEARCH_ATTRIBUTES
from mqgather.runtime.temporal import dev_server_config_args
from tests.e2e.test_hostile_input import COUNTED, counted_gather
from tests.harness import pipeline, status, taken, temporal_binary, until
from workflows.gather import PATCH_MOVE_TO_HOLD

#: The server suggests continuing as new past this many events (4,096 by default).
SUGGEST_EVENTS = 20


@pytest.fixture(scope="module")
async def small_histories():
    """A dev server that ends a workflow whose history passes :data:`LIMIT_BYTES`."""
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        search_attributes=SEARCH_ATTRIBUTES,
        data_converter=pydantic_data_converter,
        dev_server_log_level="error",
        dev_server_extra_args=[
            *dev_server_config_args(),
            "--dynamic-config-value",
            f"limit.historyCount.suggestContinueAsNew={SUGGEST_EVENTS}",
        ],
    )
    yield env
    await env.shutdown()


async def _run_id(handle) -> str:
    return (await handle.describe()).run_id or ""


def _body(n: int, size: int = 55_000) -> bytes:
    return b"%04d" % n * (size // 4)


async def test_a_gather_too_large_to_carry_moves_its_replies_to_the_hold_queue_and_goes_on(
    small_histories, tmp_path
):
    # 40 replies of 55 KB each travel inline (under the 64 KB bound, and an aggregate
    # that lets its gathers take 100 MB inline): a state of 2.9 MB, which no run can carry
    # into the next, so the gather stayed in its run, its history growing towards the
    # 50 MB at which the server ends it, its replies taken. They come ten at a time, as
    # back ends answering over a while do: each ten taken before the next.
    spec = COUNTED.model_copy(update={"gather_inline_bytes": 100 * 1024 * 1024})
    legs, first_part, group = 60, 40, 10
    async with pipeline(small_histories.client, tmp_path, [spec]) as p:
        correl, _ = await counted_gather(p, "MOVED-1", legs)
        latest = p.handle(spec, correl)
        first = p.client.get_workflow_handle(latest.id, run_id=await _run_id(latest))
        for start in range(0, first_part, group):
            for n in range(start, start + group):
                p.put(spec.reply_queue, MQMessage(correl_id=correl, body=_body(n)))
            await until(lambda: taken(latest), lambda n, end=start + group: n >= end)
        # Its bodies moved to the hold queue, the gather continues as new.
        await until(lambda: _run_id(latest), lambda run: run != first.run_id)
        moved = p.depth(spec.hold_queue)
        for n in range(first_part, legs):
            p.put(spec.reply_queue, MQMessage(correl_id=correl, body=_body(n)))
        response = await p.wait_message(spec.response_queue, timeout=60)
        result = await p.result(spec, correl, timeout=30)
        first_run = [e async for e in first.fetch_history_events()]
        assert p.empty(spec.hold_queue) and p.empty(spec.reply_queue)
    assert result.state == "COMPLETE"
    assert response.body == b"".join(_body(n) for n in range(legs))
    assert moved >= 20 and p.bridge.stats.held == 0  # moved by the gather, not the bridge
    markers = [e for e in first_run if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED]
    assert any(PATCH_MOVE_TO_HOLD.encode() in m.SerializeToString() for m in markers)
    assert first_run[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW


async def test_a_move_the_hold_queue_refuses_gives_way_to_the_gathers_response(
    small_histories, tmp_path
):
    # The hold queue PUT(DISABLED) (or full) when the state must move there: the move
    # was retried for ever, and the gather, complete, never answered.
    spec = COUNTED.model_copy(update={"gather_inline_bytes": 100 * 1024 * 1024})
    legs, first_part, group = 45, 40, 10
    async with pipeline(small_histories.client, tmp_path, [spec]) as p:
        attrs = p.qm.inquire(spec.hold_queue).model_copy(update={"put": "disabled"})
        p.qm.define(attrs, replace=True)
        correl, _ = await counted_gather(p, "REFUSED-1", legs)
        handle = p.handle(spec, correl)
        for start in range(0, first_part, group):
            for n in range(start, start + group):
                p.put(spec.reply_queue, MQMessage(correl_id=correl, body=_body(n)))
            await until(lambda: taken(handle), lambda n, end=start + group: n >= end)
        await until(lambda: status(handle), lambda s: "MQRC_PUT_INHIBITED" in s.last_error, 30)
        for n in range(first_part, legs):
            p.put(spec.reply_queue, MQMessage(correl_id=correl, body=_body(n)))
        response = await p.wait_message(spec.response_queue, timeout=60)
        result = await p.result(spec, correl, timeout=30)
        assert p.empty(spec.hold_queue) and p.empty(spec.reply_queue)
    assert result.state == "COMPLETE" and result.error == ""
    assert response.body == b"".join(_body(n) for n in range(legs))


async def test_replies_moved_to_the_hold_queue_keep_their_mqmd_properties_and_bodies_exactly(
    small_histories, tmp_path
):
    # What the bridge passed on (a NaN, an infinity, text that is not UTF-8, an EBCDIC
    # body in its CCSID) is what the move puts on the hold queue, and what the response
    # is merged from.
    spec = COUNTED.model_copy(update={"gather_inline_bytes": 100 * 1024 * 1024})
    legs, group = 30, 10
    odd = {"score": math.nan, "hi": math.inf, "name": "caf\udce9"}

    def reply(n: int) -> MQMessage:
        text = f"{n:04d}" + "Ñ" * 54_000
        return MQMessage(correl_id=correl, body=text.encode("cp037"), coded_char_set_id=37,
                         format=MQFMT_STRING, properties={**odd, "n": n})  # fmt: skip

    async with pipeline(small_histories.client, tmp_path, [spec]) as p:
        correl, _ = await counted_gather(p, "MOVED-2", legs + 1)
        latest = p.handle(spec, correl)
        first = await _run_id(latest)
        sent = {}
        for start in range(0, legs, group):
            for n in range(start, start + group):
                sent[n] = p.put(spec.reply_queue, reply(n))
            await until(lambda: taken(latest), lambda k, end=start + group: k >= end)
        await until(lambda: _run_id(latest), lambda run: run != first)
        moved = p.messages(spec.hold_queue)
        p.put(spec.reply_queue, reply(legs))
        response = await p.wait_message(spec.response_queue, timeout=60)
        result = await p.result(spec, correl, timeout=30)
        assert p.empty(spec.hold_queue) and p.empty(spec.reply_queue)
    assert result.state == "COMPLETE" and len(moved) >= 10
    for message in moved:
        original = sent[message.properties["n"]]
        assert (message.msg_id, message.correl_id, message.body) == (
            original.msg_id, original.correl_id, original.body)  # fmt: skip
        assert (message.coded_char_set_id, message.format) == (37, MQFMT_STRING)
        assert math.isnan(message.properties["score"]) and message.properties["hi"] == math.inf
        assert message.properties["name"] == "caf\udce9"
    assert response.body == b"".join(reply(n).body for n in range(legs + 1))
