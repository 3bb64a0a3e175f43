"""Synthetic gather histories with the event shapes the gather workflow really writes
(start, registration and reply signals, workflow tasks, search-attribute upserts, the
local-activity marker, completion with the result), for benchmarks and tests."""

from __future__ import annotations

import base64
import json
import random
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf import json_format
from pydantic import BaseModel
from temporalio.api.history.v1 import History

from analytics.histories import history_line
from bridge.mq.models import MQMessage
from mqgather.config import AggregateSpec, LegSpec
from mqgather.names import GATHER_WORKFLOW, SIGNAL_EXPECT, SIGNAL_REPLIES, TASK_QUEUE
from mqgather.runtime.codec import PayloadCipher, payloads_in
from workflows.models import (
    GatherInput,
    GatherResult,
    LegStatus,
    Registration,
    Reply,
    ReplyBatch,
    gather_id,
)

#: Above this a synthetic reply is held (the aggregates' default inline size).
_HELD_ABOVE = 64 * 1024

LEGS = ("CREDIT", "STOCK", "TAX")
_JSON_PLAIN = base64.b64encode(b"json/plain").decode()


@dataclass
class Truth:
    """What a synthetic gather is known to be."""

    gather_id: str
    outcome: str
    legs_missing: list[str]
    completion_ms: float
    leg_latency_ms: dict[str, float] = field(default_factory=dict)
    duplicates: int = 0
    leg_bytes: dict[str, int] = field(default_factory=dict)
    held_legs: int = 0
    leg_attempts: dict[str, int] = field(default_factory=dict)


def _payload(value: BaseModel) -> dict[str, Any]:
    data = value.model_dump_json().encode()
    return {"metadata": {"encoding": _JSON_PLAIN}, "data": base64.b64encode(data).decode()}


def _time(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _History:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def add(self, when: datetime, kind: str, attrs: dict[str, Any] | None = None) -> None:
        event: dict[str, Any] = {
            "eventId": str(len(self.events) + 1),
            "eventTime": _time(when),
            "eventType": f"EVENT_TYPE_{kind}",
        }
        if attrs is not None:
            name = "".join(p.capitalize() for p in kind.lower().split("_"))
            event[name[0].lower() + name[1:] + "EventAttributes"] = attrs
        self.events.append(event)

    def task(self, when: datetime) -> None:
        for kind in ("WORKFLOW_TASK_SCHEDULED", "WORKFLOW_TASK_STARTED", "WORKFLOW_TASK_COMPLETED"):
            self.add(when, kind, {})


def synthesize(
    n: int,
    *,
    start: datetime | None = None,
    seed: int = 1,
    aggregate: str = "orders",
    arrivals_in_result: bool = True,
) -> Iterator[tuple[str, Truth]]:
    """``n`` gathers, one export NDJSON line each, with their truth.

    About 8 % time out missing one leg and 3 % have a duplicate leg; gathers start 0.1 s
    apart from ``start``. Without ``arrivals_in_result`` the results are those of older
    gathers, which record neither when each leg arrived nor the aggregate's rule and
    timeout.
    """
    rng = random.Random(seed)
    # Sizes from a generator of their own, so the other draws stay what they were.
    sizes = random.Random(seed + 1)
    # The bridge's hop to the server: a reply's signal lands a little after its get.
    hops = random.Random(seed + 2)
    base = start or datetime(2026, 1, 1, tzinfo=UTC)
    spec = AggregateSpec(
        name=aggregate, legs=tuple(LegSpec(name=leg) for leg in LEGS), timeout_seconds=3.0
    )
    for i in range(n):
        t0 = base + timedelta(milliseconds=100 * i)
        correl = rng.randbytes(24)
        gid = gather_id(aggregate, correl)
        run_id = str(uuid.UUID(bytes=rng.randbytes(16)))
        draw = rng.random()
        missing = [rng.choice(LEGS)] if draw < 0.08 else []
        duplicate = rng.choice(LEGS) if 0.08 <= draw < 0.11 else None
        h = _History()
        h.add(t0, "WORKFLOW_EXECUTION_STARTED", {
            "workflowType": {"name": GATHER_WORKFLOW},
            "taskQueue": {"name": TASK_QUEUE},
            "input": {"payloads": [_payload(GatherInput(aggregate=spec, correl_id=correl))]},
            "originalExecutionRunId": run_id,
            "workflowId": gid,
        })  # fmt: skip
        h.add(t0, "WORKFLOW_EXECUTION_SIGNALED", {
            "signalName": SIGNAL_EXPECT,
            "input": {"payloads": [_payload(Registration(legs=list(spec.legs)))]},
        })  # fmt: skip
        h.task(t0)
        h.add(t0, "UPSERT_WORKFLOW_SEARCH_ATTRIBUTES", {"searchAttributes": {}})
        arrivals: dict[str, float] = {}
        for leg in LEGS:
            if leg in missing:
                continue
            ms = round(rng.uniform(20, 400), 3)
            arrivals[leg] = ms
        # Most replies are small; about one in twenty is megabytes and waits on the hold queue.
        leg_bytes = {
            leg: sizes.randint(200_000, 12_000_000) if sizes.random() < 0.05
            else sizes.randint(100, 4000)
            for leg in arrivals
        }  # fmt: skip
        when = sorted(arrivals.items(), key=lambda kv: kv[1])
        signalled: dict[str, float] = {}
        for leg, ms in when:
            t = t0 + timedelta(milliseconds=ms)
            signalled[leg] = round(ms + hops.uniform(0.2, 1.5), 3)
            copies = 2 if leg == duplicate else 1
            replies = [
                Reply(message=MQMessage(msg_id=rng.randbytes(24), correl_id=correl), leg=leg,
                      source_queue=spec.reply_queue, received_at=t, size=leg_bytes[leg])
                for _ in range(copies)
            ]  # fmt: skip
            batch = ReplyBatch(replies=replies)
            h.add(t0 + timedelta(milliseconds=signalled[leg]), "WORKFLOW_EXECUTION_SIGNALED", {
                "signalName": SIGNAL_REPLIES, "input": {"payloads": [_payload(batch)]},
            })  # fmt: skip
            h.task(t0 + timedelta(milliseconds=signalled[leg]))
        done_ms = 3000.0 if missing else max(arrivals.values()) + round(rng.uniform(2, 20), 3)
        t_end = t0 + timedelta(milliseconds=done_ms)
        # About one leg in seven was asked again (its own draw: the rest stays as it was).
        attempts = {leg: 1 + (zlib.crc32(f"{gid}|{leg}".encode()) % 7 == 0) for leg in LEGS}
        h.add(t_end, "MARKER_RECORDED", {"markerName": "core_local_activity"})
        h.task(t_end)
        outcome = "TIMEOUT" if missing else "COMPLETE"
        received = [leg for leg in LEGS if leg not in missing]
        result = GatherResult(
            gather_id=gid, aggregate=aggregate, correl_id=correl.hex(), state=outcome,
            legs_expected=list(LEGS), legs_received=received, legs_missing=missing,
            duplicates=1 if duplicate else 0, redeliveries=0, late=0, unknown=0,
            started_at=t0, ended_at=t_end,
            legs=[LegStatus(name=leg, received=leg in leg_bytes, replies=int(leg in leg_bytes),
                            bytes=leg_bytes.get(leg, 0),
                            held=leg_bytes.get(leg, 0) > _HELD_ABOVE, attempts=attempts[leg],
                            received_at=t0 + timedelta(milliseconds=arrivals[leg])
                            if arrivals_in_result and leg in arrivals else None)
                  for leg in LEGS],
            closed_by="deadline" if missing else "rule",
            # Older results record neither the rule nor the timeout (their input does).
            complete_when=spec.complete_when if arrivals_in_result else None,
            timeout_seconds=spec.timeout_seconds if arrivals_in_result else None,
        )  # fmt: skip
        h.add(t_end, "WORKFLOW_EXECUTION_COMPLETED", {"result": {"payloads": [_payload(result)]}})
        line = json.dumps(
            {"workflowId": gid, "runId": run_id, "history": {"events": h.events}},
            separators=(",", ":"),
        )
        held = sum(size > _HELD_ABOVE for size in leg_bytes.values())
        yield (
            line,
            Truth(
                gid,
                outcome,
                missing,
                done_ms,
                # Results that record arrivals give the bridge's get; older ones, the
                # signal's time at the server.
                arrivals if arrivals_in_result else signalled,
                1 if duplicate else 0,
                leg_bytes,
                held,
                attempts,
            ),
        )


def as_exported(line: str, cipher: PayloadCipher | None = None) -> str:
    """A synthetic ``line`` as ``mqgather export`` writes it (through the history
    message), every payload sealed with ``cipher`` where given (``--keep-encrypted``)."""
    record = json.loads(line)
    history = json_format.ParseDict(record["history"], History())
    if cipher is not None:
        for payload in payloads_in(history):
            payload.CopyFrom(cipher.seal(payload))
    return history_line(record["workflowId"], record["runId"], history)
