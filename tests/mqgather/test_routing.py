"""One vocabulary for where a message ends."""

from __future__ import annotations

import pytest

from mqgather.config import AggregateSpec
from mqgather.routing import Destination, owner_of_shared_queue, queue_for

SPEC = AggregateSpec(
    name="a", response_queue="R", timeout_queue="T", late_queue="L", unknown_queue="U",
    duplicate_queue="D", failure_queue="F", report_queue="P",
)  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "queue"),
    [
        (Destination.RESPONSE, "R"),
        (Destination.TIMEOUT, "T"),
        (Destination.LATE, "L"),
        (Destination.UNKNOWN, "U"),
        (Destination.DUPLICATE, "D"),
        (Destination.FAILURE, "F"),
        (Destination.REPORT, "P"),
    ],
)
def test_the_aggregate_names_its_own_queues(kind, queue):
    assert queue_for(SPEC, kind) == queue


def test_backout_goes_to_boqname_else_the_dead_letter_queue():
    dlq = "SYSTEM.DEAD.LETTER.QUEUE"
    assert queue_for(SPEC, Destination.BACKOUT, boqname="B", dead_letter_queue=dlq) == "B"
    assert queue_for(SPEC, Destination.BACKOUT, dead_letter_queue=dlq) == dlq
    assert queue_for(SPEC, Destination.DEAD_LETTER, boqname="B", dead_letter_queue=dlq) == dlq


def test_discarded_duplicates_have_no_queue():
    assert queue_for(SPEC.model_copy(update={"duplicate_queue": ""}), Destination.DUPLICATE) == ""


def test_every_destination_has_a_queue_rule():
    for kind in Destination:
        queue_for(SPEC, kind, boqname="B", dead_letter_queue="DLQ")


def test_a_shared_reply_queue_has_one_owner_whatever_the_order():
    specs = [AggregateSpec(name=n, failure_queue=f"F.{n}") for n in ("zeta", "alpha", "mid")]
    assert owner_of_shared_queue(specs).name == "alpha"
    assert owner_of_shared_queue(list(reversed(specs))).name == "alpha"
    with pytest.raises(ValueError, match="no aggregate"):
        owner_of_shared_queue([])
