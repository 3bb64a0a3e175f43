"""One salvage of a gather (or a collector) at a time, wherever it runs.

Salvage sends each reply with its ledger marker in one unit of work, after looking for
the marker; two salvages of one gather running at the same moment, on two machines say,
could each look before the other committed, and each send. MQ offers no lock that two
connections can take on a name, so the lease is a workflow of its own in the gather's
namespace: Temporal lets only one run under an id at a time. No worker runs it; its
execution timeout ends it should its salvage be killed, and its salvage terminates it
when done, which leaves a record in the UI of who salvaged what, and when.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from mqgather.constants import (
    SALVAGE_LEASE_MARGIN_SECONDS,
    SALVAGE_LEASE_RECHECK_SECONDS,
    SALVAGE_LEASE_RECHECK_TIMEOUT_SECONDS,
    SALVAGE_LEASE_SECONDS,
)
from mqgather.errors import MQGatherError
from mqgather.names import SALVAGE_LEASE_PREFIX, SALVAGE_LEASE_QUEUE, SALVAGE_LEASE_WORKFLOW


class LeaseHeld(MQGatherError):
    """Another salvage of the same workflow holds its lease."""


class SalvageStopped(MQGatherError):
    """A salvage stopped between two units of work: its lease ran short, or it was asked
    to stop. What it sent stays sent, once; run again, it sends the rest."""


def lease_id(workflow_id: str) -> str:
    """The id of the lease on salvaging ``workflow_id``."""
    return f"{SALVAGE_LEASE_PREFIX}{workflow_id}"


class Lease:
    """A salvage's lease on one workflow: :meth:`checker` gives what to call before each
    unit of work."""

    def __init__(self, workflow_id: str, seconds: float) -> None:
        self.workflow_id = workflow_id
        self.id = lease_id(workflow_id)
        # Stopped while time is left, so a unit of work begun just before the end
        # commits before the lease lapses and another salvage may start.
        self._until = time.monotonic() + max(seconds - SALVAGE_LEASE_MARGIN_SECONDS, 0.0)
        #: How many messages the salvage sent, for the record the lease leaves.
        self.sent = 0
        #: Why the salvage stopped before its end, when it did.
        self.stopped: str | None = None
        # The lease's run in Temporal and the event loop its client runs on, once held.
        self._held: tuple[WorkflowHandle[Any, Any], asyncio.AbstractEventLoop] | None = None
        self._seen_at = time.monotonic()

    def checker(self, stop: Callable[[], bool] = lambda: False) -> Callable[[], None]:
        """What the salvage calls before each unit of work, from a thread of its own:
        raises :class:`SalvageStopped` when ``stop()`` (an operator's Ctrl-C), once the
        lease is near its end, or once it is no longer held (an operator ended it by
        hand), which is asked of Temporal at most once every
        :data:`~mqgather.constants.SALVAGE_LEASE_RECHECK_SECONDS`."""

        def check() -> None:
            if stop():
                self.stopped = "stopped as asked"
            elif time.monotonic() >= self._until:
                self.stopped = (
                    f"stopped: its lease ({self.id}) was about to lapse, when another "
                    "salvage could start"
                )
            elif (gone := self._gone()) is not None:
                self.stopped = f"stopped: its lease ({self.id}) {gone}"
            if self.stopped is not None:
                raise SalvageStopped(f"salvage of {self.workflow_id} {self.stopped}")

        return check

    def taken(self, run: WorkflowHandle[Any, Any]) -> None:
        """Record the lease's run in Temporal, held from the running event loop."""
        self._held = (run, asyncio.get_running_loop())
        self._seen_at = time.monotonic()

    def _gone(self) -> str | None:
        """Why the lease is no longer held, when Temporal says so (asked from the
        salvage's thread, on the client's event loop); None while it is."""
        if self._held is None or time.monotonic() - self._seen_at < SALVAGE_LEASE_RECHECK_SECONDS:
            return None
        handle, loop = self._held
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop()
            return None  # on the client's own loop, which the answer would wait for
        try:
            status = (
                asyncio.run_coroutine_threadsafe(handle.describe(), loop)
                .result(SALVAGE_LEASE_RECHECK_TIMEOUT_SECONDS)
                .status
            )
        except (RPCError, TimeoutError) as exc:
            return f"could not be confirmed with Temporal ({str(exc) or 'no answer'})"
        if status != WorkflowExecutionStatus.RUNNING:
            name = status.name.lower().replace("_", " ") if status else "gone"
            return f"was ended meanwhile ({name}), when another salvage could start"
        self._seen_at = time.monotonic()
        return None


@contextlib.asynccontextmanager
async def salvage_lease(
    client: Client, workflow_id: str, *, seconds: float = SALVAGE_LEASE_SECONDS
) -> AsyncIterator[Lease]:
    """Hold the lease on salvaging ``workflow_id`` for the ``with`` block, at most
    ``seconds``.

    Raises:
        LeaseHeld: another salvage holds it; the message says since when, until when,
            and how to end a lease whose salvage was killed.
    """
    lease = Lease(workflow_id, seconds)
    try:
        handle: WorkflowHandle[None, None] = await client.start_workflow(
            SALVAGE_LEASE_WORKFLOW,
            id=lease.id,
            task_queue=SALVAGE_LEASE_QUEUE,
            execution_timeout=timedelta(seconds=seconds),
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            static_summary=f"salvage of {workflow_id} from {socket.gethostname()} "
            f"(pid {os.getpid()})",
        )
    except WorkflowAlreadyStartedError:
        raise await _held(client, lease) from None
    # Its own run: a lease taken anew after this one lapsed is another salvage's.
    lease.taken(client.get_workflow_handle(lease.id, run_id=handle.result_run_id))
    try:
        yield lease
    finally:
        # A salvage that cannot reach Temporal now leaves its lease to lapse.
        with contextlib.suppress(RPCError):
            await handle.terminate(reason=f"salvage {lease.stopped or 'done'}: {lease.sent} sent")


async def _held(client: Client, lease: Lease) -> LeaseHeld:
    what = f"another salvage of {lease.workflow_id} is running (its lease: {lease.id}"
    with contextlib.suppress(RPCError):
        held = await client.get_workflow_handle(lease.id).describe()
        since = held.start_time.strftime("%Y-%m-%d %H:%M:%S UTC")
        timeout = held.raw_description.execution_config.workflow_execution_timeout.ToSeconds()
        lapses = (held.start_time + timedelta(seconds=timeout)).strftime("%H:%M:%S UTC")
        what += f", taken {since}, lapsing {lapses}"
    return LeaseHeld(
        f"{what}); run one salvage at a time. If that salvage was killed, end its lease: "
        f"temporal workflow terminate --workflow-id '{lease.id}'"
    )


@contextlib.asynccontextmanager
async def leased(client: Client, workflow_id: str, *, take: bool) -> AsyncIterator[Lease]:
    """The lease on salvaging ``workflow_id`` when ``take`` (a salvage that sends), else
    a lease not held (a dry run sends nothing, so it need not keep another salvage out).

    Raises:
        LeaseHeld: as :func:`salvage_lease` does.
    """
    if not take:
        yield Lease(workflow_id, SALVAGE_LEASE_SECONDS)
        return
    async with salvage_lease(client, workflow_id) as lease:
        yield lease
