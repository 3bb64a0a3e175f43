"""Every recorded set of gather and collector histories replays against the current
workflow code.

``histories/<set>/`` holds the gathers (and, since collectors exist, the collector runs)
one shipped workflow version recorded (the set is
named after the build that recorded it; ``python -m tests.workflows.record`` records a
new one and the old sets stay). A change to ``workflows/`` that alters the commands a
gather issues fails here, naming the set, the gather and the event.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import WorkflowHistory

from analytics.replay import ReplayReport, read_histories, replay
from mqgather.constants import CARRIED_STATE_BYTES
from mqgather.names import (
    COLLECT_WORKFLOW,
    GATHER_WORKFLOW,
    PATCH_BATCH_CARRIED,
    PATCH_BY_CONTENT,
    PATCH_CARRY_FITS,
    PATCH_SETTLE,
    SIGNAL_UNDELIVERED,
)
from mqgather.runtime.codec import KeyRing, data_converter, parse_key_ring
from tests.workers.gather_v2 import CollectorV2, GatherV2
from tests.workflows.record import (
    COLLECT_SCENARIOS,
    HISTORIES,
    KEYS_FILE,
    LARGE_COLLECT_SCENARIOS,
    LARGE_SCENARIOS,
    SCENARIOS,
    patch_ids,
)
from workflows.collector import PATCH_DELAY_FROM_ARRIVAL
from workflows.gather import PATCH_MOVE_GIVES_WAY, PATCH_MOVE_TO_HOLD, PATCH_REREQUEST

SETS = sorted(p for p in HISTORIES.iterdir() if p.is_dir())
FILES = sorted(p for p in HISTORIES.glob("*/*.json") if not p.name.startswith("_"))
#: The large scenarios' histories, gzipped (``record --large``).
GZIPPED = sorted(HISTORIES.glob("*/*.json.gz"))


def _opened(paths: list[Path], into: Path) -> list[Path]:
    """``paths``, each gzipped one written out as plain JSON under ``into``."""
    opened = []
    for path in paths:
        if path.suffix == ".gz":
            plain = into / path.parent.name / path.stem
            plain.parent.mkdir(parents=True, exist_ok=True)
            plain.write_bytes(gzip.decompress(path.read_bytes()))
            path = plain
        opened.append(path)
    return opened


def _recorded_keys() -> KeyRing | None:
    """Every sealed set's test key in one ring (None when no set is sealed)."""
    rings = [
        parse_key_ring(f.read_text(), str(f)) for f in sorted(HISTORIES.glob(f"*/{KEYS_FILE}"))
    ]
    if not rings:
        return None
    return KeyRing(rings[0].active, {k: v for r in rings for k, v in r.keys.items()})


#: Opens the sealed sets' payloads; passes the others through.
CONVERTER = data_converter(_recorded_keys())


def test_the_recorded_sets_cover_every_path():
    assert len(SETS) >= 2, "the first set and the current code's set"

    def paths(name: str) -> set[str]:
        return {f.stem.split("_run")[0] for f in (HISTORIES / name).glob("*")}

    assert paths(LATEST) == set(SCENARIOS) | set(COLLECT_SCENARIOS)
    assert paths(RECORDED_WITH_RECORDER) < set(SCENARIOS)
    for name in ("continue_as_new", "collect_continue_as_new"):
        runs = sorted((HISTORIES / LATEST).glob(f"{name}_run*.json"))
        assert len(runs) >= 2, name
        first = WorkflowHistory.from_json("can", runs[0].read_text())
        last = first.events[-1].event_type
        assert last == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW, name
    report = ReplayReport()
    read_histories([HISTORIES / LATEST], report)
    assert report.kinds[COLLECT_WORKFLOW] == len(list((HISTORIES / LATEST).glob("collect_*")))
    # Both sides of each patch are recorded: without it, and with it.
    assert not patches(FIRST_COLLECTORS)
    assert patches(LATEST) == {
        PATCH_DELAY_FROM_ARRIVAL, PATCH_SETTLE, PATCH_BY_CONTENT, PATCH_BATCH_CARRIED}  # fmt: skip
    assert PATCH_BATCH_CARRIED not in patches(BEFORE_BATCH_CARRIED)
    assert PATCH_BY_CONTENT not in patches(BEFORE_FINGERPRINTS)
    assert not patches(BEFORE_RULES, "*.json") & {PATCH_SETTLE, PATCH_REREQUEST}
    assert patches(LATEST, "rerequested.json") == {PATCH_REREQUEST}
    assert patches(LATEST, "rerequest_reported.json") == {PATCH_REREQUEST}
    assert _signals(LATEST, "rerequest_reported.json") >= {SIGNAL_UNDELIVERED}
    assert SIGNAL_UNDELIVERED not in _signals(BEFORE_REPORTS, "*.json")
    for name in ("reset_after_cancel", "collect_reset"):
        after = WorkflowHistory.from_json(
            "reset", (HISTORIES / LATEST / f"{name}_run2.json").read_text()
        )
        causes = {e.workflow_task_failed_event_attributes.cause for e in after.events
                  if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED}  # fmt: skip
        assert causes == {WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW}, name
    assert not list((HISTORIES / BEFORE_RESETS).glob("*reset*"))
    # Gathers take the settling step from their input, not from a patch: no marker.
    gathers = [f.name for f in (HISTORIES / LATEST).glob("*.json")
               if not f.name.startswith(("collect_", "_"))]  # fmt: skip
    assert set().union(*(patches(LATEST, name) for name in gathers)) == {PATCH_REREQUEST}


def test_the_large_set_moves_to_the_hold_queue_gives_way_and_puts_first(tmp_path):
    # The branches of the two hold patches are recorded: a state too large to carry
    # moved to the hold queue before continuing as new, and a move refused giving way;
    # and the collector's: batches closed while it settled PUT before it continued.
    files = {p.name.removesuffix(".json.gz"): p for p in (HISTORIES / LARGE).glob("*.json.gz")}
    scenarios = set(LARGE_SCENARIOS) | set(LARGE_COLLECT_SCENARIOS)
    assert {name.split("_run")[0] for name in files} == scenarios
    opened = {p.stem: p for p in _opened(list(files.values()), tmp_path)}

    def events(name: str) -> list:
        return list(WorkflowHistory.from_json(name, opened[name].read_text()).events)

    def patched(name: str) -> set[str]:
        return patch_ids(events(name))

    first, moved_on = events("moved_to_hold_run1"), events("moved_to_hold_run2")
    assert first[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    assert moved_on[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
    assert patched("moved_to_hold_run1") == {PATCH_MOVE_TO_HOLD}
    assert patched("move_gives_way") == {PATCH_MOVE_TO_HOLD, PATCH_MOVE_GIVES_WAY}
    refused = events("move_gives_way")
    assert refused[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED

    collector = events("collect_carry_fits_run1")
    assert collector[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    assert PATCH_CARRY_FITS in patched("collect_carry_fits_run1")
    fits = next(n for n, e in enumerate(collector) if PATCH_CARRY_FITS in patch_ids([e]))
    puts = [e for e in collector[fits:]
            if e.marker_recorded_event_attributes.marker_name == "core_local_activity"]  # fmt: skip
    assert puts, "no batch PUT between the patch and continuing as new"
    # What the next run began with fits in a payload.
    started = events("collect_carry_fits_run2")[0].workflow_execution_started_event_attributes
    assert started.input.payloads[0].ByteSize() < CARRIED_STATE_BYTES


def test_gathers_recorded_since_chains_name_theirs_and_those_before_do_not():
    def chained(name: str) -> set[bool]:
        found = set()
        for path in (HISTORIES / name).glob("*.json"):
            if path.name.startswith(("collect_", "_")):
                continue
            history = WorkflowHistory.from_json(path.stem, path.read_text())
            started = history.events[0].workflow_execution_started_event_attributes
            found.add(json.loads(started.input.payloads[0].data).get("ledger_by_chain", False))
        return found

    assert chained(LATEST) == {True}
    assert chained(BEFORE_CHAINS) == {False}


def _signals(name: str, files: str) -> set[str]:
    """The names of the signals in the set's histories matching ``files``."""
    found = set()
    for path in (HISTORIES / name).glob(files):
        history = WorkflowHistory.from_json(path.stem, path.read_text())
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
                found.add(event.workflow_execution_signaled_event_attributes.signal_name)
    return found


def patches(name: str, files: str = "collect_*.json") -> set[str]:
    """The patches the histories of a set carry (its collectors', by default)."""
    found: set[str] = set()
    for path in (HISTORIES / name).glob(files):
        found |= patch_ids(WorkflowHistory.from_json(path.stem, path.read_text()).events)
    return found


#: The first set written by ``tests.workflows.record`` (every later one covers as much).
RECORDED_WITH_RECORDER = "0.1.0-56876c569e39"
#: The newest set: every path the recorder knows, gathers over a logical group, the
#: collector's, completion rules, optional legs, leg deadlines, a re-request, replies
#: that share a MsgId among them, and a leg asked again on MQ's report that its request
#: was not delivered (signal ``undelivered``), and a gather and a collector an operator
#: reset (their runs before and after), gathers whose ledger keys name their chain, and
#: a duplicate its queue refused for good, put to the dead-letter queue.
LATEST = "0.1.0-45cb413399ca"
#: Gathers whose state outgrew what a run can carry, and a collector that PUT its
#: batches first not to outgrow it, recorded with ``--large``.
LARGE = "0.1.0-128f7318340b-large"
#: The last set before a collector's batches counted the bytes they carry.
BEFORE_BATCH_CARRIED = "0.1.0-482180842481"
#: The last set before gathers' ledger keys named the first run of their chain.
BEFORE_CHAINS = "0.1.0-60796d95b5c7"
#: The last set before runs after a reset were told apart.
BEFORE_RESETS = "0.1.0-1c874860e123"
#: The last set before gathers heard of undelivered requests.
BEFORE_REPORTS = "0.1.0-164c2fee18a1"
#: The last set before redeliveries were told apart by content.
BEFORE_FINGERPRINTS = "0.1.0-53424fd356a0"
#: The last set before completion rules and the wait before closing.
BEFORE_RULES = "0.1.0-df265dd3ea98"
#: The first set with collectors, before their delay counted from the bridge's receipt.
FIRST_COLLECTORS = "0.1.0-200b488af0f8"


@pytest.mark.parametrize(
    "path", FILES + GZIPPED, ids=lambda p: f"{p.parent.name}/{p.name.removesuffix('.json.gz')}"
)
async def test_recorded_history_replays(path: Path, tmp_path: Path):
    report = ReplayReport()
    items = read_histories(_opened([path], tmp_path), report)
    assert len(items) == 1 and not report.unreadable, report.unreadable
    await replay(items, report, converter=CONVERTER)
    assert report.clean == 1, f"{path.parent.name}/{path.name}: {report.failures[0].describe()}"


async def test_an_incompatible_change_fails_replay_naming_the_gather_and_event(tmp_path):
    report = ReplayReport()
    gathers = [f for f in FILES + GZIPPED if not f.stem.startswith("collect_")]
    items = read_histories(_opened(gathers, tmp_path), report, kinds=(GATHER_WORKFLOW,))
    assert not report.unreadable
    await replay(items, report, workflow_class=GatherV2, converter=CONVERTER)
    assert report.replayed == len(gathers) and report.clean == 0
    for failure in report.failures:
        assert failure.workflow_id.startswith("gather:")
        assert "Nondeterminism" in failure.error
    named = [f for f in report.failures if f.event_id is not None]
    assert named and all(f"at event {f.event_id}" in f.describe() for f in named)


async def test_an_incompatible_collector_change_fails_replay_naming_the_collector(tmp_path):
    report = ReplayReport()
    collectors = [f for f in FILES + GZIPPED if f.name.startswith("collect_")]
    items = read_histories(_opened(collectors, tmp_path), report, kinds=(COLLECT_WORKFLOW,))
    assert not report.unreadable
    await replay(items, report, collector_class=CollectorV2, converter=CONVERTER)
    assert len(collectors) >= len(COLLECT_SCENARIOS)
    assert any(f.suffix == ".gz" for f in collectors), "the large set's collectors"
    assert report.replayed == len(collectors) and report.clean == 0
    assert all(f.workflow_id.startswith("collect:") for f in report.failures)
    assert all("Nondeterminism" in f.error for f in report.failures)


def test_a_sealed_set_is_among_those_replayed():
    from temporalio.api.history.v1 import History

    from mqgather.runtime.codec import key_ids_in

    sealed = [s for s in SETS if (s / KEYS_FILE).exists()]
    assert sealed, "a set recorded with --sealed"
    for path in sorted(sealed[0].glob("*.json")):
        if path.name.startswith("_"):
            continue
        events = WorkflowHistory.from_json(path.stem, path.read_text()).events
        keys = key_ids_in(History(events=events))
        assert set(keys) - {""}, f"{path.name} holds no sealed payload"


def _upserted(set_name: str) -> list[set[str]]:
    """The attribute names of every search-attribute upsert of the set's gathers."""
    found = []
    for path in sorted((HISTORIES / set_name).glob("*.json")):
        if path.name.startswith(("_", "collect")):
            continue
        for event in json.loads(path.read_text())["events"]:
            attrs = event.get("upsertWorkflowSearchAttributesEventAttributes")
            # A patch's own upsert (its version marker) is the SDK's, not the gather's.
            shown = set(attrs["searchAttributes"]["indexedFields"]) if attrs else set()
            if shown - {"TemporalChangeVersion"}:
                found.append(shown)
    return found


def test_gathers_upsert_only_what_changed():
    # The bridge or scatter sets the aggregate and the CorrelId at start: gathers of the
    # latest set never upsert them again; those recorded before did every time.
    latest = _upserted(LATEST)
    assert latest and all(not {"AggregateName", "CorrelId"} & names for names in latest)
    before = _upserted("0.1.0-02a6e95db380")
    assert before and all({"AggregateName", "CorrelId"} <= names for names in before)
