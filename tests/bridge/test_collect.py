"""The collector bridge's routing of a message it cannot batch, without a server."""

from __future__ import annotations

from bridge.collect import CollectorBridge
from bridge.mq.models import MQMessage
from tests.collecting import SPEC


def test_a_message_whose_properties_are_in_an_rfh2_body_says_so(tmp_path):
    spec = SPEC.model_copy(update={"missing_key": "failure", "rules_db": str(tmp_path / "r.db")})
    bridge = CollectorBridge(None, lambda: None, spec)  # type: ignore[arg-type]
    rfh2 = bridge._route(MQMessage(format="MQHRF2", body=b"RFH \x00\x00\x00\x02"))
    plain = bridge._route(MQMessage(format="MQSTR", body=b"<a/>"))
    assert isinstance(rfh2, str) and "has no destination" in rfh2
    assert "its body begins with an MQRFH2 header (Format MQHRF2)" in rfh2
    assert isinstance(plain, str) and "has no destination" in plain and "MQRFH2" not in plain
