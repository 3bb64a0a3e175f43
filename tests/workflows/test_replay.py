"""Every recorded set of gather histories replays against the current workflow code.

``histories/<set>/`` holds the gathers one shipped workflow version recorded (the set is
named after the build that recorded it; ``python -m tests.workflows.record`` records a
new one and the old sets stay). A change to ``workflows/`` that alters the commands a
gather issues fails here, naming the set, the gather and the event.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from analytics.replay import ReplayReport, read_histories, replay
from tests.workers.gather_v2 import GatherV2
from tests.workflows.record import HISTORIES, SCENARIOS

SETS = sorted(p for p in HISTORIES.iterdir() if p.is_dir())
FILES = sorted(HISTORIES.glob("*/*.json"))


def test_the_recorded_sets_cover_every_path():
    assert len(SETS) >= 2, "the first set and the current code's set"

    def paths(name: str) -> set[str]:
        return {f.stem.split("_run")[0] for f in (HISTORIES / name).glob("*")}

    assert paths(LATEST) == set(SCENARIOS)
    assert paths(RECORDED_WITH_RECORDER) < set(SCENARIOS)
    runs = sorted((HISTORIES / LATEST).glob("continue_as_new_run*.json"))
    assert len(runs) >= 2
    first = WorkflowHistory.from_json("can", runs[0].read_text())
    assert first.events[-1].event_type == (EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW)


#: The first set written by ``tests.workflows.record`` (every later one covers as much).
RECORDED_WITH_RECORDER = "0.1.0-56876c569e39"
#: The newest set: every path the recorder knows, cancel through Temporal and a PUT
#: retried in rounds among them.
LATEST = "0.1.0-5e1aa0a571cd"


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
async def test_recorded_history_replays(path: Path):
    report = ReplayReport()
    items = read_histories([path], report)
    assert len(items) == 1 and not report.unreadable, report.unreadable
    await replay(items, report)
    assert report.clean == 1, f"{path.parent.name}/{path.name}: {report.failures[0].describe()}"


async def test_an_incompatible_change_fails_replay_naming_the_gather_and_event():
    report = ReplayReport()
    items = read_histories([HISTORIES], report)
    await replay(items, report, workflow_class=GatherV2)
    assert report.replayed == len(FILES) and report.clean == 0
    for failure in report.failures:
        assert failure.workflow_id.startswith("gather:")
        assert "Nondeterminism" in failure.error
    named = [f for f in report.failures if f.event_id is not None]
    assert named and all(f"at event {f.event_id}" in f.describe() for f in named)
