"""Export closed gather and collector histories from Temporal to dated NDJSON files,
incrementally.

A collector's run closes when it continues as new (and its batches are in it), so the
batches of a collector's current run reach the export when that run hands over.

Layout: ``OUT/date=YYYY-MM-DD/histories-<run stamp>-<n>.ndjson`` by close date, one
history per line. ``OUT/_export_state.json`` keeps a close-time watermark and the runs
exported near it. Each run queries closes from ``watermark - overlap`` (visibility can
lag behind a close) and skips what it already wrote, so a re-run adds only what closed
since and never writes a history twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError
from temporalio.api.history.v1 import History
from temporalio.client import Client

from analytics.histories import history_line
from mqgather.errors import MQGatherError, first_problem
from mqgather.names import AGGREGATE_NAME, COLLECT_WORKFLOW, GATHER_WORKFLOW
from mqgather.runtime.codec import PayloadCipher, open_all
from mqgather.runtime.files import PRIVATE_DIR, write_whole

STATE_FILE = "_export_state.json"


@dataclass
class ExportResult:
    """What one export run did."""

    exported: int
    skipped_known: int
    files: list[Path]
    watermark: datetime | None


def visibility_query(aggregate: str | None, since: datetime | None, until: datetime | None) -> str:
    """The visibility query for closed gather and collector runs in a close-time window
    (gathers only, of that aggregate, when ``aggregate`` is given)."""
    parts = ["ExecutionStatus != 'Running'"]
    if aggregate:
        if "'" in aggregate:
            raise MQGatherError(f"aggregate name {aggregate!r} cannot contain a quote")
        parts += [f"WorkflowType = '{GATHER_WORKFLOW}'", f"{AGGREGATE_NAME.name} = '{aggregate}'"]
    else:
        parts.append(f"(WorkflowType = '{GATHER_WORKFLOW}' OR WorkflowType = '{COLLECT_WORKFLOW}')")
    if since is not None:
        parts.append(f"CloseTime >= '{since.astimezone(UTC).isoformat()}'")
    if until is not None:
        parts.append(f"CloseTime <= '{until.astimezone(UTC).isoformat()}'")
    return " AND ".join(parts)


def _writable(path: Path, write: Callable[[], None]) -> None:
    """Run ``write``; an OS error (a full disk, a directory not writable) as an error
    naming ``path``, nothing half-written left behind (:func:`write_whole`).

    Raises:
        MQGatherError: naming ``path`` and why.
    """
    try:
        write()
    except OSError as exc:
        raise MQGatherError(
            f"{path}: cannot be written ({exc.strerror}); the export stopped with its state "
            "as it was: run it again once that is fixed (`analyze` reads a history exported "
            "twice once)"
        ) from exc


class ExportState(BaseModel):
    """What an export remembers between runs: the newest close time it exported, and
    the runs it exported that the next run's overlap window can list again."""

    # Strict: the times as an export writes them (ISO 8601 text), not a number taken for one.
    model_config = ConfigDict(extra="ignore", strict=True)

    watermark: AwareDatetime | None = None
    recent: dict[str, AwareDatetime] = Field(default_factory=dict)


def _load_state(path: Path) -> ExportState:
    if not path.exists():
        return ExportState()
    try:
        return ExportState.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise MQGatherError(f"{path}: unreadable export state ({exc}); move it aside") from exc
    except ValidationError as exc:
        raise MQGatherError(
            f"{path}: not an export state ({first_problem(exc)}); move it aside, and the "
            "next export starts from the first closed run (`analyze` counts a run exported "
            "twice once)"
        ) from exc


async def export_histories(
    client: Client,
    out: Path,
    *,
    aggregate: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    batch_size: int = 1000,
    overlap: timedelta = timedelta(minutes=10),
    concurrency: int = 16,
    cipher: PayloadCipher | None = None,
    on_total: Callable[[int], None] = lambda _: None,
    on_progress: Callable[[int], None] = lambda _: None,
) -> ExportResult:
    """Export every closed gather and collector run not exported before.

    Args:
        out: the export directory (created).
        aggregate: only this aggregate.
        since / until: close-time window; ``since`` defaults to the watermark - overlap.
        batch_size: histories per file.
        cipher: opens sealed payloads before they are written; None keeps them sealed.

    Raises:
        SealedPayloadError: a payload is sealed with a key ``cipher`` does not hold.
    """
    _writable(out, lambda: out.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True))
    state_path = out / STATE_FILE
    state = _load_state(state_path)
    watermark = state.watermark
    recent = dict(state.recent)
    start = since
    if start is None and watermark is not None:
        start = watermark - overlap
    query = visibility_query(aggregate, start, until)
    total = (await client.count_workflows(query)).count
    on_total(total)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
    files: list[Path] = []
    buffers: dict[str, list[str]] = {}
    gate = asyncio.Semaphore(concurrency)
    exported = skipped = done = 0
    newest = watermark

    def flush(day: str) -> None:
        lines = buffers.pop(day, [])
        if not lines:
            return
        folder = out / f"date={day}"
        path = folder / f"histories-{stamp}-{len(files):05d}.ndjson"

        def write() -> None:
            folder.mkdir(mode=PRIVATE_DIR, exist_ok=True)
            # Whole and on disk before the watermark passes it (a reader never sees half
            # a file), and only for its owner: it holds the messages' bodies, opened.
            write_whole(path, "\n".join(lines) + "\n")

        _writable(path, write)
        files.append(path)

    async def fetch(workflow_id: str, run_id: str) -> str:
        async with gate:
            history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        events = History(events=history.events)
        if cipher is not None:
            open_all(events, cipher)
        return history_line(workflow_id, run_id, events)

    pending: list[tuple[str, datetime, asyncio.Task[str]]] = []

    async def drain() -> None:
        nonlocal exported, done
        for key, closed, task in pending:
            line = await task
            day = closed.astimezone(UTC).strftime("%Y-%m-%d")
            buffers.setdefault(day, []).append(line)
            if len(buffers[day]) >= batch_size:
                flush(day)
            recent[key] = closed
            exported += 1
            done += 1
            on_progress(done)
        pending.clear()

    async for execution in client.list_workflows(query):
        closed = execution.close_time
        if closed is None:
            continue
        key = f"{execution.id}|{execution.run_id}"
        if key in recent:
            skipped += 1
            done += 1
            on_progress(done)
            continue
        task = asyncio.create_task(fetch(execution.id, execution.run_id))
        pending.append((key, closed, task))
        newest = closed if newest is None or closed > newest else newest
        if len(pending) >= concurrency * 4:
            await drain()
    await drain()
    for day in list(buffers):
        flush(day)
    if newest is not None:
        # Keep only the runs that the next overlap window can still list.
        horizon = newest - overlap - timedelta(minutes=1)
        kept = ExportState(watermark=newest,
                           recent={k: v for k, v in recent.items() if v >= horizon})  # fmt: skip
        _writable(state_path, lambda: write_whole(state_path, kept.model_dump_json(indent=1)))
    return ExportResult(exported, skipped, files, newest)
