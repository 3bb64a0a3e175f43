"""Waiting for one server event before a workflow ends or continues as new.

A local activity's result is not an event of its own. When the activity outlived the
workflow task that started it (a query, or a long merge, completes that task meanwhile)
and a signal then races the closing task, the server refuses that task, and on the
retry the SDK delivers the activity's result ahead of the signal: a workflow that ended
right after the activity ended without seeing it. After a timer, a racing signal comes
with the timer's event instead, ahead of it. An activity that resolved in the task
that started it needs no wait: were that task refused, its retry would take the signal
first and run the activity again (once, by the ledger).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from mqgather.constants import SETTLE_SECONDS

SETTLE = timedelta(seconds=SETTLE_SECONDS)


def work_started() -> int:
    """The mark to take just before a local activity starts."""
    return workflow.info().get_current_history_length()


async def settle(started: int) -> bool:
    """Wait for one server event if the activity started at mark ``started`` outlived its
    task; True when it waited (signals and updates may have come meanwhile)."""
    if workflow.info().get_current_history_length() == started:
        return False
    await workflow.sleep(SETTLE)
    await workflow.wait_condition(workflow.all_handlers_finished)
    return True
