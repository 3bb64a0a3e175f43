"""The MQ activities killed after every write of their unit of work, one write per run:
taking held replies off the hold queue, each PUT, the ledger's marker, the commit. The
attempt that follows, as Temporal would retry it, puts each message once and takes each
held reply off the hold queue once, whichever write the first attempt died after."""

from __future__ import annotations

import json
import multiprocessing as mp
import signal
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import BaseModel

from activities.batch import CollectorActivities
from activities.mq import response_id
from bridge.mq.hold import body_digest
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage, MsgFlags, fingerprint
from mqgather.collector_config import CollectorRule, CollectorSpec
from mqgather.config import AggregateSpec
from mqgather.routing import Destination
from tests.activities.environment import attempt_env
from tests.activities.test_mq import drain
from tests.crashing import COMMIT, CountingQueueManager, Steps, named, step_names
from tests.harness import THREE_LEGS, prepare_queues
from workflows.collect_models import ClosedBatch, Item, PutBatchInput
from workflows.models import (
    HeldBody,
    PutResponseInput,
    ReceivedLeg,
    Reply,
    Routed,
    RouteInput,
)

CTX = mp.get_context("spawn")
GATHER = "gather:steps:0b"
OUT = ("OUT.A", "OUT.B")
SPEC = AggregateSpec(name="steps", legs=THREE_LEGS, destination="destinationList",
                     destination_list=OUT)  # fmt: skip
#: Every queue a message could end on, but the ledger (which keeps a marker per PUT).
QUEUES = (*OUT, "GATHER.LATE", "GATHER.DUPLICATE", "GATHER.UNKNOWN", "GATHER.FAILURE",
          "GATHER.HOLD", "SYSTEM.DEAD.LETTER.QUEUE", "ORDER.RESPONSE")  # fmt: skip
INPUTS: dict[str, type[BaseModel]] = {
    "put_response": PutResponseInput,
    "route_replies": RouteInput,
    "put_batch": PutBatchInput,
}


def _attempt_dying_after(path: str, name: str, inp_json: str, die_after: int | None, record: str):
    steps = Steps(die_after, record, armed=True)
    acts = CollectorActivities(lambda: CountingQueueManager(path, steps))
    attempt_env().run(getattr(acts, name), INPUTS[name].model_validate_json(inp_json))


def _reply(n: int, leg: str, qm: LocalQueueManager | None = None) -> Reply:
    """A reply of leg ``leg``; with ``qm``, one held on the hold queue (put there and
    committed, as the bridge leaves it), its body ``n`` KB."""
    message = MQMessage(msg_id=bytes([n]) * 24, correl_id=b"C" * 24,
                        body=f'{{"n": {n}, "pad": "{"x" * 1000 * n}"}}'.encode(),
                        properties={"leg": leg, "n": n})  # fmt: skip
    received = {"leg": leg, "source_queue": "GATHER.IN", "received_at": datetime.now(UTC)}
    if qm is None:
        return Reply(message=message, **received)
    qm.put(SPEC.hold_queue, message)
    qm.commit()
    held = HeldBody(queue=SPEC.hold_queue, msg_id=message.msg_id,
                    correl_id=message.correl_id, sha256=body_digest(message))  # fmt: skip
    bare = message.model_copy(update={"body": b"", "properties": {}})
    return Reply(message=bare, held=held, size=len(message.body),
                 fingerprint=fingerprint(message), **received)  # fmt: skip


def _response(qm: LocalQueueManager) -> tuple[BaseModel, Callable[[LocalQueueManager], None]]:
    """A response of three legs, two of them held, to two queues; and its check."""
    legs = [ReceivedLeg(leg=THREE_LEGS[0], replies=[_reply(1, "CREDIT")]),
            ReceivedLeg(leg=THREE_LEGS[1], replies=[_reply(2, "STOCK", qm)]),
            ReceivedLeg(leg=THREE_LEGS[2], replies=[_reply(3, "TAX", qm)])]  # fmt: skip
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
        Routed(kind=Destination.LATE, reply=_reply(4, "TAX"), reason="late"),
        Routed(kind=Destination.DUPLICATE, reply=_reply(5, "CREDIT", qm), reason="dup"),
        Routed(kind=Destination.UNKNOWN, reply=_reply(6, "STOCK", qm), reason="unknown"),
    ]
    inp = RouteInput(aggregate=SPEC, gather_id=GATHER, items=items)

    def check(qm: LocalQueueManager) -> None:
        for queue, n in (("GATHER.LATE", 4), ("GATHER.DUPLICATE", 5), ("GATHER.UNKNOWN", 6)):
            got = drain(qm, queue)
            assert [(m.msg_id, m.properties.get("n")) for m in got] == [(bytes([n]) * 24, n)]
            assert got[0].body.startswith(f'{{"n": {n}, '.encode()), queue
        assert drain(qm, SPEC.hold_queue) == []

    return inp, check


def _batch(qm: LocalQueueManager) -> tuple[BaseModel, Callable[[LocalQueueManager], None]]:
    """A collector's batch of three, PUT as an MQ logical group; and its check."""
    rule = CollectorRule(destination="D", target_queue=OUT[0], format="group")
    items = [Item(message=_reply(n, "-").message, received_at=datetime.now(UTC)) for n in (7, 8, 9)]
    batch = ClosedBatch(number=1, rule=rule, items=items, opened_at=items[0].received_at,
                        closed_at=datetime.now(UTC), reason="count")  # fmt: skip
    inp = PutBatchInput(collector=CollectorSpec(name="c"), destination="D",
                        workflow_id="collect:c:D", batch=batch)  # fmt: skip

    def check(qm: LocalQueueManager) -> None:
        got = drain(qm, OUT[0])
        assert [(m.msg_seq_number, m.body) for m in got] == [
            (n, item.message.body) for n, item in enumerate(items, 1)
        ]
        assert (
            len({m.group_id for m in got}) == 1 and got[-1].msg_flags & MsgFlags.LAST_MSG_IN_GROUP
        )

    return inp, check


def _killed_then_retried(tmp_path: Path, name: str, make, die_after: int | None) -> Path:
    """One run on a fresh queue manager: an attempt of ``name`` that dies after write
    ``die_after``, then the retry; every check. The record of the first attempt's steps."""
    path = tmp_path / f"qm-{die_after}.db"
    prepare_queues(path, OUT)
    record = tmp_path / f"steps-{die_after}.txt"
    with LocalQueueManager(path) as qm:
        inp, check = make(qm)
    args = (str(path), name, inp.model_dump_json(), die_after, str(record))
    dying = CTX.Process(target=_attempt_dying_after, args=args)
    dying.start()
    dying.join(60)
    where = f"killed after {named(record, die_after)}"
    assert dying.exitcode == -signal.SIGKILL, where
    acts = CollectorActivities(lambda: LocalQueueManager(path))
    try:
        attempt_env().run(getattr(acts, name), inp)
    except Exception as exc:
        raise AssertionError(f"{where}: the retry failed: {exc}") from exc
    finally:
        acts.close()
    with LocalQueueManager(path) as qm:
        try:
            check(qm)
        except AssertionError as exc:
            raise AssertionError(f"{where}: {exc}") from None
        left = {q: len(drain(qm, q)) for q in QUEUES}
        assert not any(left.values()), (where, left)
    return record


@pytest.mark.parametrize(
    ("name", "make"),
    [("put_response", _response), ("route_replies", _forward), ("put_batch", _batch)],
)
def test_an_attempt_killed_after_any_write_is_retried_into_each_message_once(tmp_path, name, make):
    names = step_names(_killed_then_retried(tmp_path, name, make, None))
    assert names[-1] == COMMIT and len(names) >= 5, names
    for step in range(1, len(names)):
        _killed_then_retried(tmp_path, name, make, step)
