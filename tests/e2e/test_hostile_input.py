"""Replies built to break the bridge or the worker: each ends in exactly one place, and
one bad reply never moves another."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, Interceptor, OutboundInterceptor
from temporalio.contrib.pydantic import pydantic_data_converter

from bridge import inbound
from bridge.mq import dlh, hold, reports
from bridge.mq.models import (
    MQFMT_STRING,
    SEGMENT_FLAGS,
    Match,
    MQMessage,
    MsgFlags,
    PutOptions,
    QueueAttributes,
    fingerprint,
    parse_id,
)
from mqgather.ccsid import codec as ccsid_codec
from mqgather.config import AggregateSpec, LegSpec
from mqgather.names import (
    GATHER_STATE,
    LEGS_MISSING,
    PROP_BACKOUT_COUNT,
    PROP_REASON,
    SIGNAL_EXPECT,
    SIGNAL_REPLIES,
)
from tests.conftest import standin_connector
from tests.harness import pipeline, status, until
from workflows.gather import GatherWorkflow
from workflows.models import (
    Registration,
    Reply,
    ReplyBatch,
    as_held,
    held_reference,
    start_input,
)
from workflows.settling import SETTLE

LEGS = (LegSpec(name="CREDIT", sequence=10), LegSpec(name="STOCK", sequence=20),
        LegSpec(name="TAX", sequence=30))  # fmt: skip


async def test_non_finite_and_invalid_text_properties_reach_the_gather(temporal_env, tmp_path):
    spec = AggregateSpec(name="odd", legs=LEGS, timeout_seconds=30)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        p.reply(spec, sent.correl_id, "CREDIT", b'{"c":1}', score=math.nan, hi=math.inf)
        p.reply(spec, sent.correl_id, "STOCK", b'{"s":1}', lo=-math.inf)
        p.reply(spec, sent.correl_id, "TAX", b'{"t":1}', name="caf\udce9")  # not UTF-8
        response = await p.wait_message("ORDER.RESPONSE")
        result = await p.result(spec, sent.correl_id)
        handle = p.handle(spec, sent.correl_id)
        history = await handle.fetch_history()
        assert p.empty("GATHER.FAILURE") and p.empty("GATHER.BACKOUT")
    assert result.state == "COMPLETE" and result.legs_missing == []
    assert json.loads(response.body)["legs"] == {"credit": {"c": 1}, "stock": {"s": 1},
                                                  "tax": {"t": 1}}  # fmt: skip
    # The properties arrived as sent, NaN and the undecodable text included.
    props = {}
    converter = pydantic_data_converter.payload_converter
    for event in history.events:
        signal = event.workflow_execution_signaled_event_attributes
        if signal.signal_name == SIGNAL_REPLIES:
            batch = converter.from_payloads(signal.input.payloads, [ReplyBatch])[0]
            for r in batch.replies:
                props.update(r.message.properties)
    assert math.isnan(props["score"]) and props["hi"] == math.inf and props["lo"] == -math.inf
    assert props["name"] == "caf\udce9"


async def test_an_oversized_property_is_held_and_its_batch_mates_complete(temporal_env, tmp_path):
    spec = AggregateSpec(name="huge", legs=LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        victim, bystander = await p.scatter(spec), await p.scatter(spec)
        # One unit of work, so the bridge gets all four in one batch.
        big = MQMessage(correl_id=victim.correl_id, body=b'{"c":1}',
                        properties={"leg": "CREDIT", "blob": "\x01" * 3_000_000})  # fmt: skip
        put = [p.qm.put("GATHER.IN", big, PutOptions(syncpoint=True))]
        for leg in ("CREDIT", "STOCK", "TAX"):
            message = MQMessage(correl_id=bystander.correl_id, properties={"leg": leg}, body=b"{}")
            put.append(p.qm.put("GATHER.IN", message, PutOptions(syncpoint=True)))
        p.qm.commit()
        await p.wait_message("ORDER.RESPONSE")
        done = await p.result(spec, bystander.correl_id)
        victim_status = await until(
            lambda: status(p.handle(spec, victim.correl_id)), lambda s: s.legs_received
        )
        # The gather takes the reference before the bridge commits the held reply.
        held = await until(lambda: asyncio.sleep(0, p.messages("GATHER.HOLD")), bool)
        assert p.empty("GATHER.BACKOUT") and p.empty("GATHER.FAILURE")
        assert p.empty("GATHER.LATE") and p.empty("GATHER.IN")
    # Properties of any size MQ carries wait on the hold queue with the body, intact.
    assert [m.msg_id for m in held] == [put[0].msg_id] and held[0].body == b'{"c":1}'
    assert held[0].properties["blob"] == "\x01" * 3_000_000
    assert done.state == "COMPLETE" and done.redeliveries == 0
    assert victim_status.legs_received == ["CREDIT"] and victim_status.state == "PARTIAL"
    assert [(leg.name, leg.held) for leg in victim_status.legs if leg.received] == [
        ("CREDIT", True)
    ]


@contextlib.asynccontextmanager
async def _bridge_running(p) -> AsyncIterator[None]:
    """The pipeline's bridge, served for the block (stopped before it returns)."""
    stop = asyncio.Event()
    served = asyncio.create_task(p.bridge.run(stop))
    try:
        yield
    finally:
        stop.set()
        await served


async def _credit_taken(p, spec: AggregateSpec):
    """A gather that took CREDIT's reply, the bridge stopped after: (scattered, handle,
    the reply as put)."""
    async with _bridge_running(p):
        sent = await p.scatter(spec)
        handle = p.handle(spec, sent.correl_id)
        credit = p.reply(spec, sent.correl_id, "CREDIT", b'{"c":1}')
        await until(lambda: status(handle), lambda s: s.legs_received == ["CREDIT"])
    return sent, handle, credit


def _backed_out(p, queue: str, messages: list[MQMessage], times: int) -> None:
    """Put ``messages`` as they were (on an empty queue), and back out a get of each
    ``times`` times, as a bridge killed between signal and MQCMIT leaves them."""
    for message in messages:
        p.qm.put(queue, message, PutOptions(syncpoint=True, set_all_context=True))
    p.qm.commit()
    for _ in range(times):
        for _ in messages:
            p.qm.get(queue, syncpoint=True)
        p.qm.backout()


async def test_a_consumed_reply_at_bothresh_is_not_also_backed_out(temporal_env, tmp_path):
    spec = AggregateSpec(name="bo", legs=LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec], run_bridge=False) as p:
        sent, _, credit = await _credit_taken(p, spec)
        # As if the bridge had been killed between signal and MQCMIT three times: the
        # same message is back on the queue with BackoutCount 3 (= BOTHRESH).
        _backed_out(p, "GATHER.IN", [credit], 3)
        again = p.qm.get("GATHER.IN", browse="first")
        assert again.backout_count == 3 and again.msg_id == credit.msg_id
        async with _bridge_running(p):
            p.reply(spec, sent.correl_id, "STOCK", b"{}")
            p.reply(spec, sent.correl_id, "TAX", b"{}")
            await p.wait_message("ORDER.RESPONSE")
            result = await p.result(spec, sent.correl_id)
        assert p.empty("GATHER.BACKOUT") and p.empty("GATHER.IN") and p.empty("GATHER.LATE")
    assert result.state == "COMPLETE"
    # Signalled again, not dropped: a gather may hold such a reply by a reference whose
    # put backed out with its get. This one took it as a redelivery, once.
    assert result.redeliveries == 1 and p.bridge.stats.redeliveries_dropped == 0


async def test_a_reply_that_cannot_be_encoded_goes_to_failure_with_its_reason(
    temporal_env, tmp_path
):
    spec = AggregateSpec(name="badname", legs=LEGS[:1], timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        bad = p.put("GATHER.IN", MQMessage(correl_id=sent.correl_id, body=b"{}",
                                           properties={"leg": "CREDIT", "k\udcff": 1}))  # fmt: skip
        failed = await p.wait_message("GATHER.FAILURE")
        p.reply(spec, sent.correl_id, "CREDIT", b'{"ok":1}')
        response = await p.wait_message("ORDER.RESPONSE")
    assert failed.msg_id == bad.msg_id and failed.properties["k\udcff"] == 1
    assert "cannot be carried to its gather" in str(failed.properties[PROP_REASON])
    assert json.loads(response.body)["legs"] == {"credit": {"ok": 1}}


async def test_an_undeliverable_response_fails_the_gather_and_is_dead_lettered(
    temporal_env, tmp_path
):
    spec = AggregateSpec(name="nowhere", legs=LEGS[:1], destination="replyToQueue",
                         delivery_attempts=2, timeout_seconds=300)  # fmt: skip
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec, reply_to_q="NO.SUCH.Q")
        p.reply(spec, sent.correl_id, "CREDIT", b'{"c":1}')
        result = await p.result(spec, sent.correl_id)
        dead = await p.wait_message("SYSTEM.DEAD.LETTER.QUEUE")
        described = await p.handle(spec, sent.correl_id).describe()
        assert p.empty("ORDER.RESPONSE")
    assert result.state == "FAILED" and "MQRC_UNKNOWN_OBJECT_NAME" in result.error
    assert "NO.SUCH.Q" in result.error and result.response_queues == ["SYSTEM.DEAD.LETTER.QUEUE"]
    assert described.typed_search_attributes.get(GATHER_STATE) == "FAILED"
    header, body = dlh.unpack(dead.body)
    assert header.dest_q_name == "NO.SUCH.Q" and header.reason == 2085
    assert json.loads(body)["legs"] == {"credit": {"c": 1}}


async def test_backout_without_boqname_goes_to_the_dead_letter_queue_with_an_mqdlh(
    temporal_env, tmp_path
):
    spec = AggregateSpec(name="dlq", legs=LEGS)
    async with pipeline(temporal_env.client, tmp_path, [spec], run_bridge=False) as p:
        p.qm.define(QueueAttributes(name="GATHER.IN", maxdepth=1000, bothresh=1), replace=True)
        poison = p.put("GATHER.IN", MQMessage(correl_id=b"P", properties={"leg": "TAX"},
                                              body=b"poison"))  # fmt: skip
        p.qm.get("GATHER.IN", match=Match(msg_id=poison.msg_id))
        p.qm.backout()
        stop = asyncio.Event()
        bridge = asyncio.create_task(p.bridge.run(stop))
        dead = await p.wait_message("SYSTEM.DEAD.LETTER.QUEUE")
        stop.set()
        await bridge
        assert p.empty("GATHER.IN") and p.empty("GATHER.BACKOUT")
    header, body = dlh.unpack(dead.body)
    assert dead.format == "MQDEAD" and dead.msg_id == poison.msg_id and body == b"poison"
    assert header.reason == 2362 and header.dest_q_name == "GATHER.IN"
    assert header.format == "MQSTR" and header.put_appl_name == "mqgather"
    assert "BOTHRESH 1" in str(dead.properties[PROP_REASON])


#: A body in EBCDIC (CCSID 37).
POISON = "poison ä".encode("cp037")


@pytest.mark.parametrize("poison", ["no CorrelId", "a segment"])
async def test_a_reply_queue_with_no_bothresh_moves_a_message_failing_every_time_aside(
    temporal_env, tmp_path, poison
):
    # BOTHRESH(0), MQ's default, and a failure queue that refuses the reply that has no
    # CorrelId: its batch was backed out for ever, and every reply behind it with it.
    # MQ's own integration nodes take BOTHRESH(0) as 1; the bridge takes its
    # --backout-threshold (5), so a failure that passes does not set a reply aside.
    spec = AggregateSpec(name="nothresh", legs=LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec], bothresh=0) as p:
        failure = p.qm.inquire(spec.failure_queue).model_copy(update={"put": "disabled"})
        p.qm.define(failure, replace=True)
        g = await p.scatter(spec)
        # MQ's defaults: no BOQNAME either.
        replies = p.qm.inquire(spec.reply_queue).model_copy(update={"boqname": ""})
        async with p.bridge_stopped():  # one batch: the poison first
            p.qm.define(replies, replace=True)
            # In EBCDIC, with property values JSON cannot hold: all kept on the way.
            odd = {"n": 1, "score": math.nan, "name": "caf\udce9"}
            bad = MQMessage(body=POISON, coded_char_set_id=37, format=MQFMT_STRING,
                            properties=odd)  # fmt: skip
            if poison == "a segment":  # not whole: to the failure queue before it is read
                bad = bad.model_copy(update={"correl_id": g.correl_id, "msg_flags": int(
                    MsgFlags.SEGMENT), "group_id": parse_id("SEGMENTED")})  # fmt: skip
            sent = p.put(spec.reply_queue, bad)
            for leg in ("CREDIT", "STOCK", "TAX"):
                p.reply(spec, g.correl_id, leg, b"{}")
        dead = await p.wait_message("SYSTEM.DEAD.LETTER.QUEUE", timeout=60)
        response = await p.wait_message(spec.response_queue, timeout=60)
        result = await p.result(spec, g.correl_id)
        await p.landed(spec.reply_queue, lambda n: n == 0)
        assert p.empty(spec.failure_queue) and p.empty("SYSTEM.DEAD.LETTER.QUEUE")
        assert p.empty("GATHER.BACKOUT")
    header, body = dlh.unpack(dead.body)
    assert (dead.msg_id, body, dead.properties["n"]) == (sent.msg_id, POISON, 1)
    assert math.isnan(dead.properties["score"]) and dead.properties["name"] == "caf\udce9"
    assert (header.coded_char_set_id, header.format) == (37, MQFMT_STRING)
    assert header.reason == 2362 and header.dest_q_name == spec.reply_queue
    assert dead.properties[PROP_BACKOUT_COUNT] == 5
    assert "BOTHRESH(0)" in str(dead.properties[PROP_REASON])
    assert "--backout-threshold 5" in str(dead.properties[PROP_REASON])
    assert result.state == "COMPLETE" and response.correl_id == g.correl_id


async def test_mainframe_replies_in_ebcdic_merge_and_forward_byte_exact(temporal_env, tmp_path):
    spec = AggregateSpec(name="ebcdic", legs=LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)

        def put(leg: str, text: str, ccsid: int, encoding: int = 785) -> MQMessage:
            message = MQMessage(correl_id=sent.correl_id, properties={"leg": leg},
                                body=text.encode(ccsid_codec(ccsid)), coded_char_set_id=ccsid,
                                encoding=encoding)  # fmt: skip
            return p.put("GATHER.IN", message)

        put("CREDIT", '{"holder": "Jürgen [A]"}', 37)
        put("STOCK", '{"sku": "X^Y"}', 1047)
        put("TAX", '{"rate": "7 %"}', 500)
        response = await p.wait_message("ORDER.RESPONSE")
        # Late once the gather has closed. (A reply that lands while the completing
        # workflow task is still in flight is handed over with the completing batch and
        # counted a duplicate instead: never lost, but not this test's case.)
        await p.result(spec, sent.correl_id)
        late = put("TAX", '{"rate": "late ä"}', 1047, encoding=273)
        forwarded = await p.wait_message("GATHER.LATE")
    assert response.coded_char_set_id == 1208
    assert json.loads(response.body.decode("utf-8"))["legs"] == {
        "credit": {"holder": "Jürgen [A]"},
        "stock": {"sku": "X^Y"},
        "tax": {"rate": "7 %"},
    }
    assert forwarded.body == late.body and forwarded.msg_id == late.msg_id
    assert (forwarded.coded_char_set_id, forwarded.encoding) == (1047, 273)


async def test_a_leg_in_an_unknown_ccsid_fails_the_gather_to_the_failure_queue(
    temporal_env, tmp_path
):
    spec = AggregateSpec(name="badccsid", legs=LEGS[:1], timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        bad = p.put("GATHER.IN", MQMessage(correl_id=sent.correl_id, properties={"leg": "CREDIT"},
                                           body=b"{}", coded_char_set_id=9999))  # fmt: skip
        failed = await p.wait_message("GATHER.FAILURE")
        result = await p.result(spec, sent.correl_id)
    assert failed.msg_id == bad.msg_id and failed.coded_char_set_id == 9999
    assert "CCSID 9999" in str(failed.properties[PROP_REASON])
    assert result.state == "FAILED"


async def test_a_flood_before_registration_stays_small_and_expires_on_time(temporal_env, tmp_path):
    """2,000 replies for one CorrelId nobody registers: the gather holds at most
    max_held_replies, routes the surplus at once, never fails a task on the payload
    limit and closes at its unknown-message timeout; every reply ends on the unknown
    queue exactly once."""
    spec = AggregateSpec(name="flood", legs=LEGS, unknown_timeout_seconds=3,
                         max_held_replies=50)  # fmt: skip
    correl = b"FLOOD".ljust(24, b"\0")
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = {p.reply(spec, correl, "TAX", b'{"n":%d}' % n).msg_id for n in range(2000)}
        await p.landed("GATHER.UNKNOWN", lambda d: d == 2000, 120)
        result = await p.result(spec, correl)
        routed = [m.msg_id for m in p.messages("GATHER.UNKNOWN")]
        history = await p.handle(spec, correl).fetch_history()
        assert p.empty("GATHER.IN") and p.empty("GATHER.FAILURE") and p.empty("GATHER.BACKOUT")
    assert result.state == "UNKNOWN"
    assert sorted(routed) == sorted(sent)
    # The only task failure allowed: Temporal refusing the close because more of the
    # flood's signals came in meanwhile (on a loaded machine), which the next task takes.
    causes = {
        e.workflow_task_failed_event_attributes.cause
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    }
    assert causes <= {WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND}
    # The gather's carried state is its largest payload: far below the 2 MB limit.
    largest = max(e.ByteSize() for e in history.events)
    assert largest < 512 * 1024
    # On time, read from the gather's own timers rather than the wall clock (a loaded
    # machine delays the close, not the deadline). The workflow's clock, while a task
    # runs, lies between that task's start and completion; so each timer it set to wait
    # aims within such a window, and all of them, however many replies came meanwhile,
    # at one deadline: the first task's time plus the unknown-message timeout. The last
    # wait ended there (its timer fired, or a task that took more of the flood found the
    # deadline passed), and no wait came after it.
    timeout = timedelta(seconds=spec.unknown_timeout_seconds)
    tasks = _task_windows(history)
    first_start, first_end = tasks[0][1]
    windows = [(first_start + timeout, first_end + timeout)]
    waits = [(event, window) for event, window, span in _timers(history, tasks) if span > SETTLE]
    windows += [window for _, window in waits]
    latest_start, earliest_end = max(w[0] for w in windows), min(w[1] for w in windows)
    slack = timedelta(milliseconds=5)
    assert waits and latest_start <= earliest_end + slack, windows
    ended = next(end for event, (_, end) in tasks if event > waits[-1][0])
    assert ended + slack >= latest_start, "the gather stopped waiting before its deadline"


Window = tuple[datetime, datetime]


def _task_windows(history) -> list[tuple[int, Window]]:
    """Each completed workflow task, in order: its completion's event id, and its start
    and completion."""
    at = {e.event_id: e for e in history.events}
    return [
        (e.event_id,
         (at[e.workflow_task_completed_event_attributes.started_event_id].event_time.ToDatetime(),
          e.event_time.ToDatetime()))
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    ]  # fmt: skip


def _timers(history, tasks: list[tuple[int, Window]]) -> list[tuple[int, Window, timedelta]]:
    """Each timer the workflow started, in order: its event id, the window its aim lies
    in (the window of the task that set it, of ``tasks``, moved by its duration) and its
    duration."""
    task_window = dict(tasks)
    timers = []
    for e in history.events:
        if e.event_type != EventType.EVENT_TYPE_TIMER_STARTED:
            continue
        attrs = e.timer_started_event_attributes
        start, end = task_window[attrs.workflow_task_completed_event_id]
        span = attrs.start_to_fire_timeout.ToTimedelta()
        timers.append((e.event_id, (start + span, end + span), span))
    return timers


@pytest.mark.parametrize("confirmed", [False, True], ids=["plain", "coa-and-cod"])
async def test_every_batch_fits_maxumsgs_when_each_message_is_moved(
    temporal_env, tmp_path, confirmed
):
    """MAXUMSGS 20 and a batch size of 100: 60 replies that name no leg each need a get
    and a put (to the failure queue), and the queue manager counts the COD the get causes
    and the COA the put causes when the reply asks for them. The bridge takes 5 per unit
    of work, so each reaches the failure queue once and none is backed out; a batch of
    100, or of the 20 the queue manager would let it get, or of 10 (a get and a put
    each) with the reports, fails at a put and is backed out for ever. Each sender hears
    of its reply's arrival on the reply queue and on the failure queue, and of its
    delivery once."""
    spec = AggregateSpec(name="small", legs=LEGS)
    asks = {"report": reports.MQRO_COA | reports.MQRO_COD, "reply_to_q": "APP.REPORTS"}
    async with pipeline(
        temporal_env.client, tmp_path, [spec], maxumsgs=20, batch_size=100, run_worker=False,
        extra_queues=["APP.REPORTS"],
    ) as p:  # fmt: skip
        fields = asks if confirmed else {}
        sent = [
            p.put("GATHER.IN", MQMessage(correl_id=b"C%d" % n, body=b"%d" % n, **fields)).msg_id
            for n in range(60)
        ]
        await p.landed("GATHER.FAILURE", lambda d: d == 60)
        moved = p.messages("GATHER.FAILURE")
        confirmations = p.messages("APP.REPORTS")
        assert p.empty("GATHER.IN") and p.empty("GATHER.BACKOUT")
        assert p.empty("SYSTEM.DEAD.LETTER.QUEUE")
        assert p.bridge.stats.rollbacks == 0
    assert sorted(m.msg_id for m in moved) == sorted(sent)
    assert all("leg" in str(m.properties[PROP_REASON]) for m in moved)
    by_sent = sorted((m.correl_id, m.feedback) for m in confirmations)
    expected = [(i, fb) for i in sent for fb in (reports.MQFB_COA, reports.MQFB_COA,
                                                 reports.MQFB_COD)]  # fmt: skip
    assert by_sent == (sorted(expected) if confirmed else [])


async def test_a_bridge_reads_maxumsgs_again_when_it_was_lowered(temporal_env, tmp_path):
    """MAXUMSGS lowered from 10,000 to 20 while the bridge runs: its batch of 60 moves
    fails once, and the bridge connects again, reads 20 and moves 10 per unit of work;
    nothing is backed out to BOTHRESH."""
    spec = AggregateSpec(name="lowered", legs=LEGS)
    async with pipeline(temporal_env.client, tmp_path, [spec], run_worker=False) as p:
        p.put("GATHER.IN", MQMessage(correl_id=b"FIRST", body=b"first"))
        await p.landed("GATHER.FAILURE", lambda d: d == 1)
        p.qm.set_max_uncommitted(20)
        for n in range(60):
            p.put("GATHER.IN", MQMessage(correl_id=b"C%d" % n, body=b"%d" % n))
        await p.landed("GATHER.FAILURE", lambda d: d == 61)
        moved = p.messages("GATHER.FAILURE")
        assert p.empty("GATHER.IN") and p.empty("GATHER.BACKOUT")
        assert p.bridge.stats.rollbacks <= 1
    assert all("leg" in str(m.properties[PROP_REASON]) for m in moved)


async def test_a_flood_is_routed_within_maxumsgs(temporal_env, tmp_path):
    """MAXUMSGS 30: 300 unknown replies for one CorrelId. The gather's routing forwards
    each with its ledger marker (and a held one with its get) in units of work of at most
    10 replies, so every reply ends on the unknown queue exactly once."""
    # Its own aggregate name: the gather of the flood test above must not be found.
    spec = AggregateSpec(name="flood-umsgs", legs=LEGS, unknown_timeout_seconds=2,
                         max_held_replies=50)  # fmt: skip
    correl = b"FLOOD".ljust(24, b"\0")
    async with pipeline(temporal_env.client, tmp_path, [spec], maxumsgs=30) as p:
        sent = {p.reply(spec, correl, "TAX", b'{"n":%d}' % n).msg_id for n in range(300)}
        await p.landed("GATHER.UNKNOWN", lambda d: d == 300, 60)
        result = await p.result(spec, correl)
        routed = [m.msg_id for m in p.messages("GATHER.UNKNOWN")]
        assert p.empty("GATHER.IN") and p.empty("GATHER.FAILURE") and p.empty("GATHER.BACKOUT")
    assert result.state == "UNKNOWN"
    assert sorted(routed) == sorted(sent)


async def test_a_hand_made_registration_of_an_endless_wait_leaves_the_gather_working(
    temporal_env, tmp_path
):
    # Any Temporal client can signal a gather. A timeout past the calendar's end used to
    # fail the gather's workflow task on every retry; it now waits until the calendar's
    # end, and the gather still completes when its replies come.
    spec = AggregateSpec(name="endless", legs=LEGS, timeout_seconds=300, timer="restart")
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        handle = p.handle(spec, sent.correl_id)
        await handle.signal(SIGNAL_EXPECT, {"timeout_seconds": 1e300})
        after = await until(lambda: status(handle), lambda s: s.registrations == 2, timeout=20)
        for leg in LEGS:
            p.reply(spec, sent.correl_id, leg.name, b"{}")
        result = await p.result(spec, sent.correl_id, timeout=20)
    assert after.deadline is not None and after.deadline.year == 9999
    assert result.state == "COMPLETE"


async def test_a_hand_made_registration_of_more_legs_than_a_gather_holds_is_left(
    temporal_env, tmp_path
):
    # Taken, a registration of a million legs would grow the gather's state and result
    # past what a payload carries (and the worker's memory); scatter never sends one.
    spec = AggregateSpec(name="toomany", leg_identification="count", merge="blob", label="R")
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        correl = parse_id("TOOMANY-1")
        handle = await p.client.start_workflow(
            GatherWorkflow.run, start_input(spec, correl),
            id=p.handle(spec, correl).id, task_queue=p.task_queue,
            start_signal=SIGNAL_EXPECT, start_signal_args=[{"count": 1_000_000}],
        )  # fmt: skip
        await handle.signal(SIGNAL_EXPECT, Registration(count=3))
        for body in (b"a", b"b", b"c"):
            p.put(spec.reply_queue, MQMessage(correl_id=correl, body=body))
        response = await p.wait_message("ORDER.RESPONSE")
        result = await p.result(spec, correl, timeout=20)
    assert response.body == b"abc"
    assert result.state == "COMPLETE" and result.legs_expected == ["R1", "R2", "R3"]


async def test_a_hand_made_registration_that_names_a_leg_twice_is_left(temporal_env, tmp_path):
    # Taken, the leg would be merged twice (or, equal but for case, one reply written
    # over the other under the json merge's lower-case key); scatter never sends one.
    spec = AggregateSpec(name="twice", merge="blob")
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        correl = parse_id("TWICE-1")
        twice = {"legs": [{"name": "CREDIT"}, {"name": "CREDIT"}]}
        handle = await p.client.start_workflow(
            GatherWorkflow.run, start_input(spec, correl),
            id=p.handle(spec, correl).id, task_queue=p.task_queue,
            start_signal=SIGNAL_EXPECT, start_signal_args=[twice],
        )  # fmt: skip
        await handle.signal(SIGNAL_EXPECT, Registration(legs=[LegSpec(name="CREDIT")]))
        p.reply(spec, correl, "CREDIT", b"a")
        response = await p.wait_message("ORDER.RESPONSE")
        result = await p.result(spec, correl, timeout=20)
    assert response.body == b"a"
    assert result.state == "COMPLETE" and result.legs_expected == ["CREDIT"]


async def test_replies_that_share_a_msg_id_are_each_taken_not_dropped_as_redeliveries(
    temporal_env, tmp_path
):
    # Back ends that answer with the request's own MQMD (its MsgId passed on, as with
    # MQRO_PASS_MSG_ID): scatter sends every leg's request under one MsgId (the gather's
    # key, with legs told by property), so three different replies share it.
    spec = AggregateSpec(name="pass", legs=LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        requests = {leg.name: await p.wait_message(leg.queue()) for leg in LEGS}
        assert len({r.msg_id for r in requests.values()}) == 1
        for leg, request in requests.items():
            body = json.dumps({"leg": leg}).encode()
            reply = request.model_copy(update={"correl_id": request.msg_id, "body": body,
                                               "reply_to_q": "", "msg_type": 2})  # fmt: skip
            p.qm.put(spec.reply_queue, reply, PutOptions(syncpoint=False))
        response = await p.wait_message("ORDER.RESPONSE")
        result = await p.result(spec, sent.correl_id)
        assert p.empty("GATHER.IN") and p.empty("GATHER.FAILURE") and p.empty("GATHER.LATE")
    assert result.state == "COMPLETE" and result.legs_missing == [] and result.redeliveries == 0
    assert json.loads(response.body)["legs"] == {
        "credit": {"leg": "CREDIT"},
        "stock": {"leg": "STOCK"},
        "tax": {"leg": "TAX"},
    }


async def test_a_reply_at_bothresh_that_reuses_a_taken_msg_id_is_backed_out_not_dropped(
    temporal_env, tmp_path
):
    spec = AggregateSpec(name="bo2", legs=LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec], run_bridge=False) as p:
        _, handle, credit = await _credit_taken(p, spec)
        # Another message with CREDIT's MsgId, backed out to BOTHRESH (3): the gather
        # never took it, so it is poison for the backout queue, not a redelivery.
        twin = credit.model_copy(update={"properties": {"leg": "STOCK"}, "body": b'{"s":1}'})
        _backed_out(p, "GATHER.IN", [twin], 3)
        async with _bridge_running(p):
            backed_out = await p.wait_message("GATHER.BACKOUT")
            now = await status(handle)
        assert p.empty("GATHER.IN") and p.empty("GATHER.LATE")
    assert backed_out.msg_id == credit.msg_id and backed_out.body == b'{"s":1}'
    assert backed_out.properties["leg"] == "STOCK"
    assert now.legs_received == ["CREDIT"] and p.bridge.stats.redeliveries_dropped == 0


@pytest.mark.parametrize(
    "backouts",
    [
        pytest.param(1, id="backed-out-once"),
        # As a queue manager that restarted without the count hardened (z/OS, HARDENBO
        # NO), or an operator who moved the message back, leaves it.
        pytest.param(0, id="backout-count-0"),
    ],
)
async def test_after_the_close_a_reply_that_reuses_a_msg_id_is_late_and_a_redelivery_dropped(
    temporal_env, tmp_path, backouts
):
    spec = AggregateSpec(name=f"late{backouts}", legs=LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec], run_bridge=False) as p:
        async with _bridge_running(p):
            sent = await p.scatter(spec)
            taken = [
                p.reply(spec, sent.correl_id, leg, b"{}") for leg in ("CREDIT", "STOCK", "TAX")
            ]
            await p.wait_message("ORDER.RESPONSE")
        # After the close: CREDIT again, as a bridge killed before MQCMIT leaves it, and
        # another message with its MsgId; one unit of work backs both out.
        twin = taken[0].model_copy(update={"body": b'{"again":"no"}'})
        _backed_out(p, "GATHER.IN", [taken[0], twin], backouts)
        assert p.qm.get("GATHER.IN", browse="first").backout_count == backouts
        async with _bridge_running(p):
            late = await p.wait_message("GATHER.LATE")
        # FIFO: the redelivery's batch committed before the late reply could be seen.
        assert p.empty("GATHER.IN") and p.empty("GATHER.LATE") and p.empty("GATHER.BACKOUT")
        assert p.empty("ORDER.RESPONSE")  # the one response was taken above
    assert late.msg_id == taken[0].msg_id and late.body == b'{"again":"no"}'
    assert p.bridge.stats.redeliveries_dropped == 1 and p.bridge.stats.late == 1


class _Reads(Interceptor):
    """Counts the gathers whose history a client reads."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        ids = self.ids

        class _Counting(OutboundInterceptor):
            def fetch_workflow_history_events(self, input):
                ids.append(input.id)
                return super().fetch_workflow_history_events(input)

        return _Counting(next)


async def test_a_flood_of_late_replies_for_one_gather_reads_its_record_once(temporal_env, tmp_path):
    spec = AggregateSpec(name="lateflood", legs=LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec], run_bridge=False, batch_size=2) as p:
        async with _bridge_running(p):
            sent = await p.scatter(spec)
            for leg in ("CREDIT", "STOCK", "TAX"):
                p.reply(spec, sent.correl_id, leg, b"{}")
            await p.wait_message("ORDER.RESPONSE")
        looks = _Reads()
        p.bridge.client = Client(**{**temporal_env.client.config(), "interceptors": [looks]})
        flood = [p.reply(spec, sent.correl_id, "TAX", b'{"n":%d}' % n) for n in range(6)]
        async with _bridge_running(p):
            late = [await p.wait_message("GATHER.LATE") for _ in flood]
        assert p.empty("GATHER.IN") and p.empty("GATHER.LATE")
    # Three batches of two, each told apart from a redelivery by the one record read.
    assert [m.body for m in late] == [m.body for m in flood]
    assert p.bridge.stats.batches >= 3 and p.bridge.stats.late == 6
    assert looks.ids == [p.handle(spec, sent.correl_id).id]


async def test_a_bridge_keeps_the_records_of_the_latest_closed_gathers_only(
    temporal_env, tmp_path, monkeypatch
):
    monkeypatch.setattr(inbound, "CLOSED_RECORDS", 1)
    spec = AggregateSpec(name="lateold", legs=LEGS, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec], run_bridge=False, batch_size=1) as p:
        async with _bridge_running(p):
            first, second = await p.scatter(spec), await p.scatter(spec)
            for sent in (first, second):
                for leg in ("CREDIT", "STOCK", "TAX"):
                    p.reply(spec, sent.correl_id, leg, b"{}")
            await p.wait_message("ORDER.RESPONSE")
            await p.wait_message("ORDER.RESPONSE")
        looks = _Reads()
        p.bridge.client = Client(**{**temporal_env.client.config(), "interceptors": [looks]})
        for sent in (first, second, first):
            p.reply(spec, sent.correl_id, "TAX", b'{"late":1}')
        async with _bridge_running(p):
            for _ in range(3):
                await p.wait_message("GATHER.LATE")
    # One batch each: the second gather's record took the first's place, so it was read again.
    ids = [p.handle(spec, sent.correl_id).id for sent in (first, second, first)]
    assert looks.ids == ids


@pytest.mark.parametrize("over", ["embedded", "ibmmq"])
async def test_a_segmented_reply_goes_to_failure_whole_not_merged_truncated(
    temporal_env, tmp_path, over
):
    """A reply that reached the queue in segments (its sender's, or a queue manager's on
    the way with MQMF_SEGMENTATION_ALLOWED) is not taken segment by segment: the first
    would be merged as the whole reply, the second counted a duplicate."""
    spec = AggregateSpec(name="segments", legs=LEGS[:2], merge="blob", timeout_seconds=2)
    transport = (lambda path: standin_connector(path)) if over == "ibmmq" else None
    async with pipeline(temporal_env.client, tmp_path, [spec], transport=transport) as p:
        g = await p.scatter(spec)
        p.reply(spec, g.correl_id, "CREDIT", b"credit")
        group = parse_id("SEGMENTED-REPLY")
        halves = ((MsgFlags.SEGMENT, 0, b"stock, first half"), (MsgFlags.LAST_SEGMENT, 17, b"+"))
        segments = []
        for flags, offset, body in halves:
            segment = MQMessage(correl_id=g.correl_id, group_id=group, msg_flags=flags,
                                offset=offset, properties={"leg": "STOCK"}, body=body)  # fmt: skip
            segments.append(p.put(spec.reply_queue, segment))
        failed = [await p.wait_message("GATHER.FAILURE") for _ in segments]
        partial = await p.wait_message("GATHER.TIMEOUT")
        result = await p.result(spec, g.correl_id)
        for queue in ("ORDER.RESPONSE", "GATHER.DUPLICATE", "GATHER.FAILURE", spec.reply_queue):
            assert p.empty(queue), queue
    assert result.state == "TIMEOUT" and result.legs_missing == ["STOCK"]
    assert partial.body == b"credit"
    for sent, moved in zip(segments, failed, strict=True):
        assert (moved.msg_id, moved.body, moved.group_id) == (sent.msg_id, sent.body, group)
        assert moved.msg_flags & SEGMENT_FLAGS == sent.msg_flags
        assert (moved.offset, moved.original_length) == (sent.offset, len(sent.body))
        assert "a segment of a segmented message" in str(moved.properties[PROP_REASON])


#: A counted aggregate of blob replies, its legs R1, R2 ...
COUNTED = AggregateSpec(name="counted", leg_identification="count", merge="blob", label="R",
                        timeout_seconds=300)  # fmt: skip


async def counted_gather(p, text: str, count: int):
    """A gather of ``COUNTED`` registered for ``count`` legs, as a hand-made start would."""
    correl = parse_id(text)
    return correl, await p.counted(COUNTED, correl, count)


async def counted_flood(p, spec: AggregateSpec, text: str, bodies: list[bytes]):
    """A counted gather for ``bodies``, each put as a reply at once: (its response, its
    result, a handle on its latest run)."""
    correl, _ = await counted_gather(p, text, len(bodies))
    for body in bodies:
        p.put(spec.reply_queue, MQMessage(correl_id=correl, body=body))
    response = await p.wait_message(spec.response_queue, timeout=90)
    result = await p.result(spec, correl, timeout=30)
    return response, result, p.handle(spec, correl)


async def test_a_gather_of_many_legs_keeps_its_missing_legs_within_the_servers_limit(
    temporal_env, tmp_path
):
    # 400 legs R1..R400 missing are 2.6 KB of JSON; upserted whole, the server failed the
    # workflow task (BadSearchAttributes) and ended the gather with its replies taken.
    spec = COUNTED
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        correl, handle = await counted_gather(p, "WIDE-1", 400)
        shown = await until(
            handle.describe, lambda d: d.typed_search_attributes.get(LEGS_MISSING), timeout=20
        )
        for _ in range(400):
            p.put(spec.reply_queue, MQMessage(correl_id=correl, body=b"a"))
        response = await p.wait_message("ORDER.RESPONSE", timeout=60)
        result = await p.result(spec, correl, timeout=30)
    missing = shown.typed_search_attributes.get(LEGS_MISSING)
    assert missing[0] == "R1" and missing[-1] == f"+{401 - len(missing)} more"
    assert result.state == "COMPLETE" and response.body == b"a" * 400


async def test_a_gather_too_large_to_carry_into_a_new_run_never_fails_its_task(
    temporal_env, tmp_path
):
    # 1,000 replies of 5 KB make a history past the size at which the server suggests
    # continuing as new while the gather still waits, with a state past what one payload
    # takes: continued as new, it failed its workflow task each time (TMPRL1103), and
    # never answered. It moves its replies to the hold queue first now.
    # The bridge holds a gather's replies past its first MiB inline; here it takes 100 MB.
    spec = COUNTED.model_copy(update={"gather_inline_bytes": 100 * 1024 * 1024})
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        response, result, handle = await counted_flood(p, spec, "HEAVY-1", [b"v" * 5000] * 1000)
        causes = [e.workflow_task_failed_event_attributes.cause
                  async for e in handle.fetch_history_events()
                  if e.HasField("workflow_task_failed_event_attributes")]  # fmt: skip
    assert result.state == "COMPLETE" and response.body == b"v" * 5_000_000
    # Put at once, the flood may have a task closed by the server (more than 2 MB of
    # signals waited for it), which the next takes over; none failed for its payloads.
    assert WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_PAYLOADS_TOO_LARGE not in causes


async def test_a_flood_of_replies_for_one_correl_id_leaves_the_gather_within_its_history(
    temporal_env, tmp_path
):
    # 1,000 replies of 55 KB, each under the 64 KB that travel inline, put at once: 55 MB
    # of signals. The server failed each workflow task while more than 2 MB of signals
    # waited for it (each retry replaying the whole history), and ended the gather at
    # 50 MB of history, its replies taken off the queue.
    spec = COUNTED
    bodies = [b"%05d" % n * 11_000 for n in range(1000)]
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        response, result, handle = await counted_flood(p, spec, "FLOOD-1", bodies)
        described = await handle.describe()
        assert p.empty(spec.hold_queue) and p.empty(spec.reply_queue)
    assert result.state == "COMPLETE"
    assert response.body == b"".join(bodies)
    # Past the gather's first MB the bridge held them: its history keeps references.
    assert p.bridge.stats.held >= 950
    assert described.raw_description.workflow_execution_info.history_size_bytes < 4_000_000


@pytest.mark.parametrize("backouts", [1, 3], ids=["redelivered", "at-bothresh"])
async def test_a_reply_held_for_its_gathers_bytes_and_backed_out_comes_with_its_body(
    temporal_env, tmp_path, backouts
):
    # The bridge held CREDIT for its gather's bytes and Temporal took the reference;
    # then the bridge's unit of work backed out, and the hold queue's copy with it. Got
    # again, CREDIT is judged by its size alone and comes inline: the gather took it for
    # a redelivery and waited for a held body that was nowhere (at BOTHRESH the bridge
    # dropped it as taken). Now the gather keeps the body it came with.
    spec = AggregateSpec(name="budget", legs=LEGS, timeout_seconds=300, gather_inline_bytes=0)
    async with pipeline(temporal_env.client, tmp_path, [spec], run_bridge=False) as p:
        sent = await p.scatter(spec)
        p.reply(spec, sent.correl_id, "CREDIT", b'{"c":1}')
        credit = p.qm.get(spec.reply_queue, syncpoint=False)
        held = Reply(
            message=hold.without_body(credit),
            leg="CREDIT",
            source_queue=spec.reply_queue,
            received_at=datetime.now(UTC),
            size=len(credit.body),
            held=held_reference(spec.hold_queue, credit),
            fingerprint=fingerprint(credit),
        )
        handle = p.handle(spec, sent.correl_id)
        await handle.signal(SIGNAL_REPLIES, ReplyBatch(replies=[held]))
        await until(lambda: status(handle), lambda s: s.legs_received == ["CREDIT"])
        _backed_out(p, spec.reply_queue, [credit], backouts)
        async with _bridge_running(p):
            p.reply(spec, sent.correl_id, "STOCK", b'{"s":1}')
            p.reply(spec, sent.correl_id, "TAX", b'{"t":1}')
            response = await p.wait_message(spec.response_queue)
            result = await p.result(spec, sent.correl_id)
        assert p.empty(spec.hold_queue) and p.empty(spec.reply_queue)
        assert p.empty("GATHER.BACKOUT") and p.empty("GATHER.LATE")
    assert result.state == "COMPLETE" and result.redeliveries == 1
    assert json.loads(response.body)["legs"] == {"credit": {"c": 1}, "stock": {"s": 1},
                                                  "tax": {"t": 1}}  # fmt: skip


async def test_a_response_waiting_for_a_held_body_that_backed_out_is_put_once_it_comes_again(
    temporal_env, tmp_path
):
    # As above, but the gather closed, its other legs in, before CREDIT came again: its
    # PUT was retried with the input made at its close, the reference that nothing would
    # ever resolve, and the gather never answered.
    spec = AggregateSpec(name="closed", legs=LEGS, timeout_seconds=300, gather_inline_bytes=0)
    async with pipeline(temporal_env.client, tmp_path, [spec], run_bridge=False) as p:
        sent = await p.scatter(spec)
        replies = []
        for leg, body in (("CREDIT", b'{"c":1}'), ("STOCK", b'{"s":1}'), ("TAX", b'{"t":1}')):
            p.reply(spec, sent.correl_id, leg, body)
            message = p.qm.get(spec.reply_queue, syncpoint=False)
            replies.append(Reply(message=message, leg=leg, source_queue=spec.reply_queue,
                                 received_at=datetime.now(UTC), size=len(message.body),
                                 fingerprint=fingerprint(message)))  # fmt: skip
        credit = replies[0].message
        replies[0] = as_held(replies[0], held_reference(spec.hold_queue, credit))
        handle = p.handle(spec, sent.correl_id)
        await handle.signal(SIGNAL_REPLIES, ReplyBatch(replies=replies))
        failing = await until(lambda: status(handle), lambda s: "is not on" in s.last_error)
        _backed_out(p, spec.reply_queue, [credit], 1)
        async with _bridge_running(p):
            response = await p.wait_message(spec.response_queue)
            result = await p.result(spec, sent.correl_id)
        assert p.empty(spec.hold_queue) and p.empty(spec.reply_queue) and p.empty("GATHER.LATE")
    assert failing.state == "COMPLETE" and result.state == "COMPLETE"
    assert json.loads(response.body)["legs"] == {"credit": {"c": 1}, "stock": {"s": 1},
                                                  "tax": {"t": 1}}  # fmt: skip
