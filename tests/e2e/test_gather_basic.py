"""A gather end to end: bridge -> workflow -> merge -> PUT, on the real dev server."""

from __future__ import annotations

import json

from temporalio.api.enums.v1 import EventType

from bridge.fanout import new_gather_key
from bridge.mq.models import (
    MQRO_DISCARD_MSG,
    MQRO_NAN,
    MQRO_NONE,
    MQRO_PAN,
    MQRO_PASS_CORREL_ID,
    MQRO_PASS_DISCARD_AND_EXPIRY,
    MQRO_PASS_MSG_ID,
    MQMessage,
    QueueAttributes,
    parse_id,
)
from mqgather.config import AggregateSpec, LegSpec
from tests.harness import pipeline

LEGS = (LegSpec(name="CREDIT", sequence=10), LegSpec(name="STOCK", sequence=20),
        LegSpec(name="TAX", sequence=30))  # fmt: skip


async def test_three_leg_gather_completes_as_json(temporal_env, tmp_path):
    spec = AggregateSpec(name="orders", legs=LEGS, timeout_seconds=30)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec, request_msg_id=parse_id("REQUEST-1"), reply_to_q="APP.REPLY")
        for leg, amount in (("TAX", 3), ("CREDIT", 1), ("STOCK", 2)):
            p.reply(spec, sent.correl_id, leg, json.dumps({"amount": amount}).encode())
        response = await p.wait_message("ORDER.RESPONSE")
        result = await p.result(spec, sent.correl_id)
    doc = json.loads(response.body)
    assert doc == {
        "schema": 1,
        "correlId": sent.correl_id.hex(),
        "state": "COMPLETE",
        "legs": {"credit": {"amount": 1}, "stock": {"amount": 2}, "tax": {"amount": 3}},
        "missing": [],
    }
    assert response.correl_id == parse_id("REQUEST-1")
    assert response.reply_to_q == "APP.REPLY"
    assert response.format == "MQSTR"
    assert result.state == "COMPLETE" and result.legs_missing == []
    assert response.msg_id.hex() == result.response_msg_id


async def test_replies_that_come_together_cost_one_task_and_one_upsert(temporal_env, tmp_path):
    # The server's cost per gather: what a trivial workflow records, plus one
    # search-attribute upsert. An extra task, timer or upsert here costs every gather.
    # (The wait before closing is taken only when the PUT's task was completed while it
    # ran: not here.)
    spec = AggregateSpec(name="lean", mode="static", legs=LEGS, timeout_seconds=30)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        correl = parse_id("LEAN-1")
        for leg in ("CREDIT", "STOCK", "TAX"):
            p.qm.put(spec.reply_queue,
                     MQMessage(correl_id=correl, properties={spec.leg_property: leg},
                               body=b"{}"))  # fmt: skip
        p.qm.commit()  # one unit of work: the bridge gets all three in one batch
        await p.wait_message("ORDER.RESPONSE")
        assert (await p.result(spec, correl)).state == "COMPLETE"
        history = await p.handle(spec, correl).fetch_history()
    assert [EventType.Name(e.event_type) for e in history.events] == [
        "EVENT_TYPE_WORKFLOW_EXECUTION_STARTED",
        "EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED",
        "EVENT_TYPE_WORKFLOW_TASK_SCHEDULED",
        "EVENT_TYPE_WORKFLOW_TASK_STARTED",
        "EVENT_TYPE_WORKFLOW_TASK_COMPLETED",
        "EVENT_TYPE_MARKER_RECORDED",
        "EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES",
        "EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED",
    ]


async def test_the_response_correlates_as_the_requesters_report_options_ask(temporal_env, tmp_path):
    spec = AggregateSpec(name="reports", legs=LEGS, timeout_seconds=30, destination="replyToQueue")
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        p.qm.define(QueueAttributes(name="APP.R2"))
        requests = {
            "pass": MQMessage(msg_id=parse_id("REQ-MSG-1"), correl_id=parse_id("CONV-1"),
                              report=MQRO_PASS_CORREL_ID, reply_to_q="APP.R2"),
            "copy": MQMessage(msg_id=parse_id("REQ-MSG-2"), correl_id=parse_id("CONV-2"),
                              reply_to_q="APP.R2"),
        }  # fmt: skip
        for request in requests.values():
            sent = await p.scatter(spec, request=request)
            for leg in ("CREDIT", "STOCK", "TAX"):
                p.reply(spec, sent.correl_id, leg, b"{}")
            await p.result(spec, sent.correl_id)
        got = {(await p.wait_message("APP.R2")).correl_id for _ in requests}
    # MQRO_PASS_CORREL_ID: the request's CorrelId; by default its MsgId.
    assert got == {parse_id("CONV-1"), parse_id("REQ-MSG-2")}


async def test_the_response_carries_the_requests_msg_id_when_it_asks(temporal_env, tmp_path):
    spec = AggregateSpec(name="passid", legs=LEGS, timeout_seconds=30,
                         destination="replyToQueue")  # fmt: skip
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        p.qm.define(QueueAttributes(name="APP.R4"))
        got = []
        for report in (MQRO_PASS_MSG_ID, MQRO_NONE):
            request = MQMessage(msg_id=new_gather_key(), report=report, reply_to_q="APP.R4")
            sent = await p.scatter(spec, request=request)
            for leg in ("CREDIT", "STOCK", "TAX"):
                p.reply(spec, sent.correl_id, leg, b"{}")
            got.append((request, await p.wait_message("APP.R4")))
    (asked, passed), (plain, new) = got
    # Both correlate by CorrelId (the request's MsgId); only the one that asked gets its
    # MsgId back as the response's own.
    assert passed.msg_id == asked.msg_id and passed.correl_id == asked.msg_id
    assert new.msg_id != plain.msg_id and new.correl_id == plain.msg_id


async def test_the_response_lives_as_long_as_the_requester_asked(temporal_env, tmp_path):
    # A requester that gives up after a minute asks, with MQRO_PASS_DISCARD_AND_EXPIRY,
    # that its reply expire with its request: responses it no longer waits for must not
    # pile up on its reply queue. One that does not ask gets a response for ever.
    spec = AggregateSpec(name="lives", legs=LEGS, timeout_seconds=30, destination="replyToQueue")
    asks = MQRO_PASS_DISCARD_AND_EXPIRY | MQRO_DISCARD_MSG
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        p.qm.define(QueueAttributes(name="APP.R3"))
        responses = []
        for report, expiry in ((asks, 600), (MQRO_NONE, 600)):
            request = MQMessage(msg_id=new_gather_key(), report=report, expiry=expiry,
                                reply_to_q="APP.R3")  # fmt: skip
            sent = await p.scatter(spec, request=request)
            for leg in ("CREDIT", "STOCK", "TAX"):
                p.reply(spec, sent.correl_id, leg, b"{}")
            responses.append(await p.wait_message("APP.R3"))
    asked, plain = responses
    assert 0 < asked.expiry <= 600 and asked.report == MQRO_DISCARD_MSG
    assert (plain.expiry, plain.report) == (-1, MQRO_NONE)


async def test_the_requester_hears_at_once_that_its_gather_timed_out_when_it_asks(
    temporal_env, tmp_path
):
    # A requester that asks for action notifications (MQRO_PAN, MQRO_NAN) hears on its
    # ReplyToQ that its request was answered, or at once that it will not be: it need not
    # wait out its own timeout. The partial result still goes to the operators.
    spec = AggregateSpec(name="notify", legs=LEGS, timeout_seconds=1)
    asks = MQRO_PAN | MQRO_NAN
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        p.qm.define(QueueAttributes(name="APP.R5"))
        told = []
        for report, answered in ((asks, True), (asks, False), (MQRO_NONE, False)):
            request = MQMessage(msg_id=new_gather_key(), report=report, reply_to_q="APP.R5")
            sent = await p.scatter(spec, request=request)
            for leg in ("CREDIT", "STOCK", "TAX") if answered else ("CREDIT",):
                p.reply(spec, sent.correl_id, leg, b"{}")
            result = await p.result(spec, sent.correl_id)
            told.append((request, result.state))
        notes = [await p.wait_message("APP.R5") for _ in range(2)]
        response = await p.wait_message("ORDER.RESPONSE")
        partials = [await p.wait_message("GATHER.TIMEOUT") for _ in range(2)]
        assert p.empty("APP.R5") and p.empty("ORDER.RESPONSE") and p.empty("GATHER.TIMEOUT")
    (pan_request, complete), (nan_request, timed_out), (_, quiet) = told
    assert (complete, timed_out, quiet) == ("COMPLETE", "TIMEOUT", "TIMEOUT")
    pan, nan = sorted(notes, key=lambda m: m.feedback)
    assert (pan.msg_type, pan.feedback, pan.correl_id) == (4, 275, pan_request.msg_id)
    assert (nan.msg_type, nan.feedback, nan.correl_id) == (4, 276, nan_request.msg_id)
    assert nan.properties["mqgather_missing"] == "STOCK,TAX"
    assert response.correl_id == pan_request.msg_id and len(partials) == 2
