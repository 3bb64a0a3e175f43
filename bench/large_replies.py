"""Large replies: gathers whose legs wait on the hold queue, against the embedded queue
manager's own byte rate for the same message size, measured in the same run.

For each leg size (default 1 MB and 10 MB; 3 legs per gather, blob merge):

(a) the floor: the queue manager alone moving the same bytes the way a gather must at
    least move them: each leg PUT by the back end and got once, and the merged response
    PUT and got once (one process, no Temporal, no mqgather code);
(b) the pipeline: the same replies through a bridge and a worker (their own processes)
    on one dev server, until every response is on ORDER.RESPONSE: gathers/s, MB/s of
    replies, the ratio to (a), the worker's RSS growth over its idle size against the
    largest gather's bytes, and the history bytes per gather.

    python -m bench.large_replies [--sizes 1,10] [--gathers N]
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.figures import command_line, exclusive
from bench.gather_throughput import Bench, _rss_mb, wait_depth
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage, PutOptions
from mqgather.constants import (
    DEFAULT_HELD_MB,
    GATHER_FAILURE,
    GATHER_HOLD,
    GATHER_LATE,
    GATHER_UNKNOWN,
)
from mqgather.runtime.temporal import ensure_search_attributes
from workflows.models import gather_id

MB = 1024 * 1024
LEGS = ("CREDIT", "STOCK", "TAX")
#: Where a reply ends when the run is wrong (a reused CorrelId, a refused reply).
ASTRAY = (GATHER_LATE, GATHER_UNKNOWN, GATHER_FAILURE)
CONFIG = """
[aggregates.large]
mode = "static"
merge = "blob"
timeout_seconds = 3600
legs = [{name = "CREDIT", sequence = 10}, {name = "STOCK", sequence = 20},
        {name = "TAX", sequence = 30}]
"""


def floor(path: Path, size: int, gathers: int) -> float:
    """Seconds the queue manager alone takes to move ``gathers`` gathers' bytes: three
    legs put and got, one response of their length put and got."""
    body = os.urandom(size)
    merged = body * len(LEGS)
    with LocalQueueManager(path) as qm:
        start = time.perf_counter()
        for _ in range(gathers):
            for _leg in LEGS:
                qm.put("BENCH.FLOOR", MQMessage(body=body), PutOptions(syncpoint=True))
            qm.commit()
            for _leg in LEGS:
                qm.get("BENCH.FLOOR")
            qm.put("BENCH.FLOOR", MQMessage(body=merged), PutOptions(syncpoint=True))
            qm.commit()
            qm.get("BENCH.FLOOR")
            qm.commit()
        return time.perf_counter() - start


def _correl(prefix: str, i: int) -> bytes:
    return f"{prefix}{i}".encode().ljust(24, b"\x00")


async def through_pipeline(
    bench: Bench, size: int, gathers: int, worker: int, run: str = "run"
) -> dict:
    """Put ``gathers`` gathers of three ``size``-byte legs; wait for every response.

    ``run`` keeps each call's CorrelIds apart: a reused one would be a late reply."""
    qm = LocalQueueManager(bench.qm_path)
    body = os.urandom(size)
    base = qm.inquire("ORDER.RESPONSE").curdepth
    idle = _rss_mb(worker)
    peak = idle
    prefix = f"{run}{size // MB}-"
    start = time.perf_counter()
    for i in range(gathers):
        for leg in LEGS:
            qm.put("GATHER.IN", MQMessage(correl_id=_correl(prefix, i),
                                          properties={"leg": leg}, body=body))  # fmt: skip
        qm.commit()
    done = asyncio.create_task(wait_depth(qm, "ORDER.RESPONSE", base + gathers))
    astray = {queue: qm.inquire(queue).curdepth for queue in ASTRAY}
    while not done.done():
        peak = max(peak, _rss_mb(worker))
        for queue, depth in astray.items():
            if qm.inquire(queue).curdepth > depth:
                done.cancel()
                raise RuntimeError(f"a reply went to {queue}: the run measures nothing")
        await asyncio.sleep(0.02)
    await done
    seconds = time.perf_counter() - start
    held = qm.inquire(GATHER_HOLD).curdepth
    qm.clear("ORDER.RESPONSE")
    qm.close()
    client = await bench.client()
    history = 0
    for i in range(gathers):
        handle = client.get_workflow_handle(gather_id("large", _correl(prefix, i)))
        events = (await handle.fetch_history()).events
        history += sum(event.ByteSize() for event in events)
    return {
        "seconds": seconds,
        "idle_mb": idle,
        "peak_mb": peak,
        "history": history / gathers,
        "held_after": held,
    }


async def main(sizes: list[int], gathers: int, held_mb: int) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp))
        (Path(tmp) / "bench.toml").write_text(CONFIG)
        from bridge.mq.models import QueueAttributes

        with LocalQueueManager(bench.qm_path) as qm:
            qm.define(QueueAttributes(name="BENCH.FLOOR", maxmsgl=100 * MB, maxdepth=100))
        try:
            client = await bench.client()
            await ensure_search_attributes(client)
            me = [sys.executable, "-m", "mqgather.cli"]
            worker_args = ["worker", "--no-sandbox", "--held-mb", str(held_mb)]
            worker = bench.spawn([*me, *worker_args], bench.env).pid
            bench.spawn([*me, "bridge"], bench.env)
            print("warming up …", flush=True)
            await through_pipeline(bench, MB, 2, worker, run="warm")
            for size in sizes:
                print(f"[{size // MB} MB legs] (a) floor: the queue manager alone …", flush=True)
                alone = floor(bench.qm_path, size, gathers)
                print(f"[{size // MB} MB legs] (b) pipeline: {gathers} gathers …", flush=True)
                got = await through_pipeline(bench, size, gathers, worker)
                rows.append((size, alone, got))
        finally:
            bench.close()
    print()
    print(
        f"{gathers} gathers of 3 legs per size, blob merge, one worker (--held-mb {held_mb}) "
        "and one bridge"
    )
    print(
        f"{'legs':>8} {'gathers/s':>10} {'MB/s':>8} {'floor MB/s':>11} {'ratio':>6} "
        f"{'RSS +MB':>8} {'gather MB':>10} {'RSS/gather':>11} {'history B':>10} {'held':>5}"
    )
    for size, alone, got in rows:
        moved = 3 * size * gathers / MB
        growth = got["peak_mb"] - got["idle_mb"]
        gather_mb = 3 * size / MB
        print(
            f"{size // MB:>5} MB {gathers / got['seconds']:>10.2f} {moved / got['seconds']:>8.1f} "
            f"{moved / alone:>11.1f} {alone / got['seconds']:>6.2f} {growth:>8.0f} "
            f"{gather_mb:>10.0f} {growth / gather_mb:>11.2f} {got['history']:>10,.0f} "
            f"{got['held_after']:>5}"
        )
    print(
        "\nfloor: the embedded queue manager moving each gather's bytes alone (legs put and "
        "got, the response put and got);\nratio: pipeline MB/s over the floor's (target ≥ "
        "0.5); RSS/gather: the worker's peak RSS growth over its idle size, in gathers' "
        "bytes (target ≤ 3)."
    )


if __name__ == "__main__":
    parser = command_line(__doc__)
    parser.add_argument("--sizes", default="1,10", help="leg sizes in MB, comma separated")
    parser.add_argument("--gathers", type=int, default=20, help="gathers per size")
    parser.add_argument("--held-mb", type=int, default=DEFAULT_HELD_MB, help="the worker's")
    args = parser.parse_args()
    sizes = [int(s) * MB for s in args.sizes.split(",")]
    with exclusive():
        asyncio.run(main(sizes, args.gathers, args.held_mb))
