"""Commit latency on the embedded queue manager while another process writes.

One process commits a put of 3 KB under syncpoint every 20 ms, as a worker commits a
gather's response; another puts and gets 1 KB messages at RATE a second, as a bridge
takes replies off its queue. Each round is made twice: as shipped, the writers taking
turns on the queue manager's file lock; and with each write left to SQLite's own wait
on a busy file, which sleeps 1, 2, 5, 10 ms and on. The floor is the same commits, as
shipped, with no other writer, in the same run.

    python -m bench.qm_commits [--commits N] [--rate R] [--rounds K]
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.figures import Figure, command_line, exclusive, percentile, record
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage, PutOptions
from tests.harness import prepare_queues

#: The settings measured: whether the writers take turns.
KINDS = {"as shipped": True, "SQLite's wait": False}


def _set(qm: LocalQueueManager, turns: bool) -> None:
    """Switch this connection to a kind's setting."""
    if not turns:
        qm._writers_turn = lambda: False  # type: ignore[method-assign]


def _other_writer(path: Path, rate: float, kind: str, ready: Any, stop: Any) -> None:
    qm = LocalQueueManager(path)
    _set(qm, KINDS[kind])
    ready.set()
    start, i = time.monotonic(), 0
    while not stop.is_set():
        qm.put("GATHER.IN", MQMessage(body=b"r" * 1000), PutOptions(syncpoint=False))
        qm.get("GATHER.IN", syncpoint=True)
        qm.commit()
        i += 1
        time.sleep(max(0.0, start + i / rate - time.monotonic()))
    qm.close()


def commits(n: int, rate: float, kind: str, other: bool) -> list[float]:
    """ms per commit of ``n`` responses, with or without another writer."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "qm.db"
        prepare_queues(path, bothresh=0)
        ready, stop = mp.Event(), mp.Event()
        writer = None
        if other:
            writer = mp.Process(target=_other_writer, args=(path, rate, kind, ready, stop))
            writer.start()
            if not ready.wait(30):
                writer.kill()
                raise RuntimeError("the other writer did not open the queue manager in 30 s")
        qm = LocalQueueManager(path)
        _set(qm, KINDS[kind])
        spent = []
        for i in range(n):
            response = MQMessage(correl_id=f"R{i}".encode(), body=b"x" * 3000)
            qm.put("ORDER.RESPONSE", response, PutOptions(syncpoint=True))
            began = time.perf_counter()
            qm.commit()
            spent.append((time.perf_counter() - began) * 1000)
            time.sleep(0.02)
        stop.set()
        if writer is not None:
            writer.join(30)
        qm.close()
        return spent


def main() -> None:
    """Rounds of each setting, alternated, then their medians."""
    parser = command_line(__doc__)
    parser.add_argument("--commits", type=int, default=1000, help="commits per measure")
    parser.add_argument("--rate", type=float, default=300, help="the other writer's gets/s")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each way, alternated")
    ns = parser.parse_args()
    runs = {"alone": ("as shipped", False), **{kind: (kind, True) for kind in KINDS}}
    rows: dict[str, list[tuple[float, float, float, float]]] = {k: [] for k in runs}
    for r in range(ns.rounds):
        for name, (kind, other) in runs.items():
            with exclusive():
                spent = commits(ns.commits, ns.rate, kind, other)
            over = 100 * sum(ms > 1 for ms in spent) / len(spent)
            row = (percentile(spent, 50), percentile(spent, 90), percentile(spent, 99), over)
            rows[name].append(row)
            print(f"round {r + 1} {name:<14} p50 {row[0]:.2f}  p90 {row[1]:.2f}  "
                  f"p99 {row[2]:.2f} ms  over 1 ms {row[3]:.1f} %", flush=True)  # fmt: skip
            if other:
                record(Figure("qm_commits", f"commit p99 ms beside another writer, {name}",
                              row[2], "ms", rows["alone"][-1][2], "alone"))  # fmt: skip
    print(f"\nmedians of {ns.rounds} rounds, {ns.commits} commits each, the other writer at "
          f"{ns.rate:g} gets/s:")  # fmt: skip
    floor = statistics.median(row[2] for row in rows["alone"])
    for name, got in rows.items():
        p = [statistics.median(row[i] for row in got) for i in range(4)]
        print(f"{name:<14} p50 {p[0]:.2f}  p90 {p[1]:.2f}  p99 {p[2]:.2f} ms "
              f"({p[2] / floor:.1f} x alone)  over 1 ms {p[3]:.1f} %")  # fmt: skip


if __name__ == "__main__":
    main()
