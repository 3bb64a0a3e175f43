"""Collector throughput: messages batched per destination against the queue manager's own
rate, in one run.

(a) the embedded queue manager alone: N messages of 1 KB put and got under syncpoint,
    100 per unit of work, on one connection (what any consumer of it can reach);
(b) the collector: the same N messages, round-robin over D destinations whose rule says
    100 messages or 2 s (json batches to one queue), through `mqgather collector run`,
    the collector workflows and the PUT in `mqgather worker` (their own processes, on a
    dev server of their own), until every message is in a batch on the output queue;
    messages/s, batches per close reason, and each batch's wait: from the PUT of its
    first message on the input queue to the PUT of the batch;
(c) CPU per message of each process during (b).

    python bench/collector_throughput.py [--messages N] [--destinations D]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

from bench.gather_throughput import Bench, _cpu_seconds
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage, PutOptions, QueueAttributes
from mqgather.collector_config import CollectorRule
from mqgather.names import PROP_BATCH_REASON, PROP_BATCH_SIZE
from mqgather.runtime.rules import RuleStore
from mqgather.runtime.temporal import ensure_search_attributes

IN, OUT, FAILURE, OWN = "BENCH.COLLECT.IN", "BENCH.BATCHES", "BENCH.COLLECT.FAILED", "BENCH.OWN"
MAX_MESSAGES, MAX_DELAY = 100, 2.0
UNIT = 100  # messages per unit of work, putting and getting
CONFIG = """
[collectors.bench]
input_queue = "{IN}"
failure_queue = "{FAILURE}"
rules_db = "{rules}"
"""


def body(n: int) -> bytes:
    """1 KB of JSON that names the message."""
    head = f'{{"n":{n},"pad":"'
    return (head + "x" * (1024 - len(head) - 2) + '"}').encode()


def own_rate(qm: LocalQueueManager, n: int) -> float:
    """(a): put and get ``n`` messages of 1 KB, ``UNIT`` per unit of work."""
    start = time.perf_counter()
    for i in range(n):
        qm.put(OWN, MQMessage(body=body(i)))
        if i % UNIT == UNIT - 1:
            qm.commit()
    qm.commit()
    got = 0
    while got < n:
        got += len(qm.get_batch(OWN, UNIT, wait_ms=1000))
        qm.commit()
    return n / (time.perf_counter() - start)


def send(qm: LocalQueueManager, n: int, destinations: int) -> dict[int, datetime]:
    """(b)'s input: message i for destination i mod D; the PUT time of each."""
    put_at: dict[int, datetime] = {}
    for i in range(n):
        message = MQMessage(properties={"destination": f"D{i % destinations:02d}"}, body=body(i))
        done = qm.put(IN, message, PutOptions(syncpoint=True))
        assert done.put_date_time is not None
        put_at[i] = done.put_date_time
        if i % UNIT == UNIT - 1:
            qm.commit()
    qm.commit()
    return put_at


def take_batches(qm: LocalQueueManager, n: int, limit: float = 900) -> list[MQMessage]:
    """Consume batches from ``OUT`` (as their consumer would) until they hold ``n``
    messages."""
    deadline = time.monotonic() + limit
    got: list[MQMessage] = []
    held = 0
    while held < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {held} of {n} messages batched")
        for batch in qm.get_batch(OUT, 50, wait_ms=500):
            got.append(batch)
            held += int(batch.properties[PROP_BATCH_SIZE])
        qm.commit()
    return got


async def main(n: int, destinations: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp))
        try:
            rules = Path(tmp) / "rules.db"
            config = CONFIG.format(IN=IN, FAILURE=FAILURE, rules=rules)
            (Path(tmp) / "bench.toml").write_text(config)
            qm = LocalQueueManager(bench.qm_path)
            for queue in (IN, OUT, FAILURE, OWN):
                qm.define(QueueAttributes(name=queue, maxdepth=10_000_000), replace=True)
            store = RuleStore(str(rules))
            for d in range(destinations):
                store.set("bench", CollectorRule(
                    destination=f"D{d:02d}", target_queue=OUT, max_messages=MAX_MESSAGES,
                    max_delay_seconds=MAX_DELAY, format="json"))  # fmt: skip
            print(f"(a) queue manager alone: {n} messages put and got …", flush=True)
            qm_rate = own_rate(qm, n)

            client = await bench.client()
            await ensure_search_attributes(client)
            me = [sys.executable, "-m", "mqgather.cli"]
            worker = bench.spawn([*me, "worker"], bench.env)
            bridge = bench.spawn([*me, "collector", "run", "bench"], bench.env)
            parts = {"server": bench.procs[0].pid, "worker": worker.pid, "bridge": bridge.pid}
            print("warming up …", flush=True)
            warm = send(qm, destinations * MAX_MESSAGES, destinations)
            take_batches(qm, len(warm))  # not measured

            print(f"(b) collector: {n} messages for {destinations} destinations …", flush=True)
            before = {k: _cpu_seconds(pid) for k, pid in parts.items()}
            start = time.perf_counter()
            put_at = send(qm, n, destinations)
            sent = time.perf_counter()
            batches = take_batches(qm, n)
            cpu = {k: _cpu_seconds(pid) - before[k] for k, pid in parts.items()}
            failed = qm.inquire(FAILURE).curdepth
            left = qm.inquire(IN).curdepth + qm.inquire(OUT).curdepth
            qm.close()
        finally:
            bench.close()

    # On the queue manager's clock: the first input's PUT to the last batch's PUT.
    last = max(b.put_date_time for b in batches if b.put_date_time is not None)
    rate = n / (last - min(put_at.values())).total_seconds()
    reasons = Counter(str(b.properties[PROP_BATCH_REASON]) for b in batches)
    waits: list[float] = []
    numbers: list[int] = []
    for batch in batches:
        items = json.loads(batch.body)
        numbers += [item["n"] for item in items]
        assert batch.put_date_time is not None
        waits.append((batch.put_date_time - put_at[items[0]["n"]]).total_seconds() * 1000)
    once = len(numbers) == len(set(numbers)) == n and not failed and not left
    q = statistics.quantiles(waits, n=100, method="inclusive")
    print()
    print(f"(a) queue manager put+get msg/s          {qm_rate:9.0f}")
    print(f"(b) collector msg/s                      {rate:9.0f}   ratio (b)/(a) "
          f"{rate / qm_rate:.2f}   (putting alone took {sent - start:.1f} s)")  # fmt: skip
    print(f"    batches {len(batches)}: " +
          ", ".join(f"{r} {c}" for r, c in sorted(reasons.items())) +
          f"; every message in exactly one batch: {'yes' if once else 'NO'}")  # fmt: skip
    print(f"    batch wait ms (first message PUT -> batch PUT)   p50 {q[49]:.0f}  "
          f"p99 {q[98]:.0f}  max {max(waits):.0f}   (rule: {MAX_MESSAGES} or "
          f"{MAX_DELAY * 1000:.0f} ms)")  # fmt: skip
    print("(c) CPU ms per 1,000 messages            " +
          "  ".join(f"{k} {1_000_000 * v / n:.0f}" for k, v in cpu.items()))  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--destinations", type=int, default=20)
    ns = parser.parse_args()
    asyncio.run(main(ns.messages, ns.destinations))
