"""A gather end to end: bridge -> workflow -> merge -> PUT, on the real dev server."""

from __future__ import annotations

import json

from bridge.mq.models import parse_id
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
