"""The collector end to end on the real dev server and the embedded queue manager: seed
002's scenarios, rule changes while running, and bad input."""

from __future__ import annotations

import asyncio
import json
import math
import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter

from bridge.collect import CollectorBridge
from bridge.mq import dlh, reports
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage, MsgFlags, PutOptions, QueueAttributes
from mqgather.collector_config import CollectorRule, CollectorSpec
from mqgather.names import PROP_BATCH_REASON, PROP_REASON
from tests.collecting import OUT, SPEC, Collecting, collecting, order
from tests.harness import prepare_queues, until
from workflows.collect_models import collector_id
from workflows.collector import CollectorWorkflow

CTX = mp.get_context("spawn")


def mqgather_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "mqgather.cli", *args]


async def test_scenario_1_plain_aggregation_by_count(temporal_env, tmp_path):
    async with collecting(temporal_env.client, tmp_path) as c:
        c.rule("France", "CMAOUT.FR", max_messages=10, max_delay_seconds=30)
        for i in range(10):
            c.send("France", order(f"Salut mon pote {i}"))
        batch = await c.take("CMAOUT.FR")
        assert c.depth("CMAOUT.FR") == 0 and c.depth("CMAIN") == 0
    text = batch.body.decode()
    assert text.startswith('<?xml version="1.0" encoding="utf-8"?>\n<Aggregation>')
    assert text.count("<?xml") == 1  # the bodies' own declarations are dropped
    assert [f"<Test>Salut mon pote {i}</Test>" in text for i in range(10)] == [True] * 10
    positions = [text.index(f"pote {i}<") for i in range(10)]
    assert positions == sorted(positions)  # in arrival order
    assert batch.properties[PROP_BATCH_REASON] == "count"


async def test_a_batch_its_target_refuses_for_good_is_dead_lettered_and_the_next_goes_out(
    temporal_env, tmp_path
):
    # CMAOUT.FR PUT(DISABLED): the batch was retried for ever, and the destination's
    # messages piled up in the collector's history behind it.
    refusing = SPEC.model_copy(update={"delivery_attempts": 1})
    async with collecting(temporal_env.client, tmp_path, spec=refusing) as c:
        c.rule("FR", "CMAOUT.FR", max_messages=2, max_delay_seconds=30)
        c.qm.define(c.qm.inquire("CMAOUT.FR").model_copy(update={"put": "disabled"}),
                    replace=True)  # fmt: skip
        for i in range(2):
            c.send("FR", order(f"un {i}"))
        dead = await c.take("SYSTEM.DEAD.LETTER.QUEUE")
        c.qm.define(c.qm.inquire("CMAOUT.FR").model_copy(update={"put": "enabled"}),
                    replace=True)  # fmt: skip
        for i in range(2):
            c.send("FR", order(f"deux {i}"))
        batch = await c.take("CMAOUT.FR")
        final = await until(lambda: c.status("FR"), lambda s: s.batches == 2)
    header, body = dlh.unpack(dead.body)
    assert (header.reason, header.dest_q_name) == (2051, "CMAOUT.FR")
    assert [f"<Test>un {i}</Test>" in body.decode() for i in range(2)] == [True, True]
    assert "<Test>deux 1</Test>" in batch.body.decode() and final.last_error == ""
    assert final.dead_lettered == 1 and "batch 1 to SYSTEM.DEAD.LETTER.QUEUE" in (
        final.last_dead_letter
    )
    assert dead.msg_id != batch.msg_id


async def test_scenario_2_an_incomplete_batch_is_closed_by_its_delay(temporal_env, tmp_path):
    async with collecting(temporal_env.client, tmp_path) as c:
        c.rule("UK", "CMAOUT.UK", max_messages=5, max_delay_seconds=15)
        started = time.monotonic()
        for _ in range(3):
            c.send("UK", order("Hi buddy"))
        seen = await until(lambda: c.status("UK"), lambda s: s.open_messages == 3)
        assert seen.closes_at is not None and seen.rule.max_messages == 5
        batch = await c.take("CMAOUT.UK", timeout=40)
        waited = time.monotonic() - started
    assert 15 <= waited < 30
    assert batch.body.decode().count("<Test>Hi buddy</Test>") == 3
    assert batch.properties[PROP_BATCH_REASON] == "delay"


async def test_a_rule_change_applies_to_the_next_batch_within_the_bound(temporal_env, tmp_path):
    """Rules are read again every 2 s (the stated bound is 5 s): a message sent after the
    change may still go by the old rule only within that bound; none is lost."""
    async with collecting(temporal_env.client, tmp_path, refresh=2.0) as c:
        c.rule("Spain", "CMAOUT.SP", max_messages=1)
        c.send("Spain", order("before"))
        await c.take("CMAOUT.SP")
        changed_at = time.monotonic()
        c.rule("Spain", "CMAOUT.JSON", max_messages=1, format="json")
        # A message every 0.25 s for 6 s, each its own batch, carrying when it was sent.
        sent = []
        while (offset := time.monotonic() - changed_at) < 6:
            sent.append(round(offset, 2))
            c.send("Spain", f"<sent>{sent[-1]}</sent>".encode())
            await asyncio.sleep(0.25)
        old = [await c.take("CMAOUT.SP") for _ in range(c.depth("CMAOUT.SP"))]
        new = [await c.take("CMAOUT.JSON") for _ in range(len(sent) - len(old))]
    # Old rule: xml, the element inside the wrapper; new: json, the element as text.
    sent_at = re.compile(r"<sent>([0-9.]+)</sent>")
    old_offsets = [float(sent_at.search(m.text())[1]) for m in old]
    new_offsets = [float(sent_at.search(json.loads(m.body)[0])[1]) for m in new]
    assert sorted(old_offsets + new_offsets) == sent  # every message, once
    assert max(old_offsets, default=0.0) < 5  # the old rule held at most 5 s
    assert min(new_offsets) < 5 and new_offsets == sorted(new_offsets)


@pytest.mark.parametrize(
    ("bothresh", "why"), [(0, "BOTHRESH(0): the bridge's --backout-threshold 5"),
                          (3, "BOTHRESH 3 of CMAIN")],
)  # fmt: skip
async def test_an_input_queue_with_no_bothresh_moves_a_message_failing_every_time_aside(
    temporal_env, tmp_path, bothresh, why
):
    # MQ's defaults, BOTHRESH(0) and no BOQNAME, and a failure queue that refuses a
    # message too large for its rule: its batch was backed out for ever, and every
    # message behind it with it. At the bridge's --backout-threshold it is dead-lettered.
    # With BOTHRESH(3) too: a message bound for the failure queue was never counted.
    async with collecting(temporal_env.client, tmp_path, run_bridge=False) as c:
        c.rule("Tiny", "CMAOUT.FR", max_messages=2, max_bytes=10)
        c.rule("UK", "CMAOUT.UK", max_messages=1)
        for queue, change in ((c.spec.input_queue, {"bothresh": bothresh, "boqname": ""}),
                              (c.spec.failure_queue, {"put": "disabled"})):  # fmt: skip
            c.qm.define(c.qm.inquire(queue).model_copy(update=change), replace=True)
        big = c.send("Tiny", b"x" * 11, note="keep me")
        c.send("UK", order("behind it"))
        c.start_bridge()
        dead = await c.take("SYSTEM.DEAD.LETTER.QUEUE", timeout=60)
        batch = await c.take("CMAOUT.UK", timeout=60)
        left = [c.depth(q) for q in (c.spec.input_queue, c.spec.failure_queue, "CMAOUT.FR")]
    header, body = dlh.unpack(dead.body)
    assert (dead.msg_id, body, dead.properties["note"]) == (big.msg_id, big.body, "keep me")
    assert header.reason == 2362 and header.dest_q_name == c.spec.input_queue
    assert why in str(dead.properties[PROP_REASON])
    assert b"<Test>behind it</Test>" in batch.body and left == [0, 0, 0]


async def test_bad_input_goes_to_the_default_rule_or_the_failure_queue_intact(
    temporal_env, tmp_path
):
    async with collecting(temporal_env.client, tmp_path) as c:
        c.rule("Tiny", "CMAOUT.FR", max_messages=2, max_bytes=10)
        c.store.set(c.spec.name, CollectorRule(destination="Odd", target_queue="CMAOUT.FR"))
        # A row written by hand with an unknown format.
        with c.store._connect() as db:
            db.execute("UPDATE collector_rules SET format = 'yaml' WHERE destination = 'Odd'")
        no_key = c.send(None, order("nobody"))
        big = c.send("Tiny", b"x" * 11, note="keep me")
        odd = c.send("Odd", order("odd"))
        failed = [await c.take(c.spec.failure_queue) for _ in range(2)]
        status = await until(lambda: c.status("DEFAULT"), lambda s: s.open_messages == 1)
    by_id = {m.msg_id: m for m in failed}
    assert by_id[big.msg_id].body == b"x" * 11
    assert by_id[big.msg_id].properties["note"] == "keep me"
    assert "max_bytes (10)" in str(by_id[big.msg_id].properties[PROP_REASON])
    assert "column format" in str(by_id[odd.msg_id].properties[PROP_REASON])
    assert by_id[odd.msg_id].body == odd.body
    # No destination key: seed 002's default (10 messages or 60 s to the default queue).
    assert status.rule.target_queue == c.spec.default_queue and status.rule.max_messages == 10
    assert no_key.msg_id not in by_id


async def test_json_and_group_formats_and_release_now(temporal_env, tmp_path):
    async with collecting(temporal_env.client, tmp_path) as c:
        c.rule("J", "CMAOUT.JSON", max_messages=100, format="json")
        c.rule("G", "CMAOUT.GRP", max_messages=3, format="group")
        c.send("J", b'{"a":1}')
        c.send("J", b"plain text")
        await until(lambda: c.status("J"), lambda s: s.open_messages == 2)
        handle = temporal_env.client.get_workflow_handle(collector_id(c.spec.name, "J"))
        from workflows.collect_models import ReleaseBatchInput

        # A reason too long to carry is refused before it is taken; the batch stays open.
        with pytest.raises(WorkflowUpdateFailedError, match="update failed") as refused:
            await handle.execute_update(
                CollectorWorkflow.release, ReleaseBatchInput(reason="r" * 1001)
            )
        assert "reason: 1,001 characters" in str(refused.value.cause)
        done = await handle.execute_update(CollectorWorkflow.release, ReleaseBatchInput())
        assert done.released and done.messages == 2
        released = await c.take("CMAOUT.JSON")
        for i in range(3):
            c.send("G", f"g{i}".encode())
        group = [await c.take("CMAOUT.GRP") for _ in range(3)]
    assert json.loads(released.body) == [{"a": 1}, "plain text"]
    assert released.properties[PROP_BATCH_REASON] == "released"
    assert [m.body for m in group] == [b"g0", b"g1", b"g2"]
    assert len({m.group_id for m in group}) == 1
    assert [m.msg_seq_number for m in group] == [1, 2, 3]
    assert [m.group_status for m in group] == ["in-group", "in-group", "last-in-group"]


async def test_a_batch_is_no_larger_than_one_unit_of_work_can_put(temporal_env, tmp_path):
    """MAXUMSGS 20: a group batch's unit of work puts each message and its ledger marker,
    and gets each from the hold queue (where all wait here), and the queue manager counts
    the COA each put causes when the message asks for one, so a rule of 50 messages
    closes its batches at 6. 24 messages become four groups of 6; one group of 24, or of
    the 9 that fit without the COAs, would fail at its put, and be retried, for ever.
    Each sender hears of its message's arrival on the input queue and on its
    destination, and of its delivery to the collector and to the destination's reader."""
    asks = {"report": reports.MQRO_COA | reports.MQRO_COD, "reply_to_q": "APP.REPORTS"}
    held = SPEC.model_copy(update={"inline_bytes": 0})  # every message on the hold queue
    async with collecting(temporal_env.client, tmp_path, spec=held, maxumsgs=20,
                          extra_queues=("APP.REPORTS",)) as c:  # fmt: skip
        c.rule("G", "CMAOUT.GRP", max_messages=50, max_delay_seconds=3, format="group")
        sent = [
            c.qm.put(c.spec.input_queue, MQMessage(properties={"destination": "G"},
                                                   body=f"g{i}".encode(), **asks),
                     PutOptions(syncpoint=False)).msg_id
            for i in range(24)
        ]  # fmt: skip
        out = [await c.take("CMAOUT.GRP") for _ in range(24)]
        assert c.depth("CMAOUT.GRP") == 0 and c.depth("CMAIN") == 0
        assert c.depth(c.spec.failure_queue) == 0
        confirmations = list(c.qm.browse("APP.REPORTS"))
    assert [m.body for m in out] == [f"g{i}".encode() for i in range(24)]
    groups = [out[i : i + 6] for i in (0, 6, 12, 18)]
    assert len({g[0].group_id for g in groups}) == 4
    for group in groups:
        assert {m.group_id for m in group} == {group[0].group_id}
        assert [m.msg_seq_number for m in group] == list(range(1, 7))
        assert group[-1].group_status == "last-in-group"
        assert group[0].properties[PROP_BATCH_REASON] == "count"
    # On the input queue the reports are correlated with the sender's MsgIds; the group's
    # messages have MsgIds of the batch's own, and the reports there with those.
    assert sorted(m.correl_id for m in confirmations if m.correl_id in sent) == sorted(sent * 2)
    assert sorted(m.correl_id for m in confirmations if m.correl_id not in sent) == sorted(
        [m.msg_id for m in out] * 2
    )
    assert sorted(m.feedback for m in confirmations) == [259] * 48 + [260] * 48


def _config(tmp_path: Path, spec: CollectorSpec) -> Path:
    file = tmp_path / "mqgather.toml"
    file.write_text(
        f"[collectors.{spec.name}]\n"
        f'input_queue = "{spec.input_queue}"\n'
        f'rules_db = "{tmp_path / "rules.db"}"\n'
        "rule_refresh_seconds = 0.5\n"
    )
    return file


async def test_scenario_3_worker_and_bridge_killed_strand_nothing(temporal_env, tmp_path):
    """Seed 002's stranded messages: 12 of a 20-message batch, then both processes die by
    SIGKILL and restart. The open batch is workflow state: all 12 arrive, once each, and
    no recycling flow exists or is needed."""
    address = temporal_env.client.service_client.config.target_host
    path = tmp_path / "qm.db"
    spec = SPEC.model_copy(
        update={"name": f"stranded-{uuid.uuid4().hex[:6]}", "rules_db": str(tmp_path / "rules.db")}
    )
    config = _config(tmp_path, spec)
    prepare_queues(path, [*OUT, SPEC.failure_queue, SPEC.default_queue])
    with LocalQueueManager(path) as qm:
        qm.define(QueueAttributes(name=SPEC.input_queue, maxdepth=100_000, bothresh=3))
    c = Collecting(temporal_env.client, path, spec, f"collect-{uuid.uuid4().hex[:10]}")
    c.rule("Spain", "CMAOUT.SP", max_messages=20, max_delay_seconds=8)
    env = dict(
        os.environ, TEMPORAL_ADDRESS=address, MQGATHER_MQ=f"local:{path}",
        MQGATHER_CONFIG=str(config),
    )  # fmt: skip
    commands = [
        mqgather_cmd("worker", "--task-queue", c.task_queue),
        mqgather_cmd("collector", "run", spec.name, "--task-queue", c.task_queue),
    ]

    def start() -> list[subprocess.Popen]:
        return [subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL) for cmd in commands]

    procs = start()
    try:
        sent = [c.send("Spain", order(f"Hola amigo {i}")) for i in range(12)]
        await until(lambda: c.status("Spain"), lambda s: s.open_messages == 12, 60)
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        procs = start()
        batch = await c.take("CMAOUT.SP", timeout=60)
        final = await until(lambda: c.status("Spain"), lambda s: s.batches == 1, 30)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)
        c.qm.close()
    text = batch.text()
    assert [text.count(f"<Test>Hola amigo {i}</Test>") for i in range(12)] == [1] * 12
    assert final.messages == 12 and final.open_messages == 0
    with LocalQueueManager(path) as qm:
        assert [qm.inquire(q).curdepth for q in ("CMAOUT.SP", "CMAIN", SPEC.failure_queue)] == [
            0, 0, 0,
        ]  # fmt: skip
    assert len(sent) == 12


class _CrashAfterSignals(CollectorBridge):
    """Dies by SIGKILL after Temporal accepted the signals and before MQCMIT."""

    async def _process(self, *args, **kwargs):
        await super()._process(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)


def _run_crashing_bridge(address: str, path: str, spec_json: str, task_queue: str) -> None:
    async def main() -> None:
        client = await Client.connect(address, data_converter=pydantic_data_converter)
        spec = CollectorSpec.model_validate_json(spec_json)
        bridge = _CrashAfterSignals(
            client, lambda: LocalQueueManager(path), spec, task_queue=task_queue
        )
        await bridge.run(asyncio.Event())

    asyncio.run(main())


async def test_a_bridge_killed_between_signal_and_commit_batches_nothing_twice(
    temporal_env, tmp_path
):
    address = temporal_env.client.service_client.config.target_host
    async with collecting(temporal_env.client, tmp_path, run_bridge=False) as c:
        c.rule("Spain", "CMAOUT.SP", max_messages=6, max_delay_seconds=120)
        crash = CTX.Process(
            target=_run_crashing_bridge,
            args=(address, str(c.path), c.spec.model_dump_json(), c.task_queue),
        )
        for i in range(6):
            c.send("Spain", order(f"once {i}"))
        crash.start()
        crash.join(60)
        assert crash.exitcode == -signal.SIGKILL
        first = await c.take("CMAOUT.SP")
        assert c.depth("CMAIN") == 6  # backed out by the dead bridge's connection
        c.start_bridge()
        final = await until(lambda: c.status("Spain"), lambda s: s.redeliveries == 6, 30)
        await until(lambda: asyncio.sleep(0, c.depth("CMAIN")), lambda d: d == 0, 30)
        left = c.depth("CMAOUT.SP")
    assert first.text().count("<Test>once") == 6
    assert final.batches == 1 and final.messages == 6 and final.open_messages == 0
    assert left == 0


async def test_hostile_properties_and_bodies_end_in_one_place_each(temporal_env, tmp_path):
    """NaN and a string that is not valid Unicode travel through the batch unchanged;
    a body that is not text for a json batch goes to the failure queue intact."""
    async with collecting(temporal_env.client, tmp_path) as c:
        c.rule("J", "CMAOUT.JSON", max_messages=1, format="json")
        c.rule("G", "CMAOUT.GRP", max_messages=1, format="group")
        odd = {"score": float("nan"), "name": "bad\udcff"}
        kept = c.send("G", b"\x00\x01binary", **odd)
        broken = c.send("J", b'{"a": "\xff"}')
        (out,) = [await c.take("CMAOUT.GRP")]
        failed = await c.take(c.spec.failure_queue)
        left = (c.depth("CMAOUT.JSON"), c.depth("CMAIN"))
    assert out.body == kept.body and math.isnan(out.properties["score"])
    assert out.properties["name"] == "bad\udcff"
    assert (failed.msg_id, failed.body) == (broken.msg_id, broken.body)
    assert "batches json" in str(failed.properties[PROP_REASON])
    assert left == (0, 0)


async def test_a_flood_of_large_properties_is_signalled_in_pieces_and_batched_whole(
    temporal_env, tmp_path
):
    """30 messages whose properties are 100 KB each, in one MQ batch for one destination:
    more than Temporal takes in one signal, so the bridge splits them by encoded size
    (not body size); every one ends in the batch, none on the failure queue."""
    async with collecting(temporal_env.client, tmp_path, run_bridge=False) as c:
        c.rule("Big", "CMAOUT.FR", max_messages=30, max_delay_seconds=60, format="blob")
        sent = [
            c.qm.put(c.spec.input_queue, MQMessage(
                properties={"destination": "Big", "note": f"{n:03d}" + "x" * 100_000},
                body=b"%03d" % n))
            for n in range(30)
        ]  # fmt: skip
        c.qm.commit()
        c.start_bridge()
        batch = await c.take("CMAOUT.FR")
        seen = await c.status("Big")
        left = (c.depth(c.spec.failure_queue), c.depth("CMAIN"))
    assert batch.body == b"".join(m.body for m in sent)
    assert seen.messages == 30 and left == (0, 0)


class _OneSignalFailsOnce(CollectorBridge):
    """Temporal fails destination B's first signal (not for its content); the others of
    the same MQ batch are accepted."""

    failed: set[str] = set()

    async def _send(self, destination, *args, **kwargs):
        if destination.startswith("B-") and destination not in self.failed:
            self.failed.add(destination)
            raise RuntimeError("Temporal unavailable")
        return await super()._send(destination, *args, **kwargs)


async def test_one_destination_failing_backs_out_the_batch_and_nothing_is_batched_twice(
    temporal_env, tmp_path
):
    """Destinations are signalled side by side: when one fails, the whole MQ batch is
    backed out; the destinations already signalled take the redelivery once."""
    a, b = f"A-{uuid.uuid4().hex[:6]}", f"B-{uuid.uuid4().hex[:6]}"
    async with collecting(temporal_env.client, tmp_path, run_bridge=False) as c:
        c.rule(a, "CMAOUT.FR", max_messages=3, format="blob", separator="|")
        c.rule(b, "CMAOUT.UK", max_messages=3, format="blob", separator="|")
        for n in range(3):
            for destination in (a, b):
                c.qm.put(
                    c.spec.input_queue,
                    MQMessage(
                        properties={"destination": destination}, body=f"{destination}-{n}".encode()
                    ),
                )
        c.qm.commit()  # one MQ batch for both destinations
        c.start_bridge(_OneSignalFailsOnce)
        batches = {q: await c.take(q) for q in ("CMAOUT.FR", "CMAOUT.UK")}
        seen_a = await until(lambda: c.status(a), lambda s: s.redeliveries == 3)
        seen_b = await c.status(b)
        left = [c.depth(q) for q in ("CMAIN", "CMAOUT.FR", "CMAOUT.UK", c.spec.failure_queue)]
    assert batches["CMAOUT.FR"].body == f"{a}-0|{a}-1|{a}-2".encode()
    assert batches["CMAOUT.UK"].body == f"{b}-0|{b}-1|{b}-2".encode()
    assert (seen_a.messages, seen_a.batches) == (3, 1)
    assert (seen_b.messages, seen_b.batches, seen_b.redeliveries) == (3, 1, 0)
    assert left == [0, 0, 0, 0]


async def test_messages_that_reuse_one_msg_id_are_each_batched(temporal_env, tmp_path):
    # Applications that set MsgId themselves (a business key, say) may reuse one: each
    # message is still one of the batch, none dropped as a redelivery of another.
    shared = b"ORDER-4711".ljust(24, b"\x00")
    async with collecting(temporal_env.client, tmp_path) as c:
        c.rule("France", "CMAOUT.FR", max_messages=3, max_delay_seconds=60)
        for i in range(3):
            message = MQMessage(msg_id=shared, properties={"destination": "France"},
                                body=order(f"line {i}"))  # fmt: skip
            c.qm.put(c.spec.input_queue, message, PutOptions(syncpoint=False))
        batch = await c.take("CMAOUT.FR")
        final = await c.status("France")
        assert c.depth("CMAIN") == 0
    assert [f"<Test>line {i}</Test>" in batch.text() for i in range(3)] == [True] * 3
    assert final.messages == 3 and final.redeliveries == 0


async def test_segments_of_a_message_go_to_the_failure_queue_not_into_a_batch(
    temporal_env, tmp_path
):
    # A message that reached the queue in segments: batched one by one, its parts would
    # be two messages of the batch, the first cut short.
    async with collecting(temporal_env.client, tmp_path) as c:
        c.rule("France", "CMAOUT.FR", max_messages=1, max_delay_seconds=60)
        group = b"SEGMENTED".ljust(24, b"\x00")
        segments = [
            c.qm.put(c.spec.input_queue, MQMessage(
                group_id=group, msg_flags=flags, offset=offset,
                properties={"destination": "France"}, body=body,
            ), PutOptions(syncpoint=False))
            for flags, offset, body in ((MsgFlags.SEGMENT, 0, order("first")[:20]),
                                        (MsgFlags.LAST_SEGMENT, 20, order("first")[20:]))
        ]  # fmt: skip
        c.send("France", order("whole"))
        failed = [await c.take(c.spec.failure_queue) for _ in segments]
        batch = await c.take("CMAOUT.FR")
        left = [c.depth(q) for q in ("CMAIN", "CMAOUT.FR", c.spec.failure_queue)]
    assert "<Test>whole</Test>" in batch.text() and left == [0, 0, 0]
    assert batch.text().count("<Test>") == 1  # the whole message alone, no segment
    for sent, moved in zip(segments, failed, strict=True):
        assert (moved.msg_id, moved.body, moved.offset) == (sent.msg_id, sent.body, sent.offset)
        assert "a segment of a segmented message" in str(moved.properties[PROP_REASON])


async def test_a_rule_that_targets_the_input_queue_sends_its_messages_to_failure(
    temporal_env, tmp_path
):
    # Its batches would come straight back to be batched again, for ever.
    async with collecting(temporal_env.client, tmp_path) as c:
        c.rule("Loop", c.spec.input_queue, max_messages=1)
        c.rule("France", "CMAOUT.FR", max_messages=1)
        looping = c.send("Loop", order("round and round"))
        c.send("France", order("fine"))
        failed = await c.take(c.spec.failure_queue)
        batch = await c.take("CMAOUT.FR")
        left = [c.depth(q) for q in ("CMAIN", "CMAOUT.FR", c.spec.failure_queue)]
    assert failed.msg_id == looping.msg_id and failed.body == looping.body
    assert "this collector's input_queue" in str(failed.properties[PROP_REASON])
    assert "<Test>fine</Test>" in batch.text() and left == [0, 0, 0]


async def test_a_body_too_deep_for_its_json_key_goes_to_failure_and_the_batch_goes_on(
    temporal_env, tmp_path
):
    # Its RecursionError was a RuntimeError, taken for Temporal being away: the bridge
    # backed the batch out and read it again, and nothing behind it was batched.
    spec = SPEC.model_copy(update={"destination_key": "json:to", "missing_key": "failure"})
    async with collecting(temporal_env.client, tmp_path, spec=spec) as c:
        c.rule("FR", "CMAOUT.FR", max_messages=1, format="json")
        deep = c.send(None, b"[" * 100_000 + b"]" * 100_000)
        good = c.send(None, b'{"to": "FR"}')
        failed = await c.take(c.spec.failure_queue)
        batch = await c.take("CMAOUT.FR")
        left = (c.depth("CMAIN"), c.depth(c.spec.failure_queue))
    assert (failed.msg_id, failed.body) == (deep.msg_id, deep.body)
    assert "nested too deep" in str(failed.properties[PROP_REASON])
    assert good.body in batch.body and left == (0, 0)


async def test_a_destination_that_is_not_valid_text_goes_to_failure_and_the_bridge_goes_on(
    temporal_env, tmp_path
):
    # A property read from bytes that are not UTF-8 holds a lone surrogate, which no rule
    # takes: its ValidationError stopped the bridge, before BOTHRESH could move it aside.
    async with collecting(temporal_env.client, tmp_path) as c:
        c.rule("FR", "CMAOUT.FR", max_messages=1)
        bad = c.send("bad\udcff", order("bad"))
        good = c.send("FR", order("good"))
        failed = await c.take(c.spec.failure_queue)
        batch = await c.take("CMAOUT.FR")
        left = (c.depth("CMAIN"), c.depth(c.spec.failure_queue))
    assert (failed.msg_id, failed.body) == (bad.msg_id, bad.body)
    assert failed.properties["destination"] == "bad\udcff"
    assert "is not printable text" in str(failed.properties[PROP_REASON])
    assert b"<Test>good</Test>" in batch.body and left == (0, 0)
    assert good.body.endswith(b"<Test>good</Test>")


async def test_a_batch_of_hundreds_of_messages_is_put_with_its_marker(temporal_env, tmp_path):
    # Its ledger marker keeps 17 bytes a message: past 4 KB (MAXMSGL of the ledger as it
    # was set up) the batch's PUT failed on every attempt, and the destination stood.
    async with collecting(temporal_env.client, tmp_path) as c:
        c.rule("FR", "CMAOUT.FR", max_messages=300)
        sent = [c.send("FR", order(str(n))) for n in range(300)]
        batch = await c.take("CMAOUT.FR", timeout=60)
        left = (c.depth("CMAIN"), c.depth("CMAOUT.FR"))
    assert batch.properties["mqgather_batch_size"] == 300 == len(sent)
    assert batch.text().count("<Test>") == 300 and left == (0, 0)


async def test_a_batch_whose_messages_outgrow_one_payload_is_put_in_parts(temporal_env, tmp_path):
    # 1,000 bodies of 5 KB are within max_bytes; their JSON is 7.5 MB, which the batch's
    # PUT carried in one payload (Temporal takes 2 MB): it failed each time (TMPRL1103).
    # (Here the bridge takes 100 MB a second inline, else it holds most of them.) Their
    # history soon asks the collector to continue as new, with batches closed while it
    # settled: that input outgrew a payload too, and the collector stood.
    inline = SPEC.model_copy(update={"destination_inline_bytes": 100 * 1024 * 1024})
    async with collecting(temporal_env.client, tmp_path, spec=inline) as c:
        c.rule(
            "FR",
            "CMAOUT.FR",
            max_messages=1000,
            max_bytes=20_000_000,
            format="blob",
            max_delay_seconds=5,
        )
        # In fives of 200, each taken before the next: all at once is a flood (the test
        # below), whose signals a loaded worker could leave waiting past the 2 MB the
        # server lets wait for one workflow task.
        for sent in range(200, 1001, 200):
            for _ in range(200):
                c.send("FR", b"v" * 5000)
            await until(lambda: c.status("FR"), lambda s, sent=sent: s.messages >= sent, 60)
        batches = []
        while sum(b.properties["mqgather_batch_size"] for b in batches) < 1000:
            batches.append(await c.take("CMAOUT.FR", timeout=60))
        left = (c.depth("CMAIN"), c.depth("CMAOUT.FR"), c.depth(c.spec.failure_queue))
    assert len(batches) >= 5 and b"".join(b.body for b in batches) == b"v" * 5_000_000
    reasons = [b.properties["mqgather_batch_reason"] for b in batches]
    assert reasons.count("bytes") >= 4 and "count" not in reasons
    assert left == (0, 0, 0)


async def test_a_flood_for_one_destination_is_batched_whole(temporal_env, tmp_path):
    # 1,000 messages of 55 KB for one destination, each small enough to travel inline,
    # put at once: the server failed the collector's tasks while more than 2 MB of
    # signals waited for them, and ended it at 50 MB of history. 286 messages went to
    # the failure queue ("history size exceeds limit"), and 84 it had taken were in its
    # history only.
    async with collecting(temporal_env.client, tmp_path) as c:
        c.rule("FR", "CMAOUT.FR", max_messages=10_000, max_bytes=4_000_000, format="blob",
               max_delay_seconds=1)  # fmt: skip
        bodies = [b"%05d" % n * 11_000 for n in range(1000)]
        for body in bodies:
            c.send("FR", body)
        batches = []
        while sum(b.properties["mqgather_batch_size"] for b in batches) < 1000:
            batches.append(await c.take("CMAOUT.FR", timeout=60))
        left = (c.depth("CMAIN"), c.depth(c.spec.failure_queue), c.depth(c.spec.hold_queue))
    assert b"".join(b.body for b in batches) == b"".join(bodies) and left == (0, 0, 0)
