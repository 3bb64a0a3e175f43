"""The driver's plans and the back ends' fate decisions (pure parts)."""

from __future__ import annotations

import pytest

from bridge.mq.models import MQMessage
from mqgather.config import default_aggregates
from workers.demo.backends import FATE_PROPERTY, BackendBehaviour, fate_of
from workers.demo.driver import (
    Rates,
    Rerequests,
    expected_counts,
    plan_requests,
    planned_rerequests,
    reconcile_rerequests,
    retrying_legs,
)

SPEC = default_aggregates()["orders"]


def test_plan_has_each_fate_in_proportion_and_unique_correl_ids():
    plans = plan_requests(200, SPEC, Rates(drop=0.02, late=0.02, duplicate=0.03, lost=0.02))
    fates = [p.fate for p in plans]
    assert (fates.count("drop"), fates.count("late"), fates.count("dup")) == (4, 4, 6)
    assert fates.count("lost") == 4
    assert len({p.correl_id for p in plans}) == 200
    assert all(p.leg in {"CREDIT", "STOCK", "TAX"} for p in plans if p.fate != "ok")
    assert {p.leg for p in plans if p.fate == "lost"} == {"STOCK"}  # the leg with retries


def test_expected_counts_follow_the_plan():
    plans = plan_requests(100, SPEC, Rates(drop=0.05, late=0.03, duplicate=0.02, lost=0.02))
    expected = expected_counts(plans, unknown=2, poison=1, retrying=retrying_legs(SPEC))
    stock_lost = sum(p.fate in ("drop", "late") and p.leg == "STOCK" for p in plans)
    assert expected == {
        "requests": 100, "completed": 92, "timed_out": 8, "late": 3, "unknown": 2,
        "duplicates": 2, "failures": 1, "rerequested": 2 + stock_lost,
    }  # fmt: skip


def test_rerequests_are_sorted_into_planned_missing_slow_and_without_cause():
    plans = plan_requests(100, SPEC, Rates(drop=0.05, late=0.03, duplicate=0.02, lost=0.02))
    planned = planned_rerequests(plans, retrying_legs(SPEC))
    assert len(planned) == expected_counts(plans, 0, 0, retrying_legs(SPEC))["rerequested"]
    first, *rest = sorted(planned)
    ok = [p.correl_id for p in plans if p.fate == "ok"]
    seen = {c: (("STOCK",), 3.0) for c in rest}  # the first planned one never came
    seen[ok[0]] = (("STOCK",), 2.6)  # due at 2.5 s and not in: asked again, as configured
    seen[ok[1]] = (("STOCK",), 2.49)  # within MQ's hundredths of a second of it: slow too
    seen[ok[2]] = (("STOCK",), 1.2)  # answered before it was due: no cause
    seen[ok[3]] = (("TAX",), 9.0)  # a leg with no retries is never asked again
    seen[ok[4]] = (("STOCK",), None)  # no time to tell by
    verdict = reconcile_rerequests(planned, seen, {"STOCK": 2.5})
    assert verdict == Rerequests(planned=len(rest), missing=1, slow=2, unexplained=3)
    assert first not in seen


def test_a_lost_leg_is_dropped_first_and_answered_when_asked_again(tmp_path):
    from bridge.mq.local_qm import LocalQueueManager
    from bridge.mq.models import MQRO_PASS_CORREL_ID, PutOptions, QueueAttributes
    from mqgather.names import PROP_ATTEMPT
    from workers.demo.backends import start_backends

    path = tmp_path / "qm.db"
    with LocalQueueManager(path) as qm:
        for name in ("REQ.Q", "REPLY.Q"):
            qm.define(QueueAttributes(name=name))
        first = MQMessage(msg_id=b"G" * 24, correl_id=b"G" * 24, reply_to_q="REPLY.Q",
                          properties={"leg": "STOCK", FATE_PROPERTY: "lost"})  # fmt: skip
        asked = {**first.properties, PROP_ATTEMPT: 2}
        again = first.model_copy(
            update={"msg_id": b"N" * 24, "report": MQRO_PASS_CORREL_ID, "properties": asked}
        )
        qm.put("REQ.Q", first, PutOptions(syncpoint=False))
        qm.put("REQ.Q", again, PutOptions(syncpoint=False))
    stop, stats, threads = start_backends(lambda: LocalQueueManager(path), ["REQ.Q"],
                                          BackendBehaviour(latency_ms=0, jitter_ms=0))  # fmt: skip
    try:
        with LocalQueueManager(path) as qm:
            reply = qm.get("REPLY.Q", wait_ms=10_000, syncpoint=False)
    finally:
        stop.set()
        for thread in threads:
            thread.join(5)
    assert reply.correl_id == b"G" * 24  # the gather's, passed on; not the new MsgId
    assert (stats.requests, stats.dropped, stats.rerequests, stats.replies) == (2, 1, 1, 1)


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


def test_a_late_reply_waits_for_its_gather_to_time_out(tmp_path):
    """However slow the worker, a planned late leg is answered only once the gather's
    partial response is on the timeout queue."""
    import time

    from bridge.mq.errors import NoMessageAvailable
    from bridge.mq.local_qm import LocalQueueManager
    from bridge.mq.models import PutOptions, QueueAttributes
    from mqgather.names import PROP_AGGREGATE
    from workers.demo.backends import start_backends

    path = tmp_path / "qm.db"
    with LocalQueueManager(path) as qm:
        for name in ("REQ.Q", "REPLY.Q", "TIMEOUT.Q"):
            qm.define(QueueAttributes(name=name))
        request = MQMessage(
            msg_id=b"G" * 24, reply_to_q="REPLY.Q",
            properties={"leg": "TAX", PROP_AGGREGATE: "agg", FATE_PROPERTY: "late"},
        )  # fmt: skip
        qm.put("REQ.Q", request, PutOptions(syncpoint=False))
    behaviour = BackendBehaviour(late_after_seconds=0.0, timeout_queues={"agg": "TIMEOUT.Q"})
    stop, stats, threads = start_backends(lambda: LocalQueueManager(path), ["REQ.Q"], behaviour)
    try:
        with LocalQueueManager(path) as qm:
            deadline = time.monotonic() + 10
            while stats.late == 0 and time.monotonic() < deadline:
                time.sleep(0.05)  # another thread's progress; nothing to await on
            assert stats.late == 1
            # Held while the gather is open (several rechecks' worth).
            try:
                qm.get("REPLY.Q", wait_ms=1000, syncpoint=False)
                raise AssertionError("a late reply went out before its gather timed out")
            except NoMessageAvailable:
                pass
            partial = MQMessage(correl_id=b"G" * 24, body=b"partial")
            qm.put("TIMEOUT.Q", partial, PutOptions(syncpoint=False))
            reply = qm.get("REPLY.Q", wait_ms=10_000, syncpoint=False)
    finally:
        stop.set()
        for thread in threads:
            thread.join(5)
    assert reply.correl_id == b"G" * 24 and FATE_PROPERTY not in reply.properties


def test_shares_past_all_the_requests_are_refused_instead_of_never_ending():
    # Each fate takes requests of its own: with more than all of them to place, the
    # search for a free request never ended (`mqgather drive --drop-rate 2` hung).
    with pytest.raises(ValueError, match=r"together 1\.04, more than 1"):
        plan_requests(100, SPEC, Rates(drop=0.5, late=0.5, duplicate=0.02, lost=0.02))
    plans = plan_requests(100, SPEC, Rates(drop=0.5, late=0.46, duplicate=0.02, lost=0.02))
    assert [p.fate for p in plans].count("ok") == 0
