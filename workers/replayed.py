"""What a run ended by hand held in no place, read by replaying its history here.

The ``unplaced`` query asks a worker, which replays the run on the server's behalf. The
server replays no run that ended while a workflow task waited to start: the messages
signalled since its last completed task are in its history, yet were never handed to
the workflow. That is the common case when the workers are down, which is when an
operator terminates what is stuck. Here the history is read up to its last completed
task; what came after it (signals, timers that fired) follows, with the end left out, and
one task that hands it over closes the history, as the worker's next task would have.
The workflow code of this release then says what the run held, as its query does.
"""

# No `from __future__ import annotations`: the SDK compares the workflows' run and init
# annotations as objects.

import functools
import logging
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHandle, WorkflowHistory
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner

from mqgather import names
from mqgather.errors import MQGatherError
from mqgather.runtime.codec import converter_from_env
from workflows.collect_models import CollectorInput
from workflows.collector import CollectorWorkflow
from workflows.gather import GatherWorkflow
from workflows.models import GatherInput, GatherResult

T = TypeVar("T", bound=BaseModel)

#: A workflow task's own events: after the last completed task, none handed anything on.
_TASK = frozenset({
    EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
})  # fmt: skip
#: How a run ends without a task of its own.
_ENDS = frozenset({
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
})  # fmt: skip

#: How a run ends by a command of its own last task (failed by its code, say).
_CLOSED_BY_ITSELF = frozenset({
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
})  # fmt: skip

#: What each replayed run answered, by workflow id; read once its replay ends.
_ANSWERS: dict[str, Any] = {}


@workflow.defn(name=names.GATHER_WORKFLOW, sandboxed=False)
class _ReplayedGather(GatherWorkflow):
    """The gather, answering ``unplaced`` as its replay ends."""

    @workflow.run
    async def run(self, inp: GatherInput) -> GatherResult:
        """As :meth:`GatherWorkflow.run`."""
        return await super().run(inp)

    async def _run(self) -> GatherResult:
        try:
            return await super()._run()
        finally:
            # Before ``run`` lets go of the state at the eviction that ends the replay.
            _ANSWERS[workflow.info().workflow_id] = self.unplaced()


@workflow.defn(name=names.COLLECT_WORKFLOW, sandboxed=False)
class _ReplayedCollector(CollectorWorkflow):
    """The collector, answering ``unplaced`` as its replay ends."""

    @workflow.run
    async def run(self, inp: CollectorInput) -> None:
        """As :meth:`CollectorWorkflow.run`."""
        try:
            await super().run(inp)
        finally:
            _ANSWERS[workflow.info().workflow_id] = self.unplaced()


def with_last_task(events: Sequence[HistoryEvent]) -> list[HistoryEvent]:
    """``events`` up to the last completed workflow task, then what came after it but its
    tasks and its end, then one task scheduled and started: the history a worker's next
    task would have seen. A run its own last task closed is left as it is. Events after
    the cut are numbered on, and what they name among themselves (an activity's start)
    follows them."""
    if events and events[-1].event_type in _CLOSED_BY_ITSELF:
        return list(events)  # its last task closed it: replayed as it is
    done = [i for i, e in enumerate(events)
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED]  # fmt: skip
    cut = done[-1] + 1 if done else 0
    out = list(events[:cut])
    moved: dict[int, int] = {}
    for event in events[cut:]:
        if event.event_type in _TASK or event.event_type in _ENDS:
            continue
        copy = HistoryEvent()
        copy.CopyFrom(event)
        moved[event.event_id] = copy.event_id = len(out) + 1
        _renumber(copy, moved)
        out.append(copy)
    scheduled = [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED]
    when = (events[-1] if events else out[-1]).event_time
    task = HistoryEvent(event_id=len(out) + 1,
                        event_type=EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED)  # fmt: skip
    task.event_time.CopyFrom(when)
    if scheduled:  # its task queue and timeout, as the server gave them
        task.workflow_task_scheduled_event_attributes.CopyFrom(
            scheduled[-1].workflow_task_scheduled_event_attributes
        )
    started = HistoryEvent(event_id=task.event_id + 1,
                           event_type=EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED)  # fmt: skip
    started.event_time.CopyFrom(when)
    started.workflow_task_started_event_attributes.scheduled_event_id = task.event_id
    return [*out, task, started]


def _renumber(event: HistoryEvent, moved: dict[int, int]) -> None:
    """Point the event's references to events that moved (``*_event_id`` fields) where
    they went."""
    kind = event.WhichOneof("attributes")
    if kind is None:
        return
    attributes = getattr(event, kind)
    for field, value in attributes.ListFields():
        if field.name.endswith("_event_id") and isinstance(value, int) and value in moved:
            setattr(attributes, field.name, moved[value])


@functools.cache
def _quiet_runtime() -> Runtime:
    """One core runtime for every replay of the process, logging errors only: the core logs
    a failed task as a warning, and the error raised says it once."""
    return Runtime(telemetry=TelemetryConfig(logging=LoggingConfig(filter="ERROR")))


async def replayed_answer(handle: WorkflowHandle[Any, Any], result_type: type[T]) -> T:
    """What the run ``handle`` names held in no place (the ``unplaced`` query's answer),
    from its history replayed here up to a last task that hands over what came.

    Raises:
        MQGatherError: its history did not replay against this release's code.
    """
    history = await handle.fetch_history()
    events = with_last_task(history.events)
    replayer = Replayer(
        workflows=[_ReplayedGather, _ReplayedCollector],
        data_converter=converter_from_env(),  # the clients' own: the key ring of this process
        workflow_runner=UnsandboxedWorkflowRunner(),
        runtime=_quiet_runtime(),
    )
    _ANSWERS.pop(handle.id, None)
    # The SDK logs a failed activation with its traceback; the error below says it once.
    sdk = logging.getLogger("temporalio.worker._workflow")
    level = sdk.level
    sdk.setLevel(logging.CRITICAL)
    try:
        result = await replayer.replay_workflow(
            WorkflowHistory(history.workflow_id, events), raise_on_replay_failure=False
        )
    finally:
        sdk.setLevel(level)
    answer = _ANSWERS.pop(handle.id, None)
    if result.replay_failure is not None or not isinstance(answer, result_type):
        why = result.replay_failure or "it gave no answer"
        raise MQGatherError(
            f"{handle.id}: its history did not replay against this release's code ({why})"
        )
    if getattr(answer, "mq_work", False) and not task_began_after_last(history.events):
        # The MQ work the handed-over task begins no worker ever began: none is under way.
        answer = answer.model_copy(update={"mq_work": False})
    return answer


def task_began_after_last(events: Sequence[HistoryEvent]) -> bool:
    """Whether a worker began a workflow task after the last one completed: its MQ work
    may then be under way still (a task kept open while a local activity runs is one)."""
    started = EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
    for event in reversed(events):
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            return False
        if event.event_type == started:
            return True
    return False
