"""Completion rules, optional legs and re-requests of a lost leg end to end, on the dev
server and the embedded queue manager (crashes included)."""

from __future__ import annotations

import asyncio
import itertools
import json
import multiprocessing as mp
import os
import signal
from pathlib import Path

import pytest
from temporalio.client import Client

from bridge.mq import dlh, reports
from bridge.mq.errors import NoMessageAvailable
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMT_REPORT, MQRO_PASS_CORREL_ID, MQMessage, parse_id
from mqgather.config import AggregateSpec, LegSpec
from mqgather.names import PROP_ATTEMPT, PROP_MISSING, PROP_REASON, PROP_STATE, PROP_USED
from tests.e2e.test_operators import cli
from tests.harness import Pipeline, pipeline, status, until
from workflows.gather import GatherWorkflow
from workflows.models import CancelInput, SendRequestInput

NAMES = ("CREDIT", "STOCK", "STOCK_ALT")
CTX = mp.get_context("spawn")


def three(**credit) -> tuple[LegSpec, ...]:
    return (LegSpec(name="CREDIT", sequence=1, **credit), LegSpec(name="STOCK", sequence=2),
            LegSpec(name="STOCK_ALT", sequence=3))  # fmt: skip


async def _in_order(p: Pipeline, spec: AggregateSpec, order: tuple[str, ...]):
    """Replies one at a time, each after the gather took the one before (or closed);
    the order, the MsgIds put and the gather's result."""
    sent = await p.scatter(spec)
    handle = p.handle(spec, sent.correl_id)
    put = []
    for n, leg in enumerate(order):
        put.append(p.reply(spec, sent.correl_id, leg, json.dumps({"n": n}).encode()).msg_id)
        await until(
            lambda: status(handle),
            lambda st, n=n: len(st.legs_received) > n or st.state == "COMPLETE",
            60,
        )
    return order, put, await p.result(spec, sent.correl_id)


#: Each rule, and how many replies of an arrival order it needs at least.
RULES = {
    "all": lambda order: 3,
    "any": lambda order: 1,
    "quorum:2": lambda order: 2,
    "CREDIT and (STOCK or STOCK_ALT)": lambda order: (
        1 + max(order.index("CREDIT"), min(order.index("STOCK"), order.index("STOCK_ALT")))
    ),
}


@pytest.mark.parametrize("rule", list(RULES))
async def test_each_rule_in_every_order_names_the_legs_used_and_missing(
    temporal_env, tmp_path, rule
):
    spec = AggregateSpec(name=f"rule-{list(RULES).index(rule)}", legs=three(),
                         complete_when=rule, timeout_seconds=120)  # fmt: skip
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        runs = await asyncio.gather(
            *(_in_order(p, spec, order) for order in itertools.permutations(NAMES))
        )
        used = {result.correl_id: len(result.legs_received) for _, _, result in runs}
        # Every reply after the rule held is routed late: none is lost, none kept twice.
        late = sum(len(NAMES) - n for n in used.values())
        await p.landed(spec.late_queue, lambda depth: depth >= late, 30)
        late_ids = [m.msg_id for m in p.messages(spec.late_queue)]
        responses = {m.correl_id.hex(): m for m in p.messages(spec.response_queue)}
    assert len(late_ids) == late == len(set(late_ids))
    assert len(responses) == len(runs) == 6
    for order, put, result in runs:
        assert result.state == "COMPLETE" and result.closed_by == "rule", (order, result)
        # The rule held with these replies; a reply that raced the decision may be among
        # them (it came before the decision was recorded), never one that came after.
        taken = len(result.legs_received)
        assert taken >= RULES[rule](order), order
        assert set(result.legs_received) == set(order[:taken])
        assert set(put) - set(late_ids) == set(put[:taken])
        missing = [name for name in NAMES if name not in result.legs_received]
        assert result.legs_missing == missing
        response = responses[result.correl_id]
        assert response.properties[PROP_USED] == ",".join(result.legs_received)
        assert response.properties[PROP_MISSING] == ",".join(missing)
        body = json.loads(response.body)
        assert sorted(body["legs"]) == sorted(n.lower() for n in result.legs_received)
        assert body["missing"] == [n.lower() for n in missing]


async def test_an_optional_leg_that_never_answers_ends_at_its_own_deadline(temporal_env, tmp_path):
    legs = (LegSpec(name="CREDIT"), LegSpec(name="STOCK"),
            LegSpec(name="STOCK_ALT", required=False, timeout_seconds=1.5))  # fmt: skip
    spec = AggregateSpec(name="optional", legs=legs, timeout_seconds=300)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        p.reply(spec, sent.correl_id, "STOCK", b"{}")
        p.reply(spec, sent.correl_id, "CREDIT", b"{}")
        result = await p.result(spec, sent.correl_id, timeout=60)
        response = await p.wait_message(spec.response_queue)
        assert p.empty(spec.timeout_queue)
    assert result.state == "COMPLETE" and result.legs_missing == ["STOCK_ALT"]
    assert result.closed_by == "rule"
    assert result.started_at and result.ended_at
    assert (result.ended_at - result.started_at).total_seconds() < 60  # not the gather's 300 s
    assert [leg.lost for leg in result.legs] == [False, False, True]
    assert response.properties[PROP_STATE] == "COMPLETE"


def _requests(path: Path, queue: str) -> list[MQMessage]:
    """Take every request waiting on ``queue`` (a consuming back end)."""
    taken = []
    with LocalQueueManager(path) as qm:
        while True:
            try:
                taken.append(qm.get(queue, syncpoint=False))
            except NoMessageAvailable:
                return taken


def _answer(p: Pipeline, spec: AggregateSpec, request: MQMessage, leg: str) -> None:
    """A back end answering as MQ asks: CorrelId passed on when the request says so."""
    correl = request.correl_id if request.report & MQRO_PASS_CORREL_ID else request.msg_id
    p.reply(spec, correl, leg, b'{"answered":true}')


async def _dropped_then_answered(p: Pipeline, spec: AggregateSpec):
    sent = await p.scatter(spec)
    p.reply(spec, sent.correl_id, "STOCK", b"{}")
    p.reply(spec, sent.correl_id, "STOCK_ALT", b"{}")
    first = await p.wait_message("BACKEND.CREDIT", timeout=60)  # dropped by the back end
    second = await p.wait_message("BACKEND.CREDIT", timeout=60)
    _answer(p, spec, second, "CREDIT")
    result = await p.result(spec, sent.correl_id, timeout=60)
    return [first, second, *_requests(p.path, "BACKEND.CREDIT")], result


def _check_asked_twice(requests: list[MQMessage], result, correl: bytes) -> None:
    assert len(requests) == 2, [r.properties for r in requests]
    first, second = requests
    assert second.correl_id == first.correl_id == correl
    assert second.msg_id != first.msg_id and second.body == first.body
    assert second.properties[PROP_ATTEMPT] == 2 and PROP_ATTEMPT not in first.properties
    assert second.reply_to_q == first.reply_to_q
    assert result.state == "COMPLETE" and result.legs_missing == []
    assert [leg.attempts for leg in result.legs] == [2, 1, 1]


RETRYING = dict(retries=3, retry_after_seconds=1.0, retry_backoff=4.0)


async def test_a_dropped_request_is_asked_again_and_the_gather_completes(temporal_env, tmp_path):
    spec = AggregateSpec(name="heal", legs=three(**RETRYING), timeout_seconds=120)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        requests, result = await _dropped_then_answered(p, spec)
        correl = bytes.fromhex(result.correl_id)
        query = f"LegsRerequested = 'CREDIT' AND WorkflowId = '{p.handle(spec, correl).id}'"
        await until(lambda: temporal_env.client.count_workflows(query), lambda c: c.count == 1)
    _check_asked_twice(requests, result, correl)


async def test_a_leg_that_never_answers_is_asked_n_plus_one_times_then_the_rule_decides(
    temporal_env, tmp_path
):
    legs = three(retries=2, retry_after_seconds=0.5, retry_backoff=1.0, required=False)
    spec = AggregateSpec(name="giveup", legs=legs, timeout_seconds=120)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        p.reply(spec, sent.correl_id, "STOCK", b"{}")
        p.reply(spec, sent.correl_id, "STOCK_ALT", b"{}")
        taken: list[MQMessage] = []
        handle = p.handle(spec, sent.correl_id)

        async def consumed_all() -> object:
            taken.extend(await asyncio.to_thread(_requests, p.path, "BACKEND.CREDIT"))
            return await handle.describe()

        await until(consumed_all, lambda d: d.status.name != "RUNNING", 60)
        result = await p.result(spec, sent.correl_id)
        taken.extend(_requests(p.path, "BACKEND.CREDIT"))
    assert len(taken) == 3 and len({m.msg_id for m in taken}) == 3
    assert [m.properties.get(PROP_ATTEMPT) for m in taken] == [None, 2, 3]
    assert result.state == "COMPLETE" and result.legs_missing == ["CREDIT"]
    assert result.legs[0].attempts == 3 and result.legs[0].lost


async def test_a_re_request_its_queue_refuses_for_good_is_dead_lettered_and_the_gather_times_out(
    temporal_env, tmp_path
):
    # The back end's request queue PUT(DISABLED) after the scatter: the re-request was
    # retried for ever, and the gather never reached its deadline's partial response.
    legs = three(retries=1, retry_after_seconds=0.5)
    spec = AggregateSpec(name="shut", legs=legs, timeout_seconds=5, delivery_attempts=1)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        (asked,) = _requests(p.path, "BACKEND.CREDIT")
        attrs = p.qm.inquire("BACKEND.CREDIT").model_copy(update={"put": "disabled"})
        p.qm.define(attrs, replace=True)
        p.reply(spec, sent.correl_id, "STOCK", b"{}")
        dead = await p.wait_message("SYSTEM.DEAD.LETTER.QUEUE")
        timed_out = await p.wait_message(spec.timeout_queue)
        result = await p.result(spec, sent.correl_id)
    header, body = dlh.unpack(dead.body)
    assert (header.reason, header.dest_q_name, body) == (2051, "BACKEND.CREDIT", asked.body)
    assert dead.properties[PROP_ATTEMPT] == 2 and dead.correl_id == asked.correl_id
    assert result.state == "TIMEOUT" and "CREDIT" in result.legs_missing
    assert timed_out.properties[PROP_STATE] == "TIMEOUT"


def _reporting(name: str, retries: int) -> AggregateSpec:
    """An aggregate whose requests ask for exception reports; CREDIT is asked again only
    after 300 s unless MQ reports its request undelivered."""
    legs = three(retries=retries, retry_after_seconds=300.0)
    return AggregateSpec(name=name, legs=legs, leg_identification="correlid",
                         request_reports=True, timeout_seconds=600)  # fmt: skip


def _queue_full(request: MQMessage, report_id: str) -> MQMessage:
    """What a message channel agent sends back about a request it could not deliver
    (MQRC_Q_FULL), correlated as MQRO_COPY_MSG_ID_TO_CORREL_ID asks."""
    return MQMessage(msg_type=MQMT_REPORT, feedback=2053, correl_id=request.msg_id,
                     msg_id=parse_id(report_id), format="")  # fmt: skip


async def test_a_report_of_an_undelivered_request_asks_the_leg_again_at_once(
    temporal_env, tmp_path
):
    """CREDIT's request was dead-lettered on the way (the channel to its queue manager
    found the queue full): with request_reports the request asked for an exception
    report, which comes back to the reply queue with the request's MsgId as CorrelId.
    The gather asks CREDIT again at once, not after retry_after_seconds (300 s here);
    the report goes to the report queue all the same, and the same report got again
    asks nothing more."""
    spec = _reporting("reported", retries=2)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        handle = p.handle(spec, sent.correl_id)
        first = await p.wait_message("BACKEND.CREDIT")
        assert first.report == reports.MQRO_EXCEPTION
        report = _queue_full(first, "EXC-1")
        p.put(spec.reply_queue, report)
        again = await p.wait_message("BACKEND.CREDIT", timeout=60)
        p.put(spec.reply_queue, report)  # got again: its bridge stopped before MQCMIT
        # A reply signalled after it: once the gather has it, it has seen the report.
        _answer(p, spec, await p.wait_message("BACKEND.STOCK"), "STOCK")
        seen = await until(lambda: status(handle), lambda s: "STOCK" in s.legs_received)
        _answer(p, spec, again, "CREDIT")
        _answer(p, spec, await p.wait_message("BACKEND.STOCK_ALT"), "STOCK_ALT")
        result = await p.result(spec, sent.correl_id, timeout=60)
        reported = p.messages(spec.report_queue)
        assert p.empty("BACKEND.CREDIT")
    assert again.properties[PROP_ATTEMPT] == 2 and again.correl_id == first.correl_id
    assert "MQRC_Q_FULL (2053)" in str(again.properties[PROP_REASON])
    assert [leg.attempts for leg in seen.legs] == [2, 1, 1]
    assert seen.legs[0].last_reason == "MQ reported its request undelivered: MQRC_Q_FULL (2053)"
    assert result.state == "COMPLETE" and [leg.attempts for leg in result.legs] == [2, 1, 1]
    assert [m.msg_id for m in reported] == [report.msg_id] * 2
    assert all("MQRC_Q_FULL" in str(m.properties[PROP_REASON]) for m in reported)


async def test_a_flood_of_reports_on_one_leg_is_one_signal_per_batch(temporal_env, tmp_path):
    """200 forged exception reports for CREDIT, committed at once: the bridge takes them
    in two batches and tells the gather once per batch, so CREDIT (which has 5
    re-requests) is asked again twice, and the gather's history grows by two signals,
    not 200. Every report reaches the report queue once."""
    spec = _reporting("flooded", retries=5)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        handle = p.handle(spec, sent.correl_id)
        first = await p.wait_message("BACKEND.CREDIT")
        for n in range(200):
            p.qm.put(spec.reply_queue, _queue_full(first, f"FLOOD-{n}"))
        p.qm.commit()
        await p.landed(spec.report_queue, lambda d: d == 200)
        await until(lambda: status(handle), lambda s: s.legs[0].attempts == 3)
        await handle.execute_update(GatherWorkflow.cancel, CancelInput(reason="test over"))
        events = (await handle.fetch_history()).events
        reported = p.messages(spec.report_queue)
    signals = [e.workflow_execution_signaled_event_attributes.signal_name for e in events
               if e.workflow_execution_signaled_event_attributes.signal_name]  # fmt: skip
    assert signals.count("undelivered") == 2
    assert sorted(m.msg_id for m in reported) == sorted(parse_id(f"FLOOD-{n}") for n in range(200))


async def test_requests_expire_when_nobody_waits_for_their_replies(temporal_env, tmp_path):
    """expire_requests: each request's Expiry is the time until its gather's deadline
    (4 s), and CREDIT's re-request, 1 s later, gets the time left. No back end answers:
    once the gather has timed out, MQ has discarded the requests nobody took, so a back
    end that comes back never works on them."""
    # CREDIT is lost only 11 s after its request: the gather's deadline ends it first.
    legs = three(retries=1, retry_after_seconds=1.0, retry_backoff=10.0)
    spec = AggregateSpec(name="expiring", legs=legs, expire_requests=True, timeout_seconds=4)
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        first = await p.wait_message("BACKEND.CREDIT")
        again = await p.wait_message("BACKEND.CREDIT", timeout=10)
        result = await p.result(spec, sent.correl_id, timeout=30)
        left = [p.empty(f"BACKEND.{leg}") for leg in ("STOCK", "STOCK_ALT")]
    assert 30 < first.expiry <= 40 and again.properties[PROP_ATTEMPT] == 2
    assert 0 < again.expiry <= 30 and again.expiry < first.expiry - 5
    assert result.state == "TIMEOUT" and left == [True, True]


async def test_an_operator_re_requests_a_leg_by_hand(temporal_env, tmp_path):
    spec = AggregateSpec(name="byhand", legs=three(), keep_requests=True, timeout_seconds=120)
    client = temporal_env.client
    async with pipeline(client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec, correl_id=b"HAND-1")
        first = await p.wait_message("BACKEND.STOCK")
        unknown = await cli(client, "rerequest", "HAND-1", "TAX")
        done = await cli(client, "rerequest", "HAND-1", "STOCK", "--reason", "supplier back")
        again = await p.wait_message("BACKEND.STOCK")
        shown = await cli(client, "status", "HAND-1")
        as_json = await cli(client, "status", "HAND-1", "--json")
        handle = p.handle(spec, sent.correl_id)
        await handle.execute_update(GatherWorkflow.cancel, CancelInput(reason="test over"))
    assert unknown.returncode != 0 and b"TAX is not a leg of this gather" in unknown.stderr
    assert done.returncode == 0, done.stderr
    assert b"leg STOCK: request 2 goes out now" in done.stdout
    assert again.correl_id == first.correl_id and again.body == first.body
    assert again.properties[PROP_ATTEMPT] == 2
    assert again.properties[PROP_REASON] == "supplier back"
    lines = [line.strip("│ ") for line in shown.stdout.decode().splitlines()]
    assert "STOCK: missing, 2 requests (last: supplier back)" in lines, lines
    stock = json.loads(as_json.stdout)["legs"][1]
    assert (stock["name"], stock["attempts"], stock["last_reason"]) == ("STOCK", 2, "supplier back")


def _run_dying_worker(address: str, path: str, task_queue: str, marker: str, when: str) -> None:
    """A worker whose first re-request dies by SIGKILL: before its PUT, or after the PUT
    was committed and before Temporal heard of it."""
    from temporalio import activity

    import activities.mq as mq
    from mqgather.names import ACTIVITY_SEND_REQUEST
    from mqgather.runtime.codec import data_converter
    from workers.worker import build_worker

    original = mq.MQActivities.send_request

    @activity.defn(name=ACTIVITY_SEND_REQUEST)
    def dying(self, inp: SendRequestInput) -> str:
        if when == "before":
            Path(marker).touch()
            os.kill(os.getpid(), signal.SIGKILL)
        msg_id = original(self, inp)
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
        return msg_id

    mq.MQActivities.send_request = dying  # type: ignore[method-assign]

    async def main() -> None:
        client = await Client.connect(address, data_converter=data_converter(None))
        worker = build_worker(client, lambda: LocalQueueManager(path), task_queue=task_queue)
        await worker.run()

    asyncio.run(main())


@pytest.mark.parametrize("when", ["before", "after"])
async def test_a_worker_killed_around_the_re_request_put_sends_it_exactly_once(
    temporal_env, tmp_path, when
):
    spec = AggregateSpec(name=f"heal-{when}", legs=three(**RETRYING), timeout_seconds=120)
    address = temporal_env.client.service_client.config.target_host
    marker = tmp_path / "died"
    async with pipeline(temporal_env.client, tmp_path, [spec], run_worker=False) as p:
        dying = CTX.Process(
            target=_run_dying_worker, args=(address, str(p.path), p.task_queue, str(marker), when)
        )
        dying.start()
        try:
            sent = await p.scatter(spec)
            p.reply(spec, sent.correl_id, "STOCK", b"{}")
            p.reply(spec, sent.correl_id, "STOCK_ALT", b"{}")
            first = await p.wait_message("BACKEND.CREDIT", timeout=60)
            await asyncio.to_thread(dying.join, 60)
            assert marker.exists() and dying.exitcode == -signal.SIGKILL
            from workers.worker import build_worker

            worker = build_worker(temporal_env.client, p.connect, task_queue=p.task_queue)
            async with worker:
                # The new worker makes the same decision again; the ledger keeps the PUT
                # the dead one may have committed from happening twice.
                handle = p.handle(spec, sent.correl_id)
                await until(lambda: status(handle), lambda st: st.legs[0].attempts == 2, 60)
                second = await p.wait_message("BACKEND.CREDIT", timeout=60)
                _answer(p, spec, second, "CREDIT")
                result = await p.result(spec, sent.correl_id, timeout=60)
                rest = _requests(p.path, "BACKEND.CREDIT")
        finally:
            dying.kill()
    _check_asked_twice([first, second, *rest], result, sent.correl_id)


async def test_scatter_refuses_legs_the_rule_cannot_complete_on(temporal_env, tmp_path):
    from bridge.fanout import ScatterError

    spec = AggregateSpec(name="norule", legs=three(), complete_when="CREDIT and STOCK")
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        with pytest.raises(ScatterError, match="cannot hold over the legs sent"):
            await p.scatter(spec, legs=three()[1:])
        assert p.empty("BACKEND.STOCK")  # nothing sent


async def test_scatter_refuses_to_keep_a_request_larger_than_a_gather_carries(
    temporal_env, tmp_path
):
    from bridge.fanout import ScatterError

    spec = AggregateSpec(name="bigreq", legs=three(retries=1))
    async with pipeline(temporal_env.client, tmp_path, [spec]) as p:
        with pytest.raises(ScatterError, match="keeps a request for re-requests only up to"):
            await p.scatter(spec, bodies={"CREDIT": b"x" * (64 * 1024 + 1)})
        assert p.empty("BACKEND.CREDIT") and p.empty("BACKEND.STOCK")  # nothing sent
        # The same body goes out when the leg asks for no re-requests.
        plain = spec.model_copy(update={"legs": three()})
        await p.scatter(plain, bodies={"CREDIT": b"x" * (64 * 1024 + 1)})
        assert len((await p.wait_message("BACKEND.CREDIT")).body) == 64 * 1024 + 1
