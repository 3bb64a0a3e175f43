"""The MQ activities killed after every write of their unit of work, one write per run:
taking held replies off the hold queue, each PUT, the ledger's marker, the commit. The
attempt that follows, as Temporal would retry it, puts each message once and takes each
held reply off the hold queue once, whichever write the first attempt died after."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

from activities.batch import CollectorActivities
from activities.mq import response_id
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MsgFlags
from mqgather.collector_config import CollectorRule, CollectorSpec
from mqgather.routing import Destination
from tests.activities.environment import attempt_env
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
from tests.harness import THREE_LEGS
from workflows.collect_models import ClosedBatch, Item, PutBatchInput
from workflows.models import (
    LegRequest,
    PutResponseInput,
    ReceivedLeg,
    Routed,
    RouteInput,
    SendRequestInput,
)

GATHER = "gather:steps:0b"
INPUTS: dict[str, type[BaseModel]] = {
    "put_response": PutResponseInput,
    "route_replies": RouteInput,
    "put_batch": PutBatchInput,
    "send_request": SendRequestInput,
}


def _attempt_dying_after(
    name: str, transport: str, path: str, inp_json: str, die_after: int | None, record: str
) -> None:
    steps = Steps(die_after, record, armed=True)
    acts = CollectorActivities(connector(transport, path, steps))
    attempt_env().run(getattr(acts, name), INPUTS[name].model_validate_json(inp_json))


def _response(qm: LocalQueueManager) -> tuple[BaseModel, Callable[[LocalQueueManager], None]]:
    """A response of three legs, two of them held, to two queues; and its check."""
    legs = [ReceivedLeg(leg=THREE_LEGS[0], replies=[reply(1, "CREDIT")]),
            ReceivedLeg(leg=THREE_LEGS[1], replies=[reply(2, "STOCK", qm)]),
            ReceivedLeg(leg=THREE_LEGS[2], replies=[reply(3, "TAX", qm)])]  # fmt: skip
    inp = PutResponseInput(aggregate=SPEC, gather_id=GATHER, correl_id=b"C" * 24,
                           outcome="COMPLETE", legs=legs, missing=[])  # fmt: skip

    def check(qm: LocalQueueManager) -> None:
        for queue in OUT:
            got = drain(qm, queue)
            assert [m.msg_id for m in got] == [response_id(inp)], queue
            legs = json.loads(got[0].body)["legs"]
            assert {leg: body["n"] for leg, body in legs.items()} == dict(credit=1, stock=2, tax=3)
            assert legs["tax"]["pad"] == "x" * 3000, queue
        assert drain(qm, SPEC.hold_queue) == []

    return inp, check


def _forward(qm: LocalQueueManager) -> tuple[BaseModel, Callable[[LocalQueueManager], None]]:
    """Three replies to forward, two of them held; and the check of where they went."""
    items = [
        Routed(kind=Destination.LATE, reply=reply(4, "TAX"), reason="late"),
        Routed(kind=Destination.DUPLICATE, reply=reply(5, "CREDIT", qm), reason="dup"),
        Routed(kind=Destination.UNKNOWN, reply=reply(6, "STOCK", qm), reason="unknown"),
    ]
    inp = RouteInput(aggregate=SPEC, gather_id=GATHER, items=items)
    return inp, forwarded({"GATHER.LATE": [4], "GATHER.DUPLICATE": [5], "GATHER.UNKNOWN": [6]})


def _batch(qm: LocalQueueManager) -> tuple[BaseModel, Callable[[LocalQueueManager], None]]:
    """A collector's batch of three, PUT as an MQ logical group; and its check."""
    rule = CollectorRule(destination="D", target_queue=OUT[0], format="group")
    now = datetime.now(UTC)
    items = [Item(message=reply(n, "-").message, received_at=now) for n in (7, 8, 9)]
    batch = ClosedBatch(number=1, rule=rule, items=items, opened_at=now, closed_at=now,
                        reason="count")  # fmt: skip
    inp = PutBatchInput(collector=CollectorSpec(name="c"), destination="D",
                        workflow_id="collect:c:D", batch=batch)  # fmt: skip

    def check(qm: LocalQueueManager) -> None:
        got = drain(qm, OUT[0])
        assert [(m.msg_seq_number, m.body) for m in got] == [
            (n, item.message.body) for n, item in enumerate(items, 1)
        ]
        assert len({m.group_id for m in got}) == 1
        assert got[-1].msg_flags & MsgFlags.LAST_MSG_IN_GROUP

    return inp, check


def _rerequest(qm: LocalQueueManager) -> tuple[BaseModel, Callable[[LocalQueueManager], None]]:
    """A leg's request asked again (its second attempt); and its check."""
    request = LegRequest(queue=OUT[0], message=reply(1, "TAX").message)
    inp = SendRequestInput(aggregate=SPEC, gather_id=GATHER, leg="TAX", attempt=2,
                           request=request, reason="lost")  # fmt: skip

    def check(qm: LocalQueueManager) -> None:
        got = drain(qm, OUT[0])
        assert [(m.correl_id, m.body, m.properties["n"]) for m in got] == [
            (request.message.correl_id, request.message.body, 1)
        ]
        assert got[0].msg_id != request.message.msg_id

    return inp, check


def _retried(name: str) -> Callable[[Connect, Any], object]:
    def again(connect: Connect, inp: Any) -> object:
        acts = CollectorActivities(connect)
        try:
            return attempt_env().run(getattr(acts, name), inp)
        finally:
            acts.close()

    return again


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("put_response", _response),
        ("route_replies", _forward),
        ("put_batch", _batch),
        ("send_request", _rerequest),
    ],
)
def test_an_attempt_killed_after_any_write_is_retried_into_each_message_once(
    tmp_path, name: str, make: Make, transport: str
):
    each_step(tmp_path, _attempt_dying_after, (name,), make, _retried(name),
              transport=transport, extra=OUT, empty=QUEUES)  # fmt: skip
