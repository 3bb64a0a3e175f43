"""One unit of work at a time per gather (or collector) in a worker process.

A local activity that outlives its timeout is retried while its thread still runs, for
Python cannot stop a thread: an MQ call that hangs (a queue manager that stalls, a
lock held long) leaves the first attempt inside its unit of work when the second
starts. Each looks on the ledger before the other commits, so each would PUT. An
attempt therefore waits for the earlier one's unit of work to end; the ledger then
tells it what was committed.

An attempt whose MQ call returns after its timeout has been retried already, maybe in
another worker or by an operator's salvage: it backs out instead of committing
(:func:`check_in_time`), so that past its timeout no attempt commits. A cancelled one
backs out too, at the same point (:func:`check_not_cancelled`).

A local activity runs inside its worker's workflow task, which another worker takes
over once the task times out (its worker cut off from Temporal, say, while an MQ call
hangs). An attempt slow enough for that first confirms that its worker still holds the
task, and backs out if not (:func:`task_lost`): the worker that took over runs the MQ
work itself.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.exceptions import CancelledError

from mqgather.errors import MQGatherError


class EarlierAttemptRunning(MQGatherError):
    """An earlier attempt of the same MQ work still runs in this process; retried."""


class AttemptOutlived(MQGatherError):
    """An attempt reached its commit after its timeout, and backed out."""


class AttemptCancelled(MQGatherError, CancelledError):
    """An attempt was cancelled (its workflow moved on, the worker shut down) before its
    commit, and backed out. A cancellation error, as the SDK expects of an activity that
    took the cancel it was sent."""


class AttemptLostTask(MQGatherError):
    """A local activity's attempt reached its commit when its worker no longer held (or
    could not confirm it held) the workflow task it ran in, and backed out."""


#: A workflow task that ended without its worker's completion: another may take it.
_TASK_ENDED = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT: "timed out",
    EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED: "failed",
}
_RUN_ENDED = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
}


def task_lost(newest_first: Iterable[HistoryEvent], identity: str) -> str | None:
    """Why the worker named ``identity`` no longer holds its run's workflow task, from
    the run's history read newest first; None while it does.

    It holds the task when the newest workflow task started is its own and nothing after
    it ended that task or the run. A task its worker completed to keep it alive while a
    local activity runs is followed by the next task started, its own again.
    """
    for event in newest_first:
        kind = event.event_type
        if kind in _RUN_ENDED:
            name = EventType.Name(kind).removeprefix("EVENT_TYPE_WORKFLOW_EXECUTION_")
            return f"its run ended ({name.lower().replace('_', ' ')}) at {_at(event)}"
        if kind in _TASK_ENDED:
            return (
                f"its workflow task {_TASK_ENDED[kind]} at {_at(event)}, when another worker "
                "may take it"
            )
        if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            taker = event.workflow_task_started_event_attributes.identity
            if taker == identity:
                return None
            return f"worker {taker!r} took its workflow task at {_at(event)}"
    return "its history holds no workflow task started"


def _at(event: HistoryEvent) -> str:
    return event.event_time.ToDatetime(UTC).strftime("%H:%M:%S")


def confirm_task(owner: str, lost: str | None) -> None:
    """Before a commit: raise :class:`AttemptLostTask` when ``lost`` says why the attempt
    of ``owner``'s MQ work can no longer be sure its worker holds the workflow task."""
    if lost is not None:
        raise AttemptLostTask(
            f"an attempt of the MQ work of {owner} reached its commit when its worker could "
            f"not be sure it still held the workflow task: {lost}. It backed out; the work "
            "is done once, by whichever worker holds the task"
        )


def check_not_cancelled(owner: str, cancelled: bool) -> None:
    """Before a commit: raise :class:`AttemptCancelled` when the attempt of ``owner``'s
    MQ work was cancelled.

    The MQ activities take a cancellation here only, never as an exception raised into
    their thread wherever it happens to be: one raised inside a lock's bookkeeping (the
    turn :class:`OneAtATime` keeps) or a queue manager's would leave it held or half
    updated.
    """
    if cancelled:
        raise AttemptCancelled(
            f"an attempt of the MQ work of {owner} was cancelled before its commit (its "
            "workflow moved on, or the worker is shutting down): it backed out, and the "
            "work is done once, by the attempt that follows"
        )


def check_in_time(owner: str, started: datetime, timeout: timedelta | None) -> timedelta:
    """Before a commit: raise :class:`AttemptOutlived` once the attempt of ``owner``'s
    MQ work that started at ``started`` has run ``timeout`` or longer (None: no limit).

    Returns:
        How long the attempt has run.
    """
    ran = datetime.now(UTC) - started
    if timeout is not None and ran >= timeout:
        raise AttemptOutlived(
            f"an attempt of the MQ work of {owner} reached its commit "
            f"{(ran - timeout).total_seconds():.0f} s after its "
            f"{timeout.total_seconds():.0f} s timeout, when a later attempt (or a salvage) "
            "may run: it backed out, and the work is done once by whichever commits within "
            "its time"
        )
    return ran


class OneAtATime:
    """Per-key mutual exclusion between threads, holding no lock for an idle key."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        # key -> (its lock, the threads holding or waiting for it)
        self._keys: dict[str, tuple[threading.Lock, int]] = {}

    def users(self, key: str) -> int:
        """Threads holding or waiting for ``key`` now."""
        with self._guard:
            return self._keys.get(key, (None, 0))[1]

    @contextmanager
    def hold(self, key: str, wait_s: float) -> Iterator[None]:
        """Run the block while no other thread runs one for ``key``.

        Raises:
            EarlierAttemptRunning: another thread held ``key`` for all of ``wait_s``
                seconds. Nothing was done yet, so the caller's retry is safe.
        """
        with self._guard:
            lock, users = self._keys.get(key) or (threading.Lock(), 0)
            self._keys[key] = (lock, users + 1)
        try:
            if not lock.acquire(timeout=wait_s):
                raise EarlierAttemptRunning(
                    f"an earlier attempt of the MQ work of {key} is still inside its unit "
                    f"of work in this worker after {wait_s:g}s (an MQ call that has not "
                    "returned); this attempt waits for it, so that nothing is put twice, "
                    "and is retried"
                )
            try:
                yield
            finally:
                lock.release()
        finally:
            with self._guard:
                lock, users = self._keys[key]
                if users == 1:
                    del self._keys[key]
                else:
                    self._keys[key] = (lock, users - 1)
