"""Chaos benchmark: gathers at a steady rate while the worker, the bridge and the
Temporal dev server are each killed (SIGKILL) at random moments, with a requester that
takes every response the instant it lands. Prints gathers, kills, lost replies and
responses, duplicate responses, and two timings: each kill's recovery (how long after
it every gather in flight at it had its response), with each part's median and worst,
and the drain (how long after the last request every gather had its response).

Then the floor: the platform alone doing the same. The floor's workflows (the gather's
shape with no MQ and no mqgather code, ``bench.trivial``), each started and then
signalled as a gather is registered and then sent its replies, go at the same rate to a
dev server of their own, and their worker and the server are killed before the same
sends (there is no bridge). Each timing is printed beside the floor's, with the ratio: a
worker killed while it holds a workflow task leaves it to Temporal's workflow task
timeout (10 s), for a gather as for any workflow.

    python -m bench.chaos [--gathers 1000] [--rate 20] [--kills 3] [--seed 1] [--large]

With ``--large`` every gather's replies are 2 KB, 300 KB and 3 MB, two of them too large
for a signal, so they wait on the hold queue (run fewer, slower: ``--gathers 100
--rate 2``).

Targets: 0 lost, 0 duplicates, drain <= 10 s.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from pathlib import Path
from typing import TypeVar

from temporalio.client import Client
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from bench.figures import Figure, command_line, exclusive, record
from bench.gather_throughput import paced, trivial_worker
from bench.trivial import FLOOR_TASK_QUEUE, TrivialLocalWorkflow
from bridge.mq.local_qm import LocalQueueManager
from tests.chaos import LARGE, LEGS, SPEC, Requester, Stack, put_replies, scatter_retrying
from tests.harness import connect_when_up, prepare_queues
from workflows.models import GatherResult, gather_id
from workflows.redelivery import msg_id_of

OTHER_QUEUES = ("GATHER.IN", "GATHER.LATE", "GATHER.DUPLICATE", "GATHER.UNKNOWN",
                "GATHER.FAILURE", "GATHER.BACKOUT", "GATHER.HOLD",
                "SYSTEM.DEAD.LETTER.QUEUE")  # fmt: skip


#: The drain's target, seconds from the last request to the last response taken.
DRAIN_TARGET_S = 10.0

#: The parts killed, in the order the schedule is drawn for; the floor has no bridge.
PARTS = ("worker", "bridge", "server")

#: What the timings are set against in the results table.
FLOOR_NAME = "the platform's workflows, the same kills"

K = TypeVar("K", bound=Hashable)

#: A run's figures, and each kill's recovery by part.
Run = tuple[dict[str, float], dict[str, list[float]]]


def first_of(taken: Iterable[K], taken_at: Iterable[float]) -> dict[K, float]:
    """When each CorrelId's first response was taken (a duplicate counts at its first)."""
    first: dict[K, float] = {}
    for correl, at in zip(taken, taken_at, strict=True):
        first.setdefault(correl, at)
    return first


def recoveries(
    done: dict[K, float], sent_at: dict[K, float], kills: list[tuple[float, str]]
) -> dict[str, list[float]]:
    """For each part killed, the recovery from each of its kills, in order: seconds from
    the kill until every gather sent before it and still unanswered at it had its
    response (0 when none was in flight); NaN where such a gather never had one. Time
    spent sending after the kill counts in none.

    Args:
        done: When each gather was answered (its first response taken).
        sent_at: When each gather was sent, its replies on their queue.
        kills: When each part was killed, and which.
    """
    each: dict[str, list[float]] = {}
    for killed_at, part in kills:
        waits = [done.get(c, math.nan) - killed_at for c, at in sent_at.items()
                 if at < killed_at and done.get(c, math.inf) > killed_at]  # fmt: skip
        took = math.nan if any(math.isnan(w) for w in waits) else max([0.0, *waits])
        each.setdefault(part, []).append(took)
    return each


def median_and_worst(values: list[float]) -> tuple[float, float]:
    """The median and the largest of ``values``; NaN for both where one is NaN."""
    if any(math.isnan(v) for v in values):
        return math.nan, math.nan
    return statistics.median(values), max(values)


def drain(done: dict[K, float], sent_at: dict[K, float]) -> float:
    """Seconds from the last gather sent until every gather was answered; NaN where one
    never was."""
    if not sent_at.keys() <= done.keys():
        return math.nan
    last_request = max(sent_at.values())
    return max([0.0, *(done[c] - last_request for c in sent_at)])


def kill_schedule(gathers: int, kills: int, seed: int) -> list[tuple[int, str]]:
    """The gather before which each kill comes, in order: ``kills`` of each part, drawn
    from the middle eight tenths of the run."""
    rng = random.Random(seed)
    return sorted((rng.randrange(gathers // 10, gathers - gathers // 10), part)
                  for part in PARTS for _ in range(kills))  # fmt: skip


async def _send_all(
    stack: Stack,
    schedule: list[tuple[int, str]],
    rate: float,
    send: Callable[[int], Awaitable[K]],
    clock: Callable[[], float],
    label: str,
    n: int,
) -> tuple[dict[K, float], list[tuple[float, str]]]:
    """Send ``n`` at ``rate`` a second, killing and restarting each part as ``schedule``
    says (a part the stack does not run is left out); when each was sent and when each
    part was killed, on ``clock``."""
    pending = list(schedule)
    sent_at: dict[K, float] = {}
    kills: list[tuple[float, str]] = []
    async for i in paced(n, rate):
        while pending and pending[0][0] == i:
            _, part = pending.pop(0)
            if part not in stack.procs:
                continue
            kills.append((clock(), part))
            stack.kill(part)
            stack.start(part)
            print(f"  {label}: killed and restarted the {part} at {i}", flush=True)
        key = await send(i)
        sent_at[key] = clock()
        if i % 100 == 99:
            print(f"  {label}: {i + 1} sent", flush=True)
    return sent_at, kills


async def run(
    gathers: int, rate: float, schedule: list[tuple[int, str]], tmp: Path, large: bool = False
) -> Run:
    """The gathers' run: the counts that must be zero, each kill's recovery and the drain,
    on the requester's clock (``time.monotonic``)."""
    path = tmp / "qm.db"
    prepare_queues(path, [leg.queue() for leg in LEGS], bothresh=5)
    stack = Stack(tmp, path)
    requester = Requester(path, SPEC.response_queue)
    put: dict[bytes, list[bytes]] = {}
    try:
        stack.start("server")
        client = await connect_when_up(f"localhost:{stack.port}")
        stack.start("worker")
        stack.start("bridge")
        with LocalQueueManager(path) as qm:

            async def send(_: int) -> bytes:
                correl = os.urandom(20) + bytes(4)
                await scatter_retrying(client, qm, correl, stack.task_queue)
                put[correl] = put_replies(qm, correl, LARGE if large else None)
                return correl

            sent_at, kills = await _send_all(stack, schedule, rate, send, time.monotonic,
                                             "gathers", gathers)  # fmt: skip
        deadline = time.monotonic() + 300
        while len({m.correl_id for m in requester.taken}) < gathers and time.monotonic() < deadline:
            await asyncio.sleep(0.1)  # the requester thread collects
        results = {}
        for correl in put:
            handle = client.get_workflow_handle(gather_id(SPEC.name, correl),
                                                result_type=GatherResult)  # fmt: skip
            results[correl] = await asyncio.wait_for(handle.result(), 60)
    finally:
        requester.stop()
        stack.stop()
    taken = requester.taken
    done = first_of([m.correl_id for m in taken], requester.taken_at)
    with LocalQueueManager(path) as qm:
        stray = sum(qm.inquire(q).curdepth for q in OTHER_QUEUES)
        left = qm.inquire(SPEC.response_queue).curdepth
    consumed = {msg_id_of(k) for r in results.values() for k in r.consumed_msg_ids}
    lost_replies = sum(m.hex() not in consumed for ids in put.values() for m in ids)
    figures: dict[str, float] = {
        "gathers": gathers,
        "kills": len(kills),
        "responses": len(taken) + left,
        "lost responses": gathers - len(done),
        "duplicate responses": len(taken) + left - len(done),
        "lost replies": lost_replies,
        "replies elsewhere": stray,
    }
    timings, each = _timings(done, sent_at, kills)
    return figures | timings, each


def _timings(
    done: dict[K, float], sent_at: dict[K, float], kills: list[tuple[float, str]]
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """The timings' figures, and each kill's recovery by part."""
    each = recoveries(done, sent_at, kills)
    figures: dict[str, float] = {}
    for part in PARTS:
        if part in each:
            median, worst = median_and_worst(each[part])
            figures[f"recovery after a kill of the {part}, median (s)"] = round(median, 2)
            figures[f"recovery after a kill of the {part}, worst (s)"] = round(worst, 2)
    figures["drain after the last request (s)"] = round(drain(done, sent_at), 2)
    return figures, each


async def _send_floor(client: Client, workflow_id: str) -> None:
    """Start one floor workflow, then signal it, as a gather is registered and then sent
    its replies: two workflow tasks, the second on the worker that ran the first (its
    sticky queue). Each step is retried while the server is down; a start that reached it
    before is taken as made, and so is a signal the workflow already closed on (only its
    signal closes it), while a second signal changes nothing."""
    while True:
        try:
            await client.start_workflow(TrivialLocalWorkflow.run, id=workflow_id,
                                        task_queue=FLOOR_TASK_QUEUE)  # fmt: skip
            break
        except WorkflowAlreadyStartedError:
            break
        except RPCError:
            await asyncio.sleep(0.2)
    while True:
        try:
            await client.get_workflow_handle(workflow_id).signal(TrivialLocalWorkflow.go, "x")
            return
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return  # closed: the signal's first try reached it, its answer did not
            await asyncio.sleep(0.2)


async def _closed_at(client: Client, workflow_id: str) -> float:
    """When the server closed the floor workflow (its wall clock), once it has."""
    handle = client.get_workflow_handle(workflow_id)
    while True:
        try:
            await asyncio.wait_for(handle.result(), 300)
            closed = (await handle.describe()).close_time
            if closed is None:
                raise RuntimeError(f"floor workflow {workflow_id} done but not closed")
            return closed.timestamp()
        except RPCError:
            await asyncio.sleep(0.2)


async def run_floor(n: int, rate: float, schedule: list[tuple[int, str]], tmp: Path) -> Run:
    """The floor's run: ``n`` of the floor's workflows (``bench.trivial``'s
    ``TrivialLocal``, each started and then signalled as a gather is registered and then
    sent its replies) at the same rate with the same kills of the worker and the dev
    server (there is no bridge), each done when the server closed it: a point after the
    one the gathers are timed at, their response taken before their workflow closes."""
    stack = Stack(tmp, tmp / "unused.db")
    stack.commands["worker"] = [sys.executable, "-m",
                                *trivial_worker(f"localhost:{stack.port}")]  # fmt: skip
    try:
        stack.start("server")
        client = await connect_when_up(f"localhost:{stack.port}")
        stack.start("worker")

        async def send(i: int) -> str:
            workflow_id = f"chaos-floor-{i}"
            await _send_floor(client, workflow_id)
            return workflow_id

        sent_at, kills = await _send_all(stack, schedule, rate, send, time.time, "floor", n)
        done = {workflow_id: await _closed_at(client, workflow_id) for workflow_id in sent_at}
    finally:
        stack.stop()
    timings, each = _timings(done, sent_at, kills)
    return {"floor workflows": n, "kills": len(kills)} | timings, each


def main() -> None:
    """Run the chaos benchmark and print its figures."""
    parser = command_line(__doc__)
    parser.add_argument("--gathers", type=int, default=1000, help="gathers sent")
    parser.add_argument("--rate", type=float, default=20.0, help="gathers per second")
    parser.add_argument("--kills", type=int, default=3, help="SIGKILLs of each part")
    parser.add_argument("--seed", type=int, default=1,
                        help="picks the gathers each kill comes at")  # fmt: skip
    parser.add_argument(
        "--large",
        action="store_true",
        help="replies of 2 KB, 300 KB and 3 MB (two on the hold queue)",
    )
    args = parser.parse_args()
    schedule = kill_schedule(args.gathers, args.kills, args.seed)
    with tempfile.TemporaryDirectory(prefix="mqgather-chaos-") as tmp:
        (Path(tmp) / "gathers").mkdir()
        (Path(tmp) / "floor").mkdir()
        gathers = asyncio.run(run(args.gathers, args.rate, schedule, Path(tmp) / "gathers",
                                  args.large))  # fmt: skip
        print(
            "the floor: the same kills of the worker and the dev server, the platform's "
            "workflows alone …",
            flush=True,
        )
        floor = asyncio.run(run_floor(args.gathers, args.rate, schedule, Path(tmp) / "floor"))
    print(report(gathers, floor))
    record_run(gathers[0], floor[0])


def record_run(figures: dict[str, float], floor_figures: dict[str, float]) -> None:
    """The run's figures for `make bench`'s table: the counts against their target of 0,
    the drain against its target in seconds, each timing beside the floor's."""
    for name in ("lost responses", "duplicate responses", "lost replies", "replies elsewhere"):
        record(Figure("chaos", name, figures[name], "messages", target=0))
    drained = "drain after the last request (s)"
    # Its target is seconds, not a ratio: judged alone, then set beside the floor's.
    record(Figure("chaos", drained.removesuffix(" (s)"), figures[drained], "s",
                  target=DRAIN_TARGET_S))  # fmt: skip
    for key, value in figures.items():
        if key.startswith("recovery") or key == drained:
            record(Figure("chaos", key.removesuffix(" (s)"), value, "s", floor_figures.get(key),
                          FLOOR_NAME if key in floor_figures else ""))  # fmt: skip


def report(gathers: Run, floor: Run) -> str:
    """The run's figures, each timing beside the floor's and their ratio, then each
    kill's recovery."""
    (figures, each), (floor_figures, floor_each) = gathers, floor
    width = max(len(k) for k in figures)
    lines = [f"{'':<{width}}  {'gathers':>8}  {'floor':>8}  ratio"]
    for key, value in figures.items():
        line = f"{key:<{width}}  {value:>8}"
        if key == "kills":
            line += f"  {floor_figures[key]:>8}"
        elif key in floor_figures:
            ratio = f"{value / floor_figures[key]:.2f}" if floor_figures[key] else "-"
            line += f"  {floor_figures[key]:>8}  {ratio}"
        lines.append(line)
    lines.append("each kill's recovery, s, in the order of the kills:")
    for part in PARTS:
        for who, of in (("gathers", each), ("floor", floor_each)):
            if part in of:
                shown = ", ".join(f"{v:.2f}" for v in of[part])
                lines.append(f"  the {part}, {who}: {shown}")
    return "\n".join(lines)


if __name__ == "__main__":
    with exclusive():
        main()
