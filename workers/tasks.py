"""Whether a worker still holds a workflow task, asked from an activity's thread.

A local activity's attempt runs inside its worker's workflow task. Cut off from
Temporal while an MQ call hangs, the worker loses that task when it times out, and
another worker takes the gather over and runs its MQ work; the first attempt's call may
still return, and must not commit then. A slow attempt therefore asks, before its
commit, whether its worker still holds the task (see :mod:`mqgather.runtime.attempts`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import CancelledError

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import Client
from temporalio.service import RPCError

from mqgather.constants import TASK_CONFIRM_TIMEOUT_SECONDS
from mqgather.runtime.attempts import task_lost

#: Events read per page, newest first; the task's start is nearly always on the first.
PAGE = 50


class TaskWatch:
    """Answers, for an activity's thread, why a worker no longer holds a run's workflow
    task (None while it does), asking Temporal on the worker's event loop."""

    def __init__(self, client: Client, identity: str) -> None:
        self._client = client
        self.identity = identity
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None  # built outside an event loop: nothing can be asked

    def lost(self, workflow_id: str, run_id: str) -> str | None:
        """Why this worker no longer holds (or cannot confirm it holds) the workflow task
        of ``workflow_id``'s run ``run_id``; None while it does. Called from a thread
        other than the event loop's, which answers."""
        if self._loop is None:
            return "the worker was built outside an event loop, so Temporal cannot be asked"
        asking_now = self._lost(workflow_id, run_id)
        try:
            asking = asyncio.run_coroutine_threadsafe(asking_now, self._loop)
        except RuntimeError:  # the loop has closed: the worker stopped
            asking_now.close()
            return "the worker has stopped, so Temporal cannot be asked"
        try:
            return asking.result(TASK_CONFIRM_TIMEOUT_SECONDS)
        except TimeoutError:
            asking.cancel()
            return f"Temporal did not answer within {TASK_CONFIRM_TIMEOUT_SECONDS:g} s"
        except CancelledError:
            return "the worker stopped while Temporal was asked"
        except RPCError as exc:
            return f"Temporal could not be asked ({exc})"

    async def _lost(self, workflow_id: str, run_id: str) -> str | None:
        return task_lost(
            [event async for event in self._newest_first(workflow_id, run_id)], self.identity
        )

    async def _newest_first(self, workflow_id: str, run_id: str) -> AsyncIterator[HistoryEvent]:
        """The run's events, newest first, a page at a time, up to the newest workflow task
        started (what :func:`task_lost` reads)."""
        request = GetWorkflowExecutionHistoryReverseRequest(
            namespace=self._client.namespace,
            execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
            maximum_page_size=PAGE,
        )
        service = self._client.workflow_service
        while True:
            page = await service.get_workflow_execution_history_reverse(request)
            for event in page.history.events:
                yield event
                if event.HasField("workflow_task_started_event_attributes"):
                    return
            if not page.next_page_token:
                return
            request.next_page_token = page.next_page_token
