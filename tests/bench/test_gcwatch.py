"""bench.gcwatch runs a module as ``python -m`` does and logs every collection of its
process; ``pauses`` reads back the full ones of a span of time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from bench.gcwatch import FULL, pauses

PROBE = """
import gc, sys
gc.collect()
print(__name__, *sys.argv)
"""


def test_a_module_runs_as_main_with_its_arguments_and_its_collections_logged(
    tmp_path: Path,
) -> None:
    (tmp_path / "probe_module.py").write_text(PROBE)
    log = tmp_path / "gc.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    before = time.time()
    run = subprocess.run(
        [sys.executable, "-m", "bench.gcwatch", str(log), "probe_module", "--flag", "value"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    name, argv0, *args = run.stdout.split()
    # As under python -m: the module's path first, then its arguments.
    assert (name, Path(argv0).name, args) == ("__main__", "probe_module.py", ["--flag", "value"])
    # The probe's own gc.collect() is a full collection, logged with its pause.
    full = pauses(log, before, time.time())
    assert full and all(p >= 0 for p in full)
    lines = [line.split() for line in log.read_text().splitlines()]
    assert all(len(fields) == 4 for fields in lines)
    assert {int(fields[1]) for fields in lines} >= {FULL}


def test_pauses_are_the_full_collections_inside_the_span(tmp_path: Path) -> None:
    log = tmp_path / "gc.log"
    log.write_text(
        "100.0 2 150.5 70000\n"  # before the span
        "105.0 0 0.4 12\n"  # young: not a full collection
        "106.0 2 210.0 80000\n"
        "108.0 1 6.0 3000\n"
        "109.5 2 39.0 500\n"
        "120.0 2 300.0 90000\n"  # after it
    )
    assert pauses(log, 101.0, 110.0) == [210.0, 39.0]
    assert pauses(log, 101.0, 110.0, generation=1) == [6.0]
    assert pauses(tmp_path / "never-written.log", 0, 1e12) == []


def test_without_a_module_it_says_how_to_run_it() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench.gcwatch"], capture_output=True, text=True, check=False
    )
    assert run.returncode != 0
    assert "usage: python -m bench.gcwatch LOG MODULE" in run.stderr
