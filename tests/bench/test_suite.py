"""`make bench`'s own parts: one benchmark at a time, and the table of ratios."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench import figures
from bench.figures import BenchmarkBusy, Figure, exclusive, read, record
from bench.suite import table


def test_a_second_benchmark_is_refused_while_one_runs(tmp_path, monkeypatch):
    lock = tmp_path / "bench.lock"
    monkeypatch.setattr(figures, "LOCK", lock)
    monkeypatch.delenv(figures.ENV_HELD, raising=False)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'a+'); "
         "fcntl.flock(f, fcntl.LOCK_EX); f.write('pid 1: the other one'); f.flush(); "
         "print('held', flush=True); time.sleep(60)", str(lock)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(BenchmarkBusy, match="the other one"), exclusive():
            pass
    finally:
        holder.kill()
        holder.wait()
    with exclusive():  # free again
        assert "pid" in lock.read_text()
        # A benchmark it starts runs under its lock instead of being refused.
        child = subprocess.run(
            [sys.executable, "-c", "from bench import figures; import sys; "
             "figures.LOCK = figures.Path(sys.argv[1]); figures.exclusive().__enter__(); "
             "print('ran')", str(lock)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert child.stdout.strip() == "ran", child.stderr
    assert lock.read_text() == ""
    assert figures.ENV_HELD not in os.environ
    monkeypatch.setenv(figures.ENV_HELD, "1")  # under the suite's lock: no second lock
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; "
                               "f = open(sys.argv[1], 'a+'); fcntl.flock(f, fcntl.LOCK_EX); "
                               "print('held', flush=True); time.sleep(60)", str(lock)],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with exclusive():
            pass
    finally:
        holder.kill()
        holder.wait()


def test_the_table_gives_median_range_and_whether_the_target_is_met(tmp_path, monkeypatch):
    monkeypatch.setenv(figures.ENV_RECORD, str(tmp_path / "f.jsonl"))
    for value, floor in ((6.0, 5.0), (7.0, 5.0), (5.5, 5.0)):
        record(Figure("gather", "worker CPU", value, "ms", floor, "floor", target=1.2))
    for value in (50.0, 52.0, 45.0):
        record(Figure("gather", "e2e", value, "/s", 50.0, "ceiling", "higher", 0.9))
    record(Figure("gather", "bridge CPU", 1.4, "ms", target=1.5))
    rows = table(read(tmp_path / "f.jsonl"))
    cpu, e2e, bridge = rows[2:]
    assert "| 3 | 6.00 (5.50 to 7.00) ms | floor | 5.00 (5.00 to 5.00) ms |" in cpu
    assert "| 1.20 (1.10 to 1.40) | ≤ 1.2 | yes |" in cpu
    assert "| 1.00 (0.90 to 1.04) | ≥ 0.9 | yes |" in e2e
    assert bridge.endswith("| 1.40 ms |  |  |  | ≤ 1.5 | yes |")


def test_a_floor_of_nothing_is_shown_without_a_ratio(tmp_path, monkeypatch):
    # The platform's workflows rode out a server kill at once: the floor is 0 s.
    monkeypatch.setenv(figures.ENV_RECORD, str(tmp_path / "f.jsonl"))
    record(Figure("chaos", "recovery", 10.0, "s", 0.0, "the platform's workflows"))
    (row,) = table(read(tmp_path / "f.jsonl"))[2:]
    assert row.endswith("| 10.0 s | the platform's workflows | 0.0 s | - |  |  |")
