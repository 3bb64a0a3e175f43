"""Each leg's own clock as pure functions of the gather's state: its deadline, when it is
asked again, when it is given up, and what the completion rule makes of them.

A leg's first request goes out with the registration; a re-request at most
``retries`` times, the first ``retry_after_seconds`` after the request and each later
wait ``retry_backoff`` times longer; after the last one the leg has one more such wait.
A leg is *lost* past its own deadline, or past that last wait: it counts as missing for
the completion rule (a reply may still fill it while the gather is open).
"""

from __future__ import annotations

from datetime import datetime

from mqgather.completion import ALL, Rule
from mqgather.config import AggregateSpec, LegSpec
from workflows.models import GatherState, Rerequest
from workflows.timing import after

#: ``closed_by`` values.
BY_RULE = "rule"
BY_DEADLINE = "deadline"
BY_LOST_LEGS = "lost legs"


def sent_at(state: GatherState, leg: LegSpec) -> datetime | None:
    """When the leg's latest request went out (the first with the registration)."""
    again = state.rerequested.get(leg.name)
    return again[-1] if again else state.registered_at


def attempts(state: GatherState, leg: LegSpec) -> int:
    """Requests sent for the leg, the first included."""
    return 1 + len(state.rerequested.get(leg.name, ()))


def deadline(state: GatherState, leg: LegSpec) -> datetime | None:
    """The leg's own deadline, from the registration (None: the gather's governs)."""
    if leg.timeout_seconds is None or state.registered_at is None:
        return None
    return after(state.registered_at, leg.timeout_seconds)


def _wait(leg: LegSpec, made: int) -> float:
    """The wait in seconds after the request that followed ``made`` re-requests."""
    return leg.retry_after_seconds * leg.retry_backoff**made


def awaited_until(state: GatherState, name: str) -> datetime | None:
    """Until when a reply of leg ``name`` is awaited: its own deadline or the gather's,
    whichever comes first (None: no deadline)."""
    leg = next(leg for leg in state.expected if leg.name == name)
    times = [t for t in (deadline(state, leg), state.deadline) if t is not None]
    return min(times, default=None)


def retry_due(state: GatherState, leg: LegSpec) -> datetime | None:
    """When the leg is asked again, if it has a re-request left and its request is kept."""
    made = len(state.rerequested.get(leg.name, ()))
    last = sent_at(state, leg)
    if made >= leg.retries or leg.name not in state.requests or last is None:
        return None
    due = after(last, _wait(leg, made))
    own = deadline(state, leg)
    return due if own is None or due < own else None


def given_up_at(state: GatherState, leg: LegSpec) -> datetime | None:
    """When the leg counts as lost: its deadline, or the end of the wait after its last
    re-request (whichever is first)."""
    own = deadline(state, leg)
    made = len(state.rerequested.get(leg.name, ()))
    last = sent_at(state, leg)
    if leg.retries and leg.name in state.requests and made >= leg.retries and last is not None:
        after_last = after(last, _wait(leg, made))
        return after_last if own is None else min(own, after_last)
    return own


def is_lost(state: GatherState, leg: LegSpec, now: datetime) -> bool:
    """No reply and past the time the leg is given up."""
    if leg.name in state.received:
        return False
    until = given_up_at(state, leg)
    return until is not None and now >= until


def verdict(spec: AggregateSpec, state: GatherState, now: datetime) -> str | None:
    """``COMPLETE`` when the rule holds, every needed leg is in and no optional leg is
    still awaited; ``TIMEOUT`` when the rule can no longer hold even if every leg still
    awaited came; else None."""
    rule, have, needed = _sets(spec, state)
    waiting = {
        leg.name for leg in state.expected if leg.name not in have and not is_lost(state, leg, now)
    }
    awaited = any(leg.optional() and leg.name in waiting for leg in state.expected)
    if _holds(state, rule, have, needed) and not awaited:
        return "COMPLETE"
    possible = have | waiting
    if not (rule.holds(possible, needed) and needed <= possible):
        return "TIMEOUT"
    return None


def holds_now(spec: AggregateSpec, state: GatherState) -> bool:
    """The rule holds and every needed leg is in, optional legs aside (at the gather's
    deadline this completes the gather rather than timing it out)."""
    return _holds(state, *_sets(spec, state))


def _sets(spec: AggregateSpec, state: GatherState) -> tuple[Rule, set[str], set[str]]:
    """The rule, the legs in, and the legs it needs."""
    rule = spec.rule()
    have = {leg.name for leg in state.expected if leg.name in state.received}
    needed = {leg.name for leg in state.expected if leg.needed(rule.kind)}
    return rule, have, needed


def _holds(state: GatherState, rule: Rule, have: set[str], needed: set[str]) -> bool:
    if state.group_size == 0 and rule.kind == ALL:
        return False  # a group whose size is not known yet
    return bool(state.expected) and rule.holds(have, needed) and needed <= have


def plan_rerequests(state: GatherState, now: datetime) -> list[Rerequest]:
    """The re-requests due now: each recorded (so it is made once, whatever happens to
    the worker) and queued for the PUT."""
    planned = []
    for leg in state.expected:
        if leg.name in state.received:
            continue
        due = retry_due(state, leg)
        if due is not None and now >= due:
            planned.append(_record(state, leg, now, "no reply"))
    return planned


def _record(state: GatherState, leg: LegSpec, now: datetime, reason: str) -> Rerequest:
    state.rerequested.setdefault(leg.name, []).append(now)
    state.rerequest_reasons[leg.name] = reason
    request = Rerequest(leg=leg.name, attempt=attempts(state, leg), reason=reason)
    state.to_request.append(request)
    return request


def refuse_rerequest(state: GatherState, name: str, now: datetime) -> str:
    """Why an operator's re-request of leg ``name`` cannot be made ("" when it can)."""
    leg = next((leg for leg in state.expected if leg.name == name), None)
    if leg is None:
        known = ", ".join(leg.name for leg in state.expected) or "none yet"
        return f"{name} is not a leg of this gather (legs: {known})"
    if name in state.received:
        return f"leg {name} has its reply already"
    if name not in state.requests:
        return (
            f"leg {name}'s request was not kept: set retries on the leg, or keep_requests "
            "= true on the aggregate, for scatter to keep it"
        )
    own = deadline(state, leg)
    if own is not None and now >= own:
        return f"leg {name} is past its own deadline ({own:%H:%M:%S} UTC)"
    return ""


def rerequest_now(state: GatherState, name: str, reason: str, now: datetime) -> Rerequest:
    """Record an operator's re-request of leg ``name`` (checked by ``refuse_rerequest``)."""
    leg = next(leg for leg in state.expected if leg.name == name)
    return _record(state, leg, now, reason)


def rerequest_reported(
    state: GatherState, index: int, reason: str, report: str, now: datetime
) -> Rerequest | None:
    """MQ reported leg ``index``'s request undelivered: the leg is asked again now when it
    has a re-request left (its next one is then not waited for), once per report. Else
    nothing changes: the report may be about an earlier request than the latest, which
    may still be delivered, so the leg keeps its clock."""
    if not 0 <= index < len(state.expected) or report in state.reported:
        return None
    leg = state.expected[index]
    if leg.name in state.received or retry_due(state, leg) is None:
        return None
    state.reported.append(report)
    return _record(state, leg, now, f"MQ reported its request undelivered: {reason}")


def next_due(state: GatherState, now: datetime) -> datetime | None:
    """The earliest moment a leg's clock changes something: a re-request or a leg given up."""
    times = []
    for leg in state.expected:
        if leg.name in state.received:
            continue
        for when in (retry_due(state, leg), given_up_at(state, leg)):
            if when is not None and when > now:
                times.append(when)
    return min(times, default=None)


def drop_unsent(state: GatherState) -> None:
    """The gather closed before PUTting these re-requests: they were never made."""
    for item in reversed(state.to_request):
        made = state.rerequested.get(item.leg, [])
        if made:
            made.pop()
        if not made:
            state.rerequested.pop(item.leg, None)
            state.rerequest_reasons.pop(item.leg, None)
    state.to_request.clear()
