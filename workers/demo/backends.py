"""Simulated back ends (in the spirit of IA72's aggLegacy): serve leg request queues and
reply after a latency, with drop, late and duplicate behaviour for testing."""

from __future__ import annotations

import hashlib
import heapq
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, Field

from bridge.mq.errors import MQError, NoMessageAvailable
from bridge.mq.models import Match, MQMessage, PutOptions
from bridge.mq.transport import Transport
from mqgather.names import PROP_AGGREGATE, PROP_ATTEMPT

log = logging.getLogger("mqgather.backends")

#: Request property that tells a simulated back end what to do with this leg.
FATE_PROPERTY = "mqgather_sim"
#: lost: the first request is dropped, a re-request answered.
Fate = Literal["ok", "drop", "late", "dup", "lost"]


class BackendBehaviour(BaseModel):
    """How the simulated back ends answer."""

    latency_ms: float = Field(default=100.0, ge=0)
    jitter_ms: float = Field(default=50.0, ge=0)
    drop_rate: float = Field(default=0.0, ge=0, le=1)
    late_rate: float = Field(default=0.0, ge=0, le=1)
    duplicate_rate: float = Field(default=0.0, ge=0, le=1)
    late_after_seconds: float = Field(default=5.0, ge=0, description="delay of a late reply")
    timeout_queues: dict[str, str] = Field(
        default_factory=dict,
        description="aggregate -> its timeout queue: a late reply also waits until its "
        "gather's partial response is there, so it is late however slow the worker is",
    )
    reply_format: Literal["json", "xml", "text"] = "json"
    leg_property: str = "leg"


def fate_of(request: MQMessage, behaviour: BackendBehaviour) -> Fate:
    """The request's fate: its ``mqgather_sim`` property, else drawn from the rates
    (deterministically from the MsgId and leg, so a run can be repeated)."""
    told = request.properties.get(FATE_PROPERTY)
    if told in ("ok", "drop", "late", "dup", "lost"):
        return told  # type: ignore[return-value]
    leg = str(request.properties.get(behaviour.leg_property, ""))
    digest = hashlib.sha256(request.msg_id + leg.encode()).digest()
    draw = int.from_bytes(digest[:8], "big") / 2**64
    for rate, fate in (
        (behaviour.drop_rate, "drop"),
        (behaviour.late_rate, "late"),
        (behaviour.duplicate_rate, "dup"),
    ):
        if draw < rate:
            return fate  # type: ignore[return-value]
        draw -= rate
    return "ok"


def reply_body(request: MQMessage, leg: str, fmt: str, copy: int = 0) -> bytes:
    """A back end's answer to one leg request."""
    if fmt == "xml":
        return f"<reply><leg>{leg}</leg><status>OK</status><copy>{copy}</copy></reply>".encode()
    if fmt == "text":
        return f"{leg}:OK".encode()
    return json.dumps(
        {"leg": leg, "status": "OK", "request": request.msg_id.hex(), "copy": copy}
    ).encode()


@dataclass
class BackendStats:
    """What the back ends did."""

    requests: int = 0
    replies: int = 0
    dropped: int = 0
    late: int = 0
    duplicated: int = 0
    rerequests: int = 0
    #: Why the back ends stopped before they were told to ("" while they serve).
    failure: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **counts: int) -> None:
        """Add to counters from any thread."""
        with self.lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)


def serve(
    connect: Callable[[], Transport],
    queue: str,
    behaviour: BackendBehaviour,
    stop: threading.Event,
    stats: BackendStats,
) -> None:
    """Serve one leg request queue until ``stop`` is set; an MQ error stops every back
    end (it sets ``stop``) and is kept in ``stats.failure``."""
    try:
        transport = connect()
    except MQError as exc:
        _stopped(queue, exc, stop, stats)
        return
    # (when, seq, target queue, reply, until when a late reply waits for its gather's close)
    due: list[tuple[float, int, str, MQMessage, float | None]] = []
    seq = 0
    try:
        while not stop.is_set():
            now = time.monotonic()
            wait = 100 if not due else max(0, min(100, int((due[0][0] - now) * 1000)))
            try:
                request = transport.get(queue, wait_ms=wait, syncpoint=False)
            except NoMessageAvailable:
                request = None
            if request is not None:
                stats.add(requests=1)
                leg = str(request.properties.get(behaviour.leg_property, queue))
                fate = fate_of(request, behaviour)
                delay = (behaviour.latency_ms + behaviour.jitter_ms * _unit(request)) / 1000
                again = PROP_ATTEMPT in request.properties
                if again:
                    stats.add(rerequests=1)
                # Planned outcomes stay exact: only a "lost" leg's re-request is answered
                # (the others' first request is answered, dropped or late as planned).
                if fate == "drop" or (fate == "lost") != again:
                    stats.add(dropped=1)
                    continue
                if fate == "lost":
                    fate = "ok"
                if fate == "late":
                    stats.add(late=1)
                    delay = behaviour.late_after_seconds
                copies = 2 if fate == "dup" else 1
                if fate == "dup":
                    stats.add(duplicated=1)
                    delay = 0.0  # answered at once, twice: never the gather's last leg
                for copy in range(copies):
                    reply = MQMessage(
                        # As the request's report options ask: a re-request passes its
                        # CorrelId on (its MsgId is new), a first request its MsgId.
                        correl_id=request.reply_correl_id(),
                        properties={
                            behaviour.leg_property: leg,
                            PROP_AGGREGATE: request.properties.get(PROP_AGGREGATE, ""),
                        },
                        body=reply_body(request, leg, behaviour.reply_format, copy),
                    )
                    seq += 1
                    hold = now + delay + LATE_MAX_HOLD_SECONDS if fate == "late" else None
                    heapq.heappush(due, (now + delay, seq, request.reply_to_q, reply, hold))
            now = time.monotonic()
            sent = 0
            held = []
            while due and due[0][0] <= now:
                _, number, target, reply, hold = heapq.heappop(due)
                if hold is not None and now < hold and not _closed(transport, reply, behaviour):
                    held.append((now + LATE_RECHECK_SECONDS, number, target, reply, hold))
                    continue
                transport.put(target, reply, PutOptions(syncpoint=True))
                sent += 1
            for entry in held:
                heapq.heappush(due, entry)
            if sent:
                transport.commit()
                stats.add(replies=sent)
    except MQError as exc:
        _stopped(queue, exc, stop, stats)
    finally:
        transport.close()


def _stopped(queue: str, exc: MQError, stop: threading.Event, stats: BackendStats) -> None:
    """Every back end stops with one that failed, and the command ends naming it."""
    log.error("back end on %s stopped: %s", queue, exc)
    with stats.lock:
        stats.failure = stats.failure or f"back end on {queue}: {exc}"
    stop.set()


#: How often a late reply checks whether its gather has timed out yet.
LATE_RECHECK_SECONDS = 0.2
#: The longest a late reply waits for its gather's partial (one routed elsewhere, e.g.
#: to the requester's ReplyToQueue, never shows on the timeout queue).
LATE_MAX_HOLD_SECONDS = 60.0


def _closed(transport: Transport, reply: MQMessage, behaviour: BackendBehaviour) -> bool:
    """Whether the reply's gather has put its partial response (always, when its
    aggregate's timeout queue is not known)."""
    queue = behaviour.timeout_queues.get(str(reply.properties.get(PROP_AGGREGATE, "")))
    if not queue:
        return True
    try:
        transport.get(queue, match=Match(correl_id=reply.correl_id), browse="first")
    except NoMessageAvailable:
        return False
    return True


def _unit(request: MQMessage) -> float:
    return hashlib.sha256(request.msg_id + b"jitter").digest()[0] / 255


def start_backends(
    connect: Callable[[], Transport],
    queues: list[str],
    behaviour: BackendBehaviour,
) -> tuple[threading.Event, BackendStats, list[threading.Thread]]:
    """Serve each queue in a thread of its own; set the returned event to stop them."""
    stop = threading.Event()
    stats = BackendStats()
    threads = [
        threading.Thread(
            target=serve,
            args=(connect, q, behaviour, stop, stats),
            name=f"backend-{q}",
            daemon=True,
        )
        for q in queues
    ]
    for thread in threads:
        thread.start()
    return stop, stats, threads
