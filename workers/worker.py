"""The worker: runs gather workflows and the MQ activities."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import UnsandboxedWorkflowRunner, Worker, WorkerDeploymentConfig
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

import activities
import workflows
from activities.batch import CollectorActivities
from bridge.mq.transport import Transport
from mqgather import __version__
from mqgather.constants import (
    DEFAULT_HELD_MB,
    DEFAULT_MAX_CACHED_GATHERS,
    MB,
    WORKER_STOP_GRACE_SECONDS,
)
from mqgather.errors import MQGatherError
from mqgather.names import TASK_QUEUE
from workers.tasks import TaskWatch
from workflows.collector import AutoUpgradeCollectorWorkflow, CollectorWorkflow
from workflows.gather import GatherWorkflow

#: The packages whose code a gather runs: a change to any of them is a new build.
VERSIONED_PACKAGES = (workflows, activities)


class WorkerStopped(MQGatherError):
    """The worker ended without being asked to, or did not finish stopping in time."""


def default_build_id() -> str:
    """``<package version>-<12 hex digits of the gather code's hash>``.

    The hash covers every source file of the workflow and activity packages, so two
    workers agree on the build id exactly when they run the same gather code.
    """
    digest = hashlib.sha256()
    for package in VERSIONED_PACKAGES:
        root = Path(next(iter(package.__path__)))
        for path in sorted(root.rglob("*.py")):
            digest.update(path.relative_to(root.parent).as_posix().encode())
            digest.update(b"\0")
            digest.update(path.read_bytes())
    return f"{__version__}-{digest.hexdigest()[:12]}"


def build_worker(
    client: Client,
    connect: Callable[[], Transport],
    *,
    task_queue: str = TASK_QUEUE,
    activity_threads: int = 8,
    version: WorkerDeploymentVersion | None = None,
    workflow_class: type = GatherWorkflow,
    max_cached_gathers: int = DEFAULT_MAX_CACHED_GATHERS,
    sandboxed: bool = True,
    held_mb: int = DEFAULT_HELD_MB,
) -> Worker:
    """A worker for the gather and collector workflows; each activity thread keeps one MQ
    connection.

    Args:
        client: The Temporal client.
        connect: Opens one MQ connection.
        task_queue: The task queue gathers run on.
        activity_threads: Activity threads, one MQ connection each.
        version: With a version, the worker joins that worker deployment and its gathers
            are pinned to it; without, it is an unversioned worker as before.
        workflow_class: The gather workflow class (another only to test a rollout).
        max_cached_gathers: Workflows kept in memory between tasks; one not kept is
            replayed from its history at its next task.
        sandboxed: Run the workflow code in Temporal's sandbox, which re-imports it for
            every gather (about 8 ms of CPU each) and refuses non-deterministic calls.
            The test suite runs it sandboxed; production workers may go without.
        held_mb: Held-reply bytes (MB) the activities read into memory at once; about
            twice this is the worker's peak for them. 0: no limit.
    """
    # Its own identity, so that a workflow task it started is told from another worker's
    # in the history even within one process (see workers/tasks.py).
    watch = TaskWatch(client, f"{client.identity}/{secrets.token_hex(3)}")
    # One class serves gathers and collectors: each activity thread keeps one connection.
    acts = CollectorActivities(connect, held_mb * MB, task_lost=watch.lost)
    deployment = None
    if version is not None:
        # Pinned: a gather finishes on the code it started with, so no version ever
        # replays another's history. Continue-as-new keeps the pin.
        deployment = WorkerDeploymentConfig(
            version=version,
            use_worker_versioning=True,
            default_versioning_behavior=VersioningBehavior.PINNED,
        )
    collector = CollectorWorkflow if version is None else AutoUpgradeCollectorWorkflow
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[workflow_class, collector],
        activities=[
            acts.put_response,
            acts.route_replies,
            acts.send_request,
            acts.hold_replies,
            acts.put_batch,
        ],
        activity_executor=ThreadPoolExecutor(activity_threads, thread_name_prefix="mq-activity"),
        max_concurrent_activities=activity_threads,
        deployment_config=deployment,
        max_cached_workflows=max_cached_gathers,
        workflow_runner=SandboxedWorkflowRunner() if sandboxed else UnsandboxedWorkflowRunner(),
        identity=watch.identity,
    )


async def serve(
    worker: Worker, stop: asyncio.Event, grace: float = WORKER_STOP_GRACE_SECONDS
) -> None:
    """Run ``worker`` until ``stop`` is set, then stop it within ``grace`` seconds.

    Asked to stop while it still checks its namespace with the server (at start, or while
    the server is gone), the worker is abandoned at once: nothing has started yet.

    Raises:
        WorkerStopped: The worker failed on its own (the message names the cause), or its
            activities had not finished ``grace`` seconds after ``stop`` was set.
    """
    running = asyncio.create_task(worker.run())
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if running.done():
        raise WorkerStopped(f"the worker stopped on its own: {_cause(running)}")
    if not worker.is_running:
        running.cancel()
        await asyncio.wait({running})
        return
    try:
        # On timeout only the wait is cancelled: the worker goes on stopping meanwhile.
        await asyncio.wait_for(worker.shutdown(), grace)
    except TimeoutError as exc:
        raise WorkerStopped(
            f"the worker had not stopped {grace:g}s after it was asked to; ending anyway "
            "(activities it was running are retried, their MQ units of work backed out)"
        ) from exc
    await asyncio.wait({running})  # it ends just after marking the shutdown complete
    if running.cancelled() or running.exception() is not None:
        raise WorkerStopped(f"the worker failed while stopping: {_cause(running)}")


def _cause(task: asyncio.Task[None]) -> str:
    """What ended ``task``: its exception and the exceptions behind it, in one line."""
    if task.cancelled():
        return "cancelled"
    reasons: list[str] = []
    exc: BaseException | None = task.exception()
    if exc is None:
        return "it returned without being asked to stop"
    while exc is not None and len(reasons) < 5:
        reasons.append(str(exc) or type(exc).__name__)
        exc = exc.__cause__ or exc.__context__
    return ": ".join(reasons)
