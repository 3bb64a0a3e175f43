"""Readers for gather histories: our export files, ``temporal workflow show --output json``
files and Temporal Cloud history-export files (protobuf). All three become the same
NDJSON lines, ``{"workflowId", "runId", "history": {...}}``, with the history in
Temporal's proto-JSON form, which the Spark job reads."""

from __future__ import annotations

import json
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.export.v1 import WorkflowExecutions
from temporalio.api.history.v1 import History, HistoryEvent
from temporalio.client import WorkflowHistory

from mqgather.errors import MQGatherError
from mqgather.names import GATHER_WORKFLOW
from mqgather.runtime.codec import (
    SEALED_JSON_ENCODING,
    KeyRing,
    PayloadCipher,
    SealedPayloadError,
    open_all,
    open_all_json,
)
from mqgather.runtime.files import PRIVATE_DIR
from workflows.models import GatherInput, gather_id

EXPORT_SUFFIXES = (".ndjson", ".jsonl")
CLI_SUFFIXES = (".json",)
CLOUD_SUFFIXES = (".pb", ".binpb", ".proto", ".bin")


class BadHistoryFile(MQGatherError):
    """An input file could not be read as a history file; the message names it."""


@dataclass
class Inputs:
    """What the readers found: NDJSON files for Spark, and the files that were skipped."""

    ndjson: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    duplicates_dropped: int = 0
    #: (workflow id, run id) of the gathers still running when their file was written
    #: (a ``temporal workflow show`` of an open gather): nothing to count until they close.
    running: list[tuple[str, str]] = field(default_factory=list)


def history_line(workflow_id: str, run_id: str, history: History) -> str:
    """One NDJSON line of the export format."""
    return json.dumps(
        {
            "workflowId": workflow_id,
            "runId": run_id,
            "history": json_format.MessageToDict(history),
        },
        separators=(",", ":"),
    )


def reset_run_id(events: Iterable[HistoryEvent]) -> str:
    """The run id of a run that a reset started ("" for any other run).

    Such a run's history begins with a copy of the run it was reset from, start event
    included, so the start names that run; the workflow task the reset failed names the
    new run (the last such task, where a reset run was reset again)."""
    reset = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW
    run_id = ""
    for event in events:
        if event.HasField("workflow_task_failed_event_attributes"):
            failed = event.workflow_task_failed_event_attributes
            if failed.cause == reset and failed.new_run_id:
                run_id = failed.new_run_id
    return run_id


def ids_of(history: History) -> tuple[str, str]:
    """(workflow id, run id) of a history, from its first event.

    Older servers do not record the workflow id in the start event; a gather's id is then
    rebuilt from its input (aggregate name and CorrelId).
    """
    if not history.events or not history.events[0].HasField(
        "workflow_execution_started_event_attributes"
    ):
        raise BadHistoryFile("the history does not start with WorkflowExecutionStarted")
    started = history.events[0].workflow_execution_started_event_attributes
    run_id = reset_run_id(history.events) or started.original_execution_run_id
    workflow_id = getattr(started, "workflow_id", "")
    if not workflow_id and started.input.payloads:
        try:
            inp = GatherInput.model_validate_json(started.input.payloads[0].data)
            workflow_id = gather_id(inp.aggregate.name, inp.correl_id)
        except ValueError:  # not a gather's input (pydantic's ValidationError included)
            workflow_id = ""
    return workflow_id or f"run:{run_id}", run_id


def read_cli_json(path: Path) -> Iterator[tuple[str, str, History]]:
    """A ``temporal workflow show --output json`` file (one history), in UTF-8, UTF-16 or
    UTF-32, with a byte-order mark or without: a shell's redirection can write any of them
    (Windows PowerShell's ``>`` writes UTF-16)."""
    try:
        # From bytes, json tells the encoding by the first bytes, as the JSON RFC allows.
        data: Any = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:  # a number json cannot hold; UnicodeDecodeError
        raise BadHistoryFile(f"{path}: not a JSON history ({exc})") from exc
    except RecursionError:
        raise BadHistoryFile(f"{path}: not a JSON history (nested too deep to read)") from None
    if isinstance(data, dict) and "history" in data and "events" not in data:
        data = data["history"]
    try:
        events = WorkflowHistory.from_json("", data).events
    except (json_format.ParseError, KeyError, TypeError, ValueError) as exc:
        raise BadHistoryFile(f"{path}: not a Temporal history ({exc})") from exc
    history = History(events=events)
    workflow_id, run_id = ids_of(history)
    yield workflow_id, run_id, history


def read_cloud_export(path: Path) -> Iterator[tuple[str, str, History]]:
    """A Temporal Cloud history-export file: ``WorkflowExecutions`` with ``items[].history``."""
    try:
        message = WorkflowExecutions.FromString(path.read_bytes())
    except (OSError, DecodeError) as exc:
        raise BadHistoryFile(f"{path}: not a history-export protobuf file ({exc})") from exc
    if not message.items:
        raise BadHistoryFile(f"{path}: the export file holds no workflow executions")
    for item in message.items:
        workflow_id, run_id = ids_of(item.history)
        yield workflow_id, run_id, item.history


#: The events that end a run: after any other, the run was still going.
_LAST_EVENTS = frozenset(
    {
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
    }
)


def ended(history: History) -> bool:
    """Whether ``history``'s run had ended (continued as new included) when it was read."""
    return history.events[-1].event_type in _LAST_EVENTS


def running_gather(history: History) -> bool:
    """Whether ``history`` is a gather's that had not ended when it was read."""
    started = history.events[0].workflow_execution_started_event_attributes
    return started.workflow_type.name == GATHER_WORKFLOW and not ended(history)


def kind_of(path: Path) -> str:
    """``export``, ``cli`` or ``cloud``, by the file's name (and first byte for ``.json``)."""
    name = path.name.lower()
    if name.endswith(EXPORT_SUFFIXES):
        return "export"
    if name.endswith(CLOUD_SUFFIXES):
        return "cloud"
    if name.endswith(CLI_SUFFIXES):
        return "cli"
    return "unknown"


#: How a sealed payload's encoding reads in proto-JSON (metadata values are base64).
SEALED_MARK = SEALED_JSON_ENCODING


def _open_export(file: Path, cipher: PayloadCipher) -> Iterator[str]:
    """The lines of an export file whose payloads were kept sealed, opened (a byte-order
    mark before the first passed over, as Spark passes over it in a file not sealed)."""
    with file.open(encoding="utf-8-sig") as lines:
        for line in lines:
            if SEALED_MARK not in line:
                yield line.rstrip("\n")
                continue
            record = json.loads(line)
            open_all_json(record.get("history") if isinstance(record, dict) else None, cipher)
            yield json.dumps(record, separators=(",", ":"))


def _stage_opened(file: Path, staged: Path, cipher: PayloadCipher) -> str | None:
    """Write ``file``'s lines to ``staged``, their sealed payloads opened; None, or why
    ``file`` cannot be (then nothing is left at ``staged``)."""
    try:
        with staged.open("w") as out:
            out.writelines(line + "\n" for line in _open_export(file, cipher))
    except (SealedPayloadError, ValueError) as exc:
        staged.unlink(missing_ok=True)
        return str(exc)
    except RecursionError:
        staged.unlink(missing_ok=True)
        return "a line nested too deep to read as JSON"
    return None


def _stage_with_ring(job: tuple[Path, Path], ring: KeyRing | None) -> str | None:
    """:func:`_stage_opened` in a worker process, which gets the key ring, not a cipher."""
    return _stage_opened(*job, PayloadCipher(ring))


def _stage_all_opened(
    jobs: list[tuple[Path, Path]],
    cipher: PayloadCipher,
    workers: int,
    progress: Callable[[str], None],
) -> list[str | None]:
    """:func:`_stage_opened` for each (file, staged) of ``jobs``, on up to ``workers``
    processes: opening is Python's work, one core's per process. Should the processes
    fail (one killed, say), every file is opened again here, one after the other."""
    if workers >= 2 and len(jobs) >= 2:
        # A fresh server forks the workers: the job's process holds threads (Spark's
        # gateway) that a fork of it would copy mid-flight. The keys reach the workers
        # through the pool's pipe, never a command line.
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([__name__])
        try:
            with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=context) as pool:
                return list(pool.map(partial(_stage_with_ring, ring=cipher.ring), jobs))
        except BrokenProcessPool as exc:
            progress(f"the processes opening them stopped ({exc}); opening them here instead")
    return [_stage_opened(file, staged, cipher) for file, staged in jobs]


def collect(
    paths: list[Path],
    staging: Path,
    cipher: PayloadCipher | None = None,
    *,
    workers: int | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> Inputs:
    """Find the history files under ``paths``; turn CLI and Cloud files into NDJSON under
    ``staging`` (each workflow run once: Cloud exports are delivered at least once; of a
    run read more than once, the copy written after it ended, or else the fullest).

    Export NDJSON files are passed on as they are; Spark reads them and reports a corrupt
    one by name. Sealed payloads are opened with ``cipher``: export files holding them
    are staged opened, each under its own name in ``staging/opened``, by up to
    ``workers`` processes (default: one per core; forked from a fresh server, they import
    the calling script's main module as multiprocessing does, so a script that runs this
    outside ``if __name__ == "__main__":`` breaks them, and the files are then opened in
    its own process, saying so); a file with a payload it cannot open is skipped, naming
    the key.
    """
    cipher = cipher or PayloadCipher(None)
    found = Inputs()
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(
                p for p in path.rglob("*") if p.is_file() and not p.name.startswith(("_", "."))
            )
        elif path.exists():
            files.append(path)
        else:
            found.skipped[str(path)] = "no such file or directory"
    # Staged files hold opened payloads: the directory is its owner's alone, even one
    # left by an earlier run.
    staging.mkdir(parents=True, exist_ok=True)
    staging.chmod(PRIVATE_DIR)
    seen: set[tuple[str, str]] = set()
    unfinished: dict[tuple[str, str], History] = {}  # runs not ended in their file
    staged = staging / "converted.ndjson"
    wrote = False
    sealed: list[Path] = []
    with staged.open("w") as out:
        for file in files:
            kind = kind_of(file)
            if kind == "export":
                if _holds(file, SEALED_MARK):
                    sealed.append(file)
                else:
                    found.ndjson.append(str(file))
                continue
            if kind == "unknown":
                found.skipped[str(file)] = "not a history file (.ndjson, .json or .pb)"
                continue
            reader = read_cli_json if kind == "cli" else read_cloud_export
            try:
                histories = list(reader(file))
                for _, _, history in histories:
                    open_all(history, cipher)
            except (BadHistoryFile, SealedPayloadError) as exc:
                found.skipped[str(file)] = str(exc)
                continue
            for workflow_id, run_id, history in histories:
                run = (workflow_id, run_id)
                if run in seen:
                    found.duplicates_dropped += 1
                    continue
                if not ended(history):
                    # Kept back: a copy read later may be fuller, or written once it ended.
                    earlier = unfinished.get(run)
                    if earlier is not None:
                        found.duplicates_dropped += 1
                        if len(earlier.events) >= len(history.events):
                            continue
                    unfinished[run] = history
                    continue
                if unfinished.pop(run, None) is not None:
                    found.duplicates_dropped += 1
                seen.add(run)
                out.write(history_line(workflow_id, run_id, history) + "\n")
                wrote = True
        for (workflow_id, run_id), history in unfinished.items():
            if running_gather(history):
                found.running.append((workflow_id, run_id))
            out.write(history_line(workflow_id, run_id, history) + "\n")
            wrote = True
    if wrote:
        found.ndjson.append(str(staged))
    else:
        staged.unlink()
    if sealed:
        progress(f"opening the sealed payloads of {len(sealed)} export file(s)")
        opened = staging / "opened"
        opened.mkdir(exist_ok=True)
        jobs = [(file, opened / f"{i:05d}-{file.name}") for i, file in enumerate(sealed)]
        why = _stage_all_opened(jobs, cipher, workers or os.cpu_count() or 1, progress)
        for (file, target), reason in zip(jobs, why, strict=True):
            if reason is None:
                found.ndjson.append(str(target))
            else:
                found.skipped[str(file)] = reason
    return found


def _holds(file: Path, text: str) -> bool:
    """Whether ``file`` contains ``text`` (read in blocks, never whole; as bytes, since
    decoding the whole file only to search it costs more than the search)."""
    wanted = text.encode()
    tail = b""
    with file.open("rb") as data:
        while block := data.read(1 << 22):
            if wanted in tail + block[: len(wanted)] or wanted in block:
                return True
            tail = block[-len(wanted) :]
    return False
