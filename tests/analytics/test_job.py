"""The job's pruned pass over export files: what it lets through, and what it tells the
passes after it (which files can hold collectors, whether a run is there twice)."""

from __future__ import annotations

from analytics.histories import collect
from analytics.job import analyze, check_files, read_histories, repeated_runs
from analytics.synth import synthesize
from tests.workflows.record import HISTORIES
from tests.workflows.test_replay import LATEST


def _gathers(path, n, repeat_first=False):
    lines = [line for line, _ in synthesize(n)]
    if repeat_first:
        lines.append(lines[0])  # the same run in the file twice
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_the_pruned_pass_sorts_the_files(spark, tmp_path):
    gathers = _gathers(tmp_path / "gathers.ndjson", 12)
    broken = tmp_path / "broken.ndjson"
    broken.write_text('{"workflowId": "cut sho\n')
    # The recorded histories mix gathers and collectors, staged as one NDJSON file.
    mixed = collect([HISTORIES / LATEST], tmp_path / "staging").ndjson
    checked = check_files(spark, [gathers, str(broken), *mixed])
    assert checked.good == [gathers, *mixed]
    assert list(checked.skipped) == [str(broken)]
    assert checked.not_only_gathers == mixed


def test_a_run_read_twice_is_found_on_the_fact_rows(spark, tmp_path):
    from analytics.transforms import gather_facts

    gathers = _gathers(tmp_path / "gathers.ndjson", 12)
    once = gather_facts(read_histories(spark, [gathers]), dedupe=False)
    twice = gather_facts(read_histories(spark, [gathers, gathers]), dedupe=False)
    assert not repeated_runs(once)
    assert repeated_runs(twice)  # an export read twice


def test_a_run_in_two_files_counts_once_and_gathers_alone_make_no_batches(spark, tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    _gathers(data / "a.ndjson", 30, repeat_first=True)
    result = analyze(spark, [data], tmp_path / "out")
    assert result.summary["gathers"] == 30
    assert result.summary["batches"] == 0
