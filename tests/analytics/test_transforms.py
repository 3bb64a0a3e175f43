"""The Spark transforms on synthetic histories, no server needed."""

from __future__ import annotations

import base64
import json
import statistics
from datetime import UTC, datetime

import pytest
from pyspark.sql import functions as F

from analytics.job import level_rows
from analytics.synth import synthesize
from analytics.transforms import (
    BY_WINDOW,
    LEVEL_KEYS,
    RAW_SCHEMA,
    RECORDED_ARRIVAL,
    RECORDED_RULE,
    base64_holds,
    gather_facts,
    span_aggregations,
    summaries,
    summarise,
)


def _raw(spark, tmp_path, n=60, duplicate_first=False, arrivals_in_result=True):
    made = list(
        synthesize(
            n,
            start=datetime(2026, 3, 1, 10, 0, tzinfo=UTC),
            arrivals_in_result=arrivals_in_result,
        )
    )
    lines = [line for line, _ in made]
    if duplicate_first:
        lines.append(lines[0])  # delivered twice
    path = tmp_path / "h.ndjson"
    path.write_text("\n".join(lines) + "\n")
    return spark.read.schema(RAW_SCHEMA).json(str(path)), [t for _, t in made]


@pytest.mark.parametrize("arrivals_in_result", [True, False], ids=["recorded", "older"])
def test_facts_match_the_synthetic_truth(spark, tmp_path, arrivals_in_result):
    # Recorded: each leg's arrival is the bridge's get, from the result; older results
    # lack it, and the arrival is the signal's time at the server (a little later).
    raw, truth = _raw(spark, tmp_path, duplicate_first=True, arrivals_in_result=arrivals_in_result)
    facts = {r["gather_id"]: r for r in gather_facts(raw).collect()}
    assert len(facts) == len(truth)
    for t in truth:
        row = facts[t.gather_id]
        assert row["outcome"] == t.outcome
        assert row["legs_missing"] == t.legs_missing
        assert row["duplicates"] == t.duplicates
        assert abs(row["completion_ms"] - t.completion_ms) < 0.002
        assert set(row["leg_latency_ms"]) == set(t.leg_latency_ms)
        for leg, ms in t.leg_latency_ms.items():
            assert abs(row["leg_latency_ms"][leg] - ms) < 0.002
        assert row["leg_bytes"] == t.leg_bytes
        assert row["reply_bytes"] == sum(t.leg_bytes.values())
        assert row["held_legs"] == t.held_legs
        assert row["leg_attempts"] == t.leg_attempts
        assert row["rerequests"] == sum(t.leg_attempts.values()) - len(t.leg_attempts)
        assert row["complete_when"] == "all"
        assert row["timeout_ms"] == 3000.0
        assert row["closed_by"] == ("deadline" if t.outcome == "TIMEOUT" else "rule")
    assert any(t.held_legs for t in truth)  # the sample has held replies to count
    assert any(n > 1 for t in truth for n in t.leg_attempts.values())  # and re-requests


def test_a_result_that_records_the_rule_needs_no_start_input(spark, tmp_path):
    # The start input is parsed only for results that lack the rule and the timeout: a
    # history whose input says otherwise (or nothing readable) takes them from its result.
    made = [next(synthesize(1, seed=i, arrivals_in_result=i == 0))[0] for i in range(3)]
    other = b'{"aggregate":{"name":"other","timeout_seconds":9.0,"complete_when":"any"}}'
    lines = []
    for i, text in enumerate(made):
        record = json.loads(text)
        events = record["history"]["events"]
        start = events[0]["workflowExecutionStartedEventAttributes"]
        start["input"]["payloads"][0]["data"] = base64.b64encode(other).decode()
        if i == 2:  # terminated: no result at all
            events[-1] = {**events[-1], "eventType": "EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED"}
            del events[-1]["workflowExecutionCompletedEventAttributes"]
        lines.append(json.dumps(record))
    path = tmp_path / "h.ndjson"
    path.write_text("\n".join(lines) + "\n")
    facts = gather_facts(spark.read.schema(RAW_SCHEMA).json(str(path)), dedupe=False).collect()
    by_rule = sorted((r["timeout_ms"], r["complete_when"], r["aggregate"]) for r in facts)
    # This release's result: its own 3 s and "all"; an older one and a run without a
    # result: what the input says.
    assert by_rule == [
        (3000.0, "all", "orders"),
        (9000.0, "any", "orders"),
        (9000.0, "any", "other"),
    ]


def test_trends_percentiles_are_exact(spark, tmp_path):
    raw, truth = _raw(spark, tmp_path, n=80)
    facts = gather_facts(raw)
    rows = level_rows(summaries(facts, "1 day").toPandas(), BY_WINDOW).to_dict("records")
    assert len(rows) == 1
    row = rows[0]
    done = [t.completion_ms for t in truth if t.outcome == "COMPLETE"]
    q = statistics.quantiles(done, n=100, method="inclusive")
    assert abs(row["p50_ms"] - q[49]) < 0.01 and abs(row["p95_ms"] - q[94]) < 0.01
    assert abs(row["p99_ms"] - q[98]) < 0.01
    timed_out = sum(t.outcome == "TIMEOUT" for t in truth)
    assert (row["gathers"], row["timed_out"]) == (80, timed_out)
    assert row["timeout_rate"] == timed_out / 80
    if timed_out:
        missed = [leg for t in truth for leg in t.legs_missing]
        top = max(sorted(set(missed)), key=missed.count)
        assert row["most_missed_leg"] == top


def _held_in_base64(spark, texts, mark):
    """Name -> whether base64_holds finds ``mark`` in the base64 of each text (or None)."""
    rows = [(name, text and base64.b64encode(text.encode()).decode())
            for name, text in texts.items()]  # fmt: skip
    frame = spark.createDataFrame(rows, "name string, data string")
    held = base64_holds(F.col("data"), mark).alias("held")
    return {r["name"]: r["held"] for r in frame.select("name", held).collect()}


@pytest.mark.parametrize("mark", [RECORDED_ARRIVAL, RECORDED_RULE])
@pytest.mark.parametrize("offset", [0, 1, 2, 3, 4, 5])
def test_a_recorded_value_is_seen_in_the_base64_at_any_offset(spark, mark, offset):
    # The job tells results that record each leg's arrival (or the aggregate's rule) from
    # older ones without decoding them: by what the base64 of the mark looks like at
    # each offset.
    key = mark.split('"')[1]
    pad = "x" * offset
    texts = {
        "recorded": f'{pad}{{"legs":[{{"{key}":"2026-03-01T10:00:00Z"}}]}}',
        "null": f'{pad}{{"legs":[{{"{key}":null}}]}}',
        "older": f'{pad}{{"legs":[{{"name":"{key}","bytes":1}}]}}',
        "in a value": f'{pad}{{"legs":[{{"name":"\\"{key}\\":\\""}}]}}',
    }
    found = _held_in_base64(spark, {**texts, "no result": None}, mark)
    assert found == {
        "recorded": True,
        "null": False,
        "older": False,
        "in a value": False,
        "no result": False,
    }


def test_summaries_give_each_level_as_its_own_grouping_would(spark, tmp_path):
    raw, _ = _raw(spark, tmp_path, n=120)
    facts = gather_facts(raw).cache()
    window = "15 minutes"
    levels = summaries(facts, window).cache()
    windowed = facts.withColumn("window_start", F.window("end_time", window)["start"])
    for level, keys in LEVEL_KEYS.items():
        got = levels.filter(F.col("level") == level).drop("level")
        want = summarise(windowed, list(keys), span_aggregations())
        columns = want.columns
        assert sorted(map(tuple, got.select(columns).collect()), key=repr) == sorted(
            map(tuple, want.collect()), key=repr
        ), level
        assert got.count() > 0
    assert {r["level"] for r in levels.select("level").distinct().collect()} == set(LEVEL_KEYS)
