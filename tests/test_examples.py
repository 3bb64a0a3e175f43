"""Each configuration in examples/ loads and does what its comments say, on the dev
server and the embedded queue manager (the collector's with its rules in PostgreSQL)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from bridge.mq.models import QueueAttributes
from mqgather.config import load_config, referenced_queues
from tests.collecting import collecting
from tests.harness import pipeline

EXAMPLES = Path(__file__).parents[1] / "examples"


def test_every_example_is_tested_here():
    assert {p.name for p in EXAMPLES.glob("*.toml")} == {
        "ia72-static-xml.toml", "ace-registration-folders.toml", "collector-postgres.toml",
    }  # fmt: skip


async def test_the_ia72_static_gather_merges_xml_in_sequence_order(temporal_env, tmp_path):
    config = load_config(EXAMPLES / "ia72-static-xml.toml")
    spec = config.aggregate("quote")
    async with pipeline(temporal_env.client, tmp_path, [spec],
                        extra_queues=list(referenced_queues(config))) as p:  # fmt: skip
        correl = f"Q-{uuid.uuid4().hex[:8]}".encode()
        for leg in ("ETA", "PRICE", "STOCK"):  # the first reply starts the gather
            p.reply(spec, correl, leg, f"<{leg.lower()}>ok</{leg.lower()}>".encode())
        response = await p.wait_message("QUOTE.RESPONSE")
    assert response.body == (
        b"<QuoteReply><QuoteReply10><price>ok</price></QuoteReply10>"
        b"<QuoteReply20><stock>ok</stock></QuoteReply20>"
        b"<QuoteReply30><eta>ok</eta></QuoteReply30></QuoteReply>"
    )


async def test_the_ace_registration_gather_answers_the_requester_in_folders(temporal_env, tmp_path):
    config = load_config(EXAMPLES / "ace-registration-folders.toml")
    spec = config.aggregate("travel")
    queues = [*referenced_queues(config), "APP.REPLY"]
    async with pipeline(temporal_env.client, tmp_path, [spec], extra_queues=queues) as p:
        sent = await p.scatter(spec, reply_to_q="APP.REPLY")
        for leg in ("FLIGHT", "HOTEL"):  # the back ends answer; CAR never does
            request = await p.wait_message(f"{leg}.REQ")
            p.reply(spec, request.correl_id, leg, json.dumps({"leg": leg}).encode())
        response = await p.wait_message("APP.REPLY")
        result = await p.result(spec, sent.correl_id)
    assert result.state == "COMPLETE" and result.legs_missing == ["CAR"]  # optional, 2 s
    body = json.loads(response.body)
    assert body["ComIbmAggregateReplyBody"]["FLIGHT"] == {"leg": "FLIGHT"}
    assert set(body["ComIbmAggregateReplyBody"]) == {"FLIGHT", "HOTEL"}


async def test_the_collector_batches_by_rules_in_postgresql(temporal_env, tmp_path, request):
    url = request.getfixturevalue("postgres_url")  # skips, saying why, without PostgreSQL
    config = load_config(EXAMPLES / "collector-postgres.toml")
    spec = config.collector("orders")
    assert spec.rules_db.startswith("postgresql://")
    queues = ("ORDERS.OUT.FR",)
    async with collecting(temporal_env.client, tmp_path, spec=spec, rules_db=url,
                          extra_queues=queues) as c:  # fmt: skip
        with c.connect() as qm:
            qm.define(QueueAttributes(name=spec.input_queue, maxdepth=1000, bothresh=3),
                      replace=True)  # fmt: skip
        c.rule("FR", "ORDERS.OUT.FR", max_messages=2, format="json")
        for n in range(2):
            c.send("FR", b'{"order":%d}' % n)
        batch = await c.take("ORDERS.OUT.FR")
    assert [item["order"] for item in json.loads(batch.body)] == [0, 1]


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.name)
def test_an_example_names_only_queues_setup_defines(path, tmp_path):
    from bridge.mq.admin import setup_queues
    from bridge.mq.local_qm import LocalQueueManager

    config = load_config(path)
    with LocalQueueManager(tmp_path / "qm.db") as qm:
        setup_queues(qm, config)
        for queue in referenced_queues(config):
            qm.inquire(queue)  # raises when `queues setup` left it out
