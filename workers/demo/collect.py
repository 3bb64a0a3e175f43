"""The demo's collector section: rules for three destinations, messages for them and for
one without a rule, one too big for its batch; then batches counted per destination and
close reason, and every message sent reconciled against where it ended."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import Client

from bridge.mq.models import MQMessage, PutOptions
from bridge.mq.transport import Transport
from mqgather.collector_config import CollectorRule, CollectorSpec
from mqgather.names import PROP_BATCH_REASON, PROP_BATCH_SIZE, PROP_DESTINATION
from mqgather.runtime.rules import RuleStore
from workflows.collect_models import ReleaseBatchInput, collector_id
from workflows.collector import CollectorWorkflow

#: destination -> (rule, messages sent). Spain's 12 of 20 close by delay, as one group.
DEMO_RULES = {
    "France": (CollectorRule(destination="France", target_queue="COLLECT.OUT.FR",
                             max_messages=10, max_delay_seconds=30), 20),
    "UK": (CollectorRule(destination="UK", target_queue="COLLECT.OUT.UK", max_messages=5,
                         max_delay_seconds=3, max_bytes=2000, format="json"), 7),
    "Spain": (CollectorRule(destination="Spain", target_queue="COLLECT.OUT.SP",
                            max_messages=20, max_delay_seconds=4, format="group"), 12),
}  # fmt: skip
#: Messages with no destination: the default rule, released by the demo as an operator.
UNROUTED = 3
DEMO_QUEUES = tuple(rule.target_queue for rule, _ in DEMO_RULES.values())


@dataclass
class CollectFigures:
    """What the section sent and where it ended."""

    sent: int = 0
    failed: int = 0
    batches: Counter[tuple[str, str]] = field(default_factory=Counter)
    batched: Counter[str] = field(default_factory=Counter)

    def reconciled(self) -> bool:
        """Every message sent is in exactly one batch or on the failure queue."""
        return self.sent == sum(self.batched.values()) + self.failed

    def as_dict(self) -> dict[str, Any]:
        """The figures as JSON-ready data."""
        return {
            "sent": self.sent,
            "failed": self.failed,
            "batched": dict(self.batched),
            "batches": [
                {"destination": d, "reason": r, "batches": n}
                for (d, r), n in sorted(self.batches.items())
            ],
            "reconciled": self.reconciled(),
        }


def set_rules(spec: CollectorSpec) -> None:
    """The demo's rules, written to the collector's rules database."""
    store = RuleStore(spec.rules_db)
    for rule, _ in DEMO_RULES.values():
        store.set(spec.name, rule)


def send(qm: Transport, spec: CollectorSpec) -> CollectFigures:
    """Put the demo's messages (one unit of work) and one too big for UK's batches."""
    figures = CollectFigures()
    for destination, (_, count) in DEMO_RULES.items():
        for i in range(count):
            body = f"<Order><Item>{destination}-{i}</Item></Order>".encode()
            qm.put(spec.input_queue, MQMessage(properties={"destination": destination}, body=body))
            figures.sent += 1
    for i in range(UNROUTED):
        qm.put(spec.input_queue, MQMessage(body=f"<Order><Item>any-{i}</Item></Order>".encode()))
        figures.sent += 1
    big = MQMessage(properties={"destination": "UK"}, body=b"{" + b" " * 4000 + b"}")
    qm.put(spec.input_queue, big, PutOptions(syncpoint=True))
    figures.sent += 1
    qm.commit()
    return figures


def count(qm: Transport, spec: CollectorSpec, figures: CollectFigures) -> None:
    """Take the batches off their queues, counting batches and messages per destination."""
    figures.batches.clear()
    figures.batched.clear()
    for queue in (*DEMO_QUEUES, spec.default_queue):
        for message in qm.browse(queue):
            destination = str(message.properties.get(PROP_DESTINATION, "?"))
            reason = str(message.properties.get(PROP_BATCH_REASON, "?"))
            if message.in_group:
                figures.batched[destination] += 1
                if message.msg_seq_number == 1:
                    figures.batches[(destination, reason)] += 1
                continue
            figures.batches[(destination, reason)] += 1
            size = message.properties.get(PROP_BATCH_SIZE, 0)
            figures.batched[destination] += size if isinstance(size, int) else 0
    figures.failed = qm.inquire(spec.failure_queue).curdepth


async def run_section(
    client: Client, qm: Transport, spec: CollectorSpec, limit: float = 90
) -> CollectFigures:
    """Send, wait until every message is accounted for (releasing the default
    destination's batch once the rest is in), and return the figures."""
    for queue in (*DEMO_QUEUES, spec.default_queue, spec.failure_queue):
        qm.clear(queue)
    figures = send(qm, spec)
    expected = sum(n for _, n in DEMO_RULES.values())
    released = False
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        count(qm, spec, figures)
        routed = sum(figures.batched[d] for d in DEMO_RULES)
        if routed == expected and figures.failed >= 1 and not released:
            handle = client.get_workflow_handle(collector_id(spec.name, spec.default_destination))
            await handle.execute_update(CollectorWorkflow.release, ReleaseBatchInput())
            released = True
        if figures.reconciled() and released:
            return figures
        await asyncio.sleep(0.25)
    return figures
