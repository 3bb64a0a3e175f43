"""Chaos benchmark: gathers at a steady rate while the worker, the bridge and the
Temporal dev server are each killed (SIGKILL) at random moments, with a requester that
takes every response the instant it lands. Prints gathers, kills, lost replies and
responses, duplicate responses, how long after the last kill every gather sent before it
had its response (the recovery), and how long after the last request every gather had
(the drain).

    python -m bench.chaos [--gathers 1000] [--rate 20] [--kills 3] [--seed 1] [--large]

With ``--large`` every gather's replies are 2 KB, 300 KB and 3 MB, two of them too large
for a signal, so they wait on the hold queue (run fewer, slower: ``--gathers 100
--rate 2``).

Targets: 0 lost, 0 duplicates, drain <= 10 s.
"""

from __future__ import annotations

import asyncio
import os
import random
import tempfile
import time
from pathlib import Path

from bench.figures import Figure, command_line, exclusive, record
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


def recovery_and_drain(
    taken: list[bytes],
    taken_at: list[float],
    sent: set[bytes],
    before_kill: set[bytes],
    last_kill: float,
    last_request: float,
) -> tuple[float, float]:
    """Seconds from the last kill until every gather sent before it had its response
    taken (the recovery; 0 when all had it already), and from the last request until
    every gather had (the drain); NaN where a gather's response was never taken. Time
    spent sending after the kill counts in neither.

    Args:
        taken: The CorrelId of each response taken, in order (a duplicate counts once,
            at its first).
        taken_at: When each was taken (``time.monotonic``).
        sent: The CorrelIds of every gather sent.
        before_kill: Those sent before the last kill.
        last_kill: When the last part was killed.
        last_request: When the last gather was sent.
    """
    first: dict[bytes, float] = {}
    for correl, at in zip(taken, taken_at, strict=True):
        first.setdefault(correl, at)

    def last(of: set[bytes], since: float) -> float:
        if not of <= first.keys():
            return float("nan")
        return max([0.0, *(first[c] - since for c in of)])

    return last(before_kill, last_kill), last(sent, last_request)


async def run(
    gathers: int, rate: float, kills: int, seed: int, tmp: Path, large: bool = False
) -> dict[str, float]:
    rng = random.Random(seed)
    schedule = sorted(
        (rng.randrange(gathers // 10, gathers - gathers // 10), part)
        for part in ("worker", "bridge", "server")
        for _ in range(kills)
    )
    path = tmp / "qm.db"
    prepare_queues(path, [leg.queue() for leg in LEGS], bothresh=5)
    stack = Stack(tmp, path)
    requester = Requester(path, SPEC.response_queue)
    put: dict[bytes, list[bytes]] = {}
    last_kill = 0.0
    before_kill: set[bytes] = set()
    last_request = 0.0
    try:
        stack.start("server")
        client = await connect_when_up(f"localhost:{stack.port}")
        stack.start("worker")
        stack.start("bridge")
        start = time.monotonic()
        with LocalQueueManager(path) as qm:
            for i in range(gathers):
                while schedule and schedule[0][0] == i:
                    _, part = schedule.pop(0)
                    last_kill = time.monotonic()
                    before_kill = set(put)
                    stack.kill(part)
                    stack.start(part)
                    print(f"  killed and restarted the {part} at gather {i}", flush=True)
                correl = os.urandom(20) + bytes(4)
                await scatter_retrying(client, qm, correl, stack.task_queue)
                put[correl] = put_replies(qm, correl, LARGE if large else None)
                last_request = time.monotonic()
                pause = start + (i + 1) / rate - time.monotonic()
                if pause > 0:
                    await asyncio.sleep(pause)  # the steady rate
                if i % 100 == 99:
                    print(f"  {i + 1} gathers sent, {len(requester.taken)} responses", flush=True)
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
    recovered, drained = recovery_and_drain([m.correl_id for m in taken], requester.taken_at,
                                            set(put), before_kill, last_kill,
                                            last_request)  # fmt: skip
    with LocalQueueManager(path) as qm:
        stray = sum(qm.inquire(q).curdepth for q in OTHER_QUEUES)
        left = qm.inquire(SPEC.response_queue).curdepth
    consumed = {msg_id_of(k) for r in results.values() for k in r.consumed_msg_ids}
    lost_replies = sum(m.hex() not in consumed for ids in put.values() for m in ids)
    return {
        "gathers": gathers,
        "kills": 3 * kills,
        "responses": len(taken) + left,
        "lost responses": gathers - len({m.correl_id for m in taken}),
        "duplicate responses": len(taken) + left - len({m.correl_id for m in taken}),
        "lost replies": lost_replies,
        "replies elsewhere": stray,
        "recovery after the last kill (s)": round(recovered, 2),
        "drain after the last request (s)": round(drained, 2),
    }


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
    with tempfile.TemporaryDirectory(prefix="mqgather-chaos-") as tmp:
        figures = asyncio.run(run(args.gathers, args.rate, args.kills, args.seed, Path(tmp),
                                  args.large))  # fmt: skip
    width = max(len(k) for k in figures)
    for key, value in figures.items():
        print(f"{key:<{width}}  {value}")
    for name in ("lost responses", "duplicate responses", "lost replies", "replies elsewhere"):
        record(Figure("chaos", name, figures[name], "messages", target=0))
    record(Figure("chaos", "drain after the last request", figures["drain after the last "
                  "request (s)"], "s", target=DRAIN_TARGET_S))  # fmt: skip


if __name__ == "__main__":
    with exclusive():
        main()
