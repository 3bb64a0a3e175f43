"""Salvage's rules on the embedded queue manager: where each reply a gather held goes,
and what counts as placed already."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from activities.mq import placed, response_msg_id
from bridge.mq import ledger
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage
from mqgather.config import AggregateSpec
from mqgather.routing import Destination
from tests.harness import THREE_LEGS, prepare_queues
from workers.salvage import destinations, salvage
from workflows.models import Reply, Routed, UnplacedReplies

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GATHER = "gather:s:00"


def reply(n: int, leg: str = "CREDIT") -> Reply:
    message = MQMessage(msg_id=bytes([n]) * 24, body=f"[{n}]".encode())
    return Reply(message=message, leg=leg, received_at=T0, size=len(message.body))


def found(spec: AggregateSpec, **parts: list) -> UnplacedReplies:
    return UnplacedReplies(gather_id=GATHER, aggregate=spec, **parts)


def test_each_reply_goes_where_the_gather_would_have_sent_it():
    spec = AggregateSpec(name="s", legs=THREE_LEGS)
    dup = Routed(kind=Destination.DUPLICATE, reply=reply(1), reason="duplicate reply")
    where = destinations(found(spec, outbox=[dup], legs=[reply(2)], waiting=[reply(3, "TAX")]))
    assert [(r.kind, r.reply.message.msg_id[0], leg) for r, leg in where] == [
        (Destination.DUPLICATE, 1, False), (Destination.LATE, 2, True),
        (Destination.UNKNOWN, 3, False)]  # fmt: skip
    assert where[0][0].reason == "duplicate reply" and "without answering" in where[1][0].reason


def test_a_final_of_an_earlier_release_carries_the_legs_replies(tmp_path: Path):
    """A final whose marker records no replies (written before finals did) holds every
    reply of the legs: salvage leaves them; a reply it was forwarding still goes."""
    spec = AggregateSpec(name="s", legs=THREE_LEGS)
    path = tmp_path / "qm.db"
    prepare_queues(path)
    with LocalQueueManager(path) as qm:
        ledger.mark(qm, spec.ledger_queue, response_msg_id(GATHER, "COMPLETE"), "old", 1.0)
        qm.commit()
        assert placed(qm, spec, GATHER, [(reply(1), True), (reply(2), False)]) == [
            "carried by its final", ""]  # fmt: skip


def test_a_duplicate_the_aggregate_discards_is_not_sent(tmp_path: Path):
    spec = AggregateSpec(name="s", legs=THREE_LEGS, duplicate_queue="")
    path = tmp_path / "qm.db"
    prepare_queues(path)
    dup = Routed(kind=Destination.DUPLICATE, reply=reply(1), reason="duplicate reply")
    done = salvage(found(spec, outbox=[dup], legs=[reply(2)]), lambda: LocalQueueManager(path))
    assert [(r.queue, r.verdict) for r in done] == [
        ("", "a duplicate the aggregate discards"), ("GATHER.LATE", "sent")]  # fmt: skip
    with LocalQueueManager(path) as qm:
        assert qm.get("GATHER.LATE", syncpoint=False).msg_id == bytes([2]) * 24
        assert qm.inquire("GATHER.LATE").curdepth == 0


def test_a_message_another_salvage_put_back_meanwhile_is_not_put_again(tmp_path: Path):
    """Two salvages of one collector run at once: the second finds the first's marker
    inside its own unit of work, after its look before it, and puts nothing."""
    from activities.batch import item_key
    from bridge.mq.ledger import ledger_key
    from mqgather.collector_config import CollectorSpec
    from workers.salvage import _put_back
    from workflows.collect_models import Item, UnplacedItems

    spec = CollectorSpec(name="c")
    path = tmp_path / "qm.db"
    prepare_queues(path, [spec.input_queue, spec.ledger_queue])
    item = Item(message=reply(1).message, received_at=T0, size=3)
    found = UnplacedItems(workflow_id="collect:c:D", collector=spec, destination="D")
    key = ledger_key("salvage", found.workflow_id, item_key(item))
    with LocalQueueManager(path) as qm:
        ledger.mark(qm, spec.ledger_queue, key, "the other salvage", 1.0)
        qm.commit()
        assert _put_back(qm, found, item, key) == f"put back on {spec.input_queue} before"
        assert qm.inquire(spec.input_queue).curdepth == 0


def test_an_aggregate_name_with_a_quote_or_a_colon_is_matched_in_code_not_in_the_query():
    from workers.salvage import _of_aggregate, _runs_query

    hex_id = "ab" * 24
    assert _of_aggregate(f"gather:a:b:{hex_id}", "a:b")
    assert not _of_aggregate(f"gather:a:b:{hex_id}", "a")  # aggregate "a:b", not "a"
    assert not _of_aggregate(f"gather:ab:{hex_id}", "a")
    query = _runs_query(f"gather:it's:{hex_id}")
    assert "it's" not in query and f"CorrelId = '{hex_id}'" in query


def test_a_salvage_that_stops_midway_leaves_the_rest_for_the_next(tmp_path: Path):
    """Stopped after one forward (its lease near its end, or an operator's Ctrl-C): the
    first reply is sent, the second is left and said so; the next salvage sends the
    second only."""
    from workers.lease import SalvageStopped
    from workers.salvage import STOPPED

    spec = AggregateSpec(name="s", legs=THREE_LEGS)
    path = tmp_path / "qm.db"
    prepare_queues(path)
    calls = []

    def once() -> None:
        calls.append(1)
        if len(calls) > 1:
            raise SalvageStopped("stopped as asked")

    held = found(spec, legs=[reply(1), reply(2, "STOCK")])
    first = salvage(held, lambda: LocalQueueManager(path), before_each=once)
    second = salvage(held, lambda: LocalQueueManager(path))
    assert [r.verdict for r in first] == ["sent", STOPPED] and len(calls) == 2
    assert [r.verdict for r in second] == ["forwarded to GATHER.LATE", "sent"]
    with LocalQueueManager(path) as qm:
        late = [qm.get("GATHER.LATE", syncpoint=False).msg_id for _ in range(2)]
        assert late == [bytes([1]) * 24, bytes([2]) * 24]
        assert qm.inquire("GATHER.LATE").curdepth == 0


def test_a_collector_salvage_that_stops_midway_leaves_the_rest_for_the_next(tmp_path: Path):
    from mqgather.collector_config import CollectorSpec
    from workers.lease import Lease
    from workers.salvage import STOPPED, salvage_items
    from workflows.collect_models import Item, UnplacedBatch, UnplacedItems

    spec = CollectorSpec(name="c")
    path = tmp_path / "qm.db"
    prepare_queues(path, [spec.input_queue, spec.ledger_queue])
    items = [Item(message=reply(n).message, received_at=T0, size=3) for n in (1, 2)]
    held = UnplacedItems(workflow_id="collect:c:D", collector=spec, destination="D",
                         batches=[UnplacedBatch(number=1, items=items)])  # fmt: skip
    lease = Lease("collect:c:D", 900)
    ctrl_c = iter([False, True]).__next__  # an operator's Ctrl-C after the first
    first = salvage_items(held, lambda: LocalQueueManager(path),
                          before_each=lease.checker(ctrl_c))  # fmt: skip
    second = salvage_items(held, lambda: LocalQueueManager(path))
    assert [m.verdict for m in first] == ["sent", STOPPED]
    assert lease.stopped == "stopped as asked"
    assert [m.verdict for m in second] == [f"put back on {spec.input_queue} before", "sent"]
    with LocalQueueManager(path) as qm:
        assert qm.inquire(spec.input_queue).curdepth == 2


def test_a_run_ended_with_its_mq_work_under_way_waits_until_no_attempt_can_commit():
    from datetime import timedelta

    from mqgather.errors import MQGatherError
    from workers.salvage import attempts_over

    now = datetime.now(UTC)
    attempts_over("gather:s:00", True, now - timedelta(seconds=66))  # over
    attempts_over("gather:s:00", False, now)  # nothing under way
    with pytest.raises(MQGatherError, match=r"ended 10 s ago .* run salvage again in 5[45] s"):
        attempts_over("gather:s:00", True, now - timedelta(seconds=10))
