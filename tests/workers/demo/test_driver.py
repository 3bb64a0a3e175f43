"""The driver's plans and the back ends' fate decisions (pure parts)."""

from __future__ import annotations

from bridge.mq.models import MQMessage
from mqgather.config import default_aggregates
from workers.demo.backends import FATE_PROPERTY, BackendBehaviour, fate_of
from workers.demo.driver import Rates, expected_counts, plan_requests

SPEC = default_aggregates()["orders"]


def test_plan_has_each_fate_in_proportion_and_unique_correl_ids():
    plans = plan_requests(200, SPEC, Rates(drop=0.02, late=0.02, duplicate=0.03))
    fates = [p.fate for p in plans]
    assert (fates.count("drop"), fates.count("late"), fates.count("dup")) == (4, 4, 6)
    assert len({p.correl_id for p in plans}) == 200
    assert all(p.leg in {"CREDIT", "STOCK", "TAX"} for p in plans if p.fate != "ok")


def test_expected_counts_follow_the_plan():
    plans = plan_requests(100, SPEC, Rates(drop=0.05, late=0.03, duplicate=0.02))
    expected = expected_counts(plans, unknown=2, poison=1)
    assert expected == {
        "requests": 100, "completed": 92, "timed_out": 8, "late": 3, "unknown": 2,
        "duplicates": 2, "failures": 1,
    }  # fmt: skip


def test_fate_property_wins_and_rates_are_deterministic():
    told = MQMessage(msg_id=b"m1", properties={FATE_PROPERTY: "late", "leg": "TAX"})
    assert fate_of(told, BackendBehaviour()) == "late"
    always_drop = BackendBehaviour(drop_rate=1.0)
    assert fate_of(MQMessage(msg_id=b"m2", properties={"leg": "TAX"}), always_drop) == "drop"
    some = BackendBehaviour(duplicate_rate=0.5)
    draws = [
        fate_of(MQMessage(msg_id=bytes([i]), properties={"leg": "A"}), some) for i in range(200)
    ]
    assert draws == [fate_of(MQMessage(msg_id=bytes([i]), properties={"leg": "A"}), some)
                     for i in range(200)]  # fmt: skip
    assert 60 < draws.count("dup") < 140
