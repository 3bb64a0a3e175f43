"""Which keys the open gathers' and collectors' histories were sealed with: a key may be
retired once no open workflow needs it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from temporalio.api.history.v1 import History
from temporalio.client import Client

from mqgather.names import COLLECT_WORKFLOW, GATHER_WORKFLOW
from mqgather.runtime.codec import key_ids_in

#: Histories read at once.
_CONCURRENCY = 16


@dataclass
class KeyUsage:
    """Open workflows by the key ids their histories hold."""

    workflows: int = 0
    #: Per key id, how many open workflows have at least one payload sealed with it.
    workflows_by_key: dict[str, int] = field(default_factory=dict)


def open_query(extra: str | None = None) -> str:
    """The visibility query for open gathers and collectors (narrowed by ``extra``)."""
    query = (
        f"ExecutionStatus = 'Running' AND (WorkflowType = '{GATHER_WORKFLOW}' OR "
        f"WorkflowType = '{COLLECT_WORKFLOW}')"
    )
    return f"{query} AND ({extra})" if extra else query


async def open_key_usage(
    client: Client,
    *,
    query: str | None = None,
    on_total: Callable[[int], object] = lambda n: None,
    on_progress: Callable[[int], object] = lambda n: None,
) -> KeyUsage:
    """Read the history of every open gather and collector and count the key ids in it.

    Only metadata is read: no key is needed, none is used.
    """
    full = open_query(query)
    on_total((await client.count_workflows(full)).count)
    usage = KeyUsage()
    gate = asyncio.Semaphore(_CONCURRENCY)

    async def read(workflow_id: str, run_id: str) -> dict[str, int]:
        async with gate:
            handle = client.get_workflow_handle(workflow_id, run_id=run_id)
            history = await handle.fetch_history()
        return key_ids_in(History(events=history.events))

    tasks = [
        asyncio.create_task(read(execution.id, execution.run_id))
        async for execution in client.list_workflows(full)
    ]
    for done, task in enumerate(asyncio.as_completed(tasks), 1):
        counts = await task
        usage.workflows += 1
        for key_id in counts:
            if key_id:
                usage.workflows_by_key[key_id] = usage.workflows_by_key.get(key_id, 0) + 1
        on_progress(done)
    return usage
