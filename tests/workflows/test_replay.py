"""Gathers recorded with earlier workflow code replay without a non-determinism error.

Each file under ``histories/`` is one gather's full history (completion with a duplicate
and a late reply, timeout, replies before registration with the restart timer and
``duplicates = "all"``, extend then release, cancel, unknown, static mode, a failed
merge). A change to ``workflows/`` that alters the commands a gather issues fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows.gather import GatherWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def test_recorded_histories_are_present():
    assert len(HISTORIES) >= 8


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_recorded_history_replays(path: Path):
    history = WorkflowHistory.from_json(f"replay-{path.stem}", path.read_text())
    replayer = Replayer(workflows=[GatherWorkflow], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None
