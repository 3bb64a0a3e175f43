"""Salvage killed after every write of its units of work, one write per run: taking a
held reply off the hold queue, each forward or message put back, the ledger's marker,
each commit. The salvage an operator runs next sends each message once, whole, and
leaves nothing on the hold queue, whichever write the first one died after."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel

from bridge.mq.local_qm import LocalQueueManager
from mqgather.collector_config import CollectorSpec
from mqgather.constants import GATHER_HOLD
from mqgather.routing import Destination
from tests.activities.test_mq import drain
from tests.crashing import (
    OUT,
    QUEUES,
    SPEC,
    TRANSPORTS,
    Connect,
    Make,
    Steps,
    connector,
    each_step,
    forwarded,
    reply,
)
from workers.salvage import salvage, salvage_items
from workflows.collect_models import Item, UnplacedBatch, UnplacedItems
from workflows.models import Routed, UnplacedReplies

COLLECTOR = CollectorSpec(name="c", hold_queue=GATHER_HOLD)
SALVAGE: dict[str, tuple[type[BaseModel], Callable[..., object]]] = {
    "gather": (UnplacedReplies, salvage),
    "collector": (UnplacedItems, salvage_items),
}


def _salvage_dying_after(
    kind: str, transport: str, path: str, found: str, die_after: int | None, record: str
) -> None:
    # With no step chosen it runs to its end: a salvage commits once per message.
    steps = Steps(die_after, record, armed=True, end=None)
    model, run = SALVAGE[kind]
    run(model.model_validate_json(found), connector(transport, path, steps))


def _gather(qm: LocalQueueManager) -> tuple[BaseModel, Callable[[LocalQueueManager], None]]:
    """What a gather terminated by hand held: a duplicate on its way out (held), two
    replies in its legs (one held), one waiting for a registration (held)."""
    dup = Routed(kind=Destination.DUPLICATE, reply=reply(5, "CREDIT", qm), reason="dup")
    found = UnplacedReplies(gather_id="gather:steps:0c", aggregate=SPEC, outbox=[dup],
                            legs=[reply(1, "CREDIT"), reply(2, "STOCK", qm)],
                            waiting=[reply(3, "TAX", qm)])  # fmt: skip
    return found, forwarded({"GATHER.DUPLICATE": [5], "GATHER.LATE": [1, 2],
                             "GATHER.UNKNOWN": [3]})  # fmt: skip


def _collector(qm: LocalQueueManager) -> tuple[BaseModel, Callable[[LocalQueueManager], None]]:
    """What a collector terminated by hand held: two batches, one message of each held."""
    items = [reply(n, "-", qm if n % 2 else None) for n in (1, 2, 3)]
    batches = [UnplacedBatch(number=1, items=[_item(items[0]), _item(items[1])]),
               UnplacedBatch(number=2, items=[_item(items[2])])]  # fmt: skip
    found = UnplacedItems(workflow_id="collect:c:D", collector=COLLECTOR, destination="D",
                          batches=batches)  # fmt: skip

    def check(qm: LocalQueueManager) -> None:
        forwarded({COLLECTOR.input_queue: [1, 2, 3]})(qm)
        assert drain(qm, COLLECTOR.hold_queue) == []

    return found, check


def _item(r: Any) -> Item:
    return Item(message=r.message, received_at=r.received_at, size=r.size, held=r.held,
                fingerprint=r.fingerprint)  # fmt: skip


def _again(kind: str) -> Callable[[Connect, Any], object]:
    def again(connect: Connect, found: Any) -> object:
        return SALVAGE[kind][1](found, connect)

    return again


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(("kind", "make"), [("gather", _gather), ("collector", _collector)])
def test_a_salvage_killed_after_any_write_is_finished_by_the_next_each_message_once(
    tmp_path, kind: str, make: Make, transport: str
):
    each_step(tmp_path, _salvage_dying_after, (kind,), make, _again(kind), transport=transport,
              extra=(*OUT, COLLECTOR.input_queue), empty=QUEUES, ends=False)  # fmt: skip
