"""Embedded queue manager throughput: put + get under syncpoint, 1 KB bodies.

Prints messages/s (each message put, committed, got and committed) for batch sizes
1, 10 and 100, on one connection and with a producer and a consumer process.

    python -m bench.mq_throughput [--messages N]
"""

from __future__ import annotations

import multiprocessing as mp
import tempfile
import time
from pathlib import Path

from bench.figures import command_line, exclusive
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage, QueueAttributes

BODY = b"x" * 1024
QUEUE = "BENCH.Q"


def _put(path: str, n: int, batch: int) -> None:
    qm = LocalQueueManager(path)
    for i in range(n):
        qm.put(QUEUE, MQMessage(body=BODY))
        if (i + 1) % batch == 0:
            qm.commit()
    qm.commit()
    qm.close()


def _get(path: str, n: int, batch: int) -> None:
    qm = LocalQueueManager(path)
    done = 0
    while done < n:
        done += len(qm.get_batch(QUEUE, min(batch, n - done), wait_ms=30_000))
        qm.commit()
    qm.close()


def _fresh(directory: Path, name: str) -> str:
    path = str(directory / f"{name}.db")
    qm = LocalQueueManager(path)
    qm.define(QueueAttributes(name=QUEUE, maxdepth=10_000_000))
    qm.close()
    return path


def main() -> None:
    """Run the benchmark and print a table."""
    parser = command_line(__doc__)
    parser.add_argument("--messages", type=int, default=5000, help="messages per measure")
    n = parser.parse_args().messages
    ctx = mp.get_context("spawn")
    print(
        f"embedded queue manager, {n} messages of 1 KB, put + get under syncpoint"
        " (get_batch, commit per batch)"
    )
    print(f"{'batch':>6} {'one connection msg/s':>22} {'two processes msg/s':>22}")
    with tempfile.TemporaryDirectory() as tmp:
        for batch in (1, 10, 100):
            path = _fresh(Path(tmp), f"one-{batch}")
            start = time.perf_counter()
            _put(path, n, batch)
            _get(path, n, batch)
            single = n / (time.perf_counter() - start)

            path = _fresh(Path(tmp), f"two-{batch}")
            procs = [
                ctx.Process(target=_put, args=(path, n, batch)),
                ctx.Process(target=_get, args=(path, n, batch)),
            ]
            start = time.perf_counter()
            for p in procs:
                p.start()
            for p in procs:
                p.join()
            double = n / (time.perf_counter() - start)
            print(f"{batch:>6} {single:>22,.0f} {double:>22,.0f}", flush=True)


if __name__ == "__main__":
    with exclusive():
        main()
