"""The queue manager checked against a configuration, on every transport."""

from __future__ import annotations

from bridge.mq.admin import QMGR_ROW, check_queues, setup_queues
from bridge.mq.models import QueueAttributes
from mqgather.config import parse_config


def test_check_names_each_problem_and_nothing_once_set_up(connect):
    qm = connect()
    config = parse_config(
        {"aggregates": {"a": {"reply_queue": "CHK.IN", "legs": [{"name": "L", "sequence": 1}]}},
         "queues": {"CHK.IN": {"bothresh": 3, "boqname": "CHK.BACKOUT"}}},
        "the test",
    )  # fmt: skip
    setup_queues(qm, config)
    assert [f for f in check_queues(qm, config) if f.queue != QMGR_ROW] == []
    inbound = qm.inquire("CHK.IN")
    qm.define(inbound.model_copy(update={"get": "disabled", "boqname": "NO.SUCH.Q"}),
              replace=True)  # fmt: skip
    qm.define(QueueAttributes(name="GATHER.LATE", maxmsgl=10), replace=True)
    # As it was defined before a marker kept a digest of each message its PUT carried.
    ledger = qm.inquire("MQGATHER.LEDGER")
    qm.define(ledger.model_copy(update={"maxmsgl": 4096}), replace=True)
    unknown = qm.inquire("GATHER.UNKNOWN")
    qm.define(unknown.model_copy(update={"usage": "xmitq"}), replace=True)
    found = {(f.queue, f.problem.split(":")[0].split(" is")[0]) for f in check_queues(qm, config)
             if f.queue != QMGR_ROW}  # fmt: skip
    assert found == {
        ("CHK.IN", "GET(DISABLED)"),
        ("CHK.IN", "BOQNAME(NO.SUCH.Q)"),
        ("GATHER.LATE", "MAXMSGL(10)"),
        ("MQGATHER.LEDGER", "MAXMSGL(4096)"),
        ("GATHER.UNKNOWN", "USAGE(XMITQ)"),
    }


def test_check_names_a_maxumsgs_below_what_scatter_and_the_bridges_need(tmp_path):
    from bridge.mq.local_qm import LocalQueueManager

    legs = [{"name": f"L{n}", "sequence": n} for n in range(1, 6)]
    config = parse_config({"aggregates": {"wide": {"legs": legs}}}, "the test")
    with LocalQueueManager(tmp_path / "qm.db") as qm:
        setup_queues(qm, config)
        qm.set_max_uncommitted(4)
        (scatter,) = [f for f in check_queues(qm, config) if f.queue == QMGR_ROW]
        qm.set_max_uncommitted(1)
        problems = sorted(f.problem for f in check_queues(qm, config) if f.queue == QMGR_ROW)
    assert (
        scatter.problem
        == "MAXUMSGS(4): scatter puts the 5 requests of aggregate wide in one unit of work"
    )
    assert problems == [
        "MAXUMSGS(1): a bridge needs at least 4 messages in one unit of work",
        "MAXUMSGS(1): scatter puts the 5 requests of aggregate wide in one unit of work",
    ]


def test_check_names_a_dead_letter_queue_that_is_missing_or_put_disabled(tmp_path):
    from bridge.mq.local_qm import LocalQueueManager
    from mqgather.constants import DEAD_LETTER_QUEUE

    config = parse_config({"aggregates": {"a": {"legs": [{"name": "L", "sequence": 1}]}}},
                          "the test")  # fmt: skip

    def about_the_dlq(qm: LocalQueueManager) -> list:
        return [f for f in check_queues(qm, config)
                if f.purpose in ("DEADQ", "the dead-letter queue")]  # fmt: skip

    with LocalQueueManager(tmp_path / "qm.db") as qm:
        setup_queues(qm, config)
        assert about_the_dlq(qm) == []
        dlq = qm.inquire(DEAD_LETTER_QUEUE)
        qm.define(dlq.model_copy(update={"put": "disabled"}), replace=True)
        (disabled,) = about_the_dlq(qm)
        qm.set_dead_letter_queue("NO.SUCH.DLQ")
        (missing,) = about_the_dlq(qm)
    assert (disabled.queue, disabled.problem.split(":")[0]) == (DEAD_LETTER_QUEUE, "PUT(DISABLED)")
    assert (missing.queue, missing.purpose) == (QMGR_ROW, "DEADQ")
    assert missing.problem.startswith("DEADQ(NO.SUCH.DLQ) is not defined")
