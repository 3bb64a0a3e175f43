"""PySpark transforms of gather histories: pure DataFrame -> DataFrame functions.

``raw`` is the export NDJSON (``workflowId``, ``runId``, ``history.events[]`` in
Temporal's proto-JSON form) read with :data:`RAW_SCHEMA`.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType, StructField, StructType

from analytics.schema import struct_of
from mqgather.names import GATHER_WORKFLOW, SIGNAL_REPLIES
from workflows.models import GatherInput, GatherResult, ReplyBatch

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

# What the job reads of the workflow's payloads: projections of its own models.
_INPUT = struct_of(
    GatherInput, {"aggregate": {"name": None, "timeout_seconds": None}, "correl_id": None}
)
_BATCH = struct_of(
    ReplyBatch, {"replies": {"leg": None, "leg_index": None, "message": {"msg_id": None}}}
)
_RESULT = struct_of(
    GatherResult,
    dict.fromkeys(
        ("gather_id", "aggregate", "correl_id", "state", "legs_expected", "legs_received",
         "legs_missing", "duplicates", "redeliveries", "late", "unknown")
    ),
)  # fmt: skip
CLOSE_TYPES = (
    "WORKFLOW_EXECUTION_COMPLETED",
    "WORKFLOW_EXECUTION_FAILED",
    "WORKFLOW_EXECUTION_TIMED_OUT",
    "WORKFLOW_EXECUTION_TERMINATED",
    "WORKFLOW_EXECUTION_CANCELED",
)


def _millis_between(start: str, end: str) -> Column:
    return (F.unix_micros(F.col(end)) - F.unix_micros(F.col(start))) / F.lit(1000.0)


def dedupe_histories(raw: DataFrame) -> DataFrame:
    """Each workflow run once (Cloud exports are delivered at least once)."""
    return raw.filter(F.col("runId").isNotNull()).dropDuplicates(["workflowId", "runId"])


def _ts(text: Column) -> Column:
    # Proto JSON may carry nanoseconds; Spark keeps microseconds.
    return F.to_timestamp(F.regexp_replace(text, r"(\.\d{6})\d+", "$1"))


def _decode(payloads: Column) -> Column:
    return F.unbase64(payloads.getItem(0).getField("data")).cast("string")


def gather_facts(histories: DataFrame) -> DataFrame:
    """One row per closed gather: aggregate, CorrelId, start, end, outcome, legs expected /
    received / missing, completion and per-leg arrival latency (ms from the gather's start),
    duplicates, redeliveries, late and unknown replies, and its number of history events.

    Works per history row with array functions: no joins, no shuffle.
    """
    events = F.col("history.events")
    close_types = [f"EVENT_TYPE_{t}" for t in CLOSE_TYPES]
    started = F.element_at(
        F.filter(events, lambda e: e["eventType"] == "EVENT_TYPE_WORKFLOW_EXECUTION_STARTED"), 1
    )
    closed = F.element_at(F.filter(events, lambda e: e["eventType"].isin(*close_types)), -1)
    reply_signals = F.filter(
        events,
        lambda e: (
            (e["eventType"] == "EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED")
            & (e["workflowExecutionSignaledEventAttributes"]["signalName"] == SIGNAL_REPLIES)
        ),
    )
    base = (
        histories.select(
            F.col("workflowId").alias("gather_id"),
            F.col("runId").alias("run_id"),
            F.size(events).alias("events"),
            started.alias("s"),
            closed.alias("c"),
            reply_signals.alias("signals"),
        )
        .filter(
            (
                F.col("s.workflowExecutionStartedEventAttributes.workflowType.name")
                == GATHER_WORKFLOW
            )
            & F.col("c").isNotNull()
        )
        .select(
            "gather_id",
            "run_id",
            "events",
            "signals",
            _ts(F.col("s.eventTime")).alias("start_time"),
            _ts(F.col("c.eventTime")).alias("end_time"),
            F.regexp_replace("c.eventType", "^EVENT_TYPE_WORKFLOW_EXECUTION_", "").alias("closed"),
            F.from_json(
                _decode(F.col("s.workflowExecutionStartedEventAttributes.input.payloads")), _INPUT
            ).alias("input"),
            F.from_json(
                _decode(F.col("c.workflowExecutionCompletedEventAttributes.result.payloads")),
                _RESULT,
            ).alias("r"),
        )
    )
    empty = F.array().cast("array<string>")
    facts = base.select(
        "gather_id",
        "run_id",
        F.coalesce("r.aggregate", "input.aggregate.name").alias("aggregate"),
        F.col("r.correl_id").alias("correl_id"),
        "start_time",
        "end_time",
        F.when(F.col("closed") == "COMPLETED", F.col("r.state"))
        .otherwise(F.col("closed"))
        .alias("outcome"),
        F.coalesce("r.legs_expected", empty).alias("legs_expected"),
        F.coalesce("r.legs_received", empty).alias("legs_received"),
        F.coalesce("r.legs_missing", empty).alias("legs_missing"),
        _millis_between("start_time", "end_time").alias("completion_ms"),
        *(
            F.coalesce(f"r.{c}", F.lit(0)).alias(c)
            for c in ("duplicates", "redeliveries", "late", "unknown")
        ),
        "events",
        (F.col("input.aggregate.timeout_seconds") * 1000.0).alias("timeout_ms"),
        # Every reply in arrival order, with the time of the signal that brought it.
        F.flatten(
            F.transform(
                "signals",
                lambda e: F.transform(
                    F.from_json(
                        _decode(e["workflowExecutionSignaledEventAttributes"]["input"]["payloads"]),
                        _BATCH,
                    )["replies"],
                    lambda r: F.struct(
                        r["leg"].alias("leg"),
                        r["leg_index"].alias("leg_index"),
                        _ts(e["eventTime"]).alias("at"),
                    ),
                ),
            )
        ).alias("arrivals"),
    )
    named = F.filter(
        F.transform(
            "arrivals",
            lambda a, i: F.struct(
                F.coalesce(
                    a["leg"],
                    F.element_at("legs_expected", (a["leg_index"] + 1).cast("int")),
                    # Count-only aggregates fill legs in arrival order.
                    F.element_at("legs_expected", i + 1),
                ).alias("leg"),
                a["at"].alias("at"),
            ),
        ),
        lambda a: F.array_contains("legs_received", a["leg"]),
    )
    start_us = F.unix_micros("start_time")
    latency = F.map_from_entries(
        F.transform(
            F.array_distinct(F.transform(named, lambda a: a["leg"])),
            lambda leg: F.struct(
                leg.alias("leg"),
                (
                    (
                        F.unix_micros(
                            F.array_min(
                                F.transform(
                                    F.filter(named, lambda a: a["leg"] == leg), lambda a: a["at"]
                                )
                            )
                        )
                        - start_us
                    )
                    / F.lit(1000.0)
                ).alias("latency_ms"),
            ),
        )
    )
    return facts.select(
        "gather_id",
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
        F.coalesce(latency, F.create_map().cast("map<string,double>")).alias("leg_latency_ms"),
        "duplicates",
        "redeliveries",
        "late",
        "unknown",
        "events",
        "timeout_ms",
    )


def _window_start(window: str) -> Column:
    return F.window("end_time", window).getField("start").alias("window_start")


def _percentiles(column: str, qs: tuple[float, ...]) -> Column:
    values = ", ".join(str(q) for q in qs)
    return F.expr(f"percentile({column}, array({values}))")


def summarise(
    frame: DataFrame, keys: list[str], extra: dict[str, Column] | None = None
) -> DataFrame:
    """Per group of ``keys`` (one row for none): gathers, each outcome's count, the
    timeout rate, exact p50/p95/p99 completion latency of completed gathers, late,
    duplicate and unknown replies (and the ``extra`` aggregations, after the keys)."""
    completed_ms = F.when(F.col("outcome") == "COMPLETE", F.col("completion_ms"))
    outcome_columns = {
        "completed": "COMPLETE", "timed_out": "TIMEOUT", "released": "RELEASED",
        "cancelled": "CANCELLED", "failed": "FAILED",
    }  # fmt: skip
    extra = extra or {}
    return (
        frame.withColumn("completed_ms", completed_ms)
        .groupBy(*keys)
        .agg(
            F.count("*").alias("gathers"),
            *(column.alias(name) for name, column in extra.items()),
            *(
                F.sum((F.col("outcome") == o).cast("long")).alias(c)
                for c, o in outcome_columns.items()
            ),
            _percentiles("completed_ms", (0.5, 0.95, 0.99)).alias("p"),
            F.sum("late").alias("late"),
            F.sum("duplicates").alias("duplicates"),
            F.sum("unknown").alias("unknown"),
        )
        .select(
            *keys,
            *extra,
            "gathers",
            *outcome_columns,
            (F.col("timed_out") / F.col("gathers")).alias("timeout_rate"),
            F.col("p")[0].alias("p50_ms"),
            F.col("p")[1].alias("p95_ms"),
            F.col("p")[2].alias("p99_ms"),
            "late",
            "duplicates",
            "unknown",
        )
    )


def most_missed(frame: DataFrame, keys: list[str]) -> DataFrame:
    """Per group of ``keys`` (one row for none): the leg missing from the most gathers
    (ties: the first name) and in how many."""
    order = Window.partitionBy(*keys).orderBy(F.desc("count"), "leg")
    return (
        frame.select(*keys, F.explode("legs_missing").alias("leg"))
        .groupBy(*keys, "leg")
        .count()
        .withColumn("rank", F.row_number().over(order))
        .filter(F.col("rank") == 1)
        .select(
            *keys,
            F.col("leg").alias("most_missed_leg"),
            F.col("count").alias("most_missed_count"),
        )
    )


def trends(facts: DataFrame, window: str = "1 hour") -> DataFrame:
    """Per time window (of gather end) and aggregate: gathers, completed, timed out,
    released, cancelled, failed, timeout rate, exact p50/p95/p99 completion latency of
    completed gathers, late, duplicate and unknown replies, and the most-missed leg."""
    keys = ["window_start", "aggregate"]
    windowed = facts.withColumn("window_start", _window_start(window))
    return (
        summarise(windowed, keys)
        .join(most_missed(windowed, keys), keys, "left")
        .fillna({"most_missed_count": 0})
        .orderBy(*keys)
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


#: Outcomes in the order the report lists them; others (TERMINATED...) follow.
OUTCOMES = ("COMPLETE", "TIMEOUT", "RELEASED", "CANCELLED", "FAILED", "UNKNOWN")
#: Trend windows the job picks from, shortest first.
WINDOWS = (
    ("1 minute", 60),
    ("5 minutes", 300),
    ("15 minutes", 900),
    ("1 hour", 3600),
    ("6 hours", 6 * 3600),
    ("1 day", 86400),
    ("1 week", 7 * 86400),
)
#: The most windows a trend should have when the job picks the window.
MAX_WINDOWS = 48


def pick_window(span_seconds: float) -> str:
    """The shortest window that cuts ``span_seconds`` of data into at most
    :data:`MAX_WINDOWS` windows (the longest one for a longer span)."""
    for name, seconds in WINDOWS:
        if span_seconds / seconds <= MAX_WINDOWS:
            return name
    return WINDOWS[-1][0]


def outcome_counts(facts: DataFrame) -> DataFrame:
    """Gathers per aggregate and outcome."""
    return facts.groupBy("aggregate", "outcome").count().orderBy("aggregate", "outcome")


def aggregate_summary(facts: DataFrame) -> DataFrame:
    """Per aggregate: the data's time range, then what :func:`trends` gives per window,
    over all of it: gathers, outcomes, latency, late, duplicate and unknown replies, and
    the most-missed leg with how often it was missing."""
    span = {"first_start": F.min("start_time"), "last_end": F.max("end_time")}
    return (
        summarise(facts, ["aggregate"], span)
        .join(most_missed(facts, ["aggregate"]), ["aggregate"], "left")
        .fillna({"most_missed_count": 0, "most_missed_leg": ""})
        .orderBy("aggregate")
    )
