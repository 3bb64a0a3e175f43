"""The PUT activities on the embedded queue manager: exactly once across retries even
when the output is consumed at once, and bounded delivery to the dead-letter queue."""

from __future__ import annotations

import dataclasses
import json
import math
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.mq import (
    MQActivities,
    notification,
    response_id,
    response_life,
    response_msg_id,
)
from bridge.mq import dlh, ledger, xqh
from bridge.mq.errors import NoMessageAvailable, QueueFull, QueueInhibited, SyncpointLimitReached
from bridge.mq.hold import body_digest
from bridge.mq.ledger import ledger_key
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import (
    MQFB_NAN,
    MQFB_PAN,
    MQMT_REPLY,
    MQMT_REPORT,
    MQRO_DISCARD_MSG,
    MQRO_NAN,
    MQRO_PAN,
    MQMessage,
    QueueAttributes,
    fingerprint,
)
from mqgather.config import AggregateSpec, LegSpec
from mqgather.constants import DEAD_LETTER_QUEUE, MAX_EXPIRY_TENTHS
from mqgather.names import PROP_REASON
from mqgather.routing import Destination
from mqgather.runtime.attempts import (
    AttemptCancelled,
    AttemptLostTask,
    AttemptOutlived,
    EarlierAttemptRunning,
)
from tests.activities.environment import attempt_env
from tests.harness import prepare_queues
from tests.stalls import Hung
from workflows.models import (
    HeldBody,
    HoldRepliesInput,
    LegRequest,
    PutResponseInput,
    ReceivedLeg,
    Reply,
    ReplyTerms,
    Routed,
    RouteInput,
    SendRequestInput,
    as_held,
)

LEG = LegSpec(name="CREDIT", sequence=10)
GATHER = "gather:t:0a"


def reply(n: int) -> Reply:
    return Reply(
        message=MQMessage(msg_id=bytes([n]) * 24, correl_id=b"C", body=b'{"ok":1}',
                          properties={"leg": "CREDIT"}),
        leg="CREDIT", source_queue="GATHER.IN", received_at=datetime.now(UTC),
    )  # fmt: skip


@pytest.fixture
def qm_path(tmp_path: Path) -> Path:
    path = tmp_path / "qm.db"
    prepare_queues(path)
    return path


def response_input(spec: AggregateSpec, **changes) -> PutResponseInput:
    fields = {"aggregate": spec, "gather_id": GATHER, "correl_id": b"C" * 24,
              "outcome": "COMPLETE", "legs": [ReceivedLeg(leg=LEG, replies=[reply(1)])],
              "missing": [], **changes}  # fmt: skip
    return PutResponseInput(**fields)


def drain(qm: LocalQueueManager, queue: str) -> list[MQMessage]:
    out = []
    while True:
        try:
            out.append(qm.get(queue, syncpoint=False))
        except NoMessageAvailable:
            return out


class _StalledCommit(LocalQueueManager):
    """A queue manager whose MQCMIT does not return until released: the attempt outlives
    its timeout, and its retry runs while its thread still waits."""

    def __init__(self, path: Path, committing: threading.Event, release: threading.Event):
        super().__init__(path)
        self._committing, self._release = committing, release

    def commit(self) -> None:
        self._committing.set()
        assert self._release.wait(30)
        super().commit()


def overlapping_attempts(
    path: Path, make: Callable, run: Callable, owner: str, *, second_gives_up: bool = False
) -> list:
    """Run an activity twice in one worker, the second while the first is stalled in its
    commit (until the second waits for its turn, or until it gave up waiting); return
    each attempt's result (or error), the first attempt's first."""
    committing, release = threading.Event(), threading.Event()
    stalled = [_StalledCommit(path, committing, release)]
    acts = make(lambda: stalled.pop() if stalled else LocalQueueManager(path))
    results: list = [None, None]

    def attempt(n: int) -> None:
        try:
            results[n] = run(acts)
        except Exception as exc:  # noqa: BLE001 - the test reads it
            results[n] = exc

    first = threading.Thread(target=attempt, args=(0,))
    first.start()
    assert committing.wait(30)
    second = threading.Thread(target=attempt, args=(1,))
    second.start()
    deadline = threading.Event()
    while acts.attempts.users(owner) < 2 and second.is_alive():  # waiting for its turn
        deadline.wait(0.01)
    if second_gives_up:
        second.join(30)
    release.set()
    first.join(30)
    second.join(30)
    return results


def test_an_attempt_that_reaches_its_commit_past_its_timeout_backs_out(qm_path):
    """Its MQ calls returned only after its 60 s (a stalled queue manager): its retry may
    have run meanwhile in another worker, or a salvage, so it commits nothing; the
    attempt in time PUTs, once."""
    spec = AggregateSpec(name="t", legs=(LEG,))
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    started = datetime.now(UTC) - timedelta(seconds=61)
    with pytest.raises(AttemptOutlived, match=f"MQ work of {GATHER} reached its commit"):
        attempt_env(started).run(acts.put_response, response_input(spec))
    with LocalQueueManager(qm_path) as qm:
        assert drain(qm, "ORDER.RESPONSE") == []
        assert not ledger.done(qm, spec.ledger_queue, response_msg_id(GATHER, "COMPLETE"))
    assert attempt_env().run(acts.put_response, response_input(spec)).outcome == "COMPLETE"
    with LocalQueueManager(qm_path) as qm:
        responses = drain(qm, "ORDER.RESPONSE")
    assert [m.msg_id for m in responses] == [response_msg_id(GATHER, "COMPLETE")]


def route_input(n: int) -> RouteInput:
    """One late reply routed for ``GATHER``."""
    items = [Routed(kind=Destination.LATE, reply=reply(n), reason="late")]
    return RouteInput(aggregate=AggregateSpec(name="t", legs=(LEG,)), gather_id=GATHER, items=items)


def test_a_slow_local_attempt_commits_only_while_its_worker_holds_the_workflow_task(qm_path):
    """Past a second, an attempt asks whether its worker still holds the task it runs in:
    another worker that took the task over runs the MQ work itself, so this one backs
    out. Quicker attempts do not ask."""
    spec = AggregateSpec(name="t", legs=(LEG,))
    asked: list[tuple[str, str]] = []
    answer: list[str | None] = ["worker 'b' took its workflow task at 10:00:07"]

    def task_lost(workflow_id: str, run_id: str) -> str | None:
        asked.append((workflow_id, run_id))
        return answer[0]

    acts = MQActivities(lambda: LocalQueueManager(qm_path), task_lost=task_lost)
    assert attempt_env().run(acts.route_replies, route_input(7)) == 1  # quick: not asked
    assert asked == []
    slow = attempt_env(datetime.now(UTC) - timedelta(seconds=2))
    with pytest.raises(AttemptLostTask, match=rf"MQ work of {GATHER} .* worker 'b' took"):
        slow.run(acts.put_response, response_input(spec))
    assert asked == [(slow.info.workflow_id, slow.info.workflow_run_id)]
    with LocalQueueManager(qm_path) as qm:
        assert drain(qm, "ORDER.RESPONSE") == []
        assert not ledger.done(qm, spec.ledger_queue, response_msg_id(GATHER, "COMPLETE"))
    answer[0] = None  # held: the slow attempt commits
    assert slow.run(acts.put_response, response_input(spec)).outcome == "COMPLETE"
    with LocalQueueManager(qm_path) as qm:
        assert len(drain(qm, "ORDER.RESPONSE")) == 1
    # An activity the server schedules is retried only past its timeout: never asked.
    remote = attempt_env(datetime.now(UTC) - timedelta(seconds=2))
    remote.info = dataclasses.replace(remote.info, is_local=False)
    answer[0] = "never asked"
    assert remote.run(acts.route_replies, route_input(8)) == 1
    assert len(asked) == 2


def test_a_cancel_takes_effect_at_the_commit_never_inside_the_mq_work(qm_path):
    """An attempt cancelled while an MQ call waits (its workflow moved on, its worker
    shuts down) finishes that call and the rest of its work, then backs out at its
    commit. A cancellation raised into its thread wherever it stood could land inside the
    queue manager's bookkeeping, or the turn's, and leave it half done or held."""
    spec = AggregateSpec(name="t", legs=(LEG,))
    hung = Hung("ORDER.RESPONSE")
    made = [hung.transport(qm_path)]
    acts = MQActivities(lambda: made.pop() if made else LocalQueueManager(qm_path))
    env, ended = attempt_env(), []

    def attempt() -> None:
        try:
            env.run(acts.put_response, response_input(spec))
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            ended.append(exc)

    thread = threading.Thread(target=attempt)
    thread.start()
    assert hung.putting.wait(30)
    env.cancel()
    hung.release.set()
    thread.join(30)
    assert [type(exc) for exc in ended] == [AttemptCancelled]
    assert hung.calls == ["put ORDER.RESPONSE", f"put {spec.ledger_queue}", "backed out"]
    assert acts.attempts.users(GATHER) == 0  # its turn given back
    with LocalQueueManager(qm_path) as qm:
        assert drain(qm, "ORDER.RESPONSE") == []
    # The attempt that follows puts the response, once.
    assert attempt_env().run(acts.put_response, response_input(spec)).outcome == "COMPLETE"
    with LocalQueueManager(qm_path) as qm:
        assert len(drain(qm, "ORDER.RESPONSE")) == 1


def test_an_attempt_retried_while_the_last_is_stalled_in_its_commit_puts_nothing(qm_path):
    spec = AggregateSpec(name="t", legs=(LEG,))
    first, second = overlapping_attempts(
        qm_path, MQActivities,
        lambda acts: attempt_env().run(acts.put_response, response_input(spec)),
        GATHER,
    )  # fmt: skip
    with LocalQueueManager(qm_path) as qm:
        responses = drain(qm, "ORDER.RESPONSE")
    assert [m.msg_id for m in responses] == [response_msg_id(GATHER, "COMPLETE")]
    assert first.outcome == "COMPLETE" and second == first


def test_an_attempt_that_waits_too_long_for_the_stalled_one_is_retried_and_puts_once(
    qm_path, monkeypatch
):
    monkeypatch.setattr("activities.mq.EARLIER_ATTEMPT_WAIT_SECONDS", 0.05)
    spec = AggregateSpec(name="t", legs=(LEG,))
    items = [Routed(kind=Destination.LATE, reply=reply(7), reason="late")]
    inp = RouteInput(aggregate=spec, gather_id=GATHER, items=items)
    first, second = overlapping_attempts(
        qm_path, MQActivities, lambda acts: attempt_env().run(acts.route_replies, inp),
        GATHER, second_gives_up=True,
    )  # fmt: skip
    assert isinstance(second, EarlierAttemptRunning) and GATHER in str(second)
    again = attempt_env().run(MQActivities(lambda: LocalQueueManager(qm_path)).route_replies, inp)
    with LocalQueueManager(qm_path) as qm:
        late = drain(qm, "GATHER.LATE")
    assert [m.msg_id for m in late] == [bytes([7]) * 24]
    assert first == again == 1


def test_a_retried_put_after_the_response_was_consumed_puts_nothing(qm_path):
    spec = AggregateSpec(name="t", legs=(LEG,))
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    env = attempt_env()
    first = env.run(acts.put_response, response_input(spec))
    with LocalQueueManager(qm_path) as requester:
        taken = drain(requester, "ORDER.RESPONSE")  # the requester is quick
        # The worker died before Temporal recorded the activity: it runs again.
        again = env.run(acts.put_response, response_input(spec))
        assert drain(requester, "ORDER.RESPONSE") == []
    assert len(taken) == 1 and taken[0].msg_id == response_msg_id(GATHER, "COMPLETE")
    assert first == again


def test_a_gather_under_an_id_used_before_keeps_a_ledger_of_its_own(qm_path):
    """Two gathers share an id (the first's history was gone when the second started):
    each chain has its own markers, so the second is answered, and once."""
    spec = AggregateSpec(name="t", legs=(LEG,))
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    env = attempt_env()
    first = env.run(acts.put_response, response_input(spec, chain="run-1"))
    second = env.run(acts.put_response, response_input(spec, chain="run-2", legs=[
        ReceivedLeg(leg=LEG, replies=[reply(2)])]))  # fmt: skip
    again = env.run(acts.put_response, response_input(spec, chain="run-2", legs=[
        ReceivedLeg(leg=LEG, replies=[reply(2)])]))  # fmt: skip
    with LocalQueueManager(qm_path) as qm:
        responses = drain(qm, "ORDER.RESPONSE")
        assert drain(qm, "GATHER.LATE") == []
    assert len(responses) == 2 and responses[0].msg_id != responses[1].msg_id
    assert (first.error, second.error) == ("", "") and again == second


def test_after_a_reset_the_earlier_final_stands_and_what_it_did_not_carry_goes_late(qm_path):
    """A run after an operator reset the closed gather: it ends another way (COMPLETE,
    not TIMEOUT), with a reply the first final did not carry. No second final; that reply
    goes late, once across retries; the gather keeps the outcome it was answered as."""
    stock_leg = LegSpec(name="STOCK", sequence=20)
    spec = AggregateSpec(name="t", legs=(LEG, stock_leg))
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    env = attempt_env()
    credit = ReceivedLeg(leg=LEG, replies=[reply(1)])
    stock = ReceivedLeg(leg=stock_leg, replies=[reply(2).model_copy(update={"leg": "STOCK"})])
    env.run(acts.put_response, response_input(spec, outcome="TIMEOUT", legs=[credit],
                                              missing=["STOCK"]))  # fmt: skip
    after_reset = response_input(spec, legs=[credit, stock], after_reset=True)
    results = [env.run(acts.put_response, after_reset) for _ in range(2)]  # and a retry
    with LocalQueueManager(qm_path) as qm:
        assert drain(qm, "ORDER.RESPONSE") == [] and len(drain(qm, "GATHER.TIMEOUT")) == 1
        late = drain(qm, "GATHER.LATE")
    assert [m.msg_id for m in late] == [bytes([2]) * 24]
    assert all(r.outcome == "TIMEOUT" and r.queues == ["GATHER.LATE"] for r in results)
    assert results[0].msg_id == response_msg_id(GATHER, "TIMEOUT").hex()


def test_a_reply_the_final_carried_is_never_forwarded_after_it(qm_path):
    """A run after a reset, with the policy "last", takes a second reply for a leg and
    counts the first, which the final carried, a duplicate: that one stays where it is."""
    spec = AggregateSpec(name="t", legs=(LEG,), duplicates="last")
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    env = attempt_env()
    env.run(acts.put_response, response_input(spec))  # the final carried reply 1
    items = [Routed(kind=Destination.DUPLICATE, reply=reply(n), reason="duplicate")
             for n in (1, 2)]  # fmt: skip
    routed = RouteInput(aggregate=spec, gather_id=GATHER, items=items, after_reset=True)
    env.run(acts.route_replies, routed)
    with LocalQueueManager(qm_path) as qm:
        assert len(drain(qm, "ORDER.RESPONSE")) == 1
        assert [m.msg_id for m in drain(qm, "GATHER.DUPLICATE")] == [bytes([2]) * 24]


def test_a_final_an_earlier_release_marked_without_its_replies_is_still_put_once(qm_path):
    # A retry across an upgrade: the marker names the PUT but not what it carried, so
    # nothing is taken for a reply it did not carry.
    spec = AggregateSpec(name="t", legs=(LEG,))
    with LocalQueueManager(qm_path) as qm:
        marked = response_msg_id(GATHER, "COMPLETE")
        ledger.mark(qm, spec.ledger_queue, marked, "an earlier release's response", 1)
        qm.commit()
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    result = attempt_env().run(acts.put_response, response_input(spec))
    with LocalQueueManager(qm_path) as qm:
        assert drain(qm, "ORDER.RESPONSE") == [] and drain(qm, "GATHER.LATE") == []
    assert result.outcome == "COMPLETE" and result.error == ""


def test_the_response_is_a_reply_though_it_names_the_requesters_reply_queue(qm_path):
    spec = AggregateSpec(name="t", legs=(LEG,), destination="replyToQueue")
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    attempt_env().run(acts.put_response, response_input(spec, reply_to_q="ORDER.RESPONSE"))
    with LocalQueueManager(qm_path) as requester:
        (response,) = drain(requester, "ORDER.RESPONSE")
    assert (response.message_type, response.reply_to_q) == (MQMT_REPLY, "ORDER.RESPONSE")


def test_a_full_ledger_backs_the_put_out_and_the_retry_puts_once_there_is_room(qm_path):
    # delivery_attempts=1: every attempt is the last, and still nothing is dead-lettered.
    spec = AggregateSpec(name="t", legs=(LEG,), delivery_attempts=1)
    with LocalQueueManager(qm_path) as qm:
        qm.define(QueueAttributes(name=spec.ledger_queue, maxdepth=1), replace=True)
        qm.put(spec.ledger_queue, MQMessage(body=b"an older marker"))
        qm.commit()
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    env = attempt_env()
    with pytest.raises(QueueFull, match="MQRC_Q_FULL"):
        env.run(acts.put_response, response_input(spec))
    with LocalQueueManager(qm_path) as qm:
        assert drain(qm, "ORDER.RESPONSE") == [] and drain(qm, DEAD_LETTER_QUEUE) == []
        assert [m.body for m in drain(qm, spec.ledger_queue)] == [b"an older marker"]
    result = env.run(acts.put_response, response_input(spec))
    with LocalQueueManager(qm_path) as qm:
        responses = drain(qm, "ORDER.RESPONSE")
    assert result.outcome == "COMPLETE"
    assert [m.msg_id for m in responses] == [response_msg_id(GATHER, "COMPLETE")]


def test_a_retried_forward_after_the_copy_was_consumed_forwards_nothing(qm_path):
    spec = AggregateSpec(name="t", legs=(LEG,))
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    items = [Routed(kind=Destination.LATE, reply=reply(7), reason="late"),
             Routed(kind=Destination.DUPLICATE, reply=reply(8), reason="dup")]  # fmt: skip
    inp = RouteInput(aggregate=spec, gather_id=GATHER, items=items)
    env = attempt_env()
    env.run(acts.route_replies, inp)
    with LocalQueueManager(qm_path) as consumer:
        late, dup = drain(consumer, "GATHER.LATE"), drain(consumer, "GATHER.DUPLICATE")
        env.run(acts.route_replies, inp)
        assert drain(consumer, "GATHER.LATE") == [] and drain(consumer, "GATHER.DUPLICATE") == []
    assert [m.msg_id for m in late] == [bytes([7]) * 24]
    assert [m.msg_id for m in dup] == [bytes([8]) * 24]


def test_routing_held_replies_that_share_ids_fits_maxumsgs_in_smaller_units(qm_path):
    """Three held replies share a MsgId and CorrelId, on the hold queue in the order C, B,
    A. MAXUMSGS 7 makes units of two replies, but forwarding A then B gets C and B on the
    way to A and puts C back: 8. The unit is backed out and the replies go one by one,
    each forwarded once."""
    spec = AggregateSpec(name="t", legs=(LEG,))
    ids = {"msg_id": b"M" * 24, "correl_id": b"C" * 24}
    held = {}
    with LocalQueueManager(qm_path) as qm:
        for name in ("C", "B", "A"):
            message = MQMessage(**ids, body=f"held {name}".encode(), properties={"leg": "CREDIT"})
            qm.put(spec.hold_queue, message)
            held[name] = (message, HeldBody(queue=spec.hold_queue, **ids,
                                            sha256=body_digest(message)))  # fmt: skip
        qm.commit()
        qm.set_max_uncommitted(7)
    items = [
        Routed(kind=Destination.LATE, reason="late", reply=Reply(
            message=held[name][0].model_copy(update={"body": b"", "properties": {}}),
            held=held[name][1], leg="CREDIT", source_queue="GATHER.IN",
            received_at=datetime.now(UTC), size=len(held[name][0].body),
            fingerprint=fingerprint(held[name][0]),
        ))
        for name in ("A", "B", "C")
    ]  # fmt: skip
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    attempt_env().run(acts.route_replies, RouteInput(aggregate=spec, gather_id=GATHER,
                                                             items=items))  # fmt: skip
    with LocalQueueManager(qm_path) as qm:
        late = drain(qm, "GATHER.LATE")
        left = drain(qm, spec.hold_queue)
    assert sorted(m.body for m in late) == [b"held A", b"held B", b"held C"]
    assert left == []


def test_an_undeliverable_response_is_retried_then_dead_lettered(qm_path):
    spec = AggregateSpec(name="t", legs=(LEG,), destination="replyToQueue", delivery_attempts=3)
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    # A ReplyToQMgr that names this queue manager is a queue of its own.
    inp = response_input(spec, reply_to_q="NO.SUCH.Q", reply_to_qmgr="MQGATHER")
    env = attempt_env()
    for attempt in (1, 2):
        env.info = dataclasses.replace(env.info, attempt=attempt)
        with pytest.raises(Exception, match="MQRC_UNKNOWN_OBJECT_NAME"):
            env.run(acts.put_response, inp)
    env.info = dataclasses.replace(env.info, attempt=3)
    result = env.run(acts.put_response, inp)
    with LocalQueueManager(qm_path) as qm:
        dead = drain(qm, DEAD_LETTER_QUEUE)
    assert result.outcome == "FAILED" and result.queues == [DEAD_LETTER_QUEUE]
    assert "MQRC_UNKNOWN_OBJECT_NAME" in result.error and "NO.SUCH.Q" in result.error
    assert len(dead) == 1 and dead[0].format == dlh.MQFMT_DEAD_LETTER_HEADER
    header, body = dlh.unpack(dead[0].body)
    assert header.reason == 2085 and header.dest_q_name == "NO.SUCH.Q"
    assert header.dest_q_mgr_name == "MQGATHER" and header.format == "MQSTR"
    assert json.loads(body)["state"] == "COMPLETE"
    assert dead[0].msg_id == response_msg_id(GATHER, "COMPLETE")
    assert dead[0].correl_id == b"C" * 24 and dead[0].reply_to_q == "NO.SUCH.Q"
    # The worker died before Temporal recorded it: the retry puts nothing again, and the
    # gather still ends FAILED.
    again = env.run(acts.put_response, inp)
    with LocalQueueManager(qm_path) as qm:
        assert drain(qm, DEAD_LETTER_QUEUE) == [] and drain(qm, "GATHER.LATE") == []
    assert again.outcome == "FAILED" and again.msg_id == ""
    assert f"put to the dead-letter queue {DEAD_LETTER_QUEUE}" in again.error


def test_a_put_disabled_response_queue_is_retried_then_dead_lettered_naming_it(qm_path):
    """PUT(DISABLED) is a refusal of the destination, as Q_FULL is: retried to the last
    delivery attempt, then dead-lettered with MQRC_PUT_INHIBITED in its MQDLH."""
    spec = AggregateSpec(name="t", legs=(LEG,), delivery_attempts=2)
    with LocalQueueManager(qm_path) as qm:
        attrs = qm.inquire("ORDER.RESPONSE")
        qm.define(attrs.model_copy(update={"put": "disabled"}), replace=True)
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    env = attempt_env()
    with pytest.raises(QueueInhibited, match="MQRC_PUT_INHIBITED"):
        env.run(acts.put_response, response_input(spec))
    env.info = dataclasses.replace(env.info, attempt=2)
    result = env.run(acts.put_response, response_input(spec))
    with LocalQueueManager(qm_path) as qm:
        (dead,) = drain(qm, DEAD_LETTER_QUEUE)
        assert qm.inquire("ORDER.RESPONSE").curdepth == 0
    assert result.outcome == "FAILED" and "MQRC_PUT_INHIBITED" in result.error
    header, _ = dlh.unpack(dead.body)
    assert (header.reason, header.dest_q_name) == (2051, "ORDER.RESPONSE")


def test_a_destination_list_delivers_where_it_can_and_dead_letters_the_rest(qm_path):
    spec = AggregateSpec(name="t", legs=(LEG,), destination="destinationList",
                         destination_list=("ORDER.RESPONSE", "GONE.Q"),
                         delivery_attempts=1)  # fmt: skip
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    result = attempt_env().run(acts.put_response, response_input(spec))
    with LocalQueueManager(qm_path) as qm:
        delivered, dead = drain(qm, "ORDER.RESPONSE"), drain(qm, DEAD_LETTER_QUEUE)
    assert result.outcome == "FAILED" and "GONE.Q" in result.error
    assert len(delivered) == 1 and len(dead) == 1
    assert dlh.unpack(dead[0].body)[0].dest_q_name == "GONE.Q"


def test_a_response_past_maxumsgs_is_retried_whole_not_dead_lettered(qm_path):
    """Six destinations and a ledger marker need 7 puts in one unit of work; MAXUMSGS is
    5. Even on the last delivery attempt that is no fault of a destination: nothing is
    delivered or dead-lettered, the error says what to raise, and once MAXUMSGS is raised
    the retry delivers to all six."""
    queues = tuple(f"OUT.{n}" for n in range(6))
    spec = AggregateSpec(name="t", legs=(LEG,), destination="destinationList",
                         destination_list=queues, delivery_attempts=1)  # fmt: skip
    with LocalQueueManager(qm_path) as admin:
        for queue in queues:
            admin.define(QueueAttributes(name=queue, maxdepth=10))
        admin.set_max_uncommitted(5)
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    env = attempt_env()
    with pytest.raises(SyncpointLimitReached, match=r"MAXUMSGS\(5\).*ALTER QMGR MAXUMSGS"):
        env.run(acts.put_response, response_input(spec))
    with LocalQueueManager(qm_path) as qm:
        assert all(qm.inquire(queue).curdepth == 0 for queue in queues)
        assert drain(qm, DEAD_LETTER_QUEUE) == [] and drain(qm, spec.ledger_queue) == []
        qm.set_max_uncommitted(7)
    result = env.run(acts.put_response, response_input(spec))
    with LocalQueueManager(qm_path) as qm:
        depths = [qm.inquire(queue).curdepth for queue in queues]
    assert result.outcome == "COMPLETE" and depths == [1] * 6


def test_a_response_lives_as_long_as_its_requester_asked_and_no_longer():
    spec = AggregateSpec(name="t", legs=(LEG,))
    now = datetime(2026, 1, 1, tzinfo=UTC)
    asked = {"reply_terms": ReplyTerms(expires_at=now + timedelta(seconds=12.34),
                                       report=MQRO_DISCARD_MSG)}  # fmt: skip
    assert response_life(response_input(spec, **asked), now) == (124, MQRO_DISCARD_MSG)
    assert response_life(response_input(spec, outcome="RELEASED", **asked), now)[0] == 124
    # Its request expired meanwhile: the shortest life MQ takes (0 is refused on a put).
    assert response_life(response_input(spec, **asked), now + timedelta(hours=1))[0] == 1
    far = {"reply_terms": ReplyTerms(expires_at=now + timedelta(days=10_000))}
    assert response_life(response_input(spec, **far), now)[0] == MAX_EXPIRY_TENTHS
    # Partial results on the timeout queue are the operators': they never expire.
    for outcome in ("TIMEOUT", "CANCELLED"):
        assert response_life(response_input(spec, outcome=outcome, **asked), now) == (-1, 0)
    assert response_life(response_input(spec), now) == (-1, 0)


def test_a_response_carries_the_requests_msg_id_when_asked_and_is_still_put_once(qm_path):
    spec = AggregateSpec(name="t", legs=(LEG,))
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    env = attempt_env()
    asked = response_input(spec, reply_terms=ReplyTerms(msg_id=b"R" * 24))
    first = env.run(acts.put_response, asked)
    with LocalQueueManager(qm_path) as requester:
        taken = drain(requester, "ORDER.RESPONSE")
        # Run again after a lost completion: the ledger, keyed apart from that MsgId,
        # knows the PUT was made.
        again = env.run(acts.put_response, asked)
        assert drain(requester, "ORDER.RESPONSE") == []
    assert [m.msg_id for m in taken] == [b"R" * 24] and first == again
    assert first.msg_id == (b"R" * 24).hex()
    # Partial results on the timeout queue are the operators': their MsgId is derived.
    passed = ReplyTerms(msg_id=b"R" * 24)
    assert response_id(response_input(spec, outcome="TIMEOUT", reply_terms=passed)) == (
        response_msg_id(GATHER, "TIMEOUT")
    )


def test_a_forward_an_earlier_release_recorded_by_msg_id_alone_is_not_put_again(qm_path):
    # The worker was upgraded between a forward's commit and Temporal recording it: the
    # retry's reply has a fingerprint, the marker the earlier release left names its
    # MsgId alone, and the forward is still put once.
    spec = AggregateSpec(name="t", legs=(LEG,))
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    late = reply(7)
    late = late.model_copy(update={"fingerprint": fingerprint(late.message)})
    with LocalQueueManager(qm_path) as qm:
        before = ledger_key("forward", GATHER, "GATHER.LATE", late.message.msg_id.hex())
        ledger.mark(qm, spec.ledger_queue, before, "an earlier release's forward", 1)
        qm.commit()
    items = [Routed(kind=Destination.LATE, reply=late, reason="late")]
    attempt_env().run(acts.route_replies, RouteInput(aggregate=spec, gather_id=GATHER,
                                                             items=items))  # fmt: skip
    with LocalQueueManager(qm_path) as consumer:
        assert drain(consumer, "GATHER.LATE") == []


def test_a_response_for_a_requester_on_another_queue_manager_waits_on_the_route_there(qm_path):
    """With a transmission queue named after the requester's queue manager, the response
    waits there behind an MQXQH naming the requester's queue and queue manager, as a
    channel would take it; the queue of the same name here gets nothing."""
    spec = AggregateSpec(name="t", legs=(LEG,), destination="replyToQueue")
    with LocalQueueManager(qm_path) as qm:
        qm.define(QueueAttributes(name="APP.REPLY"))
        qm.define(QueueAttributes(name="QM9", usage="xmitq"))
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    inp = response_input(spec, reply_to_q="APP.REPLY", reply_to_qmgr="QM9",
                         request_msg_id=b"Q" * 24)  # fmt: skip
    result = attempt_env().run(acts.put_response, inp)
    with LocalQueueManager(qm_path) as qm:
        here, waiting = drain(qm, "APP.REPLY"), drain(qm, "QM9")
    assert here == [] and (result.outcome, result.queues) == ("COMPLETE", ["APP.REPLY@QM9"])
    assert len(waiting) == 1
    carried = xqh.unpack(waiting[0].body)
    assert (carried.remote_q_name, carried.remote_q_mgr_name) == ("APP.REPLY", "QM9")
    assert carried.message.correl_id == b"Q" * 24
    assert carried.message.msg_id == response_msg_id(GATHER, "COMPLETE")


# A ReplyToQMgr with no route here; one that names a queue of mqgather's own, which is
# no transmission queue (a hostile or mistaken requester must not reach it); and one
# with a NUL and bytes that are no UTF-8 inside it.
@pytest.mark.parametrize(
    ("qmgr", "reason", "code"),
    [("QM9", "MQRC_UNKNOWN_REMOTE_Q_MGR", 2087),
     ("GATHER.LATE", "MQRC_XMIT_Q_USAGE_ERROR", 2091),
     ("QM9\x00\xe9\xff", "MQRC_UNKNOWN_REMOTE_Q_MGR", 2087)],
)  # fmt: skip
def test_a_response_for_a_requester_on_another_queue_manager_never_lands_on_a_queue_here(
    qm_path, qmgr, reason, code
):
    """The requester's ReplyToQMgr names the queue manager its ReplyToQ is on; a queue of
    the same name here is someone else's. With no route to that queue manager the PUT is
    refused, retried, then dead-lettered naming the queue and queue manager it was for;
    so is the NAN the requester asked for."""
    spec = AggregateSpec(name="t", legs=(LEG,), destination="replyToQueue", delivery_attempts=2)
    prepare_queues(qm_path, ["APP.REPLY", "GATHER.LATE"])
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    inp = response_input(spec, reply_to_q="APP.REPLY", reply_to_qmgr=qmgr,
                         reply_terms=ReplyTerms(notify=MQRO_NAN))  # fmt: skip
    env = attempt_env()
    with pytest.raises(Exception, match=reason):
        env.run(acts.put_response, inp)
    env.info = dataclasses.replace(env.info, attempt=2)
    result = env.run(acts.put_response, inp)
    with LocalQueueManager(qm_path) as qm:
        here = drain(qm, "APP.REPLY") + drain(qm, "GATHER.LATE")
        dead = drain(qm, DEAD_LETTER_QUEUE)
    assert here == []
    assert result.outcome == "FAILED" and result.queues == [DEAD_LETTER_QUEUE]
    assert reason in result.error and "APP.REPLY@" in result.error
    assert [(m.msg_type, m.feedback) for m in dead] == [(MQMT_REPLY, 0), (MQMT_REPORT, MQFB_NAN)]
    for message in dead:
        header, _ = dlh.unpack(message.body)
        assert (header.reason, header.dest_q_name) == (code, "APP.REPLY")
        assert header.dest_q_mgr_name == qmgr


@pytest.mark.parametrize(
    ("outcome", "feedback"),
    [("COMPLETE", MQFB_PAN), ("RELEASED", MQFB_PAN), ("TIMEOUT", MQFB_NAN),
     ("CANCELLED", MQFB_NAN)],
)  # fmt: skip
def test_the_requester_hears_whether_its_request_was_answered_when_it_asks(outcome, feedback):
    spec = AggregateSpec(name="t", legs=(LEG,))
    now = datetime(2026, 1, 1, tzinfo=UTC)
    terms = ReplyTerms(notify=MQRO_PAN | MQRO_NAN, expires_at=now + timedelta(seconds=9),
                       report=MQRO_DISCARD_MSG)  # fmt: skip
    asked = response_input(spec, outcome=outcome, reply_terms=terms, reply_to_q="APP.REPLY",
                           request_msg_id=b"Q" * 24, missing=["STOCK"])  # fmt: skip
    told = notification(asked, now)
    assert told is not None
    assert (told.msg_type, told.feedback, told.correl_id) == (MQMT_REPORT, feedback, b"Q" * 24)
    # It lives as long as a response to that request would, and is told by a MsgId of its
    # own, so a retried PUT of it is recognised.
    assert (told.expiry, told.report) == (90, MQRO_DISCARD_MSG)
    assert told.msg_id == response_msg_id(GATHER, f"{outcome} notification")
    assert told.properties["mqgather_state"] == outcome
    assert told.properties["mqgather_missing"] == "STOCK"
    # Only the one it asked for; none without a ReplyToQ to send it to.
    one = terms.model_copy(update={"notify": MQRO_PAN if feedback == MQFB_NAN else MQRO_NAN})
    assert notification(asked.model_copy(update={"reply_terms": one}), now) is None
    assert notification(asked.model_copy(update={"reply_to_q": ""}), now) is None
    assert notification(asked.model_copy(update={"reply_terms": None}), now) is None
    # A response its destination refused for good answered nobody.
    if feedback == MQFB_PAN:
        failed = notification(asked, now, failed=True)
        assert failed is not None and failed.feedback == MQFB_NAN
        assert failed.properties["mqgather_state"] == "FAILED"


def with_requester(qm_path: Path) -> tuple[AggregateSpec, MQActivities, ActivityEnvironment]:
    """An aggregate, its activities, and its requester's reply queue APP.REPLY."""
    with LocalQueueManager(qm_path) as qm:
        qm.define(QueueAttributes(name="APP.REPLY"))
    spec = AggregateSpec(name="t", legs=(LEG,))
    return spec, MQActivities(lambda: LocalQueueManager(qm_path)), attempt_env()


def test_a_negative_action_notification_is_put_once_beside_the_partial_result(qm_path):
    spec, acts, env = with_requester(qm_path)
    timed_out = response_input(spec, outcome="TIMEOUT", reply_to_q="APP.REPLY",
                               request_msg_id=b"Q" * 24,
                               reply_terms=ReplyTerms(notify=MQRO_NAN))  # fmt: skip
    env.run(acts.put_response, timed_out)
    with LocalQueueManager(qm_path) as requester:
        told = drain(requester, "APP.REPLY")
        partial = drain(requester, "GATHER.TIMEOUT")
        # Run again after a lost completion: neither is put twice.
        env.run(acts.put_response, timed_out)
        assert drain(requester, "APP.REPLY") == [] == drain(requester, "GATHER.TIMEOUT")
    assert [(m.feedback, m.correl_id) for m in told] == [(MQFB_NAN, b"Q" * 24)]
    assert len(partial) == 1


def test_an_undeliverable_notification_is_dead_lettered_and_the_outcome_stands(qm_path):
    spec = AggregateSpec(name="t", legs=(LEG,), delivery_attempts=1)
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    timed_out = response_input(spec, outcome="TIMEOUT", reply_to_q="GONE.Q",
                               reply_terms=ReplyTerms(notify=MQRO_NAN))  # fmt: skip
    result = attempt_env().run(acts.put_response, timed_out)
    with LocalQueueManager(qm_path) as qm:
        partial, dead = drain(qm, "GATHER.TIMEOUT"), drain(qm, DEAD_LETTER_QUEUE)
    assert result.outcome == "TIMEOUT" and len(partial) == 1
    header, _ = dlh.unpack(dead[0].body)
    assert len(dead) == 1 and header.dest_q_name == "GONE.Q"


def test_a_notification_the_dead_letter_queue_refuses_too_is_left_out_and_the_outcome_stands(
    qm_path,
):
    # The partial result was put; the notification, which came in from no one, held the
    # gather's final back for ever.
    spec = AggregateSpec(name="t", legs=(LEG,), delivery_attempts=1)
    with LocalQueueManager(qm_path) as qm:
        qm.define(qm.inquire(DEAD_LETTER_QUEUE).model_copy(update={"put": "disabled"}),
                  replace=True)  # fmt: skip
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    timed_out = response_input(spec, outcome="TIMEOUT", reply_to_q="GONE.Q",
                               reply_terms=ReplyTerms(notify=MQRO_NAN))  # fmt: skip
    result = attempt_env().run(acts.put_response, timed_out)
    with LocalQueueManager(qm_path) as qm:
        assert len(drain(qm, "GATHER.TIMEOUT")) == 1 and drain(qm, "GATHER.FAILURE") == []
    assert result.outcome == "TIMEOUT"


def test_a_gather_whose_legs_cannot_be_merged_tells_its_requester_once(qm_path):
    spec, acts, env = with_requester(qm_path)
    bad = reply(3)
    bad = bad.model_copy(update={"message": bad.message.model_copy(update={"body": b"{no"})})
    failing = response_input(spec, legs=[ReceivedLeg(leg=LEG, replies=[bad])],
                             reply_to_q="APP.REPLY", request_msg_id=b"Q" * 24,
                             reply_terms=ReplyTerms(notify=MQRO_PAN | MQRO_NAN))  # fmt: skip
    first = env.run(acts.put_response, failing)
    with LocalQueueManager(qm_path) as requester:
        told = drain(requester, "APP.REPLY")
        failed = drain(requester, "GATHER.FAILURE")
        again = env.run(acts.put_response, failing)
        assert drain(requester, "APP.REPLY") == [] == drain(requester, "GATHER.FAILURE")
    assert first.outcome == again.outcome == "FAILED"
    assert [(m.feedback, m.properties["mqgather_state"]) for m in told] == [(MQFB_NAN, "FAILED")]
    assert [m.body for m in failed] == [b"{no"]
    # Reset after that, the gather takes a good CREDIT (policy "last"): the failure
    # stands; the good one goes late, the bad one stays on the failure queue alone.
    good = ReceivedLeg(leg=LEG, replies=[reply(4)])
    after_reset = failing.model_copy(update={"legs": [good], "after_reset": True})
    result = env.run(acts.put_response, after_reset)
    with LocalQueueManager(qm_path) as qm:
        assert drain(qm, "ORDER.RESPONSE") == [] == drain(qm, "GATHER.FAILURE")
        assert drain(qm, "APP.REPLY") == []  # nor is the requester told again
        assert [m.msg_id for m in drain(qm, "GATHER.LATE")] == [bytes([4]) * 24]
    assert result.outcome == "FAILED" and "merge failed" in result.error


def test_a_leg_named_twice_is_merged_once_with_its_replies(qm_path):
    # A registration taken before such were refused: both entries carry the leg's replies.
    spec = AggregateSpec(name="t", legs=(LEG,), merge="blob")
    twice = [ReceivedLeg(leg=LEG, replies=[reply(5)]), ReceivedLeg(leg=LEG, replies=[reply(5)])]
    result = attempt_env().run(
        MQActivities(lambda: LocalQueueManager(qm_path)).put_response,
        response_input(spec, legs=twice),
    )
    with LocalQueueManager(qm_path) as qm:
        (response,) = drain(qm, "ORDER.RESPONSE")
    assert result.outcome == "COMPLETE" and response.body == b'{"ok":1}'


def test_json_legs_equal_but_for_case_fail_the_merge_and_go_to_failure_whole(qm_path):
    lower = LegSpec(name="credit", sequence=20)
    spec = AggregateSpec(name="t", legs=(LEG,), merge="json")
    second = reply(7).model_copy(update={"leg": "credit"})
    legs = [ReceivedLeg(leg=LEG, replies=[reply(6)]), ReceivedLeg(leg=lower, replies=[second])]
    result = attempt_env().run(
        MQActivities(lambda: LocalQueueManager(qm_path)).put_response,
        response_input(spec, legs=legs),
    )
    with LocalQueueManager(qm_path) as qm:
        assert drain(qm, "ORDER.RESPONSE") == []
        failed = drain(qm, "GATHER.FAILURE")
    # Merged, the one would have been written over the other under the key "credit".
    assert sorted(m.msg_id for m in failed) == [bytes([6]) * 24, bytes([7]) * 24]
    assert result.outcome == "FAILED" and "CREDIT and credit are one key" in result.error


def _big(n: int) -> Reply:
    """A reply whose body is worth moving to the hold queue."""
    r = reply(n)
    message = r.message.model_copy(update={"body": b'{"n":"%d"}' % n + b" " * 4000})
    return r.model_copy(update={"message": message, "size": len(message.body),
                                "fingerprint": fingerprint(message)})  # fmt: skip


def _hold(env, acts: MQActivities, spec: AggregateSpec, *replies):
    """Move ``replies`` of the test's gather to the hold queue; the move's result."""
    return env.run(acts.hold_replies, HoldRepliesInput(aggregate=spec, gather_id=GATHER,
                                                       replies=list(replies)))  # fmt: skip


def test_replies_moved_to_the_hold_queue_are_put_there_once_across_retries(qm_path):
    spec = AggregateSpec(name="t", legs=(LEG,))
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    inp = HoldRepliesInput(aggregate=spec, gather_id=GATHER, replies=[_big(1), _big(2)])
    env = attempt_env()
    first = env.run(acts.hold_replies, inp)
    # The worker died before Temporal recorded the move: it runs again.
    again = env.run(acts.hold_replies, inp)
    with LocalQueueManager(qm_path) as qm:
        held = drain(qm, spec.hold_queue)
    assert first == again
    assert [m.msg_id for m in held] == [bytes([1]) * 24, bytes([2]) * 24]
    assert [m.body for m in held] == [r.message.body for r in inp.replies]
    assert [(h.msg_id, h.sha256) for h in first.held] == [(m.msg_id, body_digest(m)) for m in held]


def test_a_reply_moved_to_the_hold_queue_is_taken_from_there_though_its_gather_kept_the_body(
    qm_path,
):
    # The move committed, and its result never reached the gather (it was cancelled or
    # reset meanwhile): its state still carries the body, and the hold queue a copy.
    spec = AggregateSpec(name="t", legs=(LEG,))
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    env = attempt_env()
    moved, kept = _big(1), _big(2)
    _hold(env, acts, spec, moved)
    legs = [ReceivedLeg(leg=LEG, replies=[moved])]
    env.run(acts.put_response, response_input(spec, legs=legs, moved_to_hold=True))
    items = [Routed(kind=Destination.DUPLICATE, reply=kept, reason="dup")]
    _hold(env, acts, spec, kept)
    env.run(acts.route_replies, RouteInput(aggregate=spec, gather_id=GATHER, items=items,
                                           moved_to_hold=True))  # fmt: skip
    with LocalQueueManager(qm_path) as qm:
        response, duplicates = drain(qm, "ORDER.RESPONSE"), drain(qm, "GATHER.DUPLICATE")
        assert drain(qm, spec.hold_queue) == []
    assert json.loads(response[0].body)["legs"] == {"credit": {"n": "1"}}
    assert [m.body for m in duplicates] == [kept.message.body]


def test_a_move_that_runs_on_after_its_gathers_final_leaves_nothing_on_the_hold_queue(
    qm_path,
):
    # A cancel came while the gather moved its replies: the move's thread ran on (a local
    # activity's is not stopped), and got its turn only after the response, which carried
    # the body it still had inline. Its copy on the hold queue then belonged to no one:
    # the hold check sent it to the late queue, a second place for a reply answered.
    spec = AggregateSpec(name="t", legs=(LEG,))
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    env = attempt_env()
    carried, other = _big(1), _big(2)
    legs = [ReceivedLeg(leg=LEG, replies=[carried])]
    env.run(acts.put_response, response_input(spec, legs=legs, moved_to_hold=True))
    late = _hold(env, acts, spec, carried, other)
    with LocalQueueManager(qm_path) as qm:
        (response,) = drain(qm, "ORDER.RESPONSE")
        held = drain(qm, spec.hold_queue)
    assert json.loads(response.body)["legs"] == {"credit": {"n": "1"}}
    # What the final did not carry is moved as ever: its gather still holds it.
    assert [m.body for m in held] == [other.message.body]
    assert len(late.held) == 2


class _Racing(LocalQueueManager):
    """The embedded queue manager, where ``between`` runs (once) as this connection's
    first unit of work is about to commit: another worker's unit of work then looks and
    commits between this one's look and its commit."""

    def __init__(self, path: Path, between: Callable[[], object]) -> None:
        super().__init__(path)
        self._between = [between]

    def commit(self) -> None:
        while self._between:
            self._between.pop()()
        super().commit()


def _racing(path: Path, between: Callable[[], object]) -> Callable[[], LocalQueueManager]:
    return lambda: _Racing(path, between)


def test_a_move_committed_after_the_final_on_another_worker_looked_leaves_no_copy(qm_path):
    # A cancelled move's thread ran on, on one worker, while the gather's final ran on
    # another: the move looked for the final before it committed, the final looked for
    # the move before the move committed. Both committed, the body carried in the
    # response and a copy on the hold queue, which the hold check sent to the late queue.
    spec = AggregateSpec(name="t", legs=(LEG,))
    carried = _big(1)
    legs = [ReceivedLeg(leg=LEG, replies=[carried])]
    final = MQActivities(lambda: LocalQueueManager(qm_path))
    moving = attempt_env()

    def respond() -> None:
        attempt_env().run(final.put_response, response_input(spec, legs=legs, moved_to_hold=True))
        moving.cancel()  # the gather moved on: the move is cancelled by the time it looks

    mover = MQActivities(_racing(qm_path, respond))
    _hold(moving, mover, spec, carried)
    with LocalQueueManager(qm_path) as qm:
        (response,) = drain(qm, "ORDER.RESPONSE")
        assert drain(qm, spec.hold_queue) == []
    assert json.loads(response.body)["legs"] == {"credit": {"n": "1"}}


def test_a_final_committed_after_a_move_on_another_worker_looked_leaves_no_copy(qm_path):
    # The other order: the move looked for the final, and committed, while the final,
    # which had looked for the move before, had yet to commit.
    spec = AggregateSpec(name="t", legs=(LEG,))
    carried, other = _big(1), _big(2)
    legs = [ReceivedLeg(leg=LEG, replies=[carried])]
    mover = MQActivities(lambda: LocalQueueManager(qm_path))
    answering = attempt_env()

    def move() -> None:
        _hold(attempt_env(), mover, spec, carried, other)
        answering.cancel()  # cancelled after its commit: it withdraws all the same

    final = MQActivities(_racing(qm_path, move))
    answering.run(final.put_response, response_input(spec, legs=legs, moved_to_hold=True))
    with LocalQueueManager(qm_path) as qm:
        (response,) = drain(qm, "ORDER.RESPONSE")
        held = drain(qm, spec.hold_queue)
    assert json.loads(response.body)["legs"] == {"credit": {"n": "1"}}
    # What the final did not carry stays: its gather still holds it.
    assert [m.body for m in held] == [other.message.body]


def test_a_response_the_dead_letter_queue_refuses_too_sends_its_replies_to_the_failure_queue(
    qm_path,
):
    # A response longer than the response queue's MAXMSGL and the dead-letter queue's (4 MB
    # on a new queue manager, against 100 MB application queues): its last attempt's DLQ
    # put failed too, and the PUT was retried for ever, the replies in no place.
    spec = AggregateSpec(name="t", legs=(LEG,), merge="blob", delivery_attempts=1)
    with LocalQueueManager(qm_path) as qm:
        for queue in ("ORDER.RESPONSE", DEAD_LETTER_QUEUE):
            attrs = qm.inquire(queue).model_copy(update={"maxmsgl": 300})
            qm.define(attrs, replace=True)
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    env = attempt_env()
    first, second = _big(1), _big(2)
    # The second waits on the hold queue, its body there.
    moved = _hold(env, acts, spec, second)
    legs = [ReceivedLeg(leg=LEG, replies=[first, as_held(second, moved.held[0])])]
    inp = response_input(spec, legs=legs)
    result = env.run(acts.put_response, inp)
    again = env.run(acts.put_response, inp)  # retried after its commit: nothing twice
    with LocalQueueManager(qm_path) as qm:
        assert drain(qm, "ORDER.RESPONSE") == [] and drain(qm, DEAD_LETTER_QUEUE) == []
        assert drain(qm, spec.hold_queue) == []
        failed = drain(qm, "GATHER.FAILURE")
    assert [(m.msg_id, m.body) for m in failed] == [
        (r.message.msg_id, r.message.body) for r in (first, second)]  # fmt: skip
    reason = str(failed[0].properties[PROP_REASON])
    assert reason.count("MQRC_MSG_TOO_BIG_FOR_Q") == 2 and DEAD_LETTER_QUEUE in reason
    assert result.outcome == again.outcome == "FAILED" and result.queues == ["GATHER.FAILURE"]
    assert DEAD_LETTER_QUEUE in result.error


def test_a_failed_merge_of_a_held_reply_retried_after_its_commit_stands(qm_path):
    # The worker died before Temporal recorded the failed merge: the retry looked for the
    # held body, which had gone to the failure queue, and failed on every attempt.
    spec = AggregateSpec(name="t", legs=(LEG,))
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    env = attempt_env()
    bad = _big(1)
    bad = bad.model_copy(update={"message": bad.message.model_copy(update={"body": b"{no"})})
    moved = _hold(env, acts, spec, bad)
    inp = response_input(spec, legs=[ReceivedLeg(leg=LEG, replies=[as_held(bad, moved.held[0])])])
    first = env.run(acts.put_response, inp)
    again = env.run(acts.put_response, inp)
    with LocalQueueManager(qm_path) as qm:
        (failed,) = drain(qm, "GATHER.FAILURE")
        assert drain(qm, "ORDER.RESPONSE") == [] and drain(qm, spec.hold_queue) == []
    assert failed.body == b"{no" and "merge failed" in str(failed.properties[PROP_REASON])
    assert first.outcome == again.outcome == "FAILED"


def test_a_forward_its_queue_refuses_for_good_is_dead_lettered_on_its_last_attempt(qm_path):
    # A duplicate longer than GATHER.DUPLICATE's MAXMSGL (or the queue full): the forward
    # failed on every attempt, for ever, and the gather, which forwards before it decides,
    # never answered, its deadline long past.
    spec = AggregateSpec(name="t", legs=(LEG,), delivery_attempts=3)
    with LocalQueueManager(qm_path) as qm:
        attrs = qm.inquire("GATHER.DUPLICATE").model_copy(update={"maxmsgl": 300})
        qm.define(attrs, replace=True)
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    # Held, in EBCDIC, with properties JSON cannot say plainly: all of it stays as it came.
    ebcdic = MQMessage(msg_id=bytes([8]) * 24, correl_id=b"C", coded_char_set_id=37,
                       body="Antwort ".encode("cp037") * 100,
                       properties={"leg": "CREDIT", "nan": math.nan, "k\udcff": 1})  # fmt: skip
    small = reply(7)
    long = small.model_copy(update={"message": ebcdic, "size": len(ebcdic.body),
                                    "fingerprint": fingerprint(ebcdic)})  # fmt: skip
    moved = _hold(attempt_env(), acts, spec, long)
    items = [Routed(kind=Destination.DUPLICATE, reason="dup", reply=small),
             Routed(kind=Destination.DUPLICATE, reason="dup",
                    reply=as_held(long, moved.held[0]))]  # fmt: skip
    inp = RouteInput(aggregate=spec, gather_id=GATHER, items=items, attempts_before=1)
    env = attempt_env()
    with pytest.raises(Exception, match="MQRC_MSG_TOO_BIG_FOR_Q"):
        env.run(acts.route_replies, inp)  # attempt 2 of 3: retried
    with LocalQueueManager(qm_path) as qm:
        assert drain(qm, DEAD_LETTER_QUEUE) == [] and qm.inquire(spec.hold_queue).curdepth == 1
    env.info = dataclasses.replace(env.info, attempt=2)
    assert env.run(acts.route_replies, inp) == 2
    env.run(acts.route_replies, inp)  # retried after its commit: nothing twice
    with LocalQueueManager(qm_path) as qm:
        duplicates, dead = drain(qm, "GATHER.DUPLICATE"), drain(qm, DEAD_LETTER_QUEUE)
        assert drain(qm, spec.hold_queue) == []
    assert [m.msg_id for m in duplicates] == [small.message.msg_id]
    (dead_one,) = dead
    header, body = dlh.unpack(dead_one.body)
    assert header.reason == 2030 and header.dest_q_name == "GATHER.DUPLICATE"
    assert body == long.message.body and dead_one.msg_id == long.message.msg_id
    assert header.coded_char_set_id == 37
    assert dead_one.properties[PROP_REASON] == "dup" and dead_one.properties["k\udcff"] == 1
    assert math.isnan(dead_one.properties["nan"])


def test_a_re_request_its_queue_refuses_for_good_is_dead_lettered_on_its_last_attempt(qm_path):
    # The back end's request queue PUT(DISABLED): the re-request was retried for ever,
    # and the gather, waiting on it, let its deadline pass without a response.
    spec = AggregateSpec(name="t", legs=(LEG,), delivery_attempts=2)
    with LocalQueueManager(qm_path) as qm:
        attrs = qm.inquire("ORDER.RESPONSE")
        qm.define(attrs.model_copy(update={"name": "CREDIT.REQ", "put": "disabled"}))
    acts = MQActivities(lambda: LocalQueueManager(qm_path))
    asked = MQMessage(msg_id=b"R" * 24, correl_id=b"C" * 24, body=b"ask")
    inp = SendRequestInput(aggregate=spec, gather_id=GATHER, leg="CREDIT", attempt=2,
                           request=LegRequest(queue="CREDIT.REQ", message=asked))  # fmt: skip
    env = attempt_env()
    with pytest.raises(QueueInhibited, match="MQRC_PUT_INHIBITED"):
        env.run(acts.send_request, inp)
    last = inp.model_copy(update={"attempts_before": 1})
    sent = env.run(acts.send_request, last)
    assert env.run(acts.send_request, last) == sent  # retried after its commit: once
    with LocalQueueManager(qm_path) as qm:
        (dead,) = drain(qm, DEAD_LETTER_QUEUE)
    header, body = dlh.unpack(dead.body)
    assert (header.reason, header.dest_q_name, body) == (2051, "CREDIT.REQ", b"ask")
    assert dead.msg_id.hex() == sent and dead.correl_id == asked.correl_id
