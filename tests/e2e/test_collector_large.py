"""The collector with messages larger than a signal carries: they wait on the collector's
hold queue and are PUT from there with their batch (dev server, embedded MQ)."""

from __future__ import annotations

import asyncio
import os

from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage, PutOptions, QueueAttributes
from mqgather.constants import COLLECT_HOLD, QMGR_MAXMSGL
from mqgather.names import PROP_BATCH_SIZE
from tests.collecting import SPEC, collecting
from tests.harness import until

MB = 1024 * 1024
BIG_OUT = "CMAOUT.BIG"


def _big_queue(c) -> None:
    with LocalQueueManager(c.path) as qm:
        qm.define(QueueAttributes(name=BIG_OUT, maxdepth=1000, maxmsgl=QMGR_MAXMSGL))


async def test_forty_messages_of_a_megabyte_go_out_as_one_group(temporal_env, tmp_path):
    async with collecting(temporal_env.client, tmp_path) as c:
        _big_queue(c)
        c.rule("BIG", BIG_OUT, max_messages=40, max_bytes=40 * MB, format="group")
        sent = [c.send("BIG", os.urandom(MB), n=i) for i in range(40)]
        group = [await c.take(BIG_OUT, timeout=60) for _ in range(40)]
        history = await temporal_env.client.get_workflow_handle(
            f"collect:{c.spec.name}:BIG"
        ).fetch_history()
        assert c.depth(COLLECT_HOLD) == 0 and c.depth(c.spec.input_queue) == 0
    assert [m.body for m in group] == [m.body for m in sent]
    assert [m.properties["n"] for m in group] == list(range(40))
    assert len({m.group_id for m in group}) == 1
    assert [m.msg_seq_number for m in group] == list(range(1, 41))
    assert group[-1].group_status == "last-in-group"
    assert group[0].properties[PROP_BATCH_SIZE] == 40
    assert sum(e.ByteSize() for e in history.events) < 512 * 1024


async def test_a_blob_batch_of_held_messages_is_one_message(temporal_env, tmp_path):
    async with collecting(temporal_env.client, tmp_path) as c:
        _big_queue(c)
        c.rule("BLOB", BIG_OUT, max_messages=5, max_bytes=50 * MB, format="blob", separator="|")
        sent = [c.send("BLOB", os.urandom(2 * MB)) for _ in range(4)]
        sent.append(c.send("BLOB", b"small"))
        batch = await c.take(BIG_OUT, timeout=60)
        status = await until(lambda: c.status("BLOB"), lambda s: s.batches == 1)
        assert c.depth(COLLECT_HOLD) == 0
    assert batch.body == b"|".join(m.body for m in sent)
    assert status.last_batch.size_bytes == 8 * MB + 5


async def test_a_held_message_that_expires_while_its_batch_waits_goes_out_with_it(
    temporal_env, tmp_path
):
    # Got in time, it is the batch's: waiting on the hold queue must not expire it, and
    # the group PUT gives it back the expiry (less the time it waited) and persistence it
    # came with.
    spec = SPEC.model_copy(update={"inline_bytes": 0})
    async with collecting(temporal_env.client, tmp_path, spec=spec, extra_queues=("PROBE",)) as c:
        _big_queue(c)
        c.rule("SHORT", BIG_OUT, max_messages=2, format="group")
        for queue in (c.spec.input_queue, "PROBE"):  # two seconds to live, here and beside
            message = MQMessage(properties={"destination": "SHORT"}, expiry=20, persistence=0,
                                body=b"first")  # fmt: skip
            c.qm.put(queue, message, PutOptions(syncpoint=False))
        await until(lambda: c.status("SHORT"), lambda s: s.open_messages == 1)
        # Until its twin beside it has expired: the time MQ gave it has passed.
        await until(lambda: asyncio.to_thread(c.depth, "PROBE"), lambda depth: depth == 0)
        c.send("SHORT", b"second")
        group = [await c.take(BIG_OUT) for _ in range(2)]
        assert c.depth(COLLECT_HOLD) == 0
    assert [m.body for m in group] == [b"first", b"second"]
    assert 0 < group[0].expiry <= 20 and group[1].expiry == -1
    assert (group[0].persistence, group[1].persistence) == (0, 1)
