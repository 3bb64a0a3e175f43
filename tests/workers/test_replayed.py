"""The history a run ended by hand is replayed from: up to its last completed task, what
came after it, then one task that hands that over."""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from workers.replayed import with_last_task

E = EventType


def history(*kinds: int) -> list[HistoryEvent]:
    events = []
    for n, kind in enumerate(kinds, start=1):
        event = HistoryEvent(event_id=n, event_type=kind)
        event.event_time.FromSeconds(1_800_000_000 + n)
        if kind == E.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            event.workflow_task_scheduled_event_attributes.task_queue.name = "gathers"
        events.append(event)
    return events


def shape(events: list[HistoryEvent]) -> list[tuple[int, str]]:
    return [(e.event_id, E.Name(e.event_type).removeprefix("EVENT_TYPE_")) for e in events]


START, SIGNALED = E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
SCHEDULED, STARTED = E.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, E.EVENT_TYPE_WORKFLOW_TASK_STARTED
COMPLETED, TERMINATED = (
    E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
)


def test_signals_after_the_last_task_are_handed_over_by_a_task_of_their_own():
    # The workers were down: a reply came, its task waited, the gather was terminated.
    events = history(START, SCHEDULED, STARTED, COMPLETED, SIGNALED, SCHEDULED, SIGNALED,
                     TERMINATED)  # fmt: skip
    out = with_last_task(events)
    assert shape(out) == [
        (1, "WORKFLOW_EXECUTION_STARTED"), (2, "WORKFLOW_TASK_SCHEDULED"),
        (3, "WORKFLOW_TASK_STARTED"), (4, "WORKFLOW_TASK_COMPLETED"),
        (5, "WORKFLOW_EXECUTION_SIGNALED"), (6, "WORKFLOW_EXECUTION_SIGNALED"),
        (7, "WORKFLOW_TASK_SCHEDULED"), (8, "WORKFLOW_TASK_STARTED"),
    ]  # fmt: skip
    assert out[7].workflow_task_started_event_attributes.scheduled_event_id == 7
    assert out[6].workflow_task_scheduled_event_attributes.task_queue.name == "gathers"
    assert out[6].event_time == events[-1].event_time
    assert events[6].event_id == 7  # the history read stays as it was


def test_a_task_that_started_and_failed_before_the_end_is_left_out():
    events = history(START, SCHEDULED, STARTED, COMPLETED, SIGNALED, SCHEDULED, STARTED,
                     E.EVENT_TYPE_WORKFLOW_TASK_FAILED, SCHEDULED, SIGNALED,
                     E.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT)  # fmt: skip
    assert [kind for _, kind in shape(with_last_task(events))[4:]] == [
        "WORKFLOW_EXECUTION_SIGNALED", "WORKFLOW_EXECUTION_SIGNALED",
        "WORKFLOW_TASK_SCHEDULED", "WORKFLOW_TASK_STARTED"]  # fmt: skip


def test_a_run_ended_before_its_first_task_keeps_its_start_and_signals():
    out = with_last_task(history(START, SIGNALED, SCHEDULED, SIGNALED, TERMINATED))
    assert [kind for _, kind in shape(out)] == [
        "WORKFLOW_EXECUTION_STARTED", "WORKFLOW_EXECUTION_SIGNALED",
        "WORKFLOW_EXECUTION_SIGNALED", "WORKFLOW_TASK_SCHEDULED",
        "WORKFLOW_TASK_STARTED"]  # fmt: skip


def test_what_events_after_the_cut_name_among_themselves_follows_them():
    """A collector's activity, scheduled by its last task, ended after it: its start moved
    up, and its completion names the start where it went, and the schedule where it was."""
    events = history(START, SCHEDULED, STARTED, COMPLETED, E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
                     SIGNALED, SCHEDULED, E.EVENT_TYPE_ACTIVITY_TASK_STARTED,
                     E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, TERMINATED)  # fmt: skip
    events[7].activity_task_started_event_attributes.scheduled_event_id = 5
    done = events[8].activity_task_completed_event_attributes
    done.scheduled_event_id, done.started_event_id = 5, 8
    out = with_last_task(events)
    assert shape(out)[4:] == [
        (5, "ACTIVITY_TASK_SCHEDULED"), (6, "WORKFLOW_EXECUTION_SIGNALED"),
        (7, "ACTIVITY_TASK_STARTED"), (8, "ACTIVITY_TASK_COMPLETED"),
        (9, "WORKFLOW_TASK_SCHEDULED"), (10, "WORKFLOW_TASK_STARTED"),
    ]  # fmt: skip
    assert out[6].activity_task_started_event_attributes.scheduled_event_id == 5
    moved = out[7].activity_task_completed_event_attributes
    assert (moved.scheduled_event_id, moved.started_event_id) == (5, 7)


def test_a_run_its_own_last_task_closed_is_left_as_it_is():
    events = history(START, SCHEDULED, STARTED, COMPLETED, E.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED)
    assert with_last_task(events) == events


def test_mq_work_may_be_under_way_only_where_a_worker_began_a_task_after_the_last():
    from workers.replayed import task_began_after_last

    # A worker ran a task when the run was terminated (its local activity may run on).
    assert task_began_after_last(history(START, SCHEDULED, STARTED, SIGNALED, TERMINATED))
    # That worker lost Temporal: its task timed out, its activity may still run.
    assert task_began_after_last(history(START, SCHEDULED, STARTED, COMPLETED, SCHEDULED,
                                         STARTED, E.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
                                         SCHEDULED, TERMINATED))  # fmt: skip
    # The workers were down: what the last task hands over no worker began.
    assert not task_began_after_last(history(START, SCHEDULED, STARTED, COMPLETED, SIGNALED,
                                             SCHEDULED, TERMINATED))  # fmt: skip
