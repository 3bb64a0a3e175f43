"""PySpark transforms of gather and collector histories: pure DataFrame -> DataFrame
functions.

``raw`` is the export NDJSON (``workflowId``, ``runId``, ``history.events[]`` in
Temporal's proto-JSON form) read with :data:`RAW_SCHEMA`.
"""

from __future__ import annotations

import base64

from pyspark.sql import Column, DataFrame, GroupedData, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from analytics.schema import struct_of
from mqgather.names import ACTIVITY_PUT_BATCH, COLLECT_WORKFLOW, GATHER_WORKFLOW, SIGNAL_REPLIES
from workflows.collect_models import CollectorInput, PutBatchResult
from workflows.models import GatherInput, GatherResult, ReplyBatch

CORRUPT = "_corrupt_record"
#: In ``gather_facts(..., every_row=True)``: whether the row is a closed gather's facts.
FACT = "_fact"
#: In ``gather_facts(..., every_row=True)``: whether the gather's result does not record
#: its legs' arrivals (an older gather's), so that its ``leg_latency_ms`` is read from the
#: replies' signals (without ``signals``: left empty, for the caller to read again).
UNRECORDED = "_arrivals_unrecorded"

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
        # A local activity's marker: the SDK's own record ("data") and the result.
        StructField(
            "markerRecordedEventAttributes",
            StructType(
                [
                    StructField("markerName", StringType()),
                    StructField(
                        "details",
                        StructType(
                            [StructField("data", _PAYLOADS), StructField("result", _PAYLOADS)]
                        ),
                    ),
                ]
            ),
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
    GatherInput,
    {
        "aggregate": dict.fromkeys(("name", "timeout_seconds", "complete_when")),
        "correl_id": None,
    },
)
_BATCH = struct_of(
    ReplyBatch, {"replies": {"leg": None, "leg_index": None, "message": {"msg_id": None}}}
)
_RESULT = struct_of(
    GatherResult,
    {
        **dict.fromkeys(
            ("gather_id", "aggregate", "correl_id", "state", "legs_expected", "legs_received",
             "legs_missing", "duplicates", "redeliveries", "late", "unknown", "closed_by",
             "complete_when", "timeout_seconds")
        ),
        "legs": dict.fromkeys(("name", "received", "bytes", "held", "attempts", "received_at")),
    },
)  # fmt: skip
# What the job reads of a collector: its start input and each batch PUT's result.
_COLLECTOR = struct_of(CollectorInput, {"collector": {"name": None}, "destination": None})
_PUT = struct_of(
    PutBatchResult,
    {
        "messages_put": None,
        "failed": None,
        "batch": dict.fromkeys(
            ("number", "messages", "size_bytes", "first_received_at", "opened_at", "closed_at",
             "reason", "target_queue", "format")
        ),
    },
)  # fmt: skip
#: The SDK's record of a local activity in its marker (not a model of ours).
_LOCAL_ACTIVITY = StructType(
    [
        StructField("activity_type", StringType()),
        StructField(
            "complete_time",
            StructType([StructField("seconds", LongType()), StructField("nanos", LongType())]),
        ),
    ]
)
CLOSE_REASONS = ("count", "bytes", "delay", "released")
CLOSE_TYPES = (
    "WORKFLOW_EXECUTION_COMPLETED",
    "WORKFLOW_EXECUTION_FAILED",
    "WORKFLOW_EXECUTION_TIMED_OUT",
    "WORKFLOW_EXECUTION_TERMINATED",
    "WORKFLOW_EXECUTION_CANCELED",
)


def _millis_between(start: str, end: str) -> Column:
    return (F.unix_micros(F.col(end)) - F.unix_micros(F.col(start))) / F.lit(1000.0)


def _first_start(events: Column) -> Column:
    """The run's start event: its first (null where the first is not one)."""
    kind = "EVENT_TYPE_WORKFLOW_EXECUTION_STARTED"
    first = F.try_element_at(events, F.lit(1))
    return F.when(first["eventType"] == kind, first)


def _ts(text: Column) -> Column:
    # Proto JSON may carry nanoseconds: the cast keeps microseconds (no pattern to match).
    # A time that is not one is null, not an error that stops the job over one line: the
    # file check then leaves that line's file out, naming it.
    return text.try_cast("timestamp")


def _unbase64(text: Column) -> Column:
    """Base64 text as bytes; null where it is not base64 (``unbase64`` would stop the
    job, as Spark's ANSI mode raises on such text)."""
    return F.try_to_binary(text, F.lit("base64"))


def _decode(payloads: Column) -> Column:
    return _unbase64(payloads.getItem(0).getField("data")).cast("string")


def _result_data(closed: Column) -> Column:
    """The base64 text of a close event's result (null for a run that ended without one)."""
    payloads = closed["workflowExecutionCompletedEventAttributes"]["result"]["payloads"]
    return payloads.getItem(0).getField("data")


#: How a result's JSON shows that a leg's arrival was recorded, as the data converter
#: writes it (no spaces): a ``received_at`` with a time, not null.
RECORDED_ARRIVAL = '"received_at":"'
#: How a result's JSON shows that it records the aggregate's rule and timeout (results of
#: older gathers leave them to the start input).
RECORDED_RULE = '"complete_when":"'


def base64_cores(text: str) -> tuple[str, ...]:
    """What the base64 of any bytes holding ``text`` (UTF-8) holds of it: one string per
    offset of ``text`` modulo 3, each made only of characters that ``text``'s bytes alone
    decide (the partial ones at either end are left out)."""
    data = text.encode()
    cores = []
    for k in range(3):
        encoded = base64.b64encode(b"\0" * k + data).decode()
        # Character i stands for bits 6i..6i+6; text's bits are 8k..8(k + len).
        cores.append(encoded[(4 * k + 2) // 3 : 4 * (k + len(data)) // 3])
    return tuple(cores)


def base64_holds(data: Column, text: str) -> Column:
    """Whether the base64 text ``data`` decodes to bytes holding ``text``, without decoding
    it (null data: False).

    A core pins down only some bits of ``text``'s first and last byte. For the marks
    :data:`RECORDED_ARRIVAL` and :data:`RECORDED_RULE` (a key, then ``":"``) that is
    harmless: their inner ``":`` must match in full, which only JSON's own key can do (a
    string value escapes its quotes), and a ``null`` value's ``n`` differs from ``"`` in
    the bits a core keeps."""
    found = [data.contains(core) for core in base64_cores(text)]
    return F.coalesce(found[0] | found[1] | found[2], F.lit(False))


def unreadable_fact() -> Column:
    """On :func:`gather_facts` rows (``every_row``): a closed gather whose record holds a
    value the pass could not read (an event time that is not a time, a result or input
    that is not base64 or not the JSON of one), so that its facts are not to be trusted."""
    return F.col(FACT) & (
        F.col("start_time").isNull()
        | F.col("end_time").isNull()
        | F.col("outcome").isNull()
        | F.col("aggregate").isNull()
        | F.exists(F.map_values("leg_latency_ms"), lambda ms: ms.isNull())
    )


def _since_start_ms(at: Column) -> Column:
    return (F.unix_micros(at) - F.unix_micros("start_time")) / F.lit(1000.0)


def _recorded_latency() -> Column:
    """Leg -> ms from the gather's start to its first reply, as the result records it (a
    reply the bridge got before the server started the gather counts as 0)."""
    return F.map_from_entries(
        F.transform(
            F.filter("r.legs", lambda leg: leg["received"]),
            lambda leg: F.struct(leg["name"].alias("leg"), _not_before_start(leg["received_at"])),
        )
    )


def _not_before_start(at: Column) -> Column:
    # Not greatest(ms, 0), which passes over a null: a time that cannot be read stays null
    # for the file check to find.
    ms = _since_start_ms(_ts(at))
    return F.when(ms < 0, F.lit(0.0)).otherwise(ms).alias("ms")


def _arrivals(signals: Column) -> Column:
    """Every reply of the replies' signals in arrival order, with the signal's time (null
    without signals)."""
    return F.flatten(
        F.transform(
            signals,
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
    )


def _signalled_latency() -> Column:
    """Leg -> ms from the gather's start to the first signal that brought a reply of it
    (for results that do not record arrivals), from the ``arrivals`` column."""
    arrivals = F.col("arrivals")
    named = F.filter(
        F.transform(
            arrivals,
            lambda a, i: F.struct(
                F.coalesce(
                    a["leg"],
                    F.try_element_at("legs_expected", (a["leg_index"] + 1).cast("int")),
                    # Count-only aggregates fill legs in arrival order.
                    F.try_element_at("legs_expected", i + 1),
                ).alias("leg"),
                a["at"].alias("at"),
            ),
        ),
        lambda a: F.array_contains("legs_received", a["leg"]),
    )
    return F.map_from_entries(
        F.transform(
            F.array_distinct(F.transform(named, lambda a: a["leg"])),
            lambda leg: F.struct(
                leg.alias("leg"),
                _since_start_ms(
                    F.array_min(
                        F.transform(F.filter(named, lambda a: a["leg"] == leg), lambda a: a["at"])
                    )
                ).alias("ms"),
            ),
        )
    )


#: What tells one gather's runs apart from another's: its id and the time its history
#: began. A run read twice has the same row twice; a run that a reset started copies the
#: start event of the run it was reset from, time included (continue-as-new starts a
#: history of its own, at its own time).
GATHER_START = ("gather_id", "start_time")


def one_row_per_run(facts: DataFrame) -> DataFrame:
    """Gather facts with each gather counted once: a run read twice gives the same row,
    and of the runs a reset made (they share :data:`GATHER_START`) the one that answered
    first counts. A run with no result (the run a reset terminated) yields to one with a
    result; of runs with results, the earliest to end put the final that stands, and the
    later run (which adopts its outcome) is left out."""
    first = Window.partitionBy(*GATHER_START).orderBy(
        F.col("n_expected") == 0, "end_time", "run_id"
    )
    return facts.withColumn("_nth", F.row_number().over(first)).filter("_nth = 1").drop("_nth")


def gather_facts(
    histories: DataFrame,
    *,
    dedupe: bool = True,
    carry: tuple[str, ...] = (),
    every_row: bool = False,
    signals: bool = True,
) -> DataFrame:
    """One row per closed gather: aggregate, CorrelId, start, end, outcome, legs expected /
    received / missing, completion and per-leg arrival latency (ms from the gather's start),
    duplicates, redeliveries, late and unknown replies, its number of history events, and
    the size of each received leg, their total and how many were held.

    Works per history row with array functions, no joins. Each run counts once (Cloud
    exports are delivered at least once, and an export may be read twice): with
    ``dedupe`` the rows are deduplicated, small as they are, not the histories; a caller
    that knows no run is there twice passes False and saves the shuffle.

    Args:
        carry: columns of ``histories`` passed on to each row as they are.
        every_row: a row for every history row, not only for closed gathers; the
            column :data:`FACT` tells which rows are facts (the others' facts are
            null or meaningless), and :data:`UNRECORDED` which facts' results do not
            record their legs' arrivals. Lets a caller learn about every input row in
            the same pass (the job's file check).
        signals: read the legs' arrivals of results that do not record them (older
            gathers') from the replies' signals. Without, those facts'
            ``leg_latency_ms`` is empty (:data:`UNRECORDED` marks them, for the caller
            to read their files again), and the pass costs less even where every
            result records the arrivals: the signals' branch weighs on it whether or
            not a row takes it.
    """
    events = F.col("history.events")
    close_types = [f"EVENT_TYPE_{t}" for t in CLOSE_TYPES]
    started = _first_start(events)
    # A close event is a run's last. A run that continued as new has none: it is the
    # next run's to report.
    last = F.try_element_at(events, F.lit(-1))
    closed = F.when(last["eventType"].isin(*close_types), last)
    reply_signals = F.filter(
        events,
        lambda e: (
            (e["eventType"] == "EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED")
            & (e["workflowExecutionSignaledEventAttributes"]["signalName"] == SIGNAL_REPLIES)
        ),
    )
    # Only results of older gathers lack each leg's arrival (a "received_at" time), and
    # only theirs need the replies' signals: the others do not copy them along (a
    # signal's payload holds the replies' bodies). The test reads the result's base64
    # text, so the result is decoded once, further on.
    unrecorded_signals = F.when(
        ~base64_holds(_result_data(closed), RECORDED_ARRIVAL), reply_signals
    ).alias("signals")
    start_attributes = started["workflowExecutionStartedEventAttributes"]
    # Only the fields read further on, not the two events whole: the rows between the
    # projections are copied, and a start event holds the aggregate's whole config.
    base = histories.select(
        *carry,
        F.col("workflowId").alias("gather_id"),
        F.col("runId").alias("run_id"),
        F.size(events).alias("events"),
        start_attributes["workflowType"]["name"].alias("workflow_type"),
        started["eventTime"].alias("started_at"),
        closed["eventTime"].alias("closed_at"),
        closed["eventType"].alias("closed_type"),
        _result_data(closed).alias("result_data"),
        # The start input is needed only where the result does not record the rule and
        # the timeout (older gathers', and runs that ended without a result).
        F.when(
            ~base64_holds(_result_data(closed), RECORDED_RULE),
            start_attributes["input"]["payloads"].getItem(0).getField("data"),
        ).alias("input_data"),
        *([unrecorded_signals] if signals else []),
    ).withColumn(
        FACT,
        (F.col("workflow_type") == GATHER_WORKFLOW)
        & F.col("closed_type").isNotNull()
        & F.col("run_id").isNotNull(),
    )
    if not every_row:
        base = base.filter(F.col(FACT))
    base = base.select(
        *carry,
        FACT,
        "gather_id",
        "run_id",
        "events",
        # Decoded here, beside the input and the result: in the projection after it,
        # the decoding would take that projection out of whole-stage code generation.
        *([_arrivals(F.col("signals")).alias("arrivals")] if signals else []),
        _ts(F.col("started_at")).alias("start_time"),
        _ts(F.col("closed_at")).alias("end_time"),
        F.regexp_replace("closed_type", "^EVENT_TYPE_WORKFLOW_EXECUTION_", "").alias("closed"),
        F.from_json(_unbase64(F.col("input_data")).cast("string"), _INPUT).alias("input"),
        F.from_json(_unbase64(F.col("result_data")).cast("string"), _RESULT).alias("r"),
    )
    empty = F.array().cast("array<string>")
    facts = base.select(
        *carry,
        FACT,
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
        (F.coalesce("input.aggregate.timeout_seconds", "r.timeout_seconds") * 1000.0).alias(
            "timeout_ms"
        ),
        # Sizes come with the result (gathers of older versions have none: empty, 0).
        F.coalesce(
            F.map_from_entries(
                F.transform(
                    F.filter("r.legs", lambda leg: leg["received"]),
                    lambda leg: F.struct(leg["name"], leg["bytes"]),
                )
            ),
            F.create_map().cast("map<string,bigint>"),
        ).alias("leg_bytes"),
        F.when(F.col("r.legs").isNull(), F.lit(0))
        .otherwise(F.size(F.filter("r.legs", lambda leg: leg["held"])))
        .alias("held_legs"),
        # Requests per leg, the first included (older gathers: none recorded, so 1).
        F.coalesce(
            F.map_from_entries(
                F.transform(
                    "r.legs",
                    lambda leg: F.struct(leg["name"], F.coalesce(leg["attempts"], F.lit(1))),
                )
            ),
            F.create_map().cast("map<string,bigint>"),
        ).alias("leg_attempts"),
        F.coalesce("input.aggregate.complete_when", "r.complete_when", F.lit("all")).alias(
            "complete_when"
        ),
        F.coalesce("r.closed_by", F.lit("")).alias("closed_by"),
        *(["arrivals"] if signals else []),
        "r",
    )
    # Each leg's arrival: recorded in the result (when the bridge got its first reply);
    # results of older gathers lack it, and only theirs are read from the replies'
    # signals, which means decoding every reply's payload, bodies included.
    # (size of a filter rather than forall: forall would take the projection out of
    # whole-stage code generation)
    unrecorded = F.filter("r.legs", lambda leg: leg["received"] & leg["received_at"].isNull())
    recorded = F.col("r.legs").isNotNull() & (F.size(unrecorded) == 0)
    latency = F.when(recorded, _recorded_latency())
    if signals:
        latency = latency.otherwise(_signalled_latency())
    facts = (
        facts.withColumn(
            "leg_latency_ms", F.coalesce(latency, F.create_map().cast("map<string,double>"))
        )
        # A run that ended without a result has no received legs: no arrivals to read.
        .withColumn(UNRECORDED, F.col("r").isNotNull() & ~recorded)
        .drop("arrivals", "r")
    )
    facts = facts.select(
        *carry,
        *([FACT, UNRECORDED] if every_row else []),
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
        "leg_latency_ms",
        "duplicates",
        "redeliveries",
        "late",
        "unknown",
        "events",
        "timeout_ms",
        "leg_bytes",
        F.aggregate(F.map_values("leg_bytes"), F.lit(0).cast("bigint"), lambda a, b: a + b).alias(
            "reply_bytes"
        ),
        "held_legs",
        "leg_attempts",
        F.aggregate(
            F.map_values("leg_attempts"), F.lit(0).cast("bigint"), lambda a, b: a + b - 1
        ).alias("rerequests"),
        "complete_when",
        "closed_by",
    )
    return one_row_per_run(facts) if dedupe else facts


def ordered(frame: DataFrame, *keys: Column | str) -> DataFrame:
    """``frame`` sorted by ``keys`` in one partition: for the few rows of a trend or a
    summary, which a global sort would first sample (a job of its own) to split."""
    return frame.coalesce(1).sortWithinPartitions(*keys)


def _window_start(window: str, column: str = "end_time") -> Column:
    return F.window(column, window).getField("start").alias("window_start")


_P50_95 = (0.5, 0.95)
_P50_95_99 = (0.5, 0.95, 0.99)


def _percentiles(column: Column | str) -> Column:
    """The aggregation that :func:`_percentile_columns` reads percentiles off (as
    ``"p"``): the group's values sorted, nulls left out. One sort per group costs less
    than Spark's exact ``percentile``, which counts each distinct value in a map."""
    return F.array_sort(F.collect_list(column))


def _percentile_columns(qs: tuple[float, ...], prefix: str = "") -> list[Column]:
    """Exact percentiles ``<prefix>p50_ms``... off the sorted values ``"p"``, interpolated
    between the two nearest ranks as Spark's ``percentile`` does (null for no values)."""
    values = F.col("p")
    last = F.size(values) - 1
    columns = []
    for q in qs:
        position = last * F.lit(q)
        lower, upper = F.floor(position), F.ceil(position)
        below, above = F.get(values, lower.cast("int")), F.get(values, upper.cast("int"))
        value = (upper - position) * below + (position - lower) * above
        columns.append(
            F.when(last < 0, F.lit(None))
            .when(lower == upper, below)
            .otherwise(value)
            .alias(f"{prefix}p{round(q * 100)}_ms")
        )
    return columns


def _most_missed(missing: Column) -> list[Column]:
    """From every missing leg of a group's gathers (one array): the leg missing from the
    most gathers (ties: the first name; null for none) and in how many."""
    counted = F.transform(
        F.array_distinct(missing),
        lambda leg: F.struct(
            (-F.size(F.filter(missing, lambda x: x == leg))).alias("n"), leg.alias("leg")
        ),
    )
    # Structs order by their fields: the most gathers first, then the first name.
    top = F.array_min(counted)
    return [
        top["leg"].alias("most_missed_leg"),
        F.coalesce(-top["n"], F.lit(0)).alias("most_missed_count"),
    ]


_OUTCOME_COLUMNS = {
    "completed": "COMPLETE", "timed_out": "TIMEOUT", "released": "RELEASED",
    "cancelled": "CANCELLED", "failed": "FAILED",
}  # fmt: skip


def _summary(grouped: GroupedData, extra: dict[str, Column]) -> DataFrame:
    """What :func:`summarise` gives, per group of ``grouped`` (its keys come first)."""
    completed_ms = F.when(F.col("outcome") == "COMPLETE", F.col("completion_ms"))
    return grouped.agg(
        F.count("*").alias("gathers"),
        *(column.alias(name) for name, column in extra.items()),
        *(
            F.sum((F.col("outcome") == o).cast("long")).alias(c)
            for c, o in _OUTCOME_COLUMNS.items()
        ),
        _percentiles(completed_ms).alias("p"),
        F.sum("late").alias("late"),
        F.sum("duplicates").alias("duplicates"),
        F.sum("unknown").alias("unknown"),
        F.flatten(F.collect_list("legs_missing")).alias("missing"),
    )


def _summary_columns(extra: dict[str, Column]) -> list[Column | str]:
    return [
        *extra,
        "gathers",
        *_OUTCOME_COLUMNS,
        (F.col("timed_out") / F.col("gathers")).alias("timeout_rate"),
        *_percentile_columns(_P50_95_99),
        "late",
        "duplicates",
        "unknown",
        *_most_missed(F.col("missing")),
    ]


def summarise(
    frame: DataFrame, keys: list[str], extra: dict[str, Column] | None = None
) -> DataFrame:
    """Per group of ``keys`` (one row for none): gathers, each outcome's count, the
    timeout rate, exact p50/p95/p99 completion latency of completed gathers, late,
    duplicate and unknown replies, and the most-missed leg with how many gathers missed
    it (and the ``extra`` aggregations, after the keys)."""
    extra = extra or {}
    return _summary(frame.groupBy(*keys), extra).select(*keys, *_summary_columns(extra))


#: The levels of :func:`summaries`: per trend window and aggregate, per aggregate,
#: over all the data, and per aggregate and outcome.
BY_WINDOW, BY_AGGREGATE, OVERALL, BY_OUTCOME = "window", "aggregate", "all", "outcome"
#: Each level's keys.
LEVEL_KEYS = {
    BY_WINDOW: ("window_start", "aggregate"),
    BY_AGGREGATE: ("aggregate",),
    OVERALL: (),
    BY_OUTCOME: ("aggregate", "outcome"),
}


#: What every level of :func:`summaries` adds to :func:`summarise`'s columns: each
#: column's aggregation and the fact column it reads. Each is its own merge (the minimum
#: of minima, the sum of sums), which lets :func:`summaries` roll groups up.
_SPAN = {
    "first_start": (F.min, "start_time"),
    "first_end": (F.min, "end_time"),
    "last_end": (F.max, "end_time"),
    "events": (F.sum, "events"),
    "rerequests": (F.sum, "rerequests"),
}


def span_aggregations() -> dict[str, Column]:
    """What every level of :func:`summaries` adds to :func:`summarise`'s columns."""
    return {name: how(column) for name, (how, column) in _SPAN.items()}


def summaries(facts: DataFrame, window: str = "1 hour") -> DataFrame:
    """:func:`summarise` at every level of :data:`LEVEL_KEYS` in one query, with the
    data's span, events and re-requests; the column ``level`` names each row's level,
    and the keys a level does not group by are null.

    The facts are aggregated once, per window, aggregate and outcome (every level's
    keys), keeping each group's completion latencies and missing legs as lists; the
    levels are then grouping sets over those few rows, merging the lists. Grouping sets
    over the facts themselves would aggregate every fact once per level."""
    keys = ["window_start", "aggregate", "outcome"]
    counts = ("late", "duplicates", "unknown")
    completed_ms = F.when(F.col("outcome") == "COMPLETE", F.col("completion_ms"))
    fine = (
        facts.withColumn("window_start", _window_start(window))
        .groupBy(*keys)
        .agg(
            F.count("*").alias("gathers"),
            *(column.alias(name) for name, column in span_aggregations().items()),
            *(F.sum(c).alias(c) for c in counts),
            # collect_list leaves out the nulls: the gathers that did not complete.
            F.collect_list(completed_ms).alias("p"),
            F.flatten(F.collect_list("legs_missing")).alias("missing"),
        )
    )
    span = {
        **{name: how(name) for name, (how, _) in _SPAN.items()},
        # grouping_id(): a bit per key, set where the row is not grouped by it.
        "grouping": F.grouping_id(*keys),
    }
    merged = fine.groupingSets([list(k) for k in LEVEL_KEYS.values()], *keys).agg(
        F.sum("gathers").alias("gathers"),
        *(column.alias(name) for name, column in span.items()),
        *(
            F.sum(F.when(F.col("outcome") == o, F.col("gathers")).otherwise(0)).alias(c)
            for c, o in _OUTCOME_COLUMNS.items()
        ),
        F.array_sort(F.flatten(F.collect_list("p"))).alias("p"),
        *(F.sum(c).alias(c) for c in counts),
        F.flatten(F.collect_list("missing")).alias("missing"),
    )
    gid = F.col("grouping")
    level = F.lit(None).cast("string")
    for name, grouped_by in LEVEL_KEYS.items():
        bits = sum(1 << (len(keys) - 1 - i) for i, k in enumerate(keys) if k not in grouped_by)
        level = F.when(gid == bits, F.lit(name)).otherwise(level)
    return merged.select(level.alias("level"), *keys, *_summary_columns(span)).drop("grouping")


#: The columns of the trends per window, after their keys.
TREND_COLUMNS = [
    "gathers", *_OUTCOME_COLUMNS, "timeout_rate", "p50_ms", "p95_ms", "p99_ms", "late",
    "duplicates", "unknown", "most_missed_leg", "most_missed_count",
]  # fmt: skip
#: The columns the job reports of a level of :func:`summaries`, after its keys: per
#: window and aggregate the trends; per aggregate, the data's time range too; per
#: aggregate and outcome, the count (the overall row is read whole).
LEVEL_COLUMNS = {
    BY_WINDOW: TREND_COLUMNS,
    BY_AGGREGATE: ["first_start", "last_end", *TREND_COLUMNS],
    BY_OUTCOME: ["gathers"],
}


def leg_trends(facts: DataFrame, window: str = "1 hour") -> DataFrame:
    """Per window, aggregate and leg: arrivals and exact p50/p95 arrival latency."""
    rows = (
        facts.select(
            _window_start(window),
            "aggregate",
            F.explode("leg_latency_ms").alias("leg", "latency_ms"),
        )
        .groupBy("window_start", "aggregate", "leg")
        .agg(
            F.count("*").alias("arrivals"),
            _percentiles("latency_ms").alias("p"),
        )
        .select(
            "window_start",
            "aggregate",
            "leg",
            "arrivals",
            *_percentile_columns(_P50_95),
        )
    )
    return ordered(rows, "window_start", "aggregate", "leg")


#: Outcomes in the order the report lists them; others (TERMINATED...) follow.
OUTCOMES = ("COMPLETE", "TIMEOUT", "RELEASED", "CANCELLED", "FAILED", "UNKNOWN")
#: The columns of :func:`batch_facts`, in order: the facts of a run without collectors
#: are written with this schema and no Spark job.
BATCH_FACTS_SCHEMA = StructType(
    [
        *(StructField(name, StringType()) for name in
          ("collector", "destination", "workflow_id", "run_id")),
        *(StructField(name, LongType()) for name in
          ("batch", "messages", "failed", "size_bytes")),
        *(StructField(name, StringType()) for name in ("reason", "target_queue", "format")),
        *(StructField(name, TimestampType()) for name in
          ("first_received_at", "opened_at", "closed_at", "put_at")),
        StructField("open_ms", DoubleType()),
        StructField("wait_ms", DoubleType()),
    ]
)  # fmt: skip
#: The keys of :func:`destination_summary` and :func:`batch_trends`.
DESTINATION_KEYS = ["collector", "destination"]
BATCH_TREND_KEYS = ["window_start", *DESTINATION_KEYS]


def batch_facts(histories: DataFrame) -> DataFrame:
    """One row per batch a collector PUT: collector, destination, batch number, messages
    (and of them sent to the failure queue), input bytes, close reason, target queue and
    format, when it opened, closed and was PUT, ``open_ms`` (open to close) and
    ``wait_ms`` (from its first message's arrival at the bridge to the PUT).

    Read from each PUT's local-activity marker, so any collector run counts, whether it
    continued as new, was terminated or is still running.
    """
    events = F.col("history.events")
    started = _first_start(events)
    markers = F.filter(events, lambda e: e["eventType"] == "EVENT_TYPE_MARKER_RECORDED")
    marker = F.col("m.markerRecordedEventAttributes.details")
    complete = F.col("d.complete_time")
    put_at = F.coalesce(
        F.timestamp_micros(complete["seconds"] * 1_000_000 + F.floor(complete["nanos"] / 1000)),
        F.col("recorded_at"),
    )
    rows = (
        histories.select(
            F.col("workflowId").alias("workflow_id"),
            F.col("runId").alias("run_id"),
            started.alias("s"),
            markers.alias("markers"),
        )
        .filter(
            F.col("s.workflowExecutionStartedEventAttributes.workflowType.name") == COLLECT_WORKFLOW
        )
        .select(
            "workflow_id",
            "run_id",
            F.from_json(
                _decode(F.col("s.workflowExecutionStartedEventAttributes.input.payloads")),
                _COLLECTOR,
            ).alias("input"),
            F.explode("markers").alias("m"),
        )
        .select(
            "workflow_id",
            "run_id",
            "input",
            _ts(F.col("m.eventTime")).alias("recorded_at"),
            F.from_json(_decode(marker["data"]["payloads"]), _LOCAL_ACTIVITY).alias("d"),
            F.from_json(_decode(marker["result"]["payloads"]), _PUT).alias("r"),
        )
        .filter((F.col("d.activity_type") == ACTIVITY_PUT_BATCH) & F.col("r.batch").isNotNull())
    )
    b = F.col("r.batch")
    return (
        rows.select(
            F.col("input.collector.name").alias("collector"),
            F.col("input.destination").alias("destination"),
            "workflow_id",
            "run_id",
            b["number"].alias("batch"),
            b["messages"].alias("messages"),
            F.coalesce("r.failed", F.lit(0)).alias("failed"),
            b["size_bytes"].alias("size_bytes"),
            b["reason"].alias("reason"),
            b["target_queue"].alias("target_queue"),
            b["format"].alias("format"),
            _ts(b["first_received_at"]).alias("first_received_at"),
            _ts(b["opened_at"]).alias("opened_at"),
            _ts(b["closed_at"]).alias("closed_at"),
            put_at.alias("put_at"),
            # An older collector's batch records no first arrival: its wait counts from
            # the opening. One recorded and unreadable leaves the wait null.
            F.when(b["first_received_at"].isNull(), _ts(b["opened_at"]))
            .otherwise(_ts(b["first_received_at"]))
            .alias("waited_from"),
        )
        # The same batch in two files (an export read twice), or in the history of a
        # run that a reset started (a copy of the run before, up to the reset, markers
        # and their times included), counts once; a batch that run put anew under the
        # same number, at its own time, counts as its own.
        .dropDuplicates(["workflow_id", "batch", "put_at"])
        .withColumn("open_ms", _millis_between("opened_at", "closed_at"))
        .withColumn(
            "wait_ms",
            (F.unix_micros("put_at") - F.unix_micros("waited_from")) / F.lit(1000.0),
        )
        # Held to the declared schema (each cast a no-op where the type already agrees).
        .select(*(F.col(f.name).cast(f.dataType) for f in BATCH_FACTS_SCHEMA.fields))
    )


def unreadable_batch() -> Column:
    """On :func:`batch_facts` rows: a batch whose record holds a value the pass could not
    read (a time that is not one, a collector's input that does not decode)."""
    return (
        F.col("collector").isNull()
        | F.col("opened_at").isNull()
        | F.col("closed_at").isNull()
        | F.col("put_at").isNull()
        | F.col("wait_ms").isNull()  # a first arrival recorded and unreadable
    )


#: The names of :func:`batch_summary`'s wait percentiles.
_WAIT_PERCENTILES = tuple(f"wait_p{round(q * 100)}_ms" for q in _P50_95_99)


def batch_summary_columns(keys: list[str], extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The columns of :func:`batch_summary` for these ``keys`` and ``extra`` names."""
    return [
        *keys,
        *extra,
        "batches",
        "messages",
        "failed",
        "messages_per_batch",
        "bytes",
        *(f"by_{r}" for r in CLOSE_REASONS),
        *_WAIT_PERCENTILES,
        "max_wait_ms",
    ]


def batch_summary(
    frame: DataFrame, keys: list[str], extra: dict[str, Column] | None = None
) -> DataFrame:
    """Per group of ``keys`` (one row for none): batches, messages, the failed ones,
    messages per batch, bytes, batches per close reason, exact p50/p95/p99 and the longest
    wait (and the ``extra`` aggregations, after the keys)."""
    extra = extra or {}
    summary = frame.groupBy(*keys).agg(
        F.count("*").alias("batches"),
        *(column.alias(name) for name, column in extra.items()),
        F.sum("messages").alias("messages"),
        F.sum("failed").alias("failed"),
        F.avg("messages").alias("messages_per_batch"),
        F.sum("size_bytes").alias("bytes"),
        *(F.sum((F.col("reason") == r).cast("long")).alias(f"by_{r}") for r in CLOSE_REASONS),
        _percentiles("wait_ms").alias("p"),
        F.max("wait_ms").alias("max_wait_ms"),
    )
    # The wait's percentiles are computed off the sorted waits; every other column is
    # selected as aggregated, in the order of the one list of columns.
    computed = dict(zip(_WAIT_PERCENTILES, _percentile_columns(_P50_95_99, "wait_"), strict=True))
    summary = summary.select(*(computed.get(c, c) for c in batch_summary_columns(keys, [*extra])))
    return ordered(summary, *keys) if keys else summary


def batch_trends(batches: DataFrame, window: str = "1 hour") -> DataFrame:
    """Per time window (of the PUT), collector and destination: what
    :func:`destination_summary` gives over all the data."""
    windowed = batches.withColumn("window_start", _window_start(window, "put_at"))
    return batch_summary(windowed, BATCH_TREND_KEYS)


def destination_summary(batches: DataFrame) -> DataFrame:
    """Per collector and destination: batches, messages (failed ones apart), messages per
    batch, bytes, batches closed by count / bytes / delay / release, and the wait of the
    first message (arrival at the bridge to the PUT): p50/p95/p99 and longest."""
    return batch_summary(batches, DESTINATION_KEYS)
