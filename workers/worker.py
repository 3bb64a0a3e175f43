"""The worker: runs gather workflows and the MQ activities."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from temporalio.client import Client
from temporalio.worker import Worker

from activities.mq import MQActivities
from bridge.mq.transport import Transport
from mqgather.names import TASK_QUEUE
from workflows.gather import GatherWorkflow


def build_worker(
    client: Client,
    connect: Callable[[], Transport],
    *,
    task_queue: str = TASK_QUEUE,
    activity_threads: int = 8,
) -> Worker:
    """A worker for the gather workflow; each activity thread keeps one MQ connection."""
    acts = MQActivities(connect)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[GatherWorkflow],
        activities=[acts.put_response, acts.route_replies],
        activity_executor=ThreadPoolExecutor(activity_threads, thread_name_prefix="mq-activity"),
        max_concurrent_activities=activity_threads,
    )
