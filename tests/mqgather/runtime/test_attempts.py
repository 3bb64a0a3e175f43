"""One unit of work at a time per gather in a worker: an attempt waits for the one
before it that still runs."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from mqgather.runtime.attempts import (
    AttemptCancelled,
    AttemptLostTask,
    EarlierAttemptRunning,
    OneAtATime,
    check_not_cancelled,
    confirm_task,
    task_lost,
)
from tests.mqgather.runtime.test_budget import holding


def _holding(turns: OneAtATime, key: str, inside: threading.Event, leave: threading.Event):
    return holding(lambda: turns.hold(key, wait_s=30), inside, leave)


def _until(check, timeout: float = 10.0) -> None:
    done = threading.Event()
    deadline = threading.Timer(timeout, done.set)
    deadline.start()
    try:
        while not check():
            if done.wait(0.01):
                raise AssertionError("condition not met in time")
    finally:
        deadline.cancel()


def test_a_second_attempt_for_the_same_key_waits_until_the_first_leaves():
    turns = OneAtATime()
    first_in, first_out = threading.Event(), threading.Event()
    second_in, second_out = threading.Event(), threading.Event()
    first = _holding(turns, "gather:a", first_in, first_out)
    assert first_in.wait(10)
    second = _holding(turns, "gather:a", second_in, second_out)
    _until(lambda: turns.users("gather:a") == 2)  # the second is waiting, not inside
    assert not second_in.is_set()
    first_out.set()
    assert second_in.wait(10)
    second_out.set()
    first.join(10)
    second.join(10)
    assert turns.users("gather:a") == 0  # an idle key keeps no lock


def test_different_keys_run_together():
    turns = OneAtATime()
    a_in, b_in, out = threading.Event(), threading.Event(), threading.Event()
    threads = [_holding(turns, "gather:a", a_in, out), _holding(turns, "gather:b", b_in, out)]
    assert a_in.wait(10) and b_in.wait(10)
    out.set()
    for thread in threads:
        thread.join(10)


def test_an_attempt_that_waits_too_long_fails_naming_the_key_and_leaves_nothing_held():
    turns = OneAtATime()
    with turns.hold("gather:a", wait_s=1):
        with (
            pytest.raises(EarlierAttemptRunning, match=r"of gather:a is still inside .*0\.05s"),
            turns.hold("gather:a", wait_s=0.05),
        ):
            pass
        assert turns.users("gather:a") == 1
    assert turns.users("gather:a") == 0
    with turns.hold("gather:a", wait_s=0.05):  # free again once the first left
        pass


def test_an_error_inside_releases_the_key():
    turns = OneAtATime()
    with pytest.raises(ValueError), turns.hold("gather:a", wait_s=1):
        raise ValueError("the work failed")
    with turns.hold("gather:a", wait_s=0.05):
        pass
    assert turns.users("gather:a") == 0


def test_an_attempt_commits_only_within_its_timeout():
    from datetime import UTC, datetime, timedelta

    from mqgather.runtime.attempts import AttemptOutlived, check_in_time

    now, minute = datetime.now(UTC), timedelta(seconds=60)
    check_in_time("gather:a:00", now - timedelta(seconds=59), minute)
    check_in_time("gather:a:00", now - timedelta(days=1), None)  # no limit
    with pytest.raises(AttemptOutlived, match=r"gather:a:00 reached its commit \d+ s after"):
        check_in_time("gather:a:00", now - timedelta(seconds=61), minute)


def _event(kind: EventType.ValueType, identity: str = "") -> HistoryEvent:
    event = HistoryEvent(event_type=kind)
    event.event_time.FromDatetime(datetime(2026, 11, 29, 10, 0, 7, tzinfo=UTC))
    if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
        event.workflow_task_started_event_attributes.identity = identity
    return event


_SIGNALLED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
_STARTED = EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
_SCHEDULED = EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED
_COMPLETED = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED


@pytest.mark.parametrize(
    "newest_first",
    [
        [_event(_STARTED, "me")],
        # A signal that came while the task runs is written at once.
        [_event(_SIGNALLED), _event(_STARTED, "me")],
        # The task completed to keep it alive while a local activity runs, then the next.
        [_event(_STARTED, "me"), _event(_SCHEDULED), _event(_COMPLETED), _event(_STARTED, "me")],
        [_event(_SCHEDULED), _event(_COMPLETED), _event(_STARTED, "me")],
    ],
)
def test_a_worker_holds_the_task_it_started_last_while_nothing_ended_it(newest_first):
    assert task_lost(newest_first, "me") is None


@pytest.mark.parametrize(
    ("newest_first", "why"),
    [
        ([_event(EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT), _event(_STARTED, "me")],
         "its workflow task timed out at 10:00:07, when another worker may take it"),
        ([_event(EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED), _event(_STARTED, "me")],
         "its workflow task failed at 10:00:07"),
        ([_event(_STARTED, "other"), _event(_SCHEDULED),
          _event(EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT), _event(_STARTED, "me")],
         "worker 'other' took its workflow task at 10:00:07"),
        ([_event(_COMPLETED), _event(_STARTED, "other")], "worker 'other' took"),
        ([_event(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED), _event(_COMPLETED),
          _event(_STARTED, "me")], "its run ended (completed) at 10:00:07"),
        ([_event(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED), _event(_STARTED, "me")],
         "its run ended (terminated)"),
        ([_event(_SIGNALLED)], "its history holds no workflow task started"),
    ],
)  # fmt: skip
def test_a_worker_has_lost_the_task_another_took_or_that_ended(newest_first, why):
    assert why in (task_lost(newest_first, "me") or "")


def test_an_attempt_that_cannot_be_sure_of_its_task_is_told_why_and_backs_out():
    confirm_task("gather:a", None)
    with pytest.raises(AttemptLostTask, match=r"MQ work of gather:a .* worker 'b' took"):
        confirm_task("gather:a", "worker 'b' took its workflow task at 10:00:07")


def test_a_cancelled_attempt_is_told_so_and_backs_out():
    check_not_cancelled("gather:a", False)
    with pytest.raises(AttemptCancelled, match=r"MQ work of gather:a was cancelled before"):
        check_not_cancelled("gather:a", True)
