"""The collector bridge's routing of a message it cannot batch, without a server."""

from __future__ import annotations

from bridge.collect import CollectorBridge
from bridge.mq.models import MQMessage
from mqgather.collector_config import CollectorRule
from mqgather.runtime.rules import RuleStore
from tests.collecting import SPEC


def test_a_message_whose_properties_are_in_an_rfh2_body_says_so(tmp_path):
    spec = SPEC.model_copy(update={"missing_key": "failure", "rules_db": str(tmp_path / "r.db")})
    bridge = CollectorBridge(None, lambda: None, spec)  # type: ignore[arg-type]
    rfh2 = bridge._route(MQMessage(format="MQHRF2", body=b"RFH \x00\x00\x00\x02"))
    plain = bridge._route(MQMessage(format="MQSTR", body=b"<a/>"))
    assert isinstance(rfh2, str) and "has no destination" in rfh2
    assert "its body begins with an MQRFH2 header (Format MQHRF2)" in rfh2
    assert isinstance(plain, str) and "has no destination" in plain and "MQRFH2" not in plain


def test_a_destination_whose_rule_names_a_queue_mq_refuses_goes_to_the_failure_queue(tmp_path):
    spec = SPEC.model_copy(update={"rules_db": str(tmp_path / "r.db")})
    assert spec.destination_key == "property:destination"
    store = RuleStore(spec.rules_db)
    store.set(spec.name, CollectorRule(destination="UK", target_queue="OUT.UK"))
    with store._connect() as db:  # as a hand at the database might write it
        db.execute("UPDATE collector_rules SET target_queue = 'OUT-UK'")
    bridge = CollectorBridge(None, lambda: None, spec)  # type: ignore[arg-type]
    bridge.rules.refresh(force=True)
    routed = bridge._route(MQMessage(properties={"destination": "UK"}, body=b"<a/>"))
    assert routed == (
        "the rule of destination 'UK' is invalid: column target_queue: '-' cannot stand in an "
        "MQ queue name: only A-Z, a-z, 0-9 and . / _ %"
    )
    france = bridge._route(MQMessage(properties={"destination": "FR"}, body=b"<a/>"))
    assert not isinstance(france, str)  # no row: the default rule, batched


def test_a_json_key_in_a_body_nested_too_deep_to_read_is_a_reason_not_a_runtime_error(tmp_path):
    # RecursionError is a RuntimeError, which the bridge takes for Temporal being away:
    # it backed the whole batch out and read the same message again.
    spec = SPEC.model_copy(update={"destination_key": "json:to", "missing_key": "failure",
                                   "rules_db": str(tmp_path / "r.db")})  # fmt: skip
    bridge = CollectorBridge(None, lambda: None, spec)  # type: ignore[arg-type]
    deep = bridge._route(MQMessage(body=b"[" * 100_000 + b"]" * 100_000))
    fine = bridge._route(MQMessage(body=b'{"to": "UK"}'))
    assert (
        deep == "no destination: the body is JSON nested too deep to read (destination_key json:to)"
    )
    assert not isinstance(fine, str)


def test_a_destination_that_is_not_printable_text_is_a_reason(tmp_path):
    spec = SPEC.model_copy(update={"rules_db": str(tmp_path / "r.db")})
    bridge = CollectorBridge(None, lambda: None, spec)  # type: ignore[arg-type]
    for odd in ("bad\udcff", "a\x00b", "a\nb", "zero\u200bwidth"):
        routed = bridge._route(MQMessage(properties={"destination": odd}, body=b"<a/>"))
        assert routed == (
            f"destination {odd!r} is not printable text (a control or invisible character, "
            "or a lone surrogate from a property that is not valid text)"
        )
    assert not isinstance(bridge._route(MQMessage(properties={"destination": "Côte"})), str)
