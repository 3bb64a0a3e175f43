"""A process that dies by SIGKILL after a chosen step of its MQ work: each write its
embedded queue manager connection commits to the file is a step, and (through a client
interceptor) each answer it has from Temporal. A first run with no step chosen dies after
its commit and names every step on the way, so a test can then kill one run after each."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from temporalio import client as temporal

from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage

#: The name of the step a run with no step chosen dies after.
COMMIT = "queue manager: commit"


class Steps:
    """Counts steps once ``armed``, writing each one's name to ``record``, and dies by
    SIGKILL after step ``die_after`` (after the first commit when it is None)."""

    def __init__(self, die_after: int | None, record: str, *, armed: bool = False) -> None:
        self.die_after = die_after
        self.record = record
        self.count = 0
        self.armed = armed

    def step(self, name: str) -> None:
        if not self.armed:
            return
        self.count += 1
        with open(self.record, "a") as out:
            out.write(f"{name}\n")
        if self.count == self.die_after or (self.die_after is None and name == COMMIT):
            os.kill(os.getpid(), signal.SIGKILL)


def step_names(record: Path) -> list[str]:
    """The steps a run named, in order."""
    return record.read_text().splitlines() if record.exists() else []


def named(record: Path, die_after: int | None) -> str:
    """Which step a run died after, for a failure's message."""
    if die_after is None:
        return f"step {len(step_names(record))}: the first commit"
    names = step_names(record)
    return f"step {die_after}: {names[die_after - 1] if die_after <= len(names) else '?'}"


class CountingQueueManager(LocalQueueManager):
    """The embedded queue manager, each write it commits a step named by the call that
    made it; the first ``get_batch`` arms the count."""

    def __init__(self, path: str | Path, steps: Steps) -> None:
        self.steps = steps
        self.doing = "connect"
        super().__init__(path)

    @contextlib.contextmanager
    def _write(self, read_only: bool = False) -> Iterator[Any]:
        with super()._write(read_only) as db:
            yield db
        # Opening the connection writes too (it backs out a dead one's work): not a step.
        if not read_only and self.doing != "connect":
            self.steps.step(f"queue manager: {self.doing}")

    def get_batch(self, *args: Any, **kwargs: Any) -> list[MQMessage]:
        self.steps.armed = True
        self.doing = "get_batch"
        return super().get_batch(*args, **kwargs)

    def get(self, queue: str, *args: Any, **kwargs: Any) -> MQMessage:
        self.doing = f"get from {queue}"
        return super().get(queue, *args, **kwargs)

    def put(self, queue: str, *args: Any, **kwargs: Any) -> MQMessage:
        self.doing = f"put to {queue}"
        return super().put(queue, *args, **kwargs)

    def commit(self) -> None:
        self.doing = "commit"
        super().commit()

    def backout(self) -> None:
        self.doing = "backout"
        super().backout()


class CountingCalls(temporal.Interceptor):
    """Counts each call to Temporal that was answered (an error is an answer too)."""

    def __init__(self, steps: Steps) -> None:
        self.steps = steps

    def intercept_client(self, next: temporal.OutboundInterceptor) -> temporal.OutboundInterceptor:
        return _CountingOut(next, self.steps)


class _CountingOut(temporal.OutboundInterceptor):
    def __init__(self, next: temporal.OutboundInterceptor, steps: Steps) -> None:
        super().__init__(next)
        self.steps = steps

    async def start_workflow(self, input: temporal.StartWorkflowInput) -> Any:
        try:
            return await super().start_workflow(input)
        finally:
            self.steps.step(f"Temporal: start {input.id} with {input.start_signal}")

    async def signal_workflow(self, input: temporal.SignalWorkflowInput) -> None:
        try:
            await super().signal_workflow(input)
        finally:
            self.steps.step(f"Temporal: signal {input.id}")

    async def query_workflow(self, input: temporal.QueryWorkflowInput) -> Any:
        try:
            return await super().query_workflow(input)
        finally:
            self.steps.step(f"Temporal: query {input.id}")

    async def describe_workflow(self, input: temporal.DescribeWorkflowInput) -> Any:
        try:
            return await super().describe_workflow(input)
        finally:
            self.steps.step(f"Temporal: describe {input.id}")
