"""PySpark transforms of gather histories: pure DataFrame -> DataFrame functions.

``raw`` is the export NDJSON (``workflowId``, ``runId``, ``history.events[]`` in
Temporal's proto-JSON form) read with :data:`RAW_SCHEMA`.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

CORRUPT = "_corrupt_record"

_PAYLOADS = StructType(
    [StructField("payloads", ArrayType(StructType([StructField("data", StringType())])))]
)
_EVENT = StructType(
    [
        StructField("eventId", StringType()),
        StructField("eventTime", StringType()),
        StructField("eventType", StringType()),
        StructField(
            "workflowExecutionStartedEventAttributes",
            StructType(
                [
                    StructField("workflowType", StructType([StructField("name", StringType())])),
                    StructField("input", _PAYLOADS),
                ]
            ),
        ),
        StructField(
            "workflowExecutionSignaledEventAttributes",
            StructType([StructField("signalName", StringType()), StructField("input", _PAYLOADS)]),
        ),
        StructField(
            "workflowExecutionCompletedEventAttributes",
            StructType([StructField("result", _PAYLOADS)]),
        ),
    ]
)
#: The part of an export line the job reads (Spark never infers the schema).
RAW_SCHEMA = StructType(
    [
        StructField("workflowId", StringType()),
        StructField("runId", StringType()),
        StructField("history", StructType([StructField("events", ArrayType(_EVENT))])),
        StructField(CORRUPT, StringType()),
    ]
)

_INPUT = StructType(
    [
        StructField("aggregate", StructType([StructField("name", StringType())])),
        StructField("correl_id", StringType()),
    ]
)
_BATCH = StructType(
    [
        StructField(
            "replies",
            ArrayType(
                StructType(
                    [
                        StructField("leg", StringType()),
                        StructField("leg_index", IntegerType()),
                        StructField("message", StructType([StructField("msg_id", StringType())])),
                    ]
                )
            ),
        )
    ]
)
_RESULT = StructType(
    [
        StructField("gather_id", StringType()),
        StructField("aggregate", StringType()),
        StructField("correl_id", StringType()),
        StructField("state", StringType()),
        StructField("legs_expected", ArrayType(StringType())),
        StructField("legs_received", ArrayType(StringType())),
        StructField("legs_missing", ArrayType(StringType())),
        StructField("duplicates", LongType()),
        StructField("redeliveries", LongType()),
        StructField("late", LongType()),
        StructField("unknown", LongType()),
    ]
)
CLOSE_TYPES = (
    "WORKFLOW_EXECUTION_COMPLETED",
    "WORKFLOW_EXECUTION_FAILED",
    "WORKFLOW_EXECUTION_TIMED_OUT",
    "WORKFLOW_EXECUTION_TERMINATED",
    "WORKFLOW_EXECUTION_CANCELED",
)
GATHER_TYPE = "Gather"


def _first_payload(attrs: str, field: str) -> Column:
    return F.col(f"e.{attrs}.{field}.payloads").getItem(0).getField("data")


def _millis_between(start: str, end: str) -> Column:
    return (F.unix_micros(F.col(end)) - F.unix_micros(F.col(start))) / F.lit(1000.0)


def dedupe_histories(raw: DataFrame) -> DataFrame:
    """Each workflow run once (Cloud exports are delivered at least once)."""
    return raw.filter(F.col("runId").isNotNull()).dropDuplicates(["workflowId", "runId"])


def history_events(raw: DataFrame) -> DataFrame:
    """One row per event: ids, time, type (without ``EVENT_TYPE_``), workflow type, signal
    name and the first payload decoded to its JSON text."""
    events = raw.select(
        "workflowId",
        "runId",
        F.size("history.events").alias("history_length"),
        F.explode("history.events").alias("e"),
    )
    payload = F.coalesce(
        _first_payload("workflowExecutionStartedEventAttributes", "input"),
        _first_payload("workflowExecutionSignaledEventAttributes", "input"),
        _first_payload("workflowExecutionCompletedEventAttributes", "result"),
    )
    # Proto JSON may carry nanoseconds; Spark keeps microseconds.
    time_text = F.regexp_replace("e.eventTime", r"(\.\d{6})\d+", "$1")
    return events.select(
        F.col("workflowId").alias("workflow_id"),
        F.col("runId").alias("run_id"),
        F.col("e.eventId").cast("long").alias("event_id"),
        F.to_timestamp(time_text).alias("event_time"),
        F.regexp_replace("e.eventType", "^EVENT_TYPE_", "").alias("event_type"),
        F.col("e.workflowExecutionStartedEventAttributes.workflowType.name").alias("workflow_type"),
        F.col("e.workflowExecutionSignaledEventAttributes.signalName").alias("signal_name"),
        F.unbase64(payload).cast("string").alias("payload"),
        "history_length",
    )


def gather_facts(events: DataFrame) -> DataFrame:
    """One row per closed gather: aggregate, CorrelId, start, end, outcome, legs expected /
    received / missing, completion and per-leg arrival latency (ms from the gather's start),
    duplicates, redeliveries, late and unknown replies, and its number of history events."""
    keys = ["workflow_id", "run_id"]
    starts = events.filter(
        (F.col("event_type") == "WORKFLOW_EXECUTION_STARTED")
        & (F.col("workflow_type") == GATHER_TYPE)
    ).select(
        *keys,
        F.col("event_time").alias("start_time"),
        F.from_json("payload", _INPUT).alias("input"),
        "history_length",
    )
    closes = events.filter(F.col("event_type").isin(*CLOSE_TYPES)).select(
        *keys,
        F.col("event_time").alias("end_time"),
        F.col("event_type").alias("close_type"),
        F.from_json("payload", _RESULT).alias("r"),
    )
    base = starts.join(closes, keys).select(
        *keys,
        F.coalesce("r.aggregate", "input.aggregate.name").alias("aggregate"),
        F.col("r.correl_id").alias("correl_id"),
        "start_time",
        "end_time",
        F.when(F.col("close_type") == "WORKFLOW_EXECUTION_COMPLETED", F.col("r.state"))
        .otherwise(F.regexp_replace("close_type", "^WORKFLOW_EXECUTION_", ""))
        .alias("outcome"),
        F.coalesce("r.legs_expected", F.array().cast("array<string>")).alias("legs_expected"),
        F.coalesce("r.legs_received", F.array().cast("array<string>")).alias("legs_received"),
        F.coalesce("r.legs_missing", F.array().cast("array<string>")).alias("legs_missing"),
        _millis_between("start_time", "end_time").alias("completion_ms"),
        "history_length",
        *(
            F.coalesce(f"r.{c}", F.lit(0)).alias(c)
            for c in ("duplicates", "redeliveries", "late", "unknown")
        ),
    )
    replies = events.filter(
        (F.col("event_type") == "WORKFLOW_EXECUTION_SIGNALED") & (F.col("signal_name") == "replies")
    ).select(
        *keys,
        "event_id",
        "event_time",
        F.posexplode(F.from_json("payload", _BATCH).getField("replies")).alias("pos", "reply"),
    )
    arrival_rank = F.row_number().over(Window.partitionBy(*keys).orderBy("event_id", "pos"))
    named = replies.join(
        base.select(*keys, "start_time", "legs_expected", "legs_received"), keys
    ).select(
        *keys,
        "event_time",
        "start_time",
        "legs_received",
        F.coalesce(
            F.col("reply.leg"),
            F.element_at("legs_expected", F.col("reply.leg_index") + 1),
            # Count-only aggregates fill legs in arrival order.
            F.element_at("legs_expected", arrival_rank),
        ).alias("leg"),
    )
    arrivals = (
        named.filter(F.expr("array_contains(legs_received, leg)"))
        .groupBy(*keys, "leg")
        .agg(F.min("event_time").alias("arrived"), F.first("start_time").alias("start_time"))
        .select(*keys, "leg", _millis_between("start_time", "arrived").alias("latency_ms"))
        .groupBy(*keys)
        .agg(
            F.map_from_entries(F.collect_list(F.struct("leg", "latency_ms"))).alias(
                "leg_latency_ms"
            )
        )
    )
    return base.join(arrivals, keys, "left").select(
        F.col("workflow_id").alias("gather_id"),
        "run_id",
        "aggregate",
        "correl_id",
        "start_time",
        "end_time",
        "outcome",
        "legs_expected",
        "legs_received",
        "legs_missing",
        F.size("legs_expected").alias("n_expected"),
        F.size("legs_received").alias("n_received"),
        F.size("legs_missing").alias("n_missing"),
        "completion_ms",
        F.coalesce("leg_latency_ms", F.create_map().cast("map<string,double>")).alias(
            "leg_latency_ms"
        ),
        "duplicates",
        "redeliveries",
        "late",
        "unknown",
        F.col("history_length").alias("events"),
    )


def _window_start(window: str) -> Column:
    return F.window("end_time", window).getField("start").alias("window_start")


def _percentiles(column: str, qs: tuple[float, ...]) -> Column:
    values = ", ".join(str(q) for q in qs)
    return F.expr(f"percentile({column}, array({values}))")


def trends(facts: DataFrame, window: str = "1 hour") -> DataFrame:
    """Per time window (of gather end) and aggregate: gathers, completed, timed out,
    timeout rate, exact p50/p95/p99 completion latency of completed gathers, late,
    duplicate and unknown replies, and the most-missed leg."""
    completed_ms = F.when(F.col("outcome") == "COMPLETE", F.col("completion_ms"))
    stats = (
        facts.withColumn("window_start", _window_start(window))
        .withColumn("completed_ms", completed_ms)
        .groupBy("window_start", "aggregate")
        .agg(
            F.count("*").alias("gathers"),
            F.sum((F.col("outcome") == "COMPLETE").cast("long")).alias("completed"),
            F.sum((F.col("outcome") == "TIMEOUT").cast("long")).alias("timed_out"),
            _percentiles("completed_ms", (0.5, 0.95, 0.99)).alias("p"),
            F.sum("late").alias("late"),
            F.sum("duplicates").alias("duplicates"),
            F.sum("unknown").alias("unknown"),
        )
        .select(
            "window_start",
            "aggregate",
            "gathers",
            "completed",
            "timed_out",
            (F.col("timed_out") / F.col("gathers")).alias("timeout_rate"),
            F.col("p")[0].alias("p50_ms"),
            F.col("p")[1].alias("p95_ms"),
            F.col("p")[2].alias("p99_ms"),
            "late",
            "duplicates",
            "unknown",
        )
    )
    missed = (
        facts.select(_window_start(window), "aggregate", F.explode("legs_missing").alias("leg"))
        .groupBy("window_start", "aggregate", "leg")
        .count()
        .withColumn(
            "rank",
            F.row_number().over(
                Window.partitionBy("window_start", "aggregate").orderBy(F.desc("count"), "leg")
            ),
        )
        .filter(F.col("rank") == 1)
        .select(
            "window_start",
            "aggregate",
            F.col("leg").alias("most_missed_leg"),
            F.col("count").alias("most_missed_count"),
        )
    )
    return (
        stats.join(missed, ["window_start", "aggregate"], "left")
        .fillna({"most_missed_count": 0})
        .orderBy("window_start", "aggregate")
    )


def leg_trends(facts: DataFrame, window: str = "1 hour") -> DataFrame:
    """Per window, aggregate and leg: arrivals and exact p50/p95 arrival latency."""
    return (
        facts.select(
            _window_start(window),
            "aggregate",
            F.explode("leg_latency_ms").alias("leg", "latency_ms"),
        )
        .groupBy("window_start", "aggregate", "leg")
        .agg(
            F.count("*").alias("arrivals"),
            _percentiles("latency_ms", (0.5, 0.95)).alias("p"),
        )
        .select(
            "window_start",
            "aggregate",
            "leg",
            "arrivals",
            F.col("p")[0].alias("p50_ms"),
            F.col("p")[1].alias("p95_ms"),
        )
        .orderBy("window_start", "aggregate", "leg")
    )
