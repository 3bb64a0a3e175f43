"""The bridge floor's own work (the bench itself is not a test)."""

from __future__ import annotations

import json

from bench.bridge_floor import by_correl_id
from bridge.mq.models import MQMessage


def test_the_floor_signals_each_correl_ids_messages_in_order_as_plain_json():
    got = [
        MQMessage(correl_id=b"A", properties={"leg": "CREDIT"}, body=b"\xff\x00one"),
        MQMessage(correl_id=b"B", properties={"leg": "CREDIT"}, body=b"two"),
        MQMessage(correl_id=b"A", properties={"leg": "STOCK"}, body=b"three"),
    ]
    groups = by_correl_id(got)
    assert list(groups) == [b"A".ljust(24, b"\0"), b"B".ljust(24, b"\0")]
    legs = [m["properties"]["leg"]["value"] for m in groups[b"A".ljust(24, b"\0")]]
    assert legs == ["CREDIT", "STOCK"]
    # What the floor sends is JSON already (the SDK's plain converter takes it as it is)
    # and carries every message whole, a body that is not text included: the floor moves
    # the same bytes the bridge does.
    sent = [json.loads(json.dumps(messages)) for messages in groups.values()]
    back = [MQMessage.model_validate(m) for messages in sent for m in messages]
    assert sorted(back, key=lambda m: m.body) == sorted(got, key=lambda m: m.body)
