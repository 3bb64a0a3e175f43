"""``hold check``: held replies of running gathers stay; planted ones whose gather closed,
never existed, or that no aggregate claims are found and routed intact (dev server and
embedded MQ)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import UTC, datetime

import pytest
import temporalio.client as temporal

from activities.mq import MQActivities
from bridge.holdcheck import check_held
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage, PutOptions, fingerprint, parse_id
from mqgather.config import AggregateSpec, LegSpec
from mqgather.constants import GATHER_HOLD
from mqgather.names import PROP_REASON
from tests.activities.environment import attempt_env
from tests.activities.test_mq import _racing
from tests.harness import (
    THREE_LEGS,
    CountsLedgerReads,
    delete_history,
    pipeline,
    prepare_queues,
    status,
    until,
)
from workflows.models import (
    HoldRepliesInput,
    PutResponseInput,
    ReceivedLeg,
    Reply,
    gather_id,
)

SPEC = AggregateSpec(name="heldchk", legs=THREE_LEGS, timeout_seconds=300, inline_reply_bytes=64)


def _plant(p, correl: bytes, **props) -> MQMessage:
    """A message put straight on the hold queue, as no mqgather path would."""
    message = MQMessage(correl_id=correl, properties=props, body=b"planted " + os.urandom(100))
    return p.qm.put(GATHER_HOLD, message, PutOptions(syncpoint=False))


async def test_check_routes_only_what_no_gather_will_take(temporal_env, tmp_path):
    async with pipeline(temporal_env.client, tmp_path, [SPEC]) as p:
        done = await p.scatter(SPEC)
        for leg in ("CREDIT", "STOCK", "TAX"):
            p.reply(SPEC, done.correl_id, leg, b'{"x": 1}')
        await p.result(SPEC, done.correl_id)
        await p.wait_message("ORDER.RESPONSE")
        running = await p.scatter(SPEC)
        legit = p.reply(SPEC, running.correl_id, "CREDIT", json.dumps({"y": "z" * 500}).encode())
        handle = p.handle(SPEC, running.correl_id)
        await until(lambda: status(handle), lambda s: s.legs_received == ["CREDIT"])
        await p.landed(GATHER_HOLD, lambda n: n == 1)
        closed = _plant(p, done.correl_id, leg="TAX")
        nobody = _plant(p, parse_id("NO-SUCH-GATHER"), leg="TAX")
        nameless = _plant(p, running.correl_id)  # no leg property: no aggregate claims it

        with LocalQueueManager(p.path) as qm:
            listed = await check_held(p.client, qm, [SPEC], route=False)
        assert p.depth(GATHER_HOLD) == 4  # a dry run moves nothing
        verdicts = {h.msg_id: (h.verdict, h.routed_to) for h in listed}
        assert verdicts == {
            legit.msg_id.hex(): ("running", ""),
            closed.msg_id.hex(): ("closed", "GATHER.LATE"),
            nobody.msg_id.hex(): ("unknown", "GATHER.UNKNOWN"),
            nameless.msg_id.hex(): ("unidentified", "GATHER.FAILURE"),
        }

        with LocalQueueManager(p.path) as qm:
            routed = await check_held(p.client, qm, [SPEC])
        assert sorted(h.msg_id for h in routed if h.orphan) == sorted(
            m.msg_id.hex() for m in (closed, nobody, nameless)
        )
        assert [m.msg_id for m in p.messages(GATHER_HOLD)] == [legit.msg_id]
        for queue, planted in (("GATHER.LATE", closed), ("GATHER.UNKNOWN", nobody),
                               ("GATHER.FAILURE", nameless)):  # fmt: skip
            [got] = p.messages(queue)
            assert got.msg_id == planted.msg_id and got.body == planted.body
            assert "held reply" in str(got.properties[PROP_REASON])

        # The gather still takes its own held reply.
        p.reply(SPEC, running.correl_id, "STOCK", b"{}")
        p.reply(SPEC, running.correl_id, "TAX", b"{}")
        response = await p.wait_message("ORDER.RESPONSE")
        assert json.loads(response.body)["legs"]["credit"] == {"y": "z" * 500}
        assert p.empty(GATHER_HOLD)


class _CountsDescribes(temporal.Interceptor):
    """Counts the gathers described, by workflow id."""

    def __init__(self) -> None:
        self.described: list[str] = []

    def intercept_client(self, next: temporal.OutboundInterceptor) -> temporal.OutboundInterceptor:
        return _Describes(next, self.described)


class _Describes(temporal.OutboundInterceptor):
    def __init__(self, next: temporal.OutboundInterceptor, described: list[str]) -> None:
        super().__init__(next)
        self.described = described

    async def describe_workflow(self, input: temporal.DescribeWorkflowInput):
        self.described.append(input.id)
        return await super().describe_workflow(input)


async def test_a_running_gather_is_asked_about_once_a_closed_one_for_each_reply(
    temporal_env, tmp_path
):
    """Held replies of a running gather stay, so one answer does for all of them (a
    flood's gather holds thousands); a closed gather is asked again for each, since a
    reset may start it running meanwhile and it must keep the rest."""
    async with pipeline(temporal_env.client, tmp_path, [SPEC]) as p:
        done = await p.scatter(SPEC)
        for leg in ("CREDIT", "STOCK", "TAX"):
            p.reply(SPEC, done.correl_id, leg, b'{"x": 1}')
        await p.result(SPEC, done.correl_id)
        running = await p.scatter(SPEC)
        for leg in ("CREDIT", "STOCK"):
            p.reply(SPEC, running.correl_id, leg, json.dumps({"y": "z" * 500}).encode())
        await p.landed(GATHER_HOLD, lambda n: n == 2)
        late = [_plant(p, done.correl_id, leg=leg) for leg in ("TAX", "STOCK")]
        counting = _CountsDescribes()
        client = temporal.Client(**{**p.client.config(), "interceptors": [counting]})
        with LocalQueueManager(p.path) as qm:
            checked = await check_held(client, qm, [SPEC])
        assert [h.verdict for h in checked] == ["running", "running", "closed", "closed"]
        assert sorted(h.msg_id for h in checked if h.orphan) == sorted(m.msg_id.hex() for m in late)
        assert sorted(counting.described) == sorted(
            [p.handle(SPEC, running.correl_id).id] + [p.handle(SPEC, done.correl_id).id] * 2
        )
        assert p.depth(GATHER_HOLD) == 2 and p.depth("GATHER.LATE") == 2


async def test_an_orphan_that_shares_ids_with_a_running_gathers_reply_is_the_one_moved(
    temporal_env, tmp_path
):
    async with pipeline(temporal_env.client, tmp_path, [SPEC]) as p:
        running = await p.scatter(SPEC)
        legit = p.reply(SPEC, running.correl_id, "CREDIT", json.dumps({"y": "z" * 500}).encode())
        handle = p.handle(SPEC, running.correl_id)
        await until(lambda: status(handle), lambda s: s.legs_received == ["CREDIT"])
        await p.landed(GATHER_HOLD, lambda n: n == 1)
        # Behind it on the hold queue, a message with its MsgId and CorrelId that no
        # aggregate claims (no leg property): the check must move that one, not the
        # running gather's, which a get by MsgId and CorrelId finds first.
        [held] = p.messages(GATHER_HOLD)
        stray = held.model_copy(update={"properties": {}, "body": b"stray"})
        p.qm.put(GATHER_HOLD, stray, PutOptions(syncpoint=False, set_all_context=True))
        with LocalQueueManager(p.path) as qm:
            routed = await check_held(p.client, qm, [SPEC])
        [failed] = p.messages("GATHER.FAILURE")
        [kept] = p.messages(GATHER_HOLD)
        p.reply(SPEC, running.correl_id, "STOCK", b"{}")
        p.reply(SPEC, running.correl_id, "TAX", b"{}")
        response = await p.wait_message("ORDER.RESPONSE")
        assert p.empty(GATHER_HOLD)
    assert [h.verdict for h in routed] == ["running", "unidentified"]
    assert (failed.msg_id, failed.body) == (legit.msg_id, b"stray")
    assert kept.body == legit.body
    assert json.loads(response.body)["legs"]["credit"] == {"y": "z" * 500}


async def test_the_command_lists_and_routes(temporal_env, tmp_path):
    async with pipeline(temporal_env.client, tmp_path, [SPEC], run_worker=False) as p:
        planted = _plant(p, parse_id("NO-SUCH-GATHER"), leg="TAX")
        config = tmp_path / "mqgather.toml"
        config.write_text('[aggregates.heldchk]\nlegs = [{name = "TAX"}]\n')
        env = dict(os.environ, TEMPORAL_ADDRESS=p.client.service_client.config.target_host,
                   TEMPORAL_NAMESPACE=p.client.namespace)  # fmt: skip
        command = [sys.executable, "-m", "mqgather.cli", "hold", "check",
                   "--mq", f"local:{p.path}", "--config", str(config)]  # fmt: skip
        dry = await asyncio.to_thread(
            subprocess.run, [*command, "--dry-run"], env=env, capture_output=True, text=True
        )
        assert dry.returncode == 0, dry.stderr
        assert "1 held, 0 waiting for a running gather, 1 orphaned (would route 1)" in dry.stdout
        assert p.depth(GATHER_HOLD) == 1
        done = await asyncio.to_thread(
            subprocess.run, [*command, "--json"], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        [row] = [json.loads(line) for line in done.stdout.splitlines()]
        assert row["verdict"] == "unknown" and row["routed_to"] == "GATHER.UNKNOWN"
        assert [m.msg_id for m in p.messages("GATHER.UNKNOWN")] == [planted.msg_id]
        assert p.empty(GATHER_HOLD)


#: COA: a report the reply asks for, which its copy on the hold queue does not.
COA = 0x100


class _CrashesBeforeItLooksAgain(MQActivities):
    """A worker that dies between a move's commit and its second look for the final."""

    def _withdraw_copies(self, *args, **kwargs) -> None:
        raise _Died


class _Died(Exception):
    pass


@pytest.mark.parametrize("history", ["kept", "gone"])
async def test_a_copy_of_a_reply_its_gathers_final_carried_is_withdrawn_not_sent_late(
    temporal_env, tmp_path, history
):
    # A double fault: a cancelled move's thread ran on, on one worker, while the gather's
    # final ran on another; each looked for the other before the other committed, and
    # the move's worker died before it looked again. The reply is in the response and a
    # copy on the hold queue, which this check sent to the late queue (or, the gather's
    # history gone past retention, to the unknown queue): in two places.
    spec = AggregateSpec(name="copies", legs=(LegSpec(name="CREDIT", sequence=10),))
    correl = parse_id(f"COPIED-{history}")
    gid = gather_id(spec.name, correl)
    # The gather, closed; the first run of its chain names its ledger keys.
    started = await temporal_env.client.start_workflow("closed", id=gid, task_queue="nobody")
    await started.terminate("closed")
    chain = started.result_run_id or ""
    path = tmp_path / "qm.db"
    prepare_queues(path)
    body = b'{"n": 1}' + b" " * 4000
    message = MQMessage(msg_id=b"M" * 24, correl_id=correl, properties={"leg": "CREDIT"},
                        body=body, persistence=0, report=COA)  # fmt: skip
    carried = Reply(message=message, leg="CREDIT", source_queue="GATHER.IN",
                    received_at=datetime.now(UTC), size=len(body),
                    fingerprint=fingerprint(message))  # fmt: skip
    final = MQActivities(lambda: LocalQueueManager(path))
    answer = PutResponseInput(aggregate=spec, gather_id=gid, correl_id=correl, chain=chain,
                              outcome="COMPLETE", missing=[], moved_to_hold=True,
                              legs=[ReceivedLeg(leg=spec.legs[0], replies=[carried])])  # fmt: skip
    mover = _CrashesBeforeItLooksAgain(_racing(path, lambda: attempt_env().run(
        final.put_response, answer)))  # fmt: skip
    move = HoldRepliesInput(aggregate=spec, gather_id=gid, replies=[carried], chain=chain)
    with pytest.raises(_Died):
        attempt_env().run(mover.hold_replies, move)
    if history == "gone":
        await delete_history(temporal_env.client, started)
    with LocalQueueManager(path) as qm:
        [copy] = qm.browse(GATHER_HOLD)  # its Persistence and reports are not the reply's
        listed = await check_held(temporal_env.client, qm, [spec], route=False)
        routed = await check_held(temporal_env.client, qm, [spec])
        queues = (GATHER_HOLD, "GATHER.LATE", "GATHER.UNKNOWN", "ORDER.RESPONSE")
        left = {q: list(qm.browse(q)) for q in queues}
    assert copy.body == body and (copy.persistence, copy.report) != (0, COA)
    assert [(h.verdict, h.routed_to) for h in listed] == [("carried", "withdrawn")]
    assert [h.verdict for h in routed] == ["carried"]
    assert left[GATHER_HOLD] == [] and left["GATHER.LATE"] == [] and left["GATHER.UNKNOWN"] == []
    [response] = left["ORDER.RESPONSE"]
    assert json.loads(response.body)["legs"] == {"credit": {"n": 1}}


async def test_a_flood_of_copies_is_withdrawn_reading_the_ledger_once(temporal_env, tmp_path):
    # The double fault after a flood: a move of 120 replies committed after the final
    # that carried them all looked, and its worker died; the requester took the response
    # the instant it landed and the gather's history is gone. Every copy is withdrawn,
    # none sent late or unknown, and the ledger is read once for the gather, not once per
    # copy (a check over a flood's copies took minutes per thousand).
    flood = 120
    legs = tuple(LegSpec(name=f"L{i:03d}", sequence=i) for i in range(flood))
    spec = AggregateSpec(name="flooded", legs=legs)
    correl = parse_id("FLOODED")
    gid = gather_id(spec.name, correl)
    started = await temporal_env.client.start_workflow("closed", id=gid, task_queue="nobody")
    await started.terminate("closed")
    chain = started.result_run_id or ""
    path = tmp_path / "qm.db"
    prepare_queues(path)
    replies = []
    for i, leg in enumerate(legs):
        body = json.dumps({"n": i}).encode()
        message = MQMessage(msg_id=b"F%023d" % i, correl_id=correl, body=body,
                            properties={"leg": leg.name})  # fmt: skip
        replies.append(Reply(message=message, leg=leg.name, source_queue="GATHER.IN",
                             received_at=datetime.now(UTC), size=len(body),
                             fingerprint=fingerprint(message)))  # fmt: skip
    final = MQActivities(lambda: LocalQueueManager(path))
    answer = PutResponseInput(aggregate=spec, gather_id=gid, correl_id=correl, chain=chain,
                              outcome="COMPLETE", missing=[], moved_to_hold=True,
                              legs=[ReceivedLeg(leg=leg, replies=[reply])
                                    for leg, reply in zip(legs, replies, strict=True)])  # fmt: skip

    def respond_and_take() -> None:
        attempt_env().run(final.put_response, answer)
        with LocalQueueManager(path) as requester:
            requester.get("ORDER.RESPONSE", syncpoint=False)

    mover = _CrashesBeforeItLooksAgain(_racing(path, respond_and_take))
    move = HoldRepliesInput(aggregate=spec, gather_id=gid, replies=replies, chain=chain)
    with pytest.raises(_Died):
        attempt_env().run(mover.hold_replies, move)
    await delete_history(temporal_env.client, started)
    totals, done = [], []
    with CountsLedgerReads(path, spec.ledger_queue) as qm:
        assert len(list(qm.browse(GATHER_HOLD))) == flood
        checked = await check_held(temporal_env.client, qm, [spec],
                                   on_total=totals.append, on_progress=done.append)  # fmt: skip
        queues = (GATHER_HOLD, "GATHER.LATE", "GATHER.UNKNOWN", "ORDER.RESPONSE")
        left = {q: list(qm.browse(q)) for q in queues}
        reads = qm.ledger_browses
    assert {(h.verdict, h.routed_to) for h in checked} == {("carried", "withdrawn")}
    assert sorted(h.msg_id for h in checked) == sorted(r.message.msg_id.hex() for r in replies)
    assert left == {q: [] for q in queues}
    # One browse of the gather's moves, one of its chain's final.
    assert reads == 2
    assert totals == [flood] and done == list(range(1, flood + 1))
