"""The hold queue's reader: held messages that share MsgId and CorrelId, told apart by
body, on every transport."""

from __future__ import annotations

import pytest

from bridge.mq import hold
from bridge.mq.models import MQMessage, PutOptions

IDS = {"msg_id": b"M" * 24, "correl_id": b"C" * 24}


def _twins(qm, queue: str) -> list[MQMessage]:
    put = [qm.put(queue, MQMessage(body=body, properties={"n": n}, **IDS), PutOptions())
           for n, body in enumerate((b"first", b"second", b"third"))]  # fmt: skip
    qm.commit()
    return put


def test_each_reference_gets_its_own_twin_and_the_others_stay(connect, make_queue):
    qm = connect()
    queue = make_queue(qm)
    _twins(qm, queue)
    second = list(qm.browse(queue))[1]
    reader = hold.HeldReader(qm)
    got = reader.take(queue, want=hold.digest(b"third"), **IDS)
    # The one got on the way for it serves the reference that names it, with no get.
    again = reader.take(queue, want=hold.digest(b"first"), **IDS)
    reader.put_back()
    qm.commit()
    left = [qm.get(queue) for _ in range(qm.inquire(queue).curdepth)]
    qm.commit()
    assert (got.body, got.properties) == (b"third", {"n": 2})
    assert (again.body, again.properties) == (b"first", {"n": 0})
    # Put back whole: MQMD, context and properties as they were.
    assert [(m.body, m.properties, m.msg_id, m.correl_id) for m in left] == [
        (b"second", {"n": 1}, IDS["msg_id"], IDS["correl_id"])
    ]
    assert left[0].model_dump(exclude={"expiry"}) == second.model_dump(exclude={"expiry"})


def test_a_body_no_twin_has_is_an_error_that_names_the_digests_and_leaves_them(connect, make_queue):
    qm = connect()
    queue = make_queue(qm)
    _twins(qm, queue)
    reader = hold.HeldReader(qm)
    with pytest.raises(hold.HeldReplyError, match="have body digests") as refused:
        reader.take(queue, want=hold.digest(b"fourth"), wait_ms=0, **IDS)
    qm.backout()  # as the caller's unit of work does on the error
    assert hold.digest(b"first")[:16] in str(refused.value)
    assert [qm.get(queue).body for _ in range(3)] == [b"first", b"second", b"third"]
    qm.commit()
    with pytest.raises(hold.HeldReplyError, match="MQRC_NO_MSG_AVAILABLE"):
        hold.HeldReader(qm).take(queue, want=hold.digest(b"first"), wait_ms=0, **IDS)
