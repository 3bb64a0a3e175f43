"""Replay recorded gather and collector histories against the workflow code of this
checkout.

A history replays cleanly when the code issues, event for event, the commands the
history recorded. A failure names the workflow and the event where the code and the
history part, so new code can be tried on last week's real gathers before it is
promoted. Reads the same files as the analytics job: ``mqgather export`` NDJSON,
``temporal workflow show -o json`` files and Temporal Cloud export files.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from temporalio.api.history.v1 import History
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter, DefaultFailureConverter
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig
from temporalio.worker import Replayer

from analytics.histories import (
    BadHistoryFile,
    kind_of,
    read_cli_json,
    read_cloud_export,
    reset_run_id,
)
from mqgather.names import COLLECT_WORKFLOW, GATHER_WORKFLOW
from mqgather.runtime.codec import converter_from_env
from workflows.collector import CollectorWorkflow
from workflows.gather import GatherWorkflow

#: The workflow types this project writes, and so replays.
OURS = (GATHER_WORKFLOW, COLLECT_WORKFLOW)

#: How the SDK's non-determinism errors name the history event they stopped at, and
#: the message inside its failure structure.
_EVENT_ID = re.compile(r"(?:event[ _]id|HistoryEvent\(id)[:=]?\s*(\d+)", re.IGNORECASE)
_MESSAGE = re.compile(r'message: "((?:[^"\\]|\\.)*)"')


@dataclass
class ReplayFailure:
    """One history the code does not replay, and where it parts from it."""

    workflow_id: str
    run_id: str
    source: str
    event_id: int | None
    event_type: str | None
    error: str

    def describe(self) -> str:
        """One line for an operator."""
        where = f"at event {self.event_id} ({self.event_type})" if self.event_id else ""
        return f"{self.workflow_id} run {self.run_id} [{self.source}] {where}: {self.error}"


@dataclass
class ReplayReport:
    """What a replay run found."""

    replayed: int = 0
    clean: int = 0
    failures: list[ReplayFailure] = field(default_factory=list)
    #: Histories read, by workflow type (gathers, collectors).
    kinds: dict[str, int] = field(default_factory=dict)
    not_ours: int = 0
    unreadable: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every history replayed and every file was read."""
        return not self.failures and not self.unreadable and self.replayed > 0

    def summary(self) -> str:
        """The last line of ``mqgather replay``."""
        gathers = self.kinds.get(GATHER_WORKFLOW, 0)
        collectors = self.kinds.get(COLLECT_WORKFLOW, 0)
        line = f"replayed {self.replayed} histories ({gathers} gathers, {collectors} collector "
        line += f"runs): {self.clean} clean, {len(self.failures)} failed"
        if self.not_ours:
            line += f"; {self.not_ours} other workflows skipped"
        if self.unreadable:
            line += f"; {len(self.unreadable)} unreadable inputs skipped"
        return line

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "replayed": self.replayed,
            "clean": self.clean,
            "failed": len(self.failures),
            "gathers": self.kinds.get(GATHER_WORKFLOW, 0),
            "collector_runs": self.kinds.get(COLLECT_WORKFLOW, 0),
            "not_ours": self.not_ours,
            "unreadable": self.unreadable,
            "failures": [f.__dict__ for f in self.failures],
        }


@dataclass
class ReplayItem:
    history: WorkflowHistory
    source: str


def _read_export(path: Path) -> Iterator[tuple[str, str, History]]:
    """``mqgather export`` NDJSON: one ``{"workflowId", "runId", "history"}`` a line (a
    byte-order mark before the first, which an editor may add, is passed over, as Spark
    passes over it for the analysis)."""
    with path.open(encoding="utf-8-sig") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                history = History()
                json_format.ParseDict(record["history"], history, ignore_unknown_fields=True)
            except (ValueError, json_format.ParseError, KeyError, TypeError) as exc:
                raise BadHistoryFile(f"{path}:{number}: not an exported history ({exc})") from exc
            except RecursionError:
                reason = "nested too deep to read"
                raise BadHistoryFile(
                    f"{path}:{number}: not an exported history ({reason})"
                ) from None
            yield str(record.get("workflowId", "")), str(record.get("runId", "")), history


_READERS: dict[str, Callable[[Path], Iterator[tuple[str, str, History]]]] = {
    "export": _read_export,
    "cli": read_cli_json,
    "cloud": read_cloud_export,
}


def _files(paths: list[Path]) -> Iterator[Path]:
    for path in paths:
        if path.is_dir():
            yield from sorted(
                p for p in path.rglob("*") if p.is_file() and not p.name.startswith(("_", "."))
            )
        else:
            yield path


def read_histories(
    paths: list[Path], report: ReplayReport, kinds: tuple[str, ...] = OURS
) -> list[ReplayItem]:
    """Every history of the workflow types ``kinds`` under ``paths``; what cannot be read
    is noted in ``report``."""
    items: list[ReplayItem] = []
    for path in _files(paths):
        reader = _READERS.get(kind_of(path))
        if reader is None:
            report.unreadable[str(path)] = "not a history file (.ndjson, .json or .pb)"
            continue
        try:
            for workflow_id, run_id, history in reader(path):
                first = history.events[0] if history.events else None
                attrs = first.workflow_execution_started_event_attributes if first else None
                kind = attrs.workflow_type.name if attrs is not None else ""
                if kind not in kinds:
                    report.not_ours += 1
                    continue
                report.kinds[kind] = report.kinds.get(kind, 0) + 1
                wrapped = WorkflowHistory(workflow_id or f"run:{run_id}", list(history.events))
                items.append(ReplayItem(wrapped, f"{path.name}"))
        except BadHistoryFile as exc:
            report.unreadable[str(path)] = str(exc)
    return items


def _failure(item: ReplayItem, error: Exception) -> ReplayFailure:
    text = str(error)
    inner = _MESSAGE.search(text)
    if inner:
        text = inner.group(1)
    match = _EVENT_ID.search(text)
    event_id = int(match.group(1)) if match else None
    event_type = None
    if event_id is not None:
        for event in item.history.events:
            if event.event_id == event_id:
                kind = event.WhichOneof("attributes") or ""
                event_type = kind.removesuffix("_event_attributes")
    run_id = ""
    if item.history.events:
        started = item.history.events[0].workflow_execution_started_event_attributes
        run_id = reset_run_id(item.history.events) or started.original_execution_run_id
    return ReplayFailure(
        workflow_id=item.history.workflow_id,
        run_id=run_id,
        source=item.source,
        event_id=event_id,
        event_type=event_type,
        error=text.splitlines()[0] if text else type(error).__name__,
    )


async def replay(
    items: list[ReplayItem],
    report: ReplayReport,
    *,
    workflow_class: type = GatherWorkflow,
    collector_class: type = CollectorWorkflow,
    converter: DataConverter | None = None,
    on_progress: Callable[[int], object] = lambda n: None,
) -> ReplayReport:
    """Replay each history against this code (or other ``workflow_class`` and
    ``collector_class`` code); count and describe the failures.

    Sealed payloads are opened with ``converter``'s codec, by default with the key ring of
    this process's environment; one it cannot open fails that history, naming the key id.
    """
    # The SDK's core logs each failed task as a warning; the report says it once.
    quiet = Runtime(telemetry=TelemetryConfig(logging=LoggingConfig(filter="ERROR")))
    replayer = Replayer(
        workflows=[workflow_class, collector_class],
        # Replay stores nothing: its failures stay readable, unsealed, for the report.
        data_converter=dataclasses.replace(
            converter or converter_from_env(), failure_converter_class=DefaultFailureConverter
        ),
        runtime=quiet,
    )
    by_id = {id(item.history): item for item in items}

    async def histories() -> AsyncIterator[WorkflowHistory]:
        for item in items:
            yield item.history

    async with replayer.workflow_replay_iterator(histories()) as results:
        async for result in results:
            report.replayed += 1
            if result.replay_failure is None:
                report.clean += 1
            else:
                report.failures.append(_failure(by_id[id(result.history)], result.replay_failure))
            on_progress(report.replayed)
    return report


async def replay_paths(
    paths: list[Path],
    *,
    workflow_class: type = GatherWorkflow,
    on_total: Callable[[int], object] = lambda n: None,
    on_progress: Callable[[int], object] = lambda n: None,
) -> ReplayReport:
    """Read every gather and collector history under ``paths`` and replay it (see
    :func:`replay`)."""
    report = ReplayReport()
    items = read_histories(paths, report)
    on_total(len(items))
    return await replay(items, report, workflow_class=workflow_class, on_progress=on_progress)
