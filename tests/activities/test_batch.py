"""The collector's PUT on the embedded queue manager: once across retries even when the
batch is consumed at once, and text a batch cannot hold sent to the failure queue intact."""

from __future__ import annotations

import dataclasses
import json
import math
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

import pytest

from activities.batch import CollectorActivities, batch_key
from bridge.mq import dlh
from bridge.mq.errors import QueueInhibited
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage, MsgFlags, QueueAttributes
from mqgather.collector_config import CollectorRule, CollectorSpec
from mqgather.constants import DEAD_LETTER_QUEUE
from mqgather.names import PROP_BATCH_PART, PROP_BATCH_PARTS, PROP_REASON
from tests.activities.environment import attempt_env
from tests.activities.test_mq import drain, overlapping_attempts
from tests.conftest import standin_connector
from tests.harness import CountsLedgerReads, prepare_queues
from workflows.collect_models import ClosedBatch, Item, PutBatchInput

SPEC = CollectorSpec(name="c")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def batch_input(messages: list[MQMessage], fmt: str = "json") -> PutBatchInput:
    rule = CollectorRule(destination="D", target_queue="OUT", format=fmt)
    batch = ClosedBatch(
        number=1, rule=rule, items=[Item(message=m, received_at=T0) for m in messages],
        opened_at=T0, closed_at=T0, reason="count",
    )  # fmt: skip
    return PutBatchInput(collector=SPEC, destination="D", workflow_id="collect:c:D", batch=batch)


def message(n: int, body: bytes, ccsid: int = 1208) -> MQMessage:
    return MQMessage(msg_id=bytes([n]) * 24, body=body, coded_char_set_id=ccsid)


def test_a_retried_batch_put_after_the_batch_was_consumed_puts_nothing(tmp_path: Path):
    path = tmp_path / "qm.db"
    prepare_queues(path, ["OUT"])
    acts = CollectorActivities(lambda: LocalQueueManager(path))
    env = attempt_env()
    inp = batch_input([message(1, b'{"a":1}'), message(2, b"[2]")])
    env.run(acts.put_batch, inp)
    with LocalQueueManager(path) as consumer:
        taken = drain(consumer, "OUT")  # the consumer is quick
        # The worker died before Temporal recorded the activity: it runs again.
        env.run(acts.put_batch, inp)
        assert drain(consumer, "OUT") == []
    assert len(taken) == 1 and taken[0].msg_id == batch_key(inp)
    assert json.loads(taken[0].body) == [{"a": 1}, [2]]


def test_a_batch_put_retried_while_the_last_attempt_is_stalled_in_its_commit_is_put_once(
    tmp_path: Path,
):
    path = tmp_path / "qm.db"
    prepare_queues(path, ["OUT"])
    inp = batch_input([message(1, b'{"a":1}'), message(2, b"[2]")])
    first, second = overlapping_attempts(
        path, CollectorActivities,
        lambda acts: attempt_env().run(acts.put_batch, inp), inp.workflow_id,
    )  # fmt: skip
    with LocalQueueManager(path) as consumer:
        assert [m.msg_id for m in drain(consumer, "OUT")] == [batch_key(inp)]
    assert first.messages_put == 1 and second.batch == first.batch


def test_after_a_reset_a_batch_puts_only_what_the_batches_before_did_not(tmp_path: Path):
    """The run before a reset put messages 1 and 2 as batch 1 and 3 as batch 2; the run
    after it holds 1 to 4 in its batch 1. Only 4 is put, once across retries; the batch
    numbered 3 that follows finds nothing from before, so later ones need not look."""
    path = tmp_path / "qm.db"
    prepare_queues(path, ["OUT"])
    acts = CollectorActivities(lambda: LocalQueueManager(path))
    env = attempt_env()
    m = [message(n, f"[{n}]".encode()) for n in range(1, 6)]
    second = batch_input([m[2]])
    env.run(acts.put_batch, batch_input(m[:2]))
    env.run(acts.put_batch, second.model_copy(update={"batch": second.batch.model_copy(
        update={"number": 2})}))  # fmt: skip
    after = batch_input(m[:4]).model_copy(update={"after_reset": True})
    results = [env.run(acts.put_batch, after) for _ in range(2)]  # and a retry
    third = batch_input([m[4]]).model_copy(update={"after_reset": True})
    third = third.model_copy(update={"batch": third.batch.model_copy(update={"number": 3})})
    last = env.run(acts.put_batch, third)
    with LocalQueueManager(path) as consumer:
        bodies = [json.loads(out.body) for out in drain(consumer, "OUT")]
    assert bodies == [[[1], [2]], [[3]], [[4]], [[5]]]
    assert [r.reset_behind for r in results] == [False, False] and last.reset_behind
    # Its batch is what it put itself, on the retry too: the analytics count 1 to 3
    # from the run before's history.
    assert [(r.batch and r.batch.messages, r.messages_put) for r in results] == [(1, 1), (1, 1)]


def test_after_a_reset_a_batch_with_nothing_new_reports_no_batch(tmp_path: Path):
    """A batch whose messages the run before the reset put is not put again, and is no
    batch of this run's in its facts; nor is a batch of the run that an earlier reset
    started, to a run that a later reset started."""
    path = tmp_path / "qm.db"
    prepare_queues(path, ["OUT"])
    acts = CollectorActivities(lambda: LocalQueueManager(path))
    env = attempt_env()
    m = [message(n, f"[{n}]".encode()) for n in range(1, 4)]
    env.run(acts.put_batch, batch_input(m[:2]))
    after = batch_input(m[:3]).model_copy(update={"after_reset": True})
    env.info = dataclasses.replace(env.info, workflow_run_id="reset-1")
    first = env.run(acts.put_batch, after)
    env.info = dataclasses.replace(env.info, workflow_run_id="reset-2")
    again = env.run(acts.put_batch, after)
    with LocalQueueManager(path) as consumer:
        bodies = [json.loads(out.body) for out in drain(consumer, "OUT")]
    assert bodies == [[[1], [2]], [[3]]]
    assert first.batch is not None and first.batch.messages == 1 and first.messages_put == 1
    assert again.batch is None and (again.messages_put, again.size_bytes) == (0, 0)


def numbered(inp: PutBatchInput, number: int) -> PutBatchInput:
    return inp.model_copy(update={"batch": inp.batch.model_copy(update={"number": number})})


def test_after_a_reset_each_batch_reads_the_ledger_up_to_what_put_its_messages(tmp_path):
    """The run before a reset put 60 batches; the run after it batches the same messages
    the same way, then one new one. Each of its batches stops reading the ledger at the
    first batch number that put all its messages: a few reads each, not one for every
    batch number after its own (1,890 reads for these 60, then minutes for a collector
    with thousands). Nothing is put twice, and the new message is put."""
    path = tmp_path / "qm.db"
    prepare_queues(path, ["OUT"])
    before = CollectorActivities(lambda: LocalQueueManager(path))
    env = attempt_env()
    runs = 60
    m = [message(n % 250 + 1, f"[{n}]".encode()) for n in range(2 * runs + 1)]
    batches = [numbered(batch_input(m[2 * k : 2 * k + 2]), k + 1) for k in range(runs)]
    for inp in batches:
        env.run(before.put_batch, inp)
    counting = CountsLedgerReads(path, SPEC.ledger_queue)
    after = CollectorActivities(lambda: counting)  # the activity keeps its connection
    results = [
        env.run(after.put_batch, inp.model_copy(update={"after_reset": True}))
        for inp in [*batches, numbered(batch_input(m[-1:]), runs + 1)]
    ]
    after.close()
    assert [r.messages_put for r in results] == [0] * runs + [1]
    assert [r.reset_behind for r in results] == [False] * runs + [True]
    # One read each for the 60, then the new batch's: its number (none) and its own key.
    assert counting.ledger_browses == runs + 2
    with LocalQueueManager(path) as consumer:
        bodies = [json.loads(out.body) for out in drain(consumer, "OUT")]
    assert bodies == [[[2 * k], [2 * k + 1]] for k in range(runs)] + [[[2 * runs]]]


def test_after_a_reset_a_batch_that_holds_what_several_before_put_reads_each(tmp_path):
    """The run after the reset batches more into each batch than the run before did: its
    batch 1 holds what batches 1 to 3 put, and a message of its own, and still finds each."""
    path = tmp_path / "qm.db"
    prepare_queues(path, ["OUT"])
    acts = CollectorActivities(lambda: LocalQueueManager(path))
    env = attempt_env()
    m = [message(n, f"[{n}]".encode()) for n in range(1, 6)]
    for k in range(3):
        env.run(acts.put_batch, numbered(batch_input([m[k]]), k + 1))
    first = env.run(acts.put_batch, batch_input(m[:4]).model_copy(update={"after_reset": True}))
    second = numbered(batch_input([m[2], m[4]]), 2).model_copy(update={"after_reset": True})
    env.run(acts.put_batch, second)
    with LocalQueueManager(path) as consumer:
        bodies = [json.loads(out.body) for out in drain(consumer, "OUT")]
    assert bodies == [[[1]], [[2]], [[3]], [[4]], [[5]]]
    assert first.messages_put == 1


def test_ebcdic_is_read_in_its_ccsid_and_invalid_utf8_goes_to_the_failure_queue(tmp_path):
    path = tmp_path / "qm.db"
    prepare_queues(path, ["OUT", SPEC.failure_queue])
    acts = CollectorActivities(lambda: LocalQueueManager(path))
    ebcdic = message(1, "<Test>Hola</Test>".encode("cp037"), ccsid=37)
    broken = message(2, b"<Test>\xff\xfe</Test>")
    attempt_env().run(acts.put_batch, batch_input([ebcdic, broken], fmt="xml"))
    with LocalQueueManager(path) as qm:
        (batch,) = drain(qm, "OUT")
        (failed,) = drain(qm, SPEC.failure_queue)
    assert "<Test>Hola</Test>" in batch.text() and batch.coded_char_set_id == 1208
    assert (failed.msg_id, failed.body) == (broken.msg_id, broken.body)
    assert "not text for a xml batch" in str(failed.properties[PROP_REASON])


def test_a_message_the_failure_queue_refuses_goes_to_the_dead_letter_queue_and_the_batch_is_put(
    tmp_path,
):
    # The failure queue full, or shorter than the message: its forward failed on every
    # attempt, and the batch's good messages, and every later batch, waited for ever.
    path = tmp_path / "qm.db"
    prepare_queues(path, ["OUT", SPEC.failure_queue])
    with LocalQueueManager(path) as qm:
        attrs = qm.inquire(SPEC.failure_queue).model_copy(update={"maxmsgl": 10})
        qm.define(attrs, replace=True)
    acts = CollectorActivities(lambda: LocalQueueManager(path))
    good, broken = message(1, b"<Test>ok</Test>"), message(2, b"<Test>\xff\xfe</Test>")
    inp = batch_input([good, broken], fmt="xml")
    attempt_env().run(acts.put_batch, inp)
    attempt_env().run(acts.put_batch, inp)  # retried after its commit: nothing twice
    with LocalQueueManager(path) as qm:
        (batch,) = drain(qm, "OUT")
        (dead,) = drain(qm, DEAD_LETTER_QUEUE)
        assert drain(qm, SPEC.failure_queue) == []
    assert "<Test>ok</Test>" in batch.text()
    header, body = dlh.unpack(dead.body)
    assert header.reason == 2030 and header.dest_q_name == SPEC.failure_queue
    assert (dead.msg_id, body) == (broken.msg_id, broken.body)
    assert "not text for a xml batch" in str(dead.properties[PROP_REASON])


def test_bodies_that_are_not_strict_json_are_batched_as_text_and_the_batch_is_put(tmp_path):
    """NaN, Infinity, a number out of range, nesting too deep to read and a lone
    surrogate would make the batch unwritable as JSON (and its PUT fail for ever): they
    are batched as text."""
    path = tmp_path / "qm.db"
    prepare_queues(path, ["OUT"])
    acts = CollectorActivities(lambda: LocalQueueManager(path))
    odd = [b'{"x": NaN}', b"[Infinity]", b"1e999", b"[" * 100_000 + b"]" * 100_000,
           b'{"x": "\\udcff"}']  # fmt: skip
    bodies = [b'{"ok": 1.5}', *odd]
    attempt_env().run(acts.put_batch, batch_input([message(n, b) for n, b in enumerate(bodies, 1)]))
    with LocalQueueManager(path) as qm:
        (batch,) = drain(qm, "OUT")

    def strict(token: str) -> None:
        raise AssertionError(f"{token} in the batch")

    values = json.loads(batch.body, parse_constant=strict)
    assert values == [{"ok": 1.5}, *(b.decode() for b in odd)]


def test_a_message_that_shares_its_msg_id_with_unreadable_text_is_still_batched(tmp_path):
    path = tmp_path / "qm.db"
    prepare_queues(path, ["OUT", SPEC.failure_queue])
    acts = CollectorActivities(lambda: LocalQueueManager(path))
    good = message(7, b"<Test>Hola</Test>")
    broken = message(7, b"<Test>\xff\xfe</Test>")  # the same MsgId, set by the application
    attempt_env().run(acts.put_batch, batch_input([good, broken], fmt="xml"))
    with LocalQueueManager(path) as qm:
        (batch,) = drain(qm, "OUT")
        (failed,) = drain(qm, SPEC.failure_queue)
    assert "<Test>Hola</Test>" in batch.text()
    assert failed.body == broken.body


def test_an_xml_batch_is_well_formed_whatever_its_bodies_prologs_and_the_rest_go_to_failure(
    tmp_path,
):
    # A DOCTYPE (its subset holding a ']' in a literal, or after a comment) stayed inside
    # the wrapper, and text that is no element went in as it was: no reader took the batch.
    path = tmp_path / "qm.db"
    prepare_queues(path, ["OUT", SPEC.failure_queue])
    acts = CollectorActivities(lambda: LocalQueueManager(path))
    kept = [b'<?xml version="1.0"?><!-- x --><!DOCTYPE T><T>1</T>',
            b'<!DOCTYPE T [<!ATTLIST T a CDATA "]">]><T>2</T>', b"<T>3</T>"]  # fmt: skip
    refused = [b"a < b & c", b"<T>4</T><T>5</T>", b'<!DOCTYPE T [<!ENTITY e "6">]><T>&e;</T>']
    messages = [message(n, b) for n, b in enumerate([*kept, *refused], 1)]
    attempt_env().run(acts.put_batch, batch_input(messages, fmt="xml"))
    with LocalQueueManager(path) as qm:
        (batch,) = drain(qm, "OUT")
        failed = drain(qm, SPEC.failure_queue)
    root = ET.fromstring(batch.body)
    assert [t.text for t in root] == ["1", "2", "3"]
    assert sorted(m.body for m in failed) == sorted(refused)
    assert all("not an XML element for an xml batch" in str(m.properties[PROP_REASON])
               for m in failed)  # fmt: skip


def _small_target(path: Path, maxmsgl: int) -> None:
    prepare_queues(path, [SPEC.failure_queue])
    with LocalQueueManager(path) as qm:
        qm.define(QueueAttributes(name="OUT", maxdepth=1000, maxmsgl=maxmsgl), replace=True)


@pytest.mark.parametrize("fmt", ["json", "xml", "blob"])
def test_a_batch_longer_than_its_targets_maxmsgl_is_put_in_parts_that_fit(tmp_path, fmt):
    """A rule's max_bytes above its target's MAXMSGL: the PUT of the batch failed with
    MQRC_MSG_TOO_BIG_FOR_Q on every attempt, for ever, and the destination's later
    batches waited behind it."""
    path = tmp_path / "qm.db"
    _small_target(path, 1000)
    acts = CollectorActivities(lambda: LocalQueueManager(path))
    bodies = [json.dumps({"n": n, "pad": "x" * 150}).encode() for n in range(20)]
    if fmt == "xml":
        bodies = [f"<T n='{n}'>{'x' * 150}</T>".encode() for n in range(20)]
    inp = batch_input([message(n, b) for n, b in enumerate(bodies, 1)], fmt=fmt)
    result = attempt_env().run(acts.put_batch, inp)
    with LocalQueueManager(path) as qm:
        parts = drain(qm, "OUT")
        assert drain(qm, SPEC.failure_queue) == []
    assert len(parts) > 1 and all(len(p.body) <= 1000 for p in parts)
    assert result.messages_put == len(parts) and result.failed == 0
    assert parts[0].msg_id == batch_key(inp) and len({p.msg_id for p in parts}) == len(parts)
    assert [p.properties[PROP_BATCH_PART] for p in parts] == list(range(1, len(parts) + 1))
    assert {p.properties[PROP_BATCH_PARTS] for p in parts} == {len(parts)}
    if fmt == "json":
        got = [v for p in parts for v in json.loads(p.body)]
        assert got == [json.loads(b) for b in bodies]
    elif fmt == "xml":
        got = [(e.get("n"), e.text) for p in parts for e in ET.fromstring(p.body)]
        assert got == [(str(n), "x" * 150) for n in range(20)]
    else:
        assert b"".join(p.body for p in parts) == b"".join(bodies)
    # Retried after the consumer took the parts: nothing is put twice, and it reports
    # what was (it said 1 message, whatever the parts).
    again = attempt_env().run(acts.put_batch, inp)
    with LocalQueueManager(path) as qm:
        assert drain(qm, "OUT") == []
    assert (again.messages_put, again.size_bytes) == (len(parts), sum(len(p.body) for p in parts))


@pytest.mark.parametrize("fmt", ["json", "group"])
def test_a_message_no_part_can_hold_goes_to_the_failure_queue_intact_with_the_reason(tmp_path, fmt):
    path = tmp_path / "qm.db"
    _small_target(path, 300)
    acts = CollectorActivities(lambda: LocalQueueManager(path))
    big = message(2, json.dumps({"big": "y" * 400}).encode())
    small = [message(1, b'{"a": 1}'), message(3, b'{"c": 3}')]
    result = attempt_env().run(acts.put_batch, batch_input([small[0], big, small[1]], fmt=fmt))
    with LocalQueueManager(path) as qm:
        put = drain(qm, "OUT")
        (failed,) = drain(qm, SPEC.failure_queue)
    assert (failed.msg_id, failed.body) == (big.msg_id, big.body)
    reason = str(failed.properties[PROP_REASON])
    assert "MQRC_MSG_TOO_BIG_FOR_Q" in reason and "MAXMSGL(300)" in reason and "OUT" in reason
    assert result.failed == 1
    if fmt == "json":
        assert [v for p in put for v in json.loads(p.body)] == [{"a": 1}, {"c": 3}]
    else:
        assert [p.body for p in put] == [small[0].body, small[1].body]
        assert put[-1].msg_flags & MsgFlags.LAST_MSG_IN_GROUP


def test_a_batch_longer_than_the_client_channel_takes_is_put_in_parts_over_the_adapter(
    tmp_path,
):
    """The channel's MAXMSGL refuses it (MQRC_DATA_LENGTH_ERROR), which no inquiry on
    the target queue tells: the parts are halved until the channel takes them."""
    path = tmp_path / "qm.db"
    prepare_queues(path, ["OUT", SPEC.failure_queue])
    acts = CollectorActivities(standin_connector(path, qmgr="SMALLCHL", channel_maxmsgl=5000))
    bodies = [json.dumps({"n": n, "pad": "z" * 300}).encode() for n in range(40)]
    result = attempt_env().run(
        acts.put_batch, batch_input([message(n, b) for n, b in enumerate(bodies, 1)])
    )
    acts.close()
    with LocalQueueManager(path) as qm:
        parts = drain(qm, "OUT")
        assert drain(qm, SPEC.failure_queue) == []
    assert len(parts) > 1 and all(len(p.body) <= 5000 for p in parts)
    assert [v for p in parts for v in json.loads(p.body)] == [json.loads(b) for b in bodies]
    assert result.messages_put == len(parts)


@pytest.mark.parametrize("fmt", ["json", "group"])
def test_a_batch_its_target_refuses_for_good_is_dead_lettered_on_its_last_attempt(tmp_path, fmt):
    # The target PUT(DISABLED), or deleted: the batch was retried for ever, and the
    # batches behind it grew the collector's history toward the server's limit.
    path = tmp_path / "qm.db"
    prepare_queues(path, ["OUT", SPEC.failure_queue])
    with LocalQueueManager(path) as qm:
        qm.define(qm.inquire("OUT").model_copy(update={"put": "disabled"}), replace=True)
    acts = CollectorActivities(lambda: LocalQueueManager(path))
    spec = SPEC.model_copy(update={"delivery_attempts": 3})
    odd = {"nan": math.nan, "k\udcff": 1}
    first = message(1, b'{"a":1}').model_copy(update={"properties": odd})
    messages = [first, message(2, b'{"b":2}'), message(3, b"\xff")]
    inp = batch_input(messages, fmt=fmt).model_copy(update={"collector": spec})
    env = attempt_env()
    with pytest.raises(QueueInhibited):
        env.run(acts.put_batch, inp.model_copy(update={"attempts_before": 1}))
    last = inp.model_copy(update={"attempts_before": 2})
    result = env.run(acts.put_batch, last)
    # Retried after its commit: nothing twice, and it says where the batch went.
    again = env.run(acts.put_batch, last)
    assert (again.queue, again.refused) == (result.queue, result.refused)
    with LocalQueueManager(path) as qm:
        dead = drain(qm, DEAD_LETTER_QUEUE)
        failed = drain(qm, SPEC.failure_queue)
        assert qm.inquire("OUT").curdepth == 0
    headers = [dlh.unpack(m.body)[0] for m in dead]
    assert {(h.reason, h.dest_q_name) for h in headers} == {(2051, "OUT")}
    assert result.queue == DEAD_LETTER_QUEUE and "MQRC_PUT_INHIBITED" in result.refused
    if fmt == "group":
        # Each original as it came, its properties too.
        assert [dlh.unpack(m.body)[1] for m in dead] == [b'{"a":1}', b'{"b":2}', b"\xff"]
        assert math.isnan(dead[0].properties["nan"]) and dead[0].properties["k\udcff"] == 1
        assert failed == []
    else:
        (only,) = dead
        assert json.loads(dlh.unpack(only.body)[1]) == [{"a": 1}, {"b": 2}]
        assert [m.msg_id for m in failed] == [messages[2].msg_id]
