"""Gather semantics end to end: formats, arrival order, unknown, timeout, late,
duplicates, redeliveries and bad input, on the real dev server and embedded MQ."""

from __future__ import annotations

import json

import pytest

from bridge.mq import dlh, xqh
from bridge.mq.models import MQMT_REPORT, MQMessage, PutOptions, QueueAttributes, parse_id
from mqgather.config import AggregateSpec, LegSpec
from mqgather.names import PROP_REASON, PROP_SOURCE_QUEUE
from tests.harness import delete_history, pipeline, status, until
from workflows.gather import GatherWorkflow

LEGS = (LegSpec(name="CREDIT", sequence=10), LegSpec(name="STOCK", sequence=20),
        LegSpec(name="TAX", sequence=30))  # fmt: skip


async def test_xml_response_is_byte_for_byte_ia72(temporal_env, tmp_path):
    spec = AggregateSpec(
        name="xmlagg",
        merge="xml",
        label="MyReply",
        legs=(LegSpec(name="A", sequence=30), LegSpec(name="B", sequence=50)),
    )
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        p.reply(spec, sent.correl_id, "B", b"<reply>data2</reply>")
        p.reply(spec, sent.correl_id, "A", b'<?xml version="1.0"?><reply>data1</reply>')
        response = await p.wait_message("ORDER.RESPONSE")
    assert response.body == (
        b"<MyReply><MyReply30><reply>data1</reply></MyReply30>"
        b"<MyReply50><reply>data2</reply></MyReply50></MyReply>"
    )
    assert response.format == "MQSTR"


async def test_blob_in_sequence_order_with_hex_separator(temporal_env, tmp_path):
    spec = AggregateSpec(name="blobagg", merge="blob", hex_separator="1f", legs=LEGS)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        for leg in ("STOCK", "TAX", "CREDIT"):
            p.reply(spec, sent.correl_id, leg, leg.lower().encode())
        response = await p.wait_message("ORDER.RESPONSE")
    assert response.body == b"credit\x1fstock\x1ftax"


async def test_replies_before_registration_in_any_order_complete(temporal_env, tmp_path):
    spec = AggregateSpec(name="early", legs=LEGS, unknown_timeout_seconds=30)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        correl = parse_id("hex:" + "ab" * 20 + "00000000")
        for leg in ("TAX", "CREDIT", "STOCK"):
            p.reply(spec, correl, leg, json.dumps({"leg": leg}).encode())
        # The replies are held as unknown until the registration comes.
        handle = p.handle(spec, correl)
        await until(lambda: status(handle), lambda s: s.held == 3 and not s.registered)
        await p.scatter(spec, correl_id=correl, request_msg_id=parse_id("REQ-EARLY"))
        response = await p.wait_message("ORDER.RESPONSE")
        result = await p.result(spec, correl)
    assert json.loads(response.body)["state"] == "COMPLETE"
    assert response.correl_id == parse_id("REQ-EARLY")
    assert result.state == "COMPLETE" and result.unknown == 0


async def test_reply_never_registered_goes_to_unknown_queue(temporal_env, tmp_path):
    spec = AggregateSpec(name="unreg", legs=LEGS, unknown_timeout_seconds=1)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = p.reply(spec, parse_id("NOBODY-ASKED"), "CREDIT", b'{"x":1}')
        unknown = await p.wait_message("GATHER.UNKNOWN")
        result = await p.result(spec, parse_id("NOBODY-ASKED"))
    assert unknown.msg_id == sent.msg_id and unknown.body == b'{"x":1}'
    assert unknown.correl_id == parse_id("NOBODY-ASKED")
    assert "unknown timeout" in str(unknown.properties[PROP_REASON])
    assert result.state == "UNKNOWN" and result.unknown == 1


async def test_static_legs_start_with_the_first_reply(temporal_env, tmp_path):
    spec = AggregateSpec(name="static", mode="static", legs=LEGS, timeout_seconds=30)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        for leg in ("CREDIT", "STOCK", "TAX"):
            p.reply(spec, parse_id("R1"), leg, b"{}")
        response = await p.wait_message("ORDER.RESPONSE")
    # No registration: the response is correlated to the replies' CorrelId (seeds/000).
    assert response.correl_id == parse_id("R1")
    assert json.loads(response.body)["state"] == "COMPLETE"


async def test_missing_leg_times_out_then_late_reply_goes_to_late_queue(temporal_env, tmp_path):
    spec = AggregateSpec(name="slow", legs=LEGS)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent, _ = await p.partial(
            spec, parse_id("SLOW-1"), {"CREDIT": b'{"c":1}', "TAX": b'{"t":1}'}, 0.5
        )
        partial = await p.wait_message("GATHER.TIMEOUT")
        result = await p.result(spec, sent.correl_id)
        late_sent = p.reply(spec, sent.correl_id, "STOCK", b'{"late":true}')
        late = await p.wait_message("GATHER.LATE")
        assert p.empty("ORDER.RESPONSE")
    doc = json.loads(partial.body)
    assert doc["state"] == "TIMEOUT" and doc["missing"] == ["stock"]
    assert set(doc["legs"]) == {"credit", "tax"}
    assert partial.properties["mqgather_missing"] == "STOCK"
    assert result.state == "TIMEOUT" and result.legs_missing == ["STOCK"]
    assert late.body == b'{"late":true}' and late.msg_id == late_sent.msg_id
    assert late.correl_id == sent.correl_id and late.properties["leg"] == "STOCK"
    assert late.properties[PROP_SOURCE_QUEUE] == "GATHER.IN"


async def test_duplicates_first_wins_counted_and_copied(temporal_env, tmp_path):
    spec = AggregateSpec(name="dupfirst", legs=LEGS, duplicate_queue="GATHER.DUPLICATE")
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        p.reply(spec, sent.correl_id, "CREDIT", b'{"n":1}')
        second = p.reply(spec, sent.correl_id, "CREDIT", b'{"n":2}')
        await until(lambda: status(p.handle(spec, sent.correl_id)), lambda s: s.duplicates == 1)
        p.reply(spec, sent.correl_id, "STOCK", b"{}")
        p.reply(spec, sent.correl_id, "TAX", b"{}")
        response = await p.wait_message("ORDER.RESPONSE")
        copy = await p.wait_message("GATHER.DUPLICATE")
        result = await p.result(spec, sent.correl_id)
    assert json.loads(response.body)["legs"]["credit"] == {"n": 1}
    assert copy.msg_id == second.msg_id and copy.body == b'{"n":2}'
    assert result.duplicates == 1


async def test_a_duplicate_its_queue_refuses_for_good_is_dead_lettered_and_the_gather_answers(
    temporal_env, tmp_path
):
    # GATHER.DUPLICATE shorter than the duplicate: its forward, which comes before the
    # gather decides, failed for ever, and the gather never answered.
    spec = AggregateSpec(name="duptoolong", legs=LEGS[:2], delivery_attempts=1,
                         duplicate_queue="GATHER.DUPLICATE")  # fmt: skip
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        attrs = p.qm.inquire("GATHER.DUPLICATE").model_copy(update={"maxmsgl": 100})
        p.qm.define(attrs, replace=True)
        sent = await p.scatter(spec)
        p.reply(spec, sent.correl_id, "CREDIT", b'{"n":1}')
        second = p.reply(spec, sent.correl_id, "CREDIT", b'{"n":2}' + b" " * 200)
        dead = await p.wait_message("SYSTEM.DEAD.LETTER.QUEUE")
        p.reply(spec, sent.correl_id, "STOCK", b"{}")
        response = await p.wait_message("ORDER.RESPONSE")
        result = await p.result(spec, sent.correl_id)
        assert p.empty("GATHER.DUPLICATE")
    assert json.loads(response.body)["legs"]["credit"] == {"n": 1}
    assert result.state == "COMPLETE" and result.duplicates == 1
    header, body = dlh.unpack(dead.body)
    assert header.reason == 2030 and header.dest_q_name == "GATHER.DUPLICATE"
    assert (dead.msg_id, body) == (second.msg_id, second.body)


async def test_duplicates_last_and_all(temporal_env, tmp_path):
    last = AggregateSpec(name="duplast", legs=LEGS[:1], duplicates="last")
    every = AggregateSpec(name="dupall", legs=LEGS[:2], duplicates="all")
    async with pipeline(temporal_env.client, tmp_path, [last, every]) as p:
        one = await p.scatter(last, legs=(LegSpec(name="CREDIT", sequence=10),
                                          LegSpec(name="STOCK", sequence=20)))  # fmt: skip
        two = await p.scatter(every)
        for agg, sent in ((last, one), (every, two)):
            for n in (1, 2):
                p.reply(agg, sent.correl_id, "CREDIT", json.dumps(n).encode(), aggregate=agg.name)
            await until(lambda a=agg, s=sent: status(p.handle(a, s.correl_id)),
                         lambda st: st.duplicates == 1)  # fmt: skip
            p.reply(agg, sent.correl_id, "STOCK", b"0", aggregate=agg.name)
        responses = [await p.wait_message("ORDER.RESPONSE") for _ in range(2)]
    by_correl = {r.correl_id: json.loads(r.body) for r in responses}
    assert by_correl[one.correl_id]["legs"]["credit"] == 2
    assert by_correl[two.correl_id]["legs"] == {"credit": [1, 2], "stock": [0]}


async def test_redelivered_msg_id_is_a_no_op(temporal_env, tmp_path):
    spec = AggregateSpec(name="redeliver", legs=LEGS)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        first = p.reply(spec, sent.correl_id, "CREDIT", b'{"n":1}')
        # The same message again (same MsgId), as after a bridge crash before MQCMIT.
        p.qm.put("GATHER.IN", first, PutOptions(syncpoint=False, set_all_context=True))
        await until(lambda: status(p.handle(spec, sent.correl_id)), lambda s: s.redeliveries == 1)
        p.reply(spec, sent.correl_id, "STOCK", b"{}")
        p.reply(spec, sent.correl_id, "TAX", b"{}")
        await p.wait_message("ORDER.RESPONSE")
        result = await p.result(spec, sent.correl_id)
        assert p.empty("GATHER.LATE") and p.empty("GATHER.DUPLICATE")
    assert result.redeliveries == 1 and result.duplicates == 0


async def test_bad_input_goes_to_failure_queue_and_the_rest_flows(temporal_env, tmp_path):
    spec = AggregateSpec(name="strict", legs=LEGS, max_reply_bytes=1000)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        no_correl = p.put("GATHER.IN", MQMessage(properties={"leg": "CREDIT"}, body=b"a"))
        wrong_agg = p.put(
            "GATHER.IN",
            MQMessage(correl_id=b"X", properties={"leg": "A", "aggregate": "nope"}, body=b"b"),
        )
        oversize = p.reply(spec, parse_id("BIG"), "CREDIT", b"x" * 2000)
        bad_json = await p.scatter(spec)
        p.reply(spec, bad_json.correl_id, "CREDIT", b"{not json")
        p.reply(spec, bad_json.correl_id, "STOCK", b"{}")
        p.reply(spec, bad_json.correl_id, "TAX", b"{}")
        good = await p.scatter(spec)
        for leg in ("CREDIT", "STOCK", "TAX"):
            p.reply(spec, good.correl_id, leg, b"{}")
        response = await p.wait_message("ORDER.RESPONSE")
        failed = await p.result(spec, bad_json.correl_id)
        failures = [await p.wait_message("GATHER.FAILURE") for _ in range(6)]
    assert response.correl_id == good.correl_id
    reasons = {m.msg_id: str(m.properties[PROP_REASON]) for m in failures}
    assert "no CorrelId" in reasons[no_correl.msg_id]
    assert "unknown aggregate 'nope'" in reasons[wrong_agg.msg_id]
    assert "max_reply_bytes" in reasons[oversize.msg_id]
    assert failed.state == "FAILED" and "leg CREDIT: body is not valid JSON" in failed.error
    merge_failures = [m for m in failures if m.correl_id == bad_json.correl_id]
    assert len(merge_failures) == 3
    assert {m.body for m in merge_failures} == {b"{not json", b"{}"}
    original = next(m for m in failures if m.msg_id == oversize.msg_id)
    assert original.body == b"x" * 2000 and original.correl_id == parse_id("BIG")


async def test_reply_to_queue_and_destination_list(temporal_env, tmp_path):
    to_requester = AggregateSpec(name="rtq", legs=LEGS[:1], destination="replyToQueue")
    to_list = AggregateSpec(
        name="dlist", legs=LEGS[:1], destination="destinationList",
        destination_list=("COPY.A", "COPY.B"),
    )  # fmt: skip
    extra = ["APP.REPLY", "COPY.A", "COPY.B"]
    async with pipeline(
        temporal_env.client, tmp_path, [to_requester, to_list], extra_queues=extra
    ) as p:
        # A request put here names this queue manager in its ReplyToQMgr.
        one = await p.scatter(to_requester, reply_to_q="APP.REPLY", reply_to_qmgr="MQGATHER")
        two = await p.scatter(to_list)
        p.reply(to_requester, one.correl_id, "CREDIT", b"{}", aggregate="rtq")
        p.reply(to_list, two.correl_id, "CREDIT", b"{}", aggregate="dlist")
        direct = await p.wait_message("APP.REPLY")
        copies = [await p.wait_message(q) for q in ("COPY.A", "COPY.B")]
        # A requester on another queue manager: its response waits on the route there,
        # never on the queue of the same name here.
        p.qm.define(QueueAttributes(name="QM9", usage="xmitq"))
        far = await p.scatter(to_requester, reply_to_q="APP.REPLY", reply_to_qmgr="QM9")
        p.reply(to_requester, far.correl_id, "CREDIT", b"{}", aggregate="rtq")
        waiting = xqh.unpack((await p.wait_message("QM9")).body)
        assert p.empty("ORDER.RESPONSE") and p.empty("APP.REPLY")
    assert direct.correl_id == one.correl_id and direct.reply_to_qmgr == "MQGATHER"
    assert (waiting.remote_q_name, waiting.remote_q_mgr_name) == ("APP.REPLY", "QM9")
    assert waiting.message.correl_id == far.correl_id
    assert [c.correl_id for c in copies] == [two.correl_id] * 2
    assert copies[0].msg_id == copies[1].msg_id  # one response, two destinations


async def test_correlid_layout_identifies_legs(temporal_env, tmp_path):
    from bridge.identify import leg_correl_id

    spec = AggregateSpec(name="bycorrel", legs=LEGS, leg_identification="correlid")
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        requests = [await p.wait_message(leg.queue()) for leg in LEGS]
        assert [r.msg_id for r in requests] == [leg_correl_id(sent.correl_id, i) for i in (1, 2, 3)]
        for i, request in enumerate(requests):
            # A back end copies the request's MsgId to the reply's CorrelId; no property.
            p.put(
                spec.reply_queue, MQMessage(correl_id=request.msg_id, body=f'{{"i":{i}}}'.encode())
            )
        response = await p.wait_message("ORDER.RESPONSE")
    assert json.loads(response.body)["legs"] == {
        "credit": {"i": 0},
        "stock": {"i": 1},
        "tax": {"i": 2},
    }


async def test_report_messages_are_not_replies(temporal_env, tmp_path):

    by_correl = AggregateSpec(name="bycorrel", legs=LEGS, leg_identification="correlid")
    counted = AggregateSpec(
        name="counted", legs=LEGS[:2], leg_identification="count", merge="blob",
        reply_queue="COUNT.IN",
    )  # fmt: skip
    async with pipeline(
        temporal_env.client, tmp_path, [by_correl, counted], extra_queues=["COUNT.IN"]
    ) as p:
        sent = await p.scatter(by_correl)
        requests = [await p.wait_message(leg.queue()) for leg in LEGS]
        # The queue manager confirms the first request's arrival (COA, with its data) and
        # reports the second undeliverable (an exception report, Feedback MQRC_Q_FULL);
        # each carries its request's MsgId as CorrelId, as a reply does.
        coa = p.put(
            by_correl.reply_queue,
            MQMessage(correl_id=requests[0].msg_id, msg_type=MQMT_REPORT, feedback=259,
                      body=b"{}"),
        )  # fmt: skip
        exception = p.put(
            by_correl.reply_queue,
            MQMessage(correl_id=requests[1].msg_id, msg_type=MQMT_REPORT, feedback=2053),
        )
        reports = [await p.wait_message("GATHER.REPORT") for _ in range(2)]
        assert (await status(p.handle(by_correl, sent.correl_id))).legs_received == []
        for i, request in enumerate(requests):
            p.put(by_correl.reply_queue, MQMessage(correl_id=request.msg_id, body=b'{"i":%d}' % i))
        response = await p.wait_message("ORDER.RESPONSE")
        # A count-only gather takes any message with its CorrelId: a report would count.
        second = await p.scatter(counted)
        cod = p.put(
            "COUNT.IN", MQMessage(correl_id=second.correl_id, msg_type=MQMT_REPORT, feedback=260)
        )
        reports.append(await p.wait_message("GATHER.REPORT"))
        p.put("COUNT.IN", MQMessage(correl_id=second.correl_id, body=b"one"))
        p.put("COUNT.IN", MQMessage(correl_id=second.correl_id, body=b"two"))
        blob = await p.wait_message("ORDER.RESPONSE")
        for queue in ("GATHER.REPORT", "GATHER.DUPLICATE", "GATHER.FAILURE", "GATHER.LATE"):
            assert p.empty(queue), queue
    assert json.loads(response.body)["legs"] == {"credit": {"i": 0}, "stock": {"i": 1},
                                                 "tax": {"i": 2}}  # fmt: skip
    assert blob.body == b"onetwo"
    by_id = {m.msg_id: m for m in reports}
    for original, feedback, source in (
        (coa, "MQFB_COA", "GATHER.IN"),
        (exception, "MQRC_Q_FULL", "GATHER.IN"),
        (cod, "MQFB_COD", "COUNT.IN"),
    ):
        moved = by_id[original.msg_id]
        assert moved.msg_type == MQMT_REPORT and moved.correl_id == original.correl_id
        assert moved.body == original.body and moved.feedback == original.feedback
        assert f"Feedback {feedback}" in str(moved.properties[PROP_REASON])
        assert moved.properties[PROP_SOURCE_QUEUE] == source


async def test_an_aggregate_may_take_reports_as_replies(temporal_env, tmp_path):
    # A back end that answers a failed request with a report and an application Feedback.
    spec = AggregateSpec(
        name="reportsok", legs=LEGS[:2], leg_identification="correlid", reports_are_replies=True
    )
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        await p.scatter(spec)
        first, second = [await p.wait_message(leg.queue()) for leg in LEGS[:2]]
        p.put(
            spec.reply_queue,
            MQMessage(correl_id=first.msg_id, msg_type=MQMT_REPORT, feedback=65536 + 4,
                      body=b'{"error":"no credit line"}'),
        )  # fmt: skip
        p.put(spec.reply_queue, MQMessage(correl_id=second.msg_id, body=b'{"ok":1}'))
        response = await p.wait_message("ORDER.RESPONSE")
        assert p.empty("GATHER.REPORT")
    assert json.loads(response.body)["legs"] == {
        "credit": {"error": "no credit line"},
        "stock": {"ok": 1},
    }


async def test_a_report_bound_for_a_queue_not_yet_defined_is_backed_out_not_lost(
    temporal_env, tmp_path
):
    # A release that adds report_queue, started before `queues setup` defined it.
    spec = AggregateSpec(name="upgraded", legs=LEGS[:1], report_queue="NOT.DEFINED.YET")
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        coa = MQMessage(correl_id=sent.correl_id, msg_type=MQMT_REPORT, feedback=259)
        report = p.put(spec.reply_queue, coa)
        reply = p.reply(spec, sent.correl_id, "CREDIT", b'{"ok":1}')
        backed_out = await p.wait_message("GATHER.BACKOUT")
        response = await p.wait_message("ORDER.RESPONSE")
        result = await p.result(spec, sent.correl_id)
        for queue in ("GATHER.IN", "GATHER.BACKOUT", "GATHER.FAILURE", "GATHER.DUPLICATE"):
            assert p.empty(queue), queue
    assert backed_out.msg_id == report.msg_id and backed_out.feedback == 259
    assert "backed out 3 times" in str(backed_out.properties[PROP_REASON])
    assert json.loads(response.body)["legs"] == {"credit": {"ok": 1}}
    assert result.consumed_msg_ids and result.duplicates == 0
    assert reply.msg_id.hex() in result.consumed_msg_ids[0]


async def test_count_only_gathers_n_replies(temporal_env, tmp_path):
    spec = AggregateSpec(
        name="counted", legs=LEGS[:2], leg_identification="count", merge="blob", separator="|"
    )
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        p.put(spec.reply_queue, MQMessage(correl_id=sent.correl_id, body=b"first"))
        p.put(spec.reply_queue, MQMessage(correl_id=sent.correl_id, body=b"second"))
        response = await p.wait_message("ORDER.RESPONSE")
        result = await p.result(spec, sent.correl_id)
    assert response.body == b"first|second"
    assert result.legs_received == ["CREDIT", "STOCK"]  # filled in arrival order


async def test_member_count_registration_names_replies_by_label(temporal_env, tmp_path):
    from workflows.models import GatherInput, Registration

    spec = AggregateSpec(name="members", leg_identification="count", merge="blob", label="R")
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        correl = parse_id("MEMBERS-1")
        await p.client.start_workflow(
            GatherWorkflow.run, GatherInput(aggregate=spec, correl_id=correl),
            id=p.handle(spec, correl).id, task_queue=p.task_queue,
            start_signal="expect", start_signal_args=[Registration(count=3)],
        )  # fmt: skip
        for body in (b"a", b"b", b"c"):
            p.put(spec.reply_queue, MQMessage(correl_id=correl, body=body))
        response = await p.wait_message("ORDER.RESPONSE")
        result = await p.result(spec, correl)
    assert response.body == b"abc"
    assert result.legs_received == ["R1", "R2", "R3"]


async def test_late_window_counts_late_replies_in_the_gather(temporal_env, tmp_path):
    spec = AggregateSpec(name="linger", legs=LEGS, late_window_seconds=30)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent, _ = await p.partial(spec, parse_id("LINGER-1"), {"CREDIT": b"{}"}, 0.5)
        await p.wait_message("GATHER.TIMEOUT")
        handle = p.handle(spec, sent.correl_id)
        late = p.reply(spec, sent.correl_id, "TAX", b'{"late":1}')
        routed = await p.wait_message("GATHER.LATE")
        now = await status(handle)
        await handle.terminate("test over")  # no need to wait out the window
    assert routed.msg_id == late.msg_id
    assert now.state == "TIMEOUT" and now.late == 1


async def test_late_replies_that_share_a_msg_id_are_each_forwarded(temporal_env, tmp_path):
    # Each comes alone and is forwarded by its own activity: the record that makes a
    # forward happen once must name the message, not only its MsgId.
    spec = AggregateSpec(name="linger2", legs=LEGS, late_window_seconds=30)
    shared = b"PASSED-ON".ljust(24, b"\x00")
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent, _ = await p.partial(spec, parse_id("LINGER-2"), {"CREDIT": b"{}"}, 0.5)
        await p.wait_message("GATHER.TIMEOUT")
        handle = p.handle(spec, sent.correl_id)
        routed = []
        for leg in ("STOCK", "TAX"):
            message = MQMessage(msg_id=shared, correl_id=sent.correl_id,
                                properties={"leg": leg}, body=leg.encode())  # fmt: skip
            p.put(spec.reply_queue, message)
            routed.append(await p.wait_message("GATHER.LATE"))
        now = await status(handle)
        await handle.terminate("test over")  # no need to wait out the window
    assert [(m.msg_id, m.body) for m in routed] == [(shared, b"STOCK"), (shared, b"TAX")]
    assert now.late == 2


async def test_every_message_ends_in_exactly_one_place(temporal_env, tmp_path):
    """A mixed run: each reply put is accounted for on exactly one output queue (or inside
    exactly one response), and nothing stays on the reply queue."""
    spec = AggregateSpec(name="ledger", legs=LEGS, unknown_timeout_seconds=3)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        complete = await p.scatter(spec)
        put = []
        for leg in ("CREDIT", "STOCK", "TAX", "CREDIT"):  # one duplicate
            put.append(p.reply(spec, complete.correl_id, leg, json.dumps(leg).encode()))
        partial, held = await p.partial(spec, parse_id("LEDGER-P"), {"STOCK": b'"S"'}, 0.5)
        put += held
        put.append(p.reply(spec, parse_id("STRAY"), "TAX", b'"U"'))
        put.append(p.put("GATHER.IN", MQMessage(properties={"leg": "TAX"}, body=b"poison")))
        responses = [await p.wait_message("ORDER.RESPONSE")]
        timeouts = [await p.wait_message("GATHER.TIMEOUT")]
        await p.result(spec, partial.correl_id)
        put.append(p.reply(spec, partial.correl_id, "TAX", b'"late"'))
        routed = {
            q: [await p.wait_message(q)]
            for q in ("GATHER.DUPLICATE", "GATHER.UNKNOWN", "GATHER.FAILURE", "GATHER.LATE")
        }
        await p.result(spec, parse_id("STRAY"))
        for q in ("ORDER.RESPONSE", "GATHER.TIMEOUT", *routed, "GATHER.IN", "GATHER.BACKOUT"):
            assert p.empty(q), q
    places: dict[bytes, list[str]] = {m.msg_id: [] for m in put}
    for q, msgs in routed.items():
        for m in msgs:
            places[m.msg_id].append(q)
    assert json.loads(responses[0].body)["legs"] == {
        "credit": "CREDIT",
        "stock": "STOCK",
        "tax": "TAX",
    }
    assert json.loads(timeouts[0].body)["legs"] == {"stock": "S"}
    in_response = [put[0], put[1], put[2], put[4]]  # the first CREDIT wins
    for m in in_response:
        places[m.msg_id].append("merged")
    assert all(len(where) == 1 for where in places.values()), places


@pytest.mark.parametrize("mode", ["registration", "static"])
async def test_a_correl_id_used_again_once_the_earlier_gathers_history_is_gone_is_answered(
    temporal_env, tmp_path, mode
):
    """ORDER-42 is answered, and its gather's history deleted (as the namespace's retention
    does, which may be shorter than the ledger's ``ledger_hours``). A new request under the
    same CorrelId starts a gather of its own (registered, or started by its first reply):
    its response is PUT, not taken for the earlier one's on the ledger, and its replies
    are in it, not on the late queue."""
    from bridge.fanout import ScatterError

    spec = AggregateSpec(name=f"reused-{mode}", mode=mode, legs=LEGS, timeout_seconds=300)
    correl = b"ORDER-42".ljust(24, b" ")
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        if mode == "registration":
            await p.scatter(spec, correl_id=correl)
        for leg in ("CREDIT", "STOCK", "TAX"):
            p.reply(spec, correl, leg, b'{"first":1}')
        first = await p.wait_message("ORDER.RESPONSE")
        handle = p.handle(spec, correl)
        await handle.result()
        await delete_history(p.client, handle)

        async def gone() -> bool:  # and from the visibility store and its starters' view
            if mode == "static":
                return not [w async for w in p.client.list_workflows(f"WorkflowId = '{handle.id}'")]
            try:
                await p.scatter(spec, correl_id=correl)
            except ScatterError:
                return False
            return True

        await until(gone, bool, timeout=60)
        for leg in ("CREDIT", "STOCK", "TAX"):
            p.reply(spec, correl, leg, b'{"second":2}')
        second = await p.wait_message("ORDER.RESPONSE")
        result = await p.handle(spec, correl).result()
        assert p.empty("GATHER.LATE") and p.empty("ORDER.RESPONSE")
    assert json.loads(first.body)["legs"]["credit"] == {"first": 1}
    assert json.loads(second.body)["legs"]["credit"] == {"second": 2}
    assert (result.state, result.error) == ("COMPLETE", "")
    assert second.correl_id == first.correl_id and second.msg_id != first.msg_id
