"""Record a fresh set of gather and collector histories from the current workflow code.

    python -m tests.workflows.record [SET]      (or: make histories)

Runs one real gather per path the workflow can take — complete, duplicates first / last
/ all, a late reply inside the late window, replies before registration with the restart
timer, timeout, unknown, extend then release, cancel (by update and through Temporal), a
PUT retried until its queue has room, a duplicate its queue refuses for good (put to
the dead-letter queue), static mode, a leg body the merge refuses, continue-as-new, a
logical group with a gap and a duplicate, replies that share one MsgId with a
redelivery among them, a leg asked again on MQ's report that its request was not
delivered — and one collector destination per path a collector can take (closed by
count, delay, bytes or an operator's release, a group batch, a PUT retried,
continue-as-new, messages that share a MsgId), through the bridges, a worker
and the embedded queue manager on a dev server of its own, and writes each run's history
to ``tests/workflows/histories/SET/<path>.json`` (SET defaults to the worker's build
id). Recorded sets are kept: the suite replays every one of them against the current
code.

With ``--large`` it records instead the gathers whose state outgrows what a run can
carry (their replies moved to the hold queue before continuing as new, and a move the
hold queue refuses giving way to the response) and a collector whose batches closed
while it settled would outgrow it (they are PUT first), on a server that suggests
continue-as-new sooner, each history gzipped (``SET-large/<path>.json.gz``): their
bodies run to megabytes, and repeat.

With ``--sealed`` every payload is sealed by the codec, with a key ring made for the set
and kept beside it as ``_keys.json`` (a test key that seals nothing else), so the suite
replays sealed histories too.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.converter import DataConverter
from temporalio.testing import WorkflowEnvironment

from bridge.mq.models import Match, MQMessage, MsgFlags, PutOptions, QueueAttributes, parse_id
from mqgather.collector_config import CollectorSpec
from mqgather.config import AggregateSpec, LegSpec
from mqgather.names import PATCH_CARRY_FITS, SEARCH_ATTRIBUTES
from mqgather.runtime.codec import KeyRing, data_converter, new_key
from mqgather.runtime.temporal import require_temporal_cli
from tests.collecting import SPEC, Collecting, collecting, order
from tests.harness import Pipeline, pipeline, reset_to_first_task, status, taken, until
from workers.worker import default_build_id
from workflows.collect_models import ReleaseBatchInput, collector_id
from workflows.collector import CollectorWorkflow
from workflows.gather import GatherWorkflow
from workflows.models import CancelInput, ExtendInput, ReleaseInput

HISTORIES = Path(__file__).parent / "histories"
LEGS = (LegSpec(name="CREDIT", sequence=10), LegSpec(name="STOCK", sequence=20),
        LegSpec(name="TAX", sequence=30))  # fmt: skip
#: The server suggests continue-as-new past this many events, so one scenario reaches it.
CONTINUE_AS_NEW_EVENTS = 40

Scenario = Callable[[Pipeline, AggregateSpec], Awaitable[bytes]]


async def complete_first_late(p: Pipeline, s: AggregateSpec) -> bytes:
    g = await p.scatter(s)
    p.reply(s, g.correl_id, "CREDIT", b'{"c":1}')
    await until(lambda: status(p.handle(s, g.correl_id)), lambda st: st.legs_received)
    p.reply(s, g.correl_id, "CREDIT", b'{"c":2}')
    await until(lambda: status(p.handle(s, g.correl_id)), lambda st: st.duplicates == 1)
    p.reply(s, g.correl_id, "STOCK", b'{"s":1}')
    p.reply(s, g.correl_id, "TAX", b'{"t":1}')
    await p.wait_message(s.response_queue)
    p.reply(s, g.correl_id, "TAX", b'{"late":1}')  # inside the late window
    await p.wait_message(s.late_queue)
    return g.correl_id


async def duplicate_last(p: Pipeline, s: AggregateSpec) -> bytes:
    g = await p.scatter(s)
    for leg, body in (("STOCK", b'{"s":1}'), ("STOCK", b'{"s":2}')):
        p.reply(s, g.correl_id, leg, body)
        await until(lambda: status(p.handle(s, g.correl_id)), lambda st: st.legs_received)
    await until(lambda: status(p.handle(s, g.correl_id)), lambda st: st.duplicates == 1)
    p.reply(s, g.correl_id, "CREDIT", b"{}")
    p.reply(s, g.correl_id, "TAX", b"{}")
    await p.result(s, g.correl_id)
    return g.correl_id


async def early_restart_all(p: Pipeline, s: AggregateSpec) -> bytes:
    correl = parse_id("EARLY-1")
    for leg in ("CREDIT", "CREDIT", "STOCK"):
        p.reply(s, correl, leg, b'{"early":1}')
    await until(lambda: status(p.handle(s, correl)), lambda st: st.held == 3)
    await p.scatter(s, correl_id=correl)
    await p.scatter(s, correl_id=correl)  # restarts the timer
    p.reply(s, correl, "TAX", b"{}")
    await p.result(s, correl)
    return correl


async def timeout(p: Pipeline, s: AggregateSpec) -> bytes:
    sent, _ = await p.partial(s, parse_id("TIMEOUT-1"), {"CREDIT": b"<a/>"}, 0.5)
    await p.result(s, sent.correl_id)
    return sent.correl_id


async def unknown(p: Pipeline, s: AggregateSpec) -> bytes:
    correl = parse_id("NOBODY-1")
    p.reply(s, correl, "TAX", b"{}")
    await p.wait_message(s.unknown_queue)
    await p.result(s, correl)
    return correl


async def _one_leg_then(
    p: Pipeline, s: AggregateSpec, leg: str, act: Callable[[WorkflowHandle], Awaitable[object]]
) -> bytes:
    """A gather with one leg in, then an operator's ``act`` on it, until it closes."""
    g = await p.scatter(s)
    p.reply(s, g.correl_id, leg, b"{}")
    handle = p.handle(s, g.correl_id)
    await until(lambda: status(handle), lambda st: st.legs_received)
    await act(handle)
    await p.result(s, g.correl_id)
    return g.correl_id


async def extend_release(p: Pipeline, s: AggregateSpec) -> bytes:
    async def act(handle: WorkflowHandle) -> None:
        await handle.execute_update(GatherWorkflow.extend, ExtendInput(seconds=600))
        await handle.execute_update(GatherWorkflow.release, ReleaseInput(reason="recorded"))

    return await _one_leg_then(p, s, "CREDIT", act)


async def cancel(p: Pipeline, s: AggregateSpec) -> bytes:
    return await _one_leg_then(
        p,
        s,
        "STOCK",
        lambda h: h.execute_update(GatherWorkflow.cancel, CancelInput(reason="withdrawn")),
    )


async def temporal_cancel(p: Pipeline, s: AggregateSpec) -> bytes:
    return await _one_leg_then(p, s, "STOCK", lambda h: h.cancel())  # the UI's button


async def reset_after_cancel(p: Pipeline, s: AggregateSpec) -> bytes:
    """Cancelled with CREDIT, reset by an operator, then STOCK and a cancel again: the run
    after the reset finds the partial of the run before, and sends STOCK late."""
    sent = await p.scatter(s)
    handle = p.handle(s, sent.correl_id)
    p.reply(s, sent.correl_id, "CREDIT", b'{"c":1}')
    await until(lambda: status(handle), lambda st: st.legs_received == ["CREDIT"])
    await handle.cancel()
    await handle.result()
    run = await reset_to_first_task(p.client, handle)
    after = p.client.get_workflow_handle(handle.id, run_id=run)
    await until(lambda: status(after), lambda st: st.legs_received == ["CREDIT"])
    p.reply(s, sent.correl_id, "STOCK", b'{"s":1}')
    await until(lambda: status(after), lambda st: len(st.legs_received) == 2)
    await after.cancel()
    return sent.correl_id


async def put_retried(p: Pipeline, s: AggregateSpec) -> bytes:
    p.qm.define(QueueAttributes(name="ORDER.RESPONSE", maxdepth=1), replace=True)
    blocker = p.put("ORDER.RESPONSE", MQMessage(body=b"in the way"))
    g = await p.scatter(s)
    for leg in ("CREDIT", "STOCK", "TAX"):
        p.reply(s, g.correl_id, leg, b"{}")
    handle = p.handle(s, g.correl_id)
    await until(lambda: status(handle), lambda st: st.last_error, 30)
    p.qm.get("ORDER.RESPONSE", match=Match(msg_id=blocker.msg_id), syncpoint=False)
    await p.result(s, g.correl_id)
    return g.correl_id


async def duplicate_dead_lettered(p: Pipeline, s: AggregateSpec) -> bytes:
    attrs = p.qm.inquire(s.duplicate_queue).model_copy(update={"maxmsgl": 100})
    p.qm.define(attrs, replace=True)  # shorter than the duplicate: refused for good
    g = await p.scatter(s)
    p.reply(s, g.correl_id, "CREDIT", b'{"c":1}')
    p.reply(s, g.correl_id, "CREDIT", b'{"c":2}' + b" " * 200)
    await p.wait_message("SYSTEM.DEAD.LETTER.QUEUE")
    p.reply(s, g.correl_id, "STOCK", b"{}")
    p.reply(s, g.correl_id, "TAX", b"{}")
    await p.result(s, g.correl_id)
    return g.correl_id


async def static_blob(p: Pipeline, s: AggregateSpec) -> bytes:
    correl = parse_id("STATIC-1")
    for leg in ("TAX", "CREDIT", "STOCK"):
        p.reply(s, correl, leg, leg.encode())
    await p.wait_message(s.response_queue)
    return correl


async def merge_failed(p: Pipeline, s: AggregateSpec) -> bytes:
    g = await p.scatter(s)
    p.reply(s, g.correl_id, "CREDIT", b"{not json")
    p.reply(s, g.correl_id, "STOCK", b"{}")
    p.reply(s, g.correl_id, "TAX", b"{}")
    await p.result(s, g.correl_id)
    return g.correl_id


async def continue_as_new(p: Pipeline, s: AggregateSpec) -> bytes:
    g = await p.scatter(s)
    handle = p.handle(s, g.correl_id)
    # Each duplicate arrives on its own: one signal and one task each, until the history
    # is long enough for the server to suggest continue-as-new.
    for n in range(CONTINUE_AS_NEW_EVENTS // 3):
        p.reply(s, g.correl_id, "CREDIT", b'{"n":%d}' % n)
        await until(lambda n=n: status(handle), lambda st, n=n: st.duplicates >= n)
    p.reply(s, g.correl_id, "STOCK", b"{}")
    p.reply(s, g.correl_id, "TAX", b"{}")
    await p.result(s, g.correl_id)
    return g.correl_id


async def group_gap_duplicate(p: Pipeline, s: AggregateSpec) -> bytes:
    group = parse_id("GROUP-1")
    for seq, flags in ((3, MsgFlags.LAST_MSG_IN_GROUP), (1, MsgFlags.MSG_IN_GROUP),
                       (1, MsgFlags.MSG_IN_GROUP)):  # fmt: skip
        message = MQMessage(correl_id=parse_id("REQ-G"), group_id=group, msg_seq_number=seq,
                            msg_flags=int(flags), body=b'{"n":%d}' % seq)  # fmt: skip
        p.put(s.reply_queue, message)
    await until(lambda: status(p.handle(s, group)), lambda st: st.duplicates == 1)
    await p.result(s, group)  # times out: 2 never comes
    return group


async def quorum(p: Pipeline, s: AggregateSpec) -> bytes:
    g = await p.scatter(s)
    p.reply(s, g.correl_id, "TAX", b"{}")
    p.reply(s, g.correl_id, "STOCK", b"{}")
    await p.result(s, g.correl_id)
    return g.correl_id


async def expression_late(p: Pipeline, s: AggregateSpec) -> bytes:
    g = await p.scatter(s)
    p.reply(s, g.correl_id, "STOCK", b"{}")
    await until(lambda: status(p.handle(s, g.correl_id)), lambda st: st.legs_received)
    p.reply(s, g.correl_id, "CREDIT", b"{}")
    await p.wait_message(s.response_queue)
    p.reply(s, g.correl_id, "TAX", b"{}")  # the rule held without it: late
    await p.wait_message(s.late_queue)
    return g.correl_id


async def optional_leg(p: Pipeline, s: AggregateSpec) -> bytes:
    g = await p.scatter(s)
    p.reply(s, g.correl_id, "CREDIT", b"{}")
    p.reply(s, g.correl_id, "STOCK", b"{}")
    await p.result(s, g.correl_id)  # at TAX's own deadline
    return g.correl_id


async def leg_lost(p: Pipeline, s: AggregateSpec) -> bytes:
    g = await p.scatter(s)
    p.reply(s, g.correl_id, "STOCK", b"{}")
    await p.result(s, g.correl_id)  # TIMEOUT at CREDIT's own deadline
    return g.correl_id


async def rerequested(p: Pipeline, s: AggregateSpec) -> bytes:
    g = await p.scatter(s)
    p.reply(s, g.correl_id, "STOCK", b"{}")
    p.reply(s, g.correl_id, "TAX", b"{}")
    await p.wait_message("BACKEND.CREDIT")  # the back end drops the first request
    again = await p.wait_message("BACKEND.CREDIT")
    p.reply(s, again.correl_id, "CREDIT", b"{}")
    await p.result(s, g.correl_id)
    return g.correl_id


async def rerequest_reported(p: Pipeline, s: AggregateSpec) -> bytes:
    g = await p.scatter(s)
    first = await p.wait_message("BACKEND.CREDIT")
    # A message channel agent's exception report: the request could not be delivered.
    report = MQMessage(msg_type=4, feedback=2053, correl_id=first.msg_id, format="")
    p.put(s.reply_queue, report)
    again = await p.wait_message("BACKEND.CREDIT")
    for request in (
        again,
        await p.wait_message("BACKEND.STOCK"),
        await p.wait_message("BACKEND.TAX"),
    ):
        p.put(s.reply_queue, MQMessage(correl_id=request.correl_id, body=b"{}"))
    await p.result(s, g.correl_id)
    return g.correl_id


async def reused_msg_id(p: Pipeline, s: AggregateSpec) -> bytes:
    g = await p.scatter(s)
    handle = p.handle(s, g.correl_id)
    shared = parse_id("PASSED-ON")  # back ends that pass the request's MsgId on
    sent = []
    for leg in ("CREDIT", "STOCK", "TAX"):
        message = MQMessage(msg_id=shared, correl_id=g.correl_id, properties={"leg": leg},
                            body=b'{"leg":"%s"}' % leg.encode())  # fmt: skip
        sent.append(p.put(s.reply_queue, message))
        if leg == "CREDIT":
            await until(lambda: status(handle), lambda st: st.legs_received)
            # CREDIT again, as a bridge killed before MQCMIT leaves it: a redelivery.
            p.qm.put(s.reply_queue, sent[0], PutOptions(syncpoint=False, set_all_context=True))
            await until(lambda: status(handle), lambda st: st.redeliveries == 1)
    await p.result(s, g.correl_id)
    return g.correl_id


GROUP = {"legs": (), "mode": "static", "leg_identification": "group", "merge": "json",
         "timeout_seconds": 2}  # fmt: skip
SCENARIOS: dict[str, tuple[Scenario, dict[str, object]]] = {
    "complete_first_late": (complete_first_late, {"late_window_seconds": 2}),
    "duplicate_last": (duplicate_last, {"duplicates": "last"}),
    "early_restart_all": (early_restart_all, {"timer": "restart", "duplicates": "all"}),
    "timeout_xml": (timeout, {"merge": "xml"}),
    "unknown": (unknown, {"unknown_timeout_seconds": 1}),
    "extend_release": (extend_release, {}),
    "cancel": (cancel, {}),
    "temporal_cancel": (temporal_cancel, {}),
    "put_retried": (put_retried, {}),
    "duplicate_dead_lettered": (duplicate_dead_lettered, {
        "delivery_attempts": 1, "duplicate_queue": "GATHER.DUPLICATE"}),
    "static_blob": (static_blob, {"mode": "static", "merge": "blob", "separator": "|"}),
    "merge_failed": (merge_failed, {}),
    "continue_as_new": (continue_as_new, {"duplicate_queue": ""}),
    "group_gap_duplicate": (group_gap_duplicate, GROUP),
    "quorum": (quorum, {"complete_when": "quorum:2"}),
    "expression_late": (expression_late, {"complete_when": "CREDIT and (STOCK or TAX)"}),
    "optional_leg": (optional_leg, {"legs": (*LEGS[:2], LegSpec(name="TAX", sequence=30,
                                    required=False, timeout_seconds=1))}),
    "leg_lost": (leg_lost, {"legs": (LegSpec(name="CREDIT", sequence=10, timeout_seconds=1),
                                     *LEGS[1:])}),
    "rerequested": (rerequested, {"legs": (LegSpec(name="CREDIT", sequence=10, retries=2,
                                           retry_after_seconds=1), *LEGS[1:])}),
    "reused_msg_id": (reused_msg_id, {}),
    "reset_after_cancel": (reset_after_cancel, {}),
    "rerequest_reported": (rerequest_reported, {
        "leg_identification": "correlid", "request_reports": True,
        "legs": (LegSpec(name="CREDIT", sequence=10, retries=1, retry_after_seconds=60),
                 *LEGS[1:])}),
}  # fmt: skip

#: The server suggests continue-as-new sooner for the large scenarios: the state must
#: outgrow a payload before it does.
LARGE_EVENTS = 20
#: The replies of a large scenario: 40 of 55 KB first, ten at a time (a state of 2.2 MB,
#: more than a run can carry into the next), then one at a time until the gather has
#: had to act on it, then the rest.
LARGE_LEGS, LARGE_FIRST, LARGE_GROUP = 60, 40, 10

Acted = Callable[[WorkflowHandle, str], Awaitable[bool]]


def _large_body(n: int) -> bytes:
    return b"%04d" % n * 13_750


async def _large_gather(p: Pipeline, s: AggregateSpec, text: str, acted: Acted) -> bytes:
    """A counted gather of :data:`LARGE_LEGS` of :func:`_large_body` replies, the first
    sent as back ends answering over a while send them, each group taken before the next,
    until ``acted`` (its handle, its first run's id) holds; then the rest, and its
    response checked."""
    correl = parse_id(text)
    first = (await p.counted(s, correl, LARGE_LEGS)).result_run_id or ""
    handle = p.handle(s, correl)
    sent = 0
    while sent < LARGE_LEGS:
        group = LARGE_GROUP if sent < LARGE_FIRST else 1
        for n in range(sent, sent + group):
            p.put(s.reply_queue, MQMessage(correl_id=correl, body=_large_body(n)))
        sent += group
        await until(lambda: taken(handle), lambda k, end=sent: k >= end, 60)
        if sent >= LARGE_FIRST and await acted(handle, first):
            break
    assert sent < LARGE_LEGS, "the gather never had to act on its size"
    for n in range(sent, LARGE_LEGS):
        p.put(s.reply_queue, MQMessage(correl_id=correl, body=_large_body(n)))
    response = await p.wait_message(s.response_queue, timeout=60)
    assert response.body == b"".join(_large_body(n) for n in range(LARGE_LEGS))
    return correl


async def moved_to_hold(p: Pipeline, s: AggregateSpec) -> bytes:
    async def continued(handle: WorkflowHandle, first: str) -> bool:
        return (await handle.describe()).run_id != first and p.depth(s.hold_queue) > 0

    return await _large_gather(p, s, "MOVED-1", continued)


async def move_gives_way(p: Pipeline, s: AggregateSpec) -> bytes:
    attrs = p.qm.inquire(s.hold_queue).model_copy(update={"put": "disabled"})
    p.qm.define(attrs, replace=True)

    async def refused(handle: WorkflowHandle, first: str) -> bool:
        return "MQRC_PUT_INHIBITED" in (await status(handle)).last_error

    return await _large_gather(p, s, "REFUSED-1", refused)


LARGE = {"legs": (), "leg_identification": "count", "merge": "blob", "label": "R",
         "timeout_seconds": 300, "gather_inline_bytes": 100 * 1024 * 1024}  # fmt: skip
LARGE_SCENARIOS: dict[str, tuple[Scenario, dict[str, object]]] = {
    "moved_to_hold": (moved_to_hold, LARGE),
    "move_gives_way": (move_gives_way, LARGE),
}

Collect = Callable[[Collecting, str], Awaitable[None]]


async def by_count(c: Collecting, d: str) -> None:
    for n in range(3):
        c.send(d, order(f"count {n}"))
    await c.take("CMAOUT.FR")


async def by_delay(c: Collecting, d: str) -> None:
    for n in range(2):
        c.send(d, order(f"delay {n}"))
    await c.take("CMAOUT.UK")


async def by_bytes(c: Collecting, d: str) -> None:
    for n in range(2):
        c.send(d, b"%02d" % n + b"x" * 58)  # the second would pass 100 bytes
        await until(lambda: c.status(d), lambda st, n=n: st.messages == n + 1)
    await c.take("CMAOUT.SP")
    await c.take("CMAOUT.SP")


async def released(c: Collecting, d: str) -> None:
    for n in range(2):
        c.send(d, b'{"n":%d}' % n)
    await until(lambda: c.status(d), lambda st: st.open_messages == 2)
    handle = c.client.get_workflow_handle(collector_id(c.spec.name, d))
    await handle.execute_update(CollectorWorkflow.release, ReleaseBatchInput(reason="recorded"))
    await c.take("CMAOUT.JSON")


async def as_group(c: Collecting, d: str) -> None:
    for n in range(2):
        c.send(d, order(f"group {n}"))
    for _ in range(2):
        await c.take("CMAOUT.GRP")


async def put_retried_batch(c: Collecting, d: str) -> None:
    blocker = c.qm.put("CMAOUT.FULL", MQMessage(body=b"in the way"))
    c.qm.commit()
    c.send(d, order("waits for room"))
    await until(lambda: c.status(d), lambda st: st.last_error, 30)
    c.qm.get("CMAOUT.FULL", match=Match(msg_id=blocker.msg_id), syncpoint=False)
    await c.take("CMAOUT.FULL")


async def collector_continue_as_new(c: Collecting, d: str) -> None:
    handle = c.client.get_workflow_handle(collector_id(c.spec.name, d))
    n = 0

    async def runs() -> int:
        return (await c.client.count_workflows(f'WorkflowId = "{handle.id}"')).count

    # One message a signal, until the server suggests continue-as-new; then one batch more.
    while await runs() < 2:
        n += 1
        c.send(d, order(f"can {n}"))
        await until(lambda: c.status(d), lambda st, n=n: st.messages == n)
    for _ in range(2 + n % 2):
        n += 1
        c.send(d, order(f"can {n}"))
    await until(lambda: c.status(d), lambda st, n=n: st.batches == n // 2)


async def reused_msg_id_batch(c: Collecting, d: str) -> None:
    shared = parse_id("ORDER-4711")  # an application that sets MsgId itself
    sent = [c.qm.put(c.spec.input_queue, MQMessage(msg_id=shared, body=order(f"reused {n}"),
                     properties={"destination": d}), PutOptions(syncpoint=False))
            for n in range(2)]  # fmt: skip
    await until(lambda: c.status(d), lambda st: st.messages == 2)
    # The first again, as a bridge killed before MQCMIT leaves it: a redelivery.
    c.qm.put(c.spec.input_queue, sent[0], PutOptions(syncpoint=False, set_all_context=True))
    await until(lambda: c.status(d), lambda st: st.redeliveries == 1)
    c.send(d, order("reused 2"))
    await c.take("CMAOUT.REUSED")


def _two_batches_and_nothing_open(st) -> bool:
    return st.batches == 2 and st.open_messages == st.waiting_to_put == 0


async def reset_batches(c: Collecting, d: str) -> None:
    """One batch by its delay, one by its count, then an operator's reset: the run after it
    batches the three messages otherwise and puts none of them again."""
    c.send(d, order("reset 0"))
    await until(lambda: c.status(d), lambda st: st.batches == 1, 30)
    for n in (1, 2):  # one unit of work: the bridge gets them in one batch
        message = MQMessage(properties={"destination": d}, body=order(f"reset {n}"))
        c.qm.put(c.spec.input_queue, message, PutOptions(syncpoint=True))
    c.qm.commit()
    await until(lambda: c.status(d), lambda st: st.batches == 2, 30)
    handle = c.client.get_workflow_handle(collector_id(c.spec.name, d))
    await reset_to_first_task(c.client, handle)
    await until(lambda: c.status(d), _two_batches_and_nothing_open, 30)
    for _ in range(2):
        await c.take("CMAOUT.RESET")


#: Each scenario's destination, its rule (target queue and settings) and its run. The
#: rules are in the database before the bridge starts, so none is read late.
COLLECT_SCENARIOS: dict[str, tuple[str, dict[str, object], Collect]] = {
    "collect_count": ("CMAOUT.FR", {"max_messages": 3}, by_count),
    "collect_delay": ("CMAOUT.UK", {"max_messages": 5, "max_delay_seconds": 1}, by_delay),
    "collect_bytes": (
        "CMAOUT.SP",
        {"max_bytes": 100, "max_delay_seconds": 1, "format": "blob"},
        by_bytes,
    ),
    "collect_released": (
        "CMAOUT.JSON",
        {"max_messages": 100, "max_delay_seconds": 600, "format": "json"},
        released,
    ),
    "collect_group": ("CMAOUT.GRP", {"max_messages": 2, "format": "group"}, as_group),
    "collect_put_retried": ("CMAOUT.FULL", {"max_messages": 1}, put_retried_batch),
    "collect_continue_as_new": ("CMAOUT.FR", {"max_messages": 2}, collector_continue_as_new),
    "collect_reused_msg_id": ("CMAOUT.REUSED", {"max_messages": 3}, reused_msg_id_batch),
    "collect_reset": ("CMAOUT.RESET", {"max_messages": 2, "max_delay_seconds": 1}, reset_batches),
}


def patch_ids(events) -> set[str]:
    """The ids of the patches recorded among ``events``."""
    found = set()
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            details = event.marker_recorded_event_attributes.details
            for payload in details["patch-data"].payloads if "patch-data" in details else ():
                found.add(json.loads(payload.data)["id"])
    return found


#: The large collector's messages: bursts of 200 of 5 KB, each taken before the next
#: (a burst's JSON outgrows the 1 MB a batch carries), until a run has had to PUT its
#: closed batches before continuing as new; at most this many messages.
CARRY_BURST, CARRY_BODY, CARRY_MOST = 200, 5000, 4000


def _carry_body(n: int) -> bytes:
    return b"%05d" % n * (CARRY_BODY // 5)


async def _runs_patched(c: Collecting, workflow_id: str) -> set[str]:
    """The patches recorded by every run of one workflow so far."""
    found: set[str] = set()
    async for run in c.client.list_workflows(f'WorkflowId = "{workflow_id}"'):
        history = await c.client.get_workflow_handle(run.id, run_id=run.run_id).fetch_history()
        found |= patch_ids(history.events)
    return found


async def carry_fits(c: Collecting, d: str) -> None:
    """Messages that close batches while the collector settles before continuing as new,
    the state left more than a run can carry: its closed batches are PUT first."""
    workflow_id = collector_id(c.spec.name, d)
    sent = 0
    while PATCH_CARRY_FITS not in await _runs_patched(c, workflow_id):
        assert sent < CARRY_MOST, "no run had to PUT its batches before continuing as new"
        for n in range(sent, sent + CARRY_BURST):
            c.send(d, _carry_body(n))
        sent += CARRY_BURST
        await until(lambda: c.status(d), lambda st, end=sent: st.messages == end, 60)
    await until(lambda: c.status(d), lambda st: st.open_messages == st.waiting_to_put == 0, 60)
    batches = []
    while c.depth("CMAOUT.CARRY"):
        batches.append((await c.take("CMAOUT.CARRY")).body)
    assert b"".join(batches) == b"".join(_carry_body(n) for n in range(sent))


async def _write_runs(
    env: WorkflowEnvironment, workflow_id: str, name: str, out: Path, *, gzipped: bool = False
) -> list[Path]:
    """Every run of one workflow, in start order, as ``name[_runN].json`` (``.json.gz``
    when ``gzipped``)."""
    runs = [e async for e in env.client.list_workflows(f'WorkflowId = "{workflow_id}"')]
    written = []
    for number, run in enumerate(sorted(runs, key=lambda r: r.start_time), 1):
        handle = env.client.get_workflow_handle(run.id, run_id=run.run_id)
        history = await handle.fetch_history()
        last = history.events[-1].event_type
        if last == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            assert len(runs) > 1
        suffix = f"_run{number}" if len(runs) > 1 else ""
        path = out / f"{name}{suffix}.json{'.gz' if gzipped else ''}"
        text = history.to_json()
        if gzipped:
            # mtime 0: the same history gzips to the same bytes.
            path.write_bytes(gzip.compress(text.encode(), mtime=0))
        else:
            path.write_text(text)
        written.append(path)
        print(f"recorded {path} ({len(history.events)} events)", flush=True)
    return written


#: The large collector scenario: its destination's rule and its run. The bridge keeps
#: every message inline, so the batches' bodies are in the state.
LARGE_COLLECT_SCENARIOS: dict[str, tuple[str, dict[str, object], Collect]] = {
    "collect_carry_fits": (
        "CMAOUT.CARRY",
        {"max_messages": 3000, "max_bytes": 20 * 1024 * 1024, "max_delay_seconds": 5,
         "format": "blob"},
        carry_fits,
    ),
}  # fmt: skip
LARGE_COLLECTOR = SPEC.model_copy(update={"destination_inline_bytes": 100 * 1024 * 1024})


async def record_collectors(
    env: WorkflowEnvironment,
    out: Path,
    scenarios: dict[str, tuple[str, dict[str, object], Collect]] = COLLECT_SCENARIOS,
    *,
    spec: CollectorSpec = SPEC,
    gzipped: bool = False,
) -> list[Path]:
    """Run every collector scenario of ``scenarios``, one destination each, and write
    their runs."""
    written: list[Path] = []
    with tempfile.TemporaryDirectory() as tmp:
        async with collecting(env.client, Path(tmp), spec=spec, run_bridge=False) as c:
            for name, (queue, rule, _) in scenarios.items():
                c.rule(name, queue, **rule)
            c.qm.define(QueueAttributes(name="CMAOUT.FULL", maxdepth=1), replace=True)
            for queue in ("CMAOUT.REUSED", "CMAOUT.RESET", "CMAOUT.CARRY"):
                c.qm.define(QueueAttributes(name=queue))
            c.start_bridge()
            for name, (_, _, scenario) in scenarios.items():
                await scenario(c, name)
            # Collectors never end: each is terminated once its scenario is over.
            for name in scenarios:
                handle = env.client.get_workflow_handle(collector_id(c.spec.name, name))
                await handle.terminate("recorded")
                written += await _write_runs(env, handle.id, name, out, gzipped=gzipped)
    return written


#: Beside a sealed set: the key ring its payloads were sealed with.
KEYS_FILE = "_keys.json"


async def record(
    out: Path, converter: DataConverter | None = None, *, large: bool = False
) -> list[Path]:
    """Run every scenario and write each run of each gather and collector to ``out``;
    with ``large``, the :data:`LARGE_SCENARIOS` and :data:`LARGE_COLLECT_SCENARIOS`
    only, gzipped."""
    events = LARGE_EVENTS if large else CONTINUE_AS_NEW_EVENTS
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=require_temporal_cli("run it as `make histories` does"),
        search_attributes=SEARCH_ATTRIBUTES,
        data_converter=converter or data_converter(None),
        dev_server_log_level="error",
        dev_server_extra_args=[
            "--dynamic-config-value",
            f"limit.historyCount.suggestContinueAsNew={events}",
        ],
    )
    written: list[Path] = []
    out.mkdir(parents=True, exist_ok=True)
    try:
        for name, (scenario, settings) in (LARGE_SCENARIOS if large else SCENARIOS).items():
            fields = {"name": name.replace("_", "-"), "legs": LEGS, "timeout_seconds": 60,
                      **settings}  # fmt: skip
            spec = AggregateSpec(**fields)  # type: ignore[arg-type]
            with tempfile.TemporaryDirectory() as tmp:
                async with pipeline(env.client, Path(tmp), [spec]) as p:
                    correl = await scenario(p, spec)
                    await p.handle(spec, correl).result()  # every run closed
                    workflow_id = p.handle(spec, correl).id
                    written += await _write_runs(env, workflow_id, name, out, gzipped=large)
        if large:
            written += await record_collectors(
                env, out, LARGE_COLLECT_SCENARIOS, spec=LARGE_COLLECTOR, gzipped=True
            )
        else:
            written += await record_collectors(env, out)
    finally:
        await env.shutdown()
    return written


def main() -> None:
    """Command line: the set's name (default: the worker's build id)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("set", nargs="?", default=None, help="set name")
    parser.add_argument("--sealed", action="store_true", help="seal every payload")
    parser.add_argument("--large", action="store_true", help="the gathers too large to carry")
    args = parser.parse_args()
    name = args.set or default_build_id() + ("-sealed" if args.sealed else "") + (
        "-large" if args.large else ""
    )
    out = HISTORIES / name
    if out.exists():
        sys.exit(f"{out} exists; recorded sets are kept as they are: name a new set")
    ring = None
    if args.sealed:
        key_id = f"rec-{new_key().hex()[:8]}"  # unique: the suite joins every set's keys
        ring = KeyRing(key_id, {key_id: new_key()})
        out.mkdir(parents=True)
        (out / KEYS_FILE).write_text(ring.to_file_model().model_dump_json(indent=1) + "\n")
    written = asyncio.run(record(out, data_converter(ring), large=args.large))
    print(f"{len(written)} histories in {out}; commit them with the code they came from")


if __name__ == "__main__":
    main()
