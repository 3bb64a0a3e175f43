"""What ``mqgather dev`` and ``mqgather demo`` do besides drawing: bring the stack up,
wait until it serves, and read the outcome off the queues."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from datetime import datetime

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from bridge.mq.transport import Transport
from mqgather.config import AggregateSpec
from mqgather.errors import MQGatherError
from mqgather.names import PROP_REREQUESTED, TASK_QUEUE
from mqgather.routing import Destination, queue_for
from mqgather.runtime.temporal import TemporalUnavailable, connect
from workers.demo.stack import DevStack

#: What the demo counts, and the destination each count is read from.
COUNTED = {
    "completed": Destination.RESPONSE,
    "timed_out": Destination.TIMEOUT,
    "late": Destination.LATE,
    "unknown": Destination.UNKNOWN,
    "duplicates": Destination.DUPLICATE,
    "failures": Destination.FAILURE,
}


async def ensure_server(stack: DevStack, announce: Callable[[str], None]) -> Client:
    """Connect to Temporal at the stack's address, starting the embedded server if needed.

    Raises:
        TemporalUnavailable: the server did not answer within a minute.
        StackError: the embedded server exited as it started, saying why.
    """
    try:
        return await connect(stack.address)
    except TemporalUnavailable:
        pass
    announce(f"starting the embedded Temporal server on {stack.address} …")
    stack.start_server()
    deadline = time.monotonic() + 60
    while True:
        try:
            return await connect(stack.address)
        except TemporalUnavailable:
            if (exited := stack.server_exited()) is not None:
                raise exited from None
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)  # the server is starting; nothing to await on yet


async def until_ready(
    client: Client, qm: Transport, spec: AggregateSpec, stop: asyncio.Event, limit: float = 120
) -> None:
    """Until a worker polls the task queue and the bridge has taken the first replies,
    so the latency figures measure gathers, not process start-up.

    Raises:
        MQGatherError: not ready within ``limit`` seconds.
    """
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=TASK_QUEUE),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    deadline = time.monotonic() + limit
    while not stop.is_set():
        polled = await client.workflow_service.describe_task_queue(request)
        if polled.pollers and qm.inquire(spec.reply_queue).curdepth == 0:
            return
        if time.monotonic() > deadline:
            raise MQGatherError(
                "the worker or bridge did not start; see the logs in the state directory"
            )
        await asyncio.sleep(0.2)  # polling other processes' progress


def counts(qm: Transport, spec: AggregateSpec) -> dict[str, int]:
    """How many messages each destination of the aggregate holds now, and how many of
    its responses say a leg was asked again."""
    out = {}
    for key, kind in COUNTED.items():
        queue = queue_for(spec, kind)
        out[key] = qm.inquire(queue).curdepth if queue else 0
    out["rerequested"] = sum(
        PROP_REREQUESTED in m.properties
        for kind in (Destination.RESPONSE, Destination.TIMEOUT)
        for m in qm.browse(queue_for(spec, kind))
    )
    return out


def counts_for(qm: Transport, spec: AggregateSpec, correl_ids: set[bytes]) -> dict[str, int]:
    """How many messages of these CorrelIds each destination of the aggregate holds now
    (a long-running stack's queues also hold earlier runs' messages)."""
    out = {}
    for key, kind in COUNTED.items():
        queue = queue_for(spec, kind)
        out[key] = sum(1 for m in qm.browse(queue) if m.correl_id in correl_ids) if queue else 0
    out["rerequested"] = sum(
        PROP_REREQUESTED in m.properties and m.correl_id in correl_ids
        for kind in (Destination.RESPONSE, Destination.TIMEOUT)
        for m in qm.browse(queue_for(spec, kind))
    )
    return out


def rerequests_seen(
    qm: Transport, spec: AggregateSpec, sent: dict[bytes, datetime]
) -> dict[bytes, tuple[tuple[str, ...], float | None]]:
    """Each of these gathers whose response or timeout notice says a leg was asked again:
    the legs, and the seconds from its scatter to that message (None if unknown)."""
    out: dict[bytes, tuple[tuple[str, ...], float | None]] = {}
    for kind in (Destination.RESPONSE, Destination.TIMEOUT):
        for m in qm.browse(queue_for(spec, kind)):
            start = sent.get(m.correl_id)
            if start is None or PROP_REREQUESTED not in m.properties:
                continue
            legs = tuple(str(m.properties[PROP_REREQUESTED]).split(","))
            took = (m.put_date_time - start).total_seconds() if m.put_date_time else None
            out[m.correl_id] = (legs, took)
    return out


def latencies(qm: Transport, spec: AggregateSpec, sent: dict[bytes, datetime]) -> list[float]:
    """Milliseconds from each request's scatter to its response's PutDateTime."""
    out = []
    for response in qm.browse(queue_for(spec, Destination.RESPONSE)):
        start = sent.get(response.correl_id)
        if start is not None and response.put_date_time is not None:
            out.append((response.put_date_time - start).total_seconds() * 1000)
    return out


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (inclusive method); 0 for no values."""
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]
