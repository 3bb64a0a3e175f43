"""Gathers whose replies are one MQ logical group, on the real dev server and embedded MQ:
the GroupId correlates, MsgSeqNumber orders, the last-in-group message gives the count."""

from __future__ import annotations

import json

from bridge.mq.models import MQMessage, MsgFlags, PutOptions, parse_id
from mqgather.config import AggregateSpec
from mqgather.names import PROP_REASON
from tests.harness import pipeline, status, until

IN = int(MsgFlags.MSG_IN_GROUP)
LAST = int(MsgFlags.LAST_MSG_IN_GROUP)


def group_spec(**changes) -> AggregateSpec:
    return AggregateSpec(
        **{
            "name": "grp",
            "mode": "static",
            "leg_identification": "group",
            "merge": "blob",
            "separator": "|",
            "timeout_seconds": 30,
            **changes,
        }
    )


async def test_a_group_put_in_logical_order_completes_in_sequence_order(temporal_env, tmp_path):
    spec = group_spec()
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        backend = p.connect()
        # A back end answers with a group in logical order: MQ gives GroupId and numbers.
        put = []
        for i, body in enumerate((b"one", b"two", b"three")):
            flags = LAST if i == 2 else IN
            message = MQMessage(correl_id=parse_id("REQ-G1"), msg_flags=flags, body=body)
            put.append(backend.put(spec.reply_queue, message, PutOptions(logical_order=True)))
        backend.commit()
        group = put[0].group_id
        response = await p.wait_message("ORDER.RESPONSE")
        result = await p.result(spec, group)
        backend.close()
    assert response.body == b"one|two|three"
    assert response.correl_id == parse_id("REQ-G1")  # the request the group answers
    assert result.state == "COMPLETE"
    assert result.legs_received == ["Reply1", "Reply2", "Reply3"]


async def test_physical_order_a_duplicate_number_and_a_timeout_naming_the_gap(
    temporal_env, tmp_path
):
    spec = group_spec(timeout_seconds=2, merge="json")
    group = parse_id("GROUP-7")

    def part(seq: int, body: bytes, flags: int = IN) -> MQMessage:
        return MQMessage(
            correl_id=parse_id("REQ-7"),
            group_id=group,
            msg_seq_number=seq,
            msg_flags=flags,
            body=body,
        )

    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        # Any order; 2 never comes, 3 comes twice (a second MsgId), 4 is the last.
        p.put(spec.reply_queue, part(4, b'{"n":4}', LAST))
        p.put(spec.reply_queue, part(3, b'{"n":3}'))
        p.put(spec.reply_queue, part(1, b'{"n":1}'))
        p.put(spec.reply_queue, part(3, b'{"n":"3 again"}'))
        handle = p.handle(spec, group)
        seen = await until(lambda: status(handle), lambda s: s.duplicates == 1)
        assert seen.legs_missing == ["Reply2"]
        partial = await p.wait_message("GATHER.TIMEOUT")
        duplicate = await p.wait_message("GATHER.DUPLICATE")
        result = await p.result(spec, group)
    body = json.loads(partial.body)
    assert body["state"] == "TIMEOUT"
    assert body["missing"] == ["reply2"]
    assert body["legs"]["reply3"] == {"n": 3}
    assert result.legs_missing == ["Reply2"] and result.duplicates == 1
    assert duplicate.body == b'{"n":"3 again"}' and duplicate.msg_seq_number == 3
    assert duplicate.group_id == group


async def test_a_group_without_its_last_message_times_out_and_says_so(temporal_env, tmp_path):
    spec = group_spec(timeout_seconds=1, merge="json")
    group = parse_id("GROUP-OPEN")
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        for seq in (1, 2):
            p.put(
                spec.reply_queue,
                MQMessage(group_id=group, msg_seq_number=seq, msg_flags=IN, body=b"{}"),
            )
        partial = await p.wait_message("GATHER.TIMEOUT")
        stray = p.put(spec.reply_queue, MQMessage(correl_id=b"NOT-IN-A-GROUP", body=b"{}"))
        failed = await p.wait_message("GATHER.FAILURE")
    assert json.loads(partial.body)["missing"] == ["last-in-group"]
    assert failed.msg_id == stray.msg_id and failed.body == b"{}"
    assert "logical group" in str(failed.properties[PROP_REASON])
