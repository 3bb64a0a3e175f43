"""``hold check`` over a flood's copies, against the floor of any such check.

A gather that moved N replies to its hold queue (a flood, at continue-as-new) and was
then terminated by hand leaves N held replies and N move markers on the ledger. For each
N, in the same run, on one dev server and one embedded queue manager:

- the check: ``check_held`` listing every held reply with its verdict (``--dry-run``),
  then the same check routing each to the late queue;
- the floor: what any check must do, without mqgather's code: browse the hold queue
  and ask Temporal for each message's gather (a describe per message, as the check asks);
  for the routing, that and a get of each message and a put of it to the late queue, a
  unit of work each.

Prints seconds and the ratio for each N, and how each grows for 4x the copies (the
ledger is read once per gather, so the check grows as the floor does).

    python -m bench.hold_check [--copies 1000 4000] [--repeat N]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from temporalio.client import Client

from bench.figures import Figure, command_line, exclusive, record
from bench.gather_throughput import Bench
from bridge.holdcheck import check_held
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import Match, MQMessage, PutOptions, fingerprint, parse_id
from mqgather.config import AggregateSpec, LegSpec
from mqgather.constants import GATHER_HOLD, GATHER_LATE
from tests.activities.environment import attempt_env
from tests.harness import prepare_queues
from workflows.models import HoldRepliesInput, Reply, gather_id

SPEC = AggregateSpec(name="flooded", legs=(LegSpec(name="CREDIT", sequence=10),))
#: A held reply's body: one a signal would not carry inline.
BODY = b'{"n": 1, "pad": "' + b"x" * 40_000 + b'"}'


async def flooded(client: Client, path: Path, copies: int, run: int) -> None:
    """A terminated gather whose move left ``copies`` replies on the hold queue."""
    from activities.mq import MQActivities

    correl = parse_id(f"FLOOD-{copies}-{run}")
    gid = gather_id(SPEC.name, correl)
    handle = await client.start_workflow("terminated", id=gid, task_queue="nobody")
    await handle.terminate("a flood's gather terminated by hand")
    replies = []
    for i in range(copies):
        message = MQMessage(msg_id=i.to_bytes(24, "big"), correl_id=correl, body=BODY,
                            properties={"leg": "CREDIT"})  # fmt: skip
        replies.append(Reply(message=message, leg="CREDIT", source_queue="GATHER.IN",
                             received_at=datetime.now(UTC), size=len(BODY),
                             fingerprint=fingerprint(message)))  # fmt: skip
    move = HoldRepliesInput(aggregate=SPEC, gather_id=gid, replies=replies,
                            chain=handle.result_run_id or "")  # fmt: skip
    attempt_env().run(MQActivities(lambda: LocalQueueManager(path)).hold_replies, move)


async def floor(client: Client, qm: LocalQueueManager, route: bool) -> float:
    """Seconds to browse the hold queue and describe each message's gather; with
    ``route``, each also got and put on the late queue in a unit of work of its own."""
    start = time.perf_counter()
    for message in list(qm.browse(GATHER_HOLD)):
        await client.get_workflow_handle(gather_id(SPEC.name, message.correl_id)).describe()
        if route:
            got = qm.get(GATHER_HOLD, match=Match(msg_id=message.msg_id,
                                                  correl_id=message.correl_id))  # fmt: skip
            qm.put(GATHER_LATE, got, PutOptions(syncpoint=True))
            qm.commit()
    return time.perf_counter() - start


async def one(bench: Bench, client: Client, copies: int, run: int) -> dict[str, float]:
    """One round at ``copies``: the floor and the check, listing then routing."""
    path = bench.tmp / f"qm-{copies}-{run}.db"
    prepare_queues(path)
    await flooded(client, path, copies, run)
    with LocalQueueManager(path) as qm:
        listed_floor = await floor(client, qm, route=False)
        start = time.perf_counter()
        listed = await check_held(client, qm, [SPEC], route=False)
        listing = time.perf_counter() - start
        assert len(listed) == copies and {h.verdict for h in listed} == {"closed"}
        start = time.perf_counter()
        routed = await check_held(client, qm, [SPEC])
        routing = time.perf_counter() - start
        assert len(routed) == copies and sum(1 for _ in qm.browse(GATHER_LATE)) == copies
        # The floor's routing, over the same messages put back on the hold queue.
        for _ in range(copies):
            qm.put(GATHER_HOLD, qm.get(GATHER_LATE), PutOptions(syncpoint=True))
            qm.commit()
        routed_floor = await floor(client, qm, route=True)
    return {"listing": listing, "listing floor": listed_floor,
            "routing": routing, "routing floor": routed_floor}  # fmt: skip


async def main(sizes: list[int], repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp))
        try:
            client = await bench.client()
            rounds: dict[int, list[dict[str, float]]] = {}
            for run in range(repeat):
                for copies in sizes:
                    print(f"[round {run + 1}] {copies:,} held copies …", flush=True)
                    rounds.setdefault(copies, []).append(await one(bench, client, copies, run))
        finally:
            bench.close()
    print()
    print(f"{'copies':>7} {'check s':>8} {'floor s':>8} {'ratio':>6}  "
          f"{'routed s':>9} {'floor s':>8} {'ratio':>6}")  # fmt: skip
    medians: dict[int, dict[str, float]] = {}
    for copies, runs in rounds.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        medians[copies] = med
        listing, routing = med["listing"], med["routing"]
        print(f"{copies:>7,} {listing:>8.2f} {med['listing floor']:>8.2f} "
              f"{listing / med['listing floor']:>6.2f}  {routing:>9.2f} "
              f"{med['routing floor']:>8.2f} {routing / med['routing floor']:>6.2f}")  # fmt: skip
        for r in runs:
            record(Figure("hold_check", f"hold check --dry-run s, {copies:,} copies",
                          r["listing"], "s", r["listing floor"],
                          "browse and describe each"))  # fmt: skip
            record(Figure("hold_check", f"hold check s, {copies:,} copies", r["routing"], "s",
                          r["routing floor"], "browse, describe, get and put each"))  # fmt: skip
    low, high = min(medians), max(medians)
    if high > low:
        for key in ("listing", "listing floor", "routing", "routing floor"):
            grew = medians[high][key] / medians[low][key]
            print(f"{key}: grew {grew:.1f}x for {high / low:g}x the copies")


if __name__ == "__main__":
    parser = command_line(__doc__)
    parser.add_argument("--copies", type=int, nargs="+", default=[1000, 4000],
                        help="held replies a flood leaves, one measure each")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=3, metavar="N",
                        help="runs of each measure")  # fmt: skip
    ns = parser.parse_args()
    with exclusive():
        try:
            asyncio.run(main(ns.copies, ns.repeat))
        except KeyboardInterrupt:
            sys.exit(130)
