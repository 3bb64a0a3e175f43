"""The collector's rules as pure functions of its state (no I/O, no clock: ``now`` is
passed in). A batch takes the rule of the signal that opens it and closes on its count,
its bytes or its delay, whichever comes first."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from mqgather.constants import BATCH_CARRIED_BYTES
from workflows import redelivery
from workflows.collect_models import (
    BatchFacts,
    BatchStatus,
    ClosedBatch,
    CloseReason,
    CollectInput,
    CollectorState,
    Item,
    OpenBatch,
    PutBatchResult,
    ReleaseBatchResult,
)
from workflows.logic import attempt_failed, attempt_succeeded


def digest_of(msg_id: bytes) -> str:
    """A short digest of a MsgId, or of a MsgId and fingerprint, remembered to spot its
    redelivery."""
    return hashlib.blake2b(msg_id, digest_size=8).hexdigest()


def _seen(state: CollectorState) -> set[str]:
    """``state.seen`` as a set, kept beside the list (which is what is carried) so that a
    signal does not rebuild 20,000 entries; rebuilt after a continue-as-new."""
    seen = state._seen
    if len(seen) != len(state.seen):
        seen.clear()
        seen.update(state.seen)
    return seen


def _remembered(key: str) -> str:
    """What the collector remembers of a message's key."""
    return digest_of(bytes.fromhex(key))


def _has(seen: set[str], key: str, remembered: str) -> bool:
    """Whether the message of ``key`` (remembered as ``remembered``) was taken: the same
    message, or its MsgId taken with no fingerprint (which stands for every message of
    that MsgId), as :meth:`workflows.redelivery.Seen.has` tells for gathers."""
    if remembered in seen:
        return True
    return not redelivery.is_bare(key) and _remembered(redelivery.msg_id_of(key)) in seen


def consumed(state: CollectorState, msg_ids: list[str]) -> list[str]:
    """Those of ``msg_ids`` (hex) the collector has taken with no fingerprint (among the
    remembered): the question of bridges of earlier releases."""
    seen = _seen(state)
    return [m for m in msg_ids if _remembered(m) in seen]


def taken(state: CollectorState, keys: list[str]) -> list[str]:
    """Those of ``keys`` (:mod:`workflows.redelivery`) whose message the collector took
    (among the remembered)."""
    seen = _seen(state)
    return [k for k in keys if _has(seen, k, _remembered(k))]


def close(state: CollectorState, now: datetime, reason: CloseReason) -> None:
    """Close the open batch (if any): it waits in ``ready`` for its PUT."""
    batch = state.open
    if batch is None or not batch.items:
        return
    state.ready.append(
        ClosedBatch(
            number=batch.number,
            rule=batch.rule,
            items=batch.items,
            opened_at=batch.opened_at,
            closed_at=now,
            reason=reason,
        )
    )
    state.open = None


def _open(
    state: CollectorState, signal: CollectInput, item: Item, now: datetime, from_arrival: bool
) -> OpenBatch:
    delay = timedelta(seconds=signal.rule.max_delay_seconds)
    # From the bridge's receipt of the first message, so the time it took to reach the
    # workflow counts too; never later than from now (a bridge clock ahead of ours).
    closes_at = min(item.received_at + delay, now + delay) if from_arrival else now + delay
    batch = OpenBatch(number=state.next_batch, rule=signal.rule, opened_at=now,
                      closes_at=closes_at)  # fmt: skip
    state.next_batch += 1
    state.open = batch
    return batch


def take(
    state: CollectorState,
    signal: CollectInput,
    now: datetime,
    remember: int,
    from_arrival: bool = True,
    by_content: bool = False,
    carry_bound: bool = False,
) -> None:
    """Add a bridge batch's messages to the open batch, closing batches as they fill.

    A message seen before (its bridge died between signal and MQCMIT) is a redelivery
    and changes nothing: the same MsgId and content when ``by_content`` (another message
    that reuses a MsgId is taken), the same MsgId otherwise (collectors recorded before).
    ``remember`` bounds how many recent messages are remembered.
    A new batch's delay counts from when the bridge got its first message
    (``from_arrival``; collectors that started before that rule count from ``now``).
    With ``carry_bound`` a batch also closes before its messages' JSON outgrows
    ``BATCH_CARRIED_BYTES``, which its PUT's input carries.
    """
    seen = _seen(state)
    for item in signal.items:
        msg_key = redelivery.key(item.message, item.fingerprint, by_content)
        remembered = _remembered(msg_key)
        if _has(seen, msg_key, remembered):
            state.redeliveries += 1
            if by_content:
                _with_body(state, item)
            continue
        seen.add(remembered)
        state.seen.append(remembered)
        state.messages += 1
        size = item.body_bytes()
        carried = len(item.model_dump_json()) if carry_bound else 0
        batch = state.open
        if batch is not None and (
            batch.size_bytes + size > batch.rule.max_bytes
            or batch.carried_bytes + carried > BATCH_CARRIED_BYTES
        ):
            close(state, now, "bytes")
            batch = None
        if batch is None:
            batch = _open(state, signal, item, now, from_arrival)
        batch.items.append(item)
        batch.size_bytes += size
        batch.carried_bytes += carried
        if len(batch.items) >= batch.rule.max_messages:
            close(state, now, "count")
        elif batch.size_bytes >= batch.rule.max_bytes:
            close(state, now, "bytes")
    if len(state.seen) > remember:
        forgotten = len(state.seen) - remember
        seen.difference_update(state.seen[:forgotten])
        del state.seen[:forgotten]


def _with_body(state: CollectorState, item: Item) -> None:
    """Keep the body a redelivery brings for a message a batch holds by a reference
    that names nothing (:func:`workflows.redelivery.with_body`)."""
    batches: list[OpenBatch | ClosedBatch] = [*state.ready]
    if state.open is not None:
        batches.append(state.open)
    for batch in batches:
        batch.items[:] = [redelivery.with_body(kept, item) for kept in batch.items]


def make_room(state: CollectorState, now: datetime) -> bool:
    """The state being too large to carry into a new run: whether a batch waits to be
    PUT first, the open one closed ("bytes") when none did.

    Batches that closed while the collector settled (a flood, inline) made the next
    run's input larger than a payload: continued as new, its task failed each time
    (TMPRL1103), and the messages it had taken were never PUT. False when there is no
    batch to PUT: nothing in this run would make the state smaller.
    """
    if not state.ready:
        close(state, now, "bytes")
    return bool(state.ready)


def expire(state: CollectorState, now: datetime) -> None:
    """Close the open batch when its delay is over, or when an operator released it."""
    if state.open is None:
        state.release = None
        return
    if state.release is not None:
        close(state, now, "released")
        state.release = None
    elif now >= state.open.closes_at:
        close(state, now, "delay")


def release(state: CollectorState, reason: str) -> ReleaseBatchResult:
    """Operator update ``release``: the open batch closes at the next turn of the loop."""
    if state.open is None or not state.open.items:
        return ReleaseBatchResult(released=False, message="no open batch")
    state.release = reason
    return ReleaseBatchResult(released=True, messages=len(state.open.items), message=reason)


def next_timer(state: CollectorState, now: datetime) -> float | None:
    """Seconds until the open batch's delay is over; None when no batch is open."""
    if state.open is None:
        return None
    return max((state.open.closes_at - now).total_seconds(), 0.001)


def put_done(
    state: CollectorState, facts: BatchFacts, result: PutBatchResult | None = None
) -> None:
    """The first ready batch is PUT: forget its messages, keep its facts (and, when its
    target refused it for good, where it went instead: ``result``)."""
    if result is not None and result.refused:
        state.dead_lettered += 1
        number = state.ready[0].number
        state.last_dead_letter = f"batch {number} to {result.queue}: {result.refused}"
    state.ready.pop(0)
    state.batches += 1
    state.last_batch = facts
    attempt_succeeded(state)


def put_failed(state: CollectorState, error: str, now: datetime) -> float:
    """Record a failed round of PUT attempts of the first ready batch; the seconds to
    wait before the next (as a gather's MQ work: :func:`workflows.logic.attempt_failed`)."""
    batch = state.ready[0]
    return attempt_failed(state, f"PUT of batch {batch.number} to {batch.rule.target_queue}",
                          error, now)  # fmt: skip


def status(collector: str, destination: str, state: CollectorState) -> BatchStatus:
    """The ``status`` query's answer."""
    batch = state.open
    return BatchStatus(
        collector=collector,
        destination=destination,
        open_messages=len(batch.items) if batch else 0,
        open_bytes=batch.size_bytes if batch else 0,
        opened_at=batch.opened_at if batch else None,
        closes_at=batch.closes_at if batch else None,
        rule=batch.rule if batch else None,
        waiting_to_put=len(state.ready),
        batches=state.batches,
        messages=state.messages,
        redeliveries=state.redeliveries,
        last_batch=state.last_batch,
        last_error=state.last_error,
        dead_lettered=state.dead_lettered,
        last_dead_letter=state.last_dead_letter,
    )


def details(destination: str, state: CollectorState) -> str:
    """Current details for the Temporal UI (markdown)."""
    lines = [f"**{destination}**: {state.batches} batches, {state.messages} messages"]
    batch = state.open
    if batch is not None:
        rule = batch.rule
        lines.append(
            f"open batch #{batch.number}: {len(batch.items)} of {rule.max_messages} messages, "
            f"{batch.size_bytes} of {rule.max_bytes} bytes, closes {batch.closes_at:%H:%M:%S} "
            f"UTC at the latest, to `{rule.target_queue}` ({rule.format})"
        )
    if state.ready:
        lines.append(f"{len(state.ready)} closed batches waiting for their PUT")
    if state.last_error:
        lines.append(f"⚠ PUT failing since {state.failing_since:%H:%M:%S} UTC: {state.last_error}")
    return "\n".join(lines)
