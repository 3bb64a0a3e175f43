"""The ledger: one of every class of bad input, between good gathers; afterwards every
message that entered is in exactly one place, with its MQMD and body intact."""

from __future__ import annotations

import json

from bridge.mq.models import Match, MQMessage, PutOptions, parse_id
from mqgather.config import AggregateSpec, LegSpec
from tests.harness import pipeline, status, until
from workflows.redelivery import msg_id_of

LEGS = (LegSpec(name="CREDIT", sequence=10), LegSpec(name="STOCK", sequence=20),
        LegSpec(name="TAX", sequence=30))  # fmt: skip
QUEUES = ("GATHER.FAILURE", "GATHER.LATE", "GATHER.UNKNOWN", "GATHER.DUPLICATE",
          "GATHER.BACKOUT", "SYSTEM.DEAD.LETTER.QUEUE", "GATHER.HOLD", "GATHER.IN")  # fmt: skip
#: Where messages end; the hold queue and the reply queue are where none may stay.
ENDS = QUEUES[:-2]


async def test_every_bad_input_ends_in_exactly_one_place_intact(temporal_env, tmp_path):
    spec = AggregateSpec(name="ledger", legs=LEGS, max_reply_bytes=1000, timeout_seconds=300,
                         unknown_timeout_seconds=2)  # fmt: skip
    expect: dict[bytes, str] = {}  # MsgId -> where it must end ("merged" or a queue)
    sent: dict[bytes, MQMessage] = {}
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        n = 0

        def put(correl: bytes, where: str, *, leg: str | None = "CREDIT", body: bytes = b"{}",
                ccsid: int = 1208, **props: object) -> MQMessage:  # fmt: skip
            nonlocal n
            n += 1
            properties = dict(props)
            if leg is not None:
                properties["leg"] = leg
            message = MQMessage(correl_id=correl, properties=properties, body=body,
                                coded_char_set_id=ccsid, encoding=273 if ccsid == 37 else 546,
                                put_appl_name=f"BACKEND-{n}", user_identifier=f"svc{n}",
                                accounting_token=n.to_bytes(4, "big"),
                                appl_identity_data=f"id-{n}", put_appl_type=11)  # fmt: skip
            done = p.qm.put("GATHER.IN", message, PutOptions(syncpoint=False,
                                                              set_all_context=True))  # fmt: skip
            expect[done.msg_id], sent[done.msg_id] = where, done
            return done

        async def good(label: str, where: str = "merged") -> bytes:
            g = await p.scatter(spec)
            for leg in ("CREDIT", "STOCK", "TAX"):
                put(g.correl_id, where, leg=leg, body=json.dumps({"g": label}).encode())
            return g.correl_id

        before = await good("before")
        failure = "GATHER.FAILURE"
        put(b"\x00" * 24, failure)  # no CorrelId
        put(parse_id("X1"), failure, aggregate="nope")  # unknown aggregate
        put(parse_id("X2"), failure, leg=None)  # no leg property
        put(parse_id("X3"), failure, body=b"x" * 2000, ccsid=37)  # body too big
        # A property of megabytes is no fault: the reply waits on the hold queue, whole,
        # and (nobody registers X4) ends on the unknown queue, its property intact.
        put(parse_id("X4"), "GATHER.UNKNOWN", blob="y" * 2_000_000)
        put(parse_id("X5"), failure, **{"k\udcff": 1})  # property name not text
        bad = await p.scatter(spec)  # its replies pass; the merge fails on one body
        put(bad.correl_id, failure, leg="CREDIT", body=b"{not json")
        put(bad.correl_id, failure, leg="STOCK")
        put(bad.correl_id, failure, leg="TAX")
        cc = await p.scatter(spec)
        for leg in ("CREDIT", "STOCK", "TAX"):
            put(cc.correl_id, failure, leg=leg, ccsid=9999)  # a CCSID no one can read
        # A duplicate leg, then late replies to gathers that closed.
        dup = await p.scatter(spec)
        put(dup.correl_id, "merged", leg="CREDIT", body=b'{"first":1}')
        await until(lambda: status(p.handle(spec, dup.correl_id)),
                    lambda s: s.legs_received == ["CREDIT"])  # fmt: skip
        put(dup.correl_id, "GATHER.DUPLICATE", leg="CREDIT", body=b'{"second":1}', ccsid=37)
        put(dup.correl_id, "merged", leg="STOCK")
        put(dup.correl_id, "merged", leg="TAX")
        await p.result(spec, before)
        put(before, "GATHER.LATE", leg="TAX", ccsid=37, body=b"\xc1\xc2")
        # Replies nobody registers.
        put(parse_id("NOBODY"), "GATHER.UNKNOWN", leg="TAX")
        # A reply backed out BOTHRESH times that no gather took.
        async with p.bridge_stopped():  # or the bridge could take it between the gets
            poison = put(parse_id("POISON"), "GATHER.BACKOUT", leg="TAX")
            for _ in range(3):
                p.qm.get("GATHER.IN", match=Match(msg_id=poison.msg_id))
                p.qm.backout()
        after = await good("after")
        for correl in (before, dup.correl_id, after):
            assert (await p.result(spec, correl)).state == "COMPLETE"
        await p.landed(ENDS, lambda total: total == sum(w != "merged" for w in expect.values()),
                       30)  # fmt: skip
        found: dict[bytes, list[tuple[str, MQMessage]]] = {m: [] for m in expect}
        for queue in QUEUES:
            for message in p.messages(queue):
                if message.msg_id in found:
                    found[message.msg_id].append((queue, message))
        merged = set()
        for correl in (before, dup.correl_id, after):
            taken = (await p.result(spec, correl)).consumed_msg_ids
            merged |= {bytes.fromhex(msg_id_of(k)) for k in taken}
    for msg_id, where in expect.items():
        places = found[msg_id]
        if where == "merged":
            assert places == [] and msg_id in merged, (where, places)
            continue
        assert [q for q, _ in places] == [where], (sent[msg_id].properties, places)
        copy, original = places[0][1], sent[msg_id]
        assert copy.correl_id == original.correl_id and copy.body == original.body
        context = {"put_appl_name", "put_date_time", "user_identifier", "accounting_token",
                   "appl_identity_data", "put_appl_type", "appl_origin_data"}  # fmt: skip
        assert copy.model_dump(include=context) == original.model_dump(include=context)
        assert (copy.coded_char_set_id, copy.encoding) == (original.coded_char_set_id,
                                                            original.encoding)  # fmt: skip
        assert {k: v for k, v in copy.properties.items() if not k.startswith("mqgather_")} == (
            original.properties
        )
