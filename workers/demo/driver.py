"""The driver (in the spirit of IA72's aggDriver): N scatters at a rate, each with a
planned fate for the back ends, so the expected outcome of a run is known."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from temporalio.client import Client

from bridge.fanout import new_gather_key, scatter
from bridge.mq.models import MQMessage, PutOptions
from bridge.mq.transport import Transport
from mqgather.config import AggregateSpec
from mqgather.names import TASK_QUEUE
from workers.demo.backends import FATE_PROPERTY, Fate


@dataclass(frozen=True)
class RequestPlan:
    """One request: its CorrelId and, at most, one leg with a special fate."""

    correl_id: bytes
    fate: Fate
    leg: str | None


@dataclass(frozen=True)
class Rates:
    """Share of requests with a dropped, late or duplicated leg; extra unknown and poison
    replies per request."""

    drop: float = 0.02
    late: float = 0.02
    duplicate: float = 0.03
    #: A first request dropped and its re-request answered (legs with retries only).
    lost: float = 0.02
    unknown: float = 0.02
    poison: float = 0.01


def plan_requests(n: int, spec: AggregateSpec, rates: Rates, seed: int = 7) -> list[RequestPlan]:
    """Plans for ``n`` requests: ``round(n * rate)`` of each fate, spread evenly over the
    run, each on a leg drawn from a seeded generator (so every run shows each fate)."""
    retrying = [leg.name for leg in spec.legs if leg.retries]
    shares = rates.drop + rates.late + rates.duplicate + (rates.lost if retrying else 0.0)
    if not shares <= 1:  # each fate takes its own requests: more than all would never end
        raise ValueError(
            f"the drop, late, duplicate (and lost) rates are shares of the requests: "
            f"together {shares:g}, more than 1"
        )
    rng = random.Random(seed)
    names = [leg.name for leg in spec.legs]
    fates: list[Fate] = ["ok"] * n
    offset = 0
    special: tuple[tuple[float, Fate], ...] = (
        (rates.drop, "drop"),
        (rates.late, "late"),
        (rates.duplicate, "dup"),
        (rates.lost if retrying else 0.0, "lost"),
    )
    for rate, fate in special:
        count = min(round(n * rate), n)
        for k in range(count):
            slot = (k * n // max(count, 1) + offset) % n
            while fates[slot] != "ok":
                slot = (slot + 1) % n
            fates[slot] = fate
        offset += max(1, n // 7)
    return [
        RequestPlan(new_gather_key(), fate, _leg_for(fate, names, retrying, rng)) for fate in fates
    ]


def _leg_for(fate: Fate, names: list[str], retrying: list[str], rng: random.Random) -> str | None:
    if fate == "ok":
        return None
    return rng.choice(retrying if fate == "lost" else names)


def retrying_legs(spec: AggregateSpec) -> frozenset[str]:
    """The aggregate's legs with re-requests."""
    return frozenset(leg.name for leg in spec.legs if leg.retries)


def planned_rerequests(plans: list[RequestPlan], retrying: frozenset[str]) -> set[bytes]:
    """The gathers that ask a leg again: a lost leg's, and a dropped or late leg's where
    that leg has retries."""
    return {
        p.correl_id
        for p in plans
        if p.fate == "lost" or (p.fate in ("drop", "late") and p.leg in retrying)
    }


@dataclass(frozen=True)
class Rerequests:
    """The re-requests a run's responses name, against the plan."""

    #: Planned, and seen.
    planned: int
    #: Planned, and not seen.
    missing: int
    #: Not planned, on a gather whose response came later than the re-requested leg's
    #: retry_after_seconds: the leg was due and not in yet (a slow machine or server), so
    #: asking it again is what the configuration says.
    slow: int
    #: Not planned, on a gather answered sooner than that: a re-request with no cause.
    unexplained: int


#: PutDateTime is kept to the hundredth of a second (MQ's precision), the send time to
#: the microsecond: a response at exactly the leg's retry_after_seconds may read as
#: this much sooner.
_TIME_SLACK_SECONDS = 0.02


def reconcile_rerequests(
    planned: set[bytes],
    seen: dict[bytes, tuple[tuple[str, ...], float | None]],
    retry_after: dict[str, float],
) -> Rerequests:
    """Sort the re-requests seen (per CorrelId: the legs asked again, and the seconds from
    the scatter to the response, None if unknown) against the ``planned`` ones;
    ``retry_after`` is each leg's retry_after_seconds."""
    slow = unexplained = 0
    for correl_id, (legs, took) in seen.items():
        if correl_id in planned:
            continue
        due = min((retry_after.get(leg, float("inf")) for leg in legs), default=float("inf"))
        if took is not None and took + _TIME_SLACK_SECONDS >= due:
            slow += 1
        else:
            unexplained += 1
    return Rerequests(
        planned=len(planned & seen.keys()),
        missing=len(planned - seen.keys()),
        slow=slow,
        unexplained=unexplained,
    )


def expected_counts(
    plans: list[RequestPlan], unknown: int, poison: int, retrying: frozenset[str] = frozenset()
) -> dict[str, int]:
    """What a correct run ends with, given the plans and the legs with retries: a lost
    leg is asked again and completes; a dropped or late leg with retries is asked again
    too (and the gather still times out)."""
    timed_out = sum(1 for p in plans if p.fate in ("drop", "late"))
    again = len(planned_rerequests(plans, retrying))
    return {
        "requests": len(plans),
        "completed": len(plans) - timed_out,
        "timed_out": timed_out,
        "late": sum(1 for p in plans if p.fate == "late"),
        "unknown": unknown,
        "duplicates": sum(1 for p in plans if p.fate == "dup"),
        "failures": poison,
        "rerequested": again,
    }


async def drive(
    client: Client,
    transport: Transport,
    spec: AggregateSpec,
    plans: list[RequestPlan],
    *,
    rate: float,
    task_queue: str = TASK_QUEUE,
    on_sent: Callable[[int], None] | None = None,
) -> dict[bytes, datetime]:
    """Scatter every plan at ``rate`` per second; returns when each was sent."""
    sent: dict[bytes, datetime] = {}
    start = time.monotonic()
    for i, plan in enumerate(plans):
        due = start + i / rate if rate > 0 else start
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)  # pacing the load, not synchronising
        props = {plan.leg: {FATE_PROPERTY: plan.fate}} if plan.leg else None
        sent[plan.correl_id] = datetime.now(UTC)
        await scatter(
            client, transport, spec, correl_id=plan.correl_id, leg_properties=props,
            task_queue=task_queue,
        )  # fmt: skip
        if on_sent:
            on_sent(i + 1)
    return sent


def put_strays(transport: Transport, spec: AggregateSpec, unknown: int, poison: int) -> None:
    """Replies nobody registered (they end on the unknown queue) and poison messages
    (no CorrelId; they end on the failure queue)."""
    leg = spec.legs[0].name if spec.legs else "LEG"
    for _ in range(unknown):
        transport.put(
            spec.reply_queue,
            MQMessage(correl_id=new_gather_key(), properties={spec.leg_property: leg}, body=b"{}"),
            PutOptions(syncpoint=True),
        )
    for i in range(poison):
        transport.put(
            spec.reply_queue,
            MQMessage(properties={spec.leg_property: leg}, body=f"poison {i}".encode()),
            PutOptions(syncpoint=True),
        )
    transport.commit()
