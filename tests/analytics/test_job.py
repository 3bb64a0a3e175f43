"""The job's one pass over export files: what it lets through, and what it tells the
steps after it (which files can hold collectors, whether a run is there twice)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
from pyspark.sql import Column
from pyspark.sql import functions as F

from analytics.histories import collect
from analytics.job import (
    analyze,
    check_files,
    format_summary,
    good_facts,
    line_facts,
    read_histories,
    repeated_runs,
    unrecorded_facts,
)
from analytics.synth import synthesize
from analytics.transforms import FACT, UNRECORDED, gather_facts, one_row_per_run
from tests.workflows.record import HISTORIES
from tests.workflows.test_replay import LATEST


def _gathers(path, n, repeat_first=False, **synth):
    lines = [line for line, _ in synthesize(n, **synth)]
    if repeat_first:
        lines.append(lines[0])  # the same run in the file twice
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_the_one_pass_sorts_the_files_and_keeps_the_good_ones_facts(spark, tmp_path):
    gathers = _gathers(tmp_path / "gathers.ndjson", 12)
    # A good line before the cut one: the file is skipped whole, its good line too.
    broken = tmp_path / "broken.ndjson"
    good_line = next(iter(synthesize(1)))[0].replace("gather:", "gather:other-", 1)
    broken.write_text(good_line + '\n{"workflowId": "cut sho\n')
    # The recorded histories mix gathers and collectors, staged as one NDJSON file.
    mixed = collect([HISTORIES / LATEST], tmp_path / "staging").ndjson
    files = [gathers, str(broken), *mixed]
    lines = line_facts(spark, files)
    checked = check_files(lines, files)
    assert checked.good == [gathers, *mixed]
    assert list(checked.skipped) == [str(broken)]
    assert checked.not_only_gathers == mixed
    facts = good_facts(lines, checked).collect()
    # Every closed run of a gather (a reset's two included: the job counts once after)
    recorded = gather_facts(read_histories(spark, mixed), dedupe=False).count()
    assert len(facts) == 12 + recorded  # the good files' closed gathers, nothing else
    assert not any(r["gather_id"].startswith("gather:other-") for r in facts)
    ends = [r["end_time"] for r in facts]
    assert (checked.first_end, checked.last_end) == (min(ends), max(ends))


def test_older_results_arrivals_are_read_again_from_their_files_only(spark, tmp_path):
    # Results that record each leg's arrival give it in the pass; older ones (which
    # lack it) leave it to their replies' signals, read again from their files alone.
    new = _gathers(tmp_path / "new.ndjson", 20)
    older = _gathers(tmp_path / "older.ndjson", 20, seed=2, arrivals_in_result=False)
    files = [new, older]
    lines = line_facts(spark, files)
    checked = check_files(lines, files)
    assert checked.unrecorded == [older]
    passed = lines.filter(FACT).collect()
    assert {r["gather_id"] for r in passed if r[UNRECORDED]} == _ids(older)
    assert all(not r["leg_latency_ms"] for r in passed if r[UNRECORDED])  # not read here
    facts = good_facts(lines, checked, unrecorded_facts(spark, checked)).collect()
    expected = gather_facts(read_histories(spark, files)).collect()
    assert len(facts) == len(expected) == 40
    by_id = {(r["gather_id"], r["run_id"]): r.asDict() for r in expected}
    assert {(r["gather_id"], r["run_id"]): r.asDict() for r in facts} == by_id
    assert sum(bool(r["leg_latency_ms"]) for r in facts) == 40  # every gather got a leg
    said: list[str] = []
    out = tmp_path / "out"
    result = analyze(spark, [Path(new), Path(older)], out, window="1 second", progress=said.append)
    assert result.summary["gathers"] == 40
    legs = pd.read_csv(out / "leg_trends.csv")
    order = list(zip(legs["window_start"], legs["aggregate"], legs["leg"], strict=True))
    assert len(order) > 9 and order == sorted(order)  # windows, then legs
    again = [line for line in said if "again" in line]
    assert len(again) == 1 and again[0].startswith("reading 1 file(s) again for older gathers")


def _ids(path):
    with open(path, encoding="utf-8") as lines:
        return {json.loads(line)["workflowId"] for line in lines}


def test_a_run_read_twice_is_found_on_the_fact_rows(spark, tmp_path):
    gathers = _gathers(tmp_path / "gathers.ndjson", 12)
    once = gather_facts(read_histories(spark, [gathers]), dedupe=False)
    twice = gather_facts(read_histories(spark, [gathers, gathers]), dedupe=False)
    assert not repeated_runs(once)
    assert repeated_runs(twice)  # an export read twice

    # Runs whose digests collide (here: all of them) are told apart by their ids.
    def collide(*_: object) -> Column:
        return F.lit("one digest")

    assert not repeated_runs(once, collide)
    assert repeated_runs(twice, collide)


RESET = HISTORIES / "0.1.0-60796d95b5c7"


def test_a_gather_reset_after_its_close_counts_once_as_it_answered(spark, tmp_path):
    """A cancelled gather reset and then cancelled again (a real server's two runs): the
    run after the reset is named by its own id, not taken for a file read twice, and the
    gather counts once, as the run before the reset answered it."""
    data = tmp_path / "in"
    data.mkdir()
    for run in ("run1", "run2"):
        name = f"reset_after_cancel_{run}.json"
        (data / name).write_text((RESET / name).read_text())
    found = collect([data], tmp_path / "staging")
    lines = [json.loads(line) for f in found.ndjson for line in Path(f).read_text().splitlines()]
    first = json.loads((RESET / "reset_after_cancel_run1.json").read_text())["events"][0]
    before = first["workflowExecutionStartedEventAttributes"]["originalExecutionRunId"]
    assert found.duplicates_dropped == 0 and len({line["runId"] for line in lines}) == 2
    runs = read_histories(spark, found.ndjson)
    assert repeated_runs(gather_facts(runs, dedupe=False))
    facts = gather_facts(runs).collect()
    assert [(f["run_id"], f["outcome"]) for f in facts] == [(before, "CANCELLED")]


def test_of_a_gathers_runs_the_one_that_answered_first_counts(spark):
    """The rule of :func:`one_row_per_run`: a run with no result (the one a reset
    terminated) yields to one with a result; of two with results, the earlier stands;
    a run of its own start (continue-as-new) counts apart."""
    t = [datetime(2026, 1, 1, 0, 0, n, tzinfo=UTC) for n in range(4)]
    rows = [
        ("terminated", t[0], t[1], "base", 0), ("terminated", t[0], t[2], "reset", 3),
        ("answered", t[0], t[1], "base", 3), ("answered", t[0], t[3], "reset", 3),
        ("answered", t[2], t[3], "next", 3),
    ]  # fmt: skip
    facts = spark.createDataFrame(
        rows, "gather_id string, start_time timestamp, end_time timestamp, run_id string, "
        "n_expected int",
    )  # fmt: skip
    kept = {(r["gather_id"], r["run_id"]) for r in one_row_per_run(facts).collect()}
    assert kept == {("terminated", "reset"), ("answered", "base"), ("answered", "next")}


def test_a_run_in_two_files_counts_once_and_gathers_alone_make_no_batches(spark, tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    _gathers(data / "a.ndjson", 30, repeat_first=True)
    result = analyze(spark, [data], tmp_path / "out")
    assert result.summary["gathers"] == 30
    assert result.summary["runs_counted_with_another"] == 1
    assert result.summary["batches"] == 0
    # A gather's own values are written plain; the shared ones with a dictionary.
    encodings = {}
    for part in (tmp_path / "out" / "facts").glob("*.parquet"):
        chunks = pq.ParquetFile(part).metadata.row_group(0)
        for i in range(chunks.num_columns):
            encodings[chunks.column(i).path_in_schema] = set(chunks.column(i).encodings)
    assert "PLAIN_DICTIONARY" not in encodings["gather_id"]
    assert "PLAIN_DICTIONARY" not in encodings["completion_ms"]
    assert "PLAIN_DICTIONARY" in encodings["aggregate"]


def test_files_named_with_spaces_and_accents_are_told_apart(spark, tmp_path):
    # Spark's file URIs escape a space but not an accented letter: the check must still
    # name the broken file as given, and keep the good one's gathers.
    data = tmp_path / "ex ports" / "é"
    data.mkdir(parents=True)
    good = _gathers(data / "good één.ndjson", 7)
    broken = data / "bro ken%20é.ndjson"
    broken.write_text('{"workflowId": "cut sho\n')
    files = [good, str(broken)]
    checked = check_files(line_facts(spark, files), files)
    assert checked.good == [good]
    assert checked.skipped == {str(broken): "corrupt or truncated line (not a history record)"}
    assert checked.not_only_gathers == []
    result = analyze(spark, [data], tmp_path / "out")
    assert result.summary["gathers"] == 7
    assert set(result.skipped) == {str(broken)}


def test_a_gather_record_without_its_run_id_leaves_its_file_out(spark, tmp_path):
    # Each run counts once by its run id: a record without one cannot be counted, nor
    # passed over unsaid.
    good = _gathers(tmp_path / "good.ndjson", 5)
    first, second = (line for line, _ in synthesize(2, seed=11))
    record = json.loads(first)
    del record["runId"]
    broken = tmp_path / "no-run.ndjson"
    broken.write_text(json.dumps(record) + "\n" + second + "\n")
    files = [good, str(broken)]
    checked = check_files(line_facts(spark, files), files)
    assert checked.good == [good]
    assert checked.skipped == {str(broken): "corrupt or truncated line (not a history record)"}


#: A change to a gather's history: given its events and its decoded result (to alter in
#: place), it returns the result payload's new base64 text, or None to encode the result.
Change = Callable[[list[dict], dict], str | None]


def _altered(line: str, change: Change) -> str:
    """A synthesized gather's line with ``change`` made to its history."""
    record = json.loads(line)
    events = record["history"]["events"]
    payload = events[-1]["workflowExecutionCompletedEventAttributes"]["result"]["payloads"][0]
    result = json.loads(base64.b64decode(payload["data"]))
    data = change(events, result)
    if data is None:
        data = base64.b64encode(json.dumps(result).encode()).decode()
    payload["data"] = data
    return json.dumps(record)


def _time_not_a_time(index: int) -> Change:
    def change(events: list[dict], _: dict) -> None:
        events[index]["eventTime"] = "not a time"

    return change


def _result_data(data: bytes | str) -> Change:
    text = data if isinstance(data, str) else base64.b64encode(data).decode()
    return lambda *_: text


def _arrival_not_a_time(_: list[dict], result: dict) -> None:
    result["legs"][0]["received_at"] = "yesterday"


#: Values a damaged or altered export can hold in a line that is still JSON, and still a
#: history record: Spark's ANSI mode would stop the whole job on any of them.
UNREADABLE: dict[str, Change] = {
    "start_time": _time_not_a_time(0),
    "close_time": _time_not_a_time(-1),
    "result_not_base64": _result_data("%%% not base64 %%%"),
    "result_not_json": _result_data(b'{"state": "COMPL'),
    "result_not_a_result": _result_data(b"[1, 2, 3]"),
    "arrival_not_a_time": _arrival_not_a_time,
}


def test_a_record_whose_values_cannot_be_read_leaves_its_file_out_by_name(spark, tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    _gathers(data / "good.ndjson", 9)
    lines = [line for line, _ in synthesize(2 * len(UNREADABLE), seed=7)]
    altered = {}
    for i, (name, change) in enumerate(UNREADABLE.items()):
        # Beside the altered gather, a good one: its file is left out whole.
        path = data / f"{name}.ndjson"
        path.write_text(_altered(lines[2 * i], change) + "\n" + lines[2 * i + 1] + "\n")
        altered[str(path)] = name
    files = [str(data / "good.ndjson"), *altered]
    checked = check_files(line_facts(spark, files), files)
    assert checked.good == [str(data / "good.ndjson")]
    assert set(checked.skipped) == set(altered)
    assert all("cannot be read" in why for why in checked.skipped.values())
    # The whole job runs through, and says which files it left out and why.
    result = analyze(spark, [data], tmp_path / "out")
    assert result.summary["gathers"] == 9
    assert sum(result.summary["outcomes"].values()) == 9
    assert result.skipped == checked.skipped
    summary = format_summary(result)
    assert all(f"skipped {path}: a gather's record" in summary for path in altered)
