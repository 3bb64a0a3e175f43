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
    (line, _), (older, _) = (
        next(synthesize(1, arrivals_in_result=recorded)) for recorded in (True, False)
    )
    other = base64.b64encode(b'{"aggregate":{"timeout_seconds":9.0,"complete_when":"any"}}')
    lines = []
    for text in (line, older):
        record = json.loads(text)
        start = record["history"]["events"][0]["workflowExecutionStartedEventAttributes"]
        start["input"]["payloads"][0]["data"] = other.decode()
        lines.append(json.dumps(record))
    path = tmp_path / "h.ndjson"
    path.write_text("\n".join(lines) + "\n")
    facts = gather_facts(spark.read.schema(RAW_SCHEMA).json(str(path)), dedupe=False).collect()
    by_rule = sorted((r["timeout_ms"], r["complete_when"]) for r in facts)
    # This release's result: its own 3 s and "all"; an older one: what its input says.
    assert by_rule == [(3000.0, "all"), (9000.0, "any")]


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


@pytest.mark.parametrize("offset", [0, 1, 2, 3, 4, 5])
def test_a_recorded_arrival_is_seen_in_the_base64_at_any_offset(spark, offset):
    # The job tells results that record each leg's arrival from older ones without
    # decoding them: by what the base64 of RECORDED_ARRIVAL looks like at each offset.
    pad = "x" * offset
    texts = {
        "recorded": f'{pad}{{"legs":[{{"received_at":"2026-03-01T10:00:00Z"}}]}}',
        "not received": f'{pad}{{"legs":[{{"received_at":null}}]}}',
        "older": f'{pad}{{"legs":[{{"name":"received_at","bytes":1}}]}}',
        "in a value": f'{pad}{{"legs":[{{"name":"\\"received_at\\":\\""}}]}}',
    }
    found = _held_in_base64(spark, {**texts, "no result": None}, RECORDED_ARRIVAL)
    assert found == {
        "recorded": True,
        "not received": False,
        "older": False,
        "in a value": False,
        "no result": False,
    }


def test_a_recorded_rule_is_told_from_an_older_or_null_one(spark):
    texts = {
        "recorded": '{"closed_by":"rule","complete_when":"all","timeout_seconds":3.0}',
        "null": '{"closed_by":"rule","complete_when":null,"timeout_seconds":null}',
        "older": '{"closed_by":"rule"}',
    }
    found = _held_in_base64(spark, texts, RECORDED_RULE)
    assert found == {"recorded": True, "null": False, "older": False}


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
