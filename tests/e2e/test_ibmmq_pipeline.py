"""The whole gather pipeline over the IBM MQ adapter: bridge and worker talk to the queue
manager only through the real ``ibmmq`` package (over the stand-in for IBM's library).
Complete, duplicate, late, unknown and poison replies, and reports, each end in exactly
one place."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from bridge.mq.models import MQMT_REPORT, MQMessage, PutOptions, parse_id
from mqgather.config import AggregateSpec, LegSpec
from tests.conftest import standin_connector
from tests.harness import pipeline, status, until
from tests.mqi_standin.ibmmqc import (
    CONTEXT_FIELDS,
    UNCONVERTIBLE,
    live_connections,
    live_message_handles,
)
from workflows.redelivery import msg_id_of

LEGS = (LegSpec(name="CREDIT", sequence=10), LegSpec(name="STOCK", sequence=20),
        LegSpec(name="TAX", sequence=30))  # fmt: skip
CONTEXT = set(CONTEXT_FIELDS)
OUTPUTS = ("ORDER.RESPONSE", "GATHER.DUPLICATE", "GATHER.LATE", "GATHER.UNKNOWN",
           "GATHER.FAILURE", "GATHER.REPORT", "GATHER.BACKOUT",
           "SYSTEM.DEAD.LETTER.QUEUE")  # fmt: skip


async def test_a_gather_with_duplicate_late_unknown_and_poison_replies(temporal_env, tmp_path):
    spec = AggregateSpec(name="ibm", legs=LEGS, unknown_timeout_seconds=1)
    before = live_message_handles() - live_connections()
    async with pipeline(
        temporal_env.client, tmp_path, [spec], transport=lambda path: standin_connector(path)
    ) as p:
        g = await p.scatter(spec)
        first = p.reply(spec, g.correl_id, "CREDIT", b'{"c":1}', note="caf\u00e9", n=7)
        await until(lambda: status(p.handle(spec, g.correl_id)), lambda s: s.legs_received)
        # Another application's identity, put with all context set as a relay would.
        relayed = MQMessage(
            correl_id=g.correl_id, properties={"leg": "CREDIT"}, body=b'{"c":2}',
            user_identifier="backend", accounting_token=b"\x16acct-7",
            appl_identity_data="order-service", put_appl_type=11, appl_origin_data="EU1",
            put_appl_name="CREDIT.SVC",  # MQ keeps PutTime in hundredths of a second
            put_date_time=datetime(2026, 3, 4, 5, 6, 7, 80000, tzinfo=UTC))  # fmt: skip
        dup = p.qm.put(spec.reply_queue, relayed, PutOptions(syncpoint=False, set_all_context=True))
        await until(lambda: status(p.handle(spec, g.correl_id)), lambda s: s.duplicates == 1)
        # A confirmation of arrival (COA) for STOCK's request, before its reply.
        coa = p.put(
            spec.reply_queue,
            MQMessage(correl_id=g.correl_id, msg_type=MQMT_REPORT, feedback=259,
                      properties={"leg": "STOCK"}, body=b'{"coa":1}'),
        )  # fmt: skip
        rest = [p.reply(spec, g.correl_id, leg, b"{}") for leg in ("STOCK", "TAX")]
        result = await p.result(spec, g.correl_id)
        late = p.reply(spec, g.correl_id, "TAX", b'{"late":1}')
        unknown = p.reply(spec, parse_id("NOBODY-IBM"), "TAX", b"{}")
        poison = p.put("GATHER.IN", MQMessage(properties={"leg": "TAX"}, body=b"poison"))
        expected = {dup.msg_id: "GATHER.DUPLICATE", late.msg_id: "GATHER.LATE",
                    unknown.msg_id: "GATHER.UNKNOWN", poison.msg_id: "GATHER.FAILURE",
                    coa.msg_id: "GATHER.REPORT"}  # fmt: skip
        await p.landed(OUTPUTS[1:], lambda n: n == len(expected), 30)
        found: dict[bytes, list[str]] = {}
        copies: dict[bytes, MQMessage] = {}
        for queue in OUTPUTS:
            for message in p.messages(queue):
                found.setdefault(message.msg_id, []).append(queue)
                copies[message.msg_id] = message
        responses = p.messages("ORDER.RESPONSE")
        assert p.empty("GATHER.IN")
    assert result.state == "COMPLETE"
    assert len(responses) == 1 and responses[0].correl_id == g.request_msg_id
    assert json.loads(responses[0].body)["legs"]["credit"] == {"c": 1}
    assert json.loads(responses[0].body)["legs"]["stock"] == {}
    assert copies[coa.msg_id].feedback == 259 and copies[coa.msg_id].msg_type == MQMT_REPORT
    merged = {bytes.fromhex(msg_id_of(k)) for k in result.consumed_msg_ids}
    assert {first.msg_id, *(m.msg_id for m in rest)} <= merged
    for msg_id, queue in expected.items():
        assert found.get(msg_id) == [queue], (queue, found.get(msg_id))
        assert msg_id not in merged or queue == "GATHER.DUPLICATE"
    # Forwarded intact: body, CorrelId, context and the properties as sent.
    copy = copies[dup.msg_id]
    assert (copy.body, copy.correl_id) == (dup.body, dup.correl_id)
    assert copy.model_dump(include=CONTEXT) == dup.model_dump(include=CONTEXT)
    assert copy.user_identifier == "backend"
    sent = {k: v for k, v in copy.properties.items()
            if not k.startswith("mqgather_")}  # fmt: skip
    assert sent == dup.properties
    # A connection keeps one handle for its gets; none is left per message put or got.
    assert live_message_handles() - live_connections() <= before


async def test_a_gather_of_large_replies_over_the_adapter(temporal_env, tmp_path):
    spec = AggregateSpec(name="ibmbig", legs=LEGS, merge="blob", timeout_seconds=300)
    big = 100 * 1024 * 1024

    def connector(path):
        return standin_connector(path, qmgr="IBMBIG", channel_maxmsgl=big)

    async with pipeline(temporal_env.client, tmp_path, [spec], transport=connector) as p:
        g = await p.scatter(spec)
        bodies = {"CREDIT": b"c" * 6_000_000, "STOCK": b"s" * 200_000, "TAX": b"t"}
        for leg, body in bodies.items():
            p.reply(spec, g.correl_id, leg, body)
        response = await p.wait_message("ORDER.RESPONSE", timeout=60)
        result = await p.result(spec, g.correl_id)
        assert p.empty("GATHER.HOLD") and p.empty("GATHER.IN")
    assert response.body == bodies["CREDIT"] + bodies["STOCK"] + bodies["TAX"]
    assert [(leg.name, leg.held) for leg in result.legs] == [
        ("CREDIT", True),
        ("STOCK", True),
        ("TAX", False),
    ]


async def test_a_reply_whose_property_mq_cannot_convert_goes_aside_whole_and_stalls_nothing(
    temporal_env, tmp_path
):
    spec = AggregateSpec(name="odd", legs=LEGS)
    async with pipeline(
        temporal_env.client, tmp_path, [spec], transport=lambda path: standin_connector(path)
    ) as p:
        g = await p.scatter(spec)
        props = {"leg": "CREDIT", "note": "Hi".encode("cp037"), f"{UNCONVERTIBLE}note": 4711}
        odd = MQMessage(correl_id=g.correl_id, body=b'{"c":9}', properties=props)
        bad = p.put("GATHER.IN", odd)
        for leg in ("CREDIT", "STOCK", "TAX"):
            p.reply(spec, g.correl_id, leg, b"{}")
        result = await p.result(spec, g.correl_id)
        aside = await p.wait_message("GATHER.FAILURE")
    assert result.state == "COMPLETE"
    assert (aside.msg_id, aside.body, aside.correl_id) == (bad.msg_id, b'{"c":9}', g.correl_id)
    assert aside.properties["leg"] == "CREDIT"
    assert "MQRC_PROP_VALUE_NOT_CONVERTED" in str(aside.properties["mqgather_reason"])
    # The property no one could read went with it, as MQ held it.
    assert (aside.properties["note"], aside.properties[f"{UNCONVERTIBLE}note"]) == (
        "Hi".encode("cp037"), 4711)  # fmt: skip


@pytest.mark.parametrize("ccsid", [1208, 819])
async def test_replies_whose_property_names_are_not_ascii_each_end_in_one_place(
    temporal_env, tmp_path, ccsid
):
    """A JMS back end may name a property "größe" or "価格", as MQ allows. With the
    process's CCSID at 1208 such a reply is gathered, and its late copy forwarded with
    every property; in 819 it cannot be read, so it goes aside whole, and the queue
    goes on: the next reply still completes the gather."""
    spec = AggregateSpec(name="names", legs=LEGS)
    named = {"größe": "XL", "価格": 12}
    connect = lambda path: standin_connector(path, application_ccsid=ccsid)  # noqa: E731
    async with pipeline(temporal_env.client, tmp_path, [spec], transport=connect) as p:
        g = await p.scatter(spec)
        odd = p.put("GATHER.IN", MQMessage(correl_id=g.correl_id, body=b'{"c":9}',
                                           properties={"leg": "CREDIT", **named}))  # fmt: skip
        if ccsid == 819:
            aside = await p.wait_message("GATHER.FAILURE")
            p.reply(spec, g.correl_id, "CREDIT", b"{}")
        for leg in ("STOCK", "TAX"):
            p.reply(spec, g.correl_id, leg, b"{}")
        result = await p.result(spec, g.correl_id)
        response = await p.wait_message("ORDER.RESPONSE")
        late = p.put("GATHER.IN", MQMessage(correl_id=g.correl_id, body=b"{}",
                                            properties={"leg": "TAX", **named}))  # fmt: skip
        moved = await p.wait_message("GATHER.LATE" if ccsid == 1208 else "GATHER.FAILURE")
        for queue in OUTPUTS:
            assert p.empty(queue), queue
    assert result.state == "COMPLETE" and response.correl_id == g.correl_id
    assert (moved.msg_id, {k: moved.properties[k] for k in named}) == (late.msg_id, named)
    if ccsid == 1208:
        assert sorted(result.legs_received) == ["CREDIT", "STOCK", "TAX"]
    else:
        assert (aside.msg_id, {k: aside.properties[k] for k in named}) == (odd.msg_id, named)
        assert "MQCCSID=1208" in str(aside.properties["mqgather_reason"])
