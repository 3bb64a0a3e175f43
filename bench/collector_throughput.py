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
(c) CPU per message of each process during (b);
(d) batch wait at half of (b)'s rate, where no backlog builds on the input queue: from
    the PUT of a batch's first message to the PUT of the batch, and inside the collector
    (the bridge got the first message -> the batch's PUT done, from the histories).

    python -m bench.collector_throughput [--messages N] [--destinations D]
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from bench.figures import command_line, exclusive
from bench.gather_throughput import Bench, _cpu_seconds
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage, PutOptions, QueueAttributes
from mqgather.collector_config import CollectorRule
from mqgather.names import PROP_BATCH_REASON, PROP_BATCH_SIZE
from mqgather.runtime.rules import RuleStore
from mqgather.runtime.temporal import ensure_search_attributes
from workflows.collect_models import PutBatchResult, collector_id

CONVERTER = pydantic_data_converter.payload_converter

IN, OUT, FAILURE, OWN = "BENCH.COLLECT.IN", "BENCH.BATCHES", "BENCH.COLLECT.FAILED", "BENCH.OWN"
MAX_MESSAGES, MAX_DELAY = 100, 2.0
PACED_SECONDS = 15  # how long (d) feeds the collector
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


def send(
    qm: LocalQueueManager, numbers: range, destinations: int, rate: float | None = None
) -> dict[int, datetime]:
    """Message i for destination i mod D, ``UNIT`` per unit of work (10 when paced at
    ``rate`` messages/s); the PUT time of each."""
    put_at: dict[int, datetime] = {}
    unit = UNIT if rate is None else 10
    start = time.monotonic()
    for count, i in enumerate(numbers):
        if rate is not None and count % unit == 0:
            time.sleep(max(0.0, start + count / rate - time.monotonic()))  # pacing
        message = MQMessage(properties={"destination": f"D{i % destinations:02d}"}, body=body(i))
        done = qm.put(IN, message, PutOptions(syncpoint=True))
        assert done.put_date_time is not None
        put_at[i] = done.put_date_time
        if count % unit == unit - 1:
            qm.commit()
    qm.commit()
    return put_at


def waits_of(batches: list[MQMessage], put_at: dict[int, datetime]) -> list[float]:
    """ms from the PUT of each batch's first message to the batch's PUT."""
    out = []
    for batch in batches:
        first = json.loads(batch.body)[0]["n"]
        assert batch.put_date_time is not None
        out.append((batch.put_date_time - put_at[first]).total_seconds() * 1000)
    return out


async def inside_waits(client: Client, destinations: int, after: datetime) -> list[float]:
    """ms from the bridge getting each batch's first message to its PUT being done, for
    the batches PUT after ``after``: read from the PUT markers in the histories."""
    out = []
    for d in range(destinations):
        handle = client.get_workflow_handle(collector_id("bench", f"D{d:02d}"))
        async for event in handle.fetch_history_events():
            if event.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
                continue
            details = event.marker_recorded_event_attributes.details
            if "result" not in details:
                continue
            data, result = (
                CONVERTER.from_payloads(details[key].payloads)[0] for key in ("data", "result")
            )
            facts = PutBatchResult.model_validate(result).batch
            done = data["complete_time"]
            put = datetime.fromtimestamp(done["seconds"] + done["nanos"] / 1e9, UTC)
            if facts is not None and facts.first_received_at and put > after:
                out.append((put - facts.first_received_at).total_seconds() * 1000)
    return out


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
            held += int(str(batch.properties[PROP_BATCH_SIZE]))
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
            warm = send(qm, range(-destinations * MAX_MESSAGES, 0), destinations)
            take_batches(qm, len(warm))  # not measured

            print(f"(b) collector: {n} messages for {destinations} destinations …", flush=True)
            before = {k: _cpu_seconds(pid) for k, pid in parts.items()}
            start = time.perf_counter()
            put_at = send(qm, range(n), destinations)
            sent = time.perf_counter()
            batches = take_batches(qm, n)
            cpu = {k: _cpu_seconds(pid) - before[k] for k, pid in parts.items()}
            # On the queue manager's clock: the first input's PUT to the last batch's PUT.
            last = max(b.put_date_time for b in batches if b.put_date_time is not None)
            rate = n / (last - min(put_at.values())).total_seconds()

            paced_rate = rate / 2
            m = min(n, int(paced_rate * PACED_SECONDS))
            print(f"(d) paced: {m} messages at {paced_rate:.0f} msg/s …", flush=True)
            paced_put = send(qm, range(n, n + m), destinations, paced_rate)
            paced = take_batches(qm, m)
            inside = await inside_waits(client, destinations, min(paced_put.values()))
            failed = qm.inquire(FAILURE).curdepth
            left = qm.inquire(IN).curdepth + qm.inquire(OUT).curdepth
            qm.close()
        finally:
            bench.close()

    numbers = [item["n"] for b in batches + paced for item in json.loads(b.body)]
    once = numbers and sorted(numbers) == list(range(n + m)) and not failed and not left

    def reasons(of: list[MQMessage]) -> str:
        counts = Counter(str(b.properties[PROP_BATCH_REASON]) for b in of)
        return f"{len(of)} batches: " + ", ".join(f"{r} {c}" for r, c in sorted(counts.items()))

    def spread(waits: list[float]) -> str:
        q = statistics.quantiles(waits, n=100, method="inclusive")
        return f"p50 {q[49]:5.0f}  p99 {q[98]:5.0f}  max {max(waits):5.0f}"

    print()
    print(f"(a) queue manager put+get msg/s          {qm_rate:9.0f}")
    print(f"(b) collector msg/s                      {rate:9.0f}   ratio (b)/(a) "
          f"{rate / qm_rate:.2f}   (putting alone took {sent - start:.1f} s)")  # fmt: skip
    flood = spread(waits_of(batches, put_at))
    print(f"    {reasons(batches)}; first message PUT -> batch PUT ms {flood}"
          "  (with the input's backlog)")  # fmt: skip
    print("(c) CPU ms per 1,000 messages            " +
          "  ".join(f"{k} {1_000_000 * v / n:.0f}" for k, v in cpu.items()))  # fmt: skip
    print(f"(d) at {paced_rate:.0f} msg/s, {reasons(paced)}  (rule: {MAX_MESSAGES} messages or "
          f"{MAX_DELAY * 1000:.0f} ms)")  # fmt: skip
    end_to_end = spread(waits_of(paced, put_at | paced_put))
    print(f"    batch wait ms, first message PUT -> batch PUT     {end_to_end}")
    print(f"    batch wait ms, in the collector (bridge got it -> PUT done) {spread(inside)}")
    print(f"every message in exactly one batch, none failed or left: {'yes' if once else 'NO'}")


if __name__ == "__main__":
    parser = command_line(__doc__)
    parser.add_argument("--messages", type=int, default=20_000, help="messages put (N)")
    parser.add_argument("--destinations", type=int, default=20,
                        help="destinations they are spread over (D)")  # fmt: skip
    ns = parser.parse_args()
    with exclusive():
        asyncio.run(main(ns.messages, ns.destinations))
