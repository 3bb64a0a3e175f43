"""The analytics job: gather and collector histories -> facts (Parquet), trends (CSV),
charts (PNG) and an HTML report. Run it as ``mqgather analyze PATH`` or with spark-submit:

    spark-submit --master spark://host:7077 analytics/job.py exports/ --out analytics-out
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, cast
from urllib.parse import unquote, urlsplit

import pandas as pd
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from analytics.advisor import leg_deadlines, timeout_advice
from analytics.histories import collect
from analytics.report import (
    ReportData,
    batch_charts,
    charts,
    html_report,
    millis,
    percent,
    when,
    write_csv,
)
from analytics.transforms import (
    BATCH_FACTS_SCHEMA,
    BATCH_TREND_KEYS,
    BY_AGGREGATE,
    BY_OUTCOME,
    BY_WINDOW,
    CLOSE_REASONS,
    CORRUPT,
    DESTINATION_KEYS,
    FACT,
    GATHER_START,
    LEVEL_COLUMNS,
    LEVEL_KEYS,
    OVERALL,
    RAW_SCHEMA,
    UNRECORDED,
    batch_facts,
    batch_summary,
    batch_summary_columns,
    batch_trends,
    destination_summary,
    gather_facts,
    leg_trends,
    one_row_per_run,
    summaries,
    unreadable_batch,
    unreadable_fact,
)
from analytics.windows import pick_window, window_seconds
from mqgather.names import GATHER_ID_PREFIX
from mqgather.runtime.codec import PayloadCipher, load_key_ring

#: Trend queries run side by side (each is small; see :func:`analyze`).
QUERY_THREADS = 4
#: Fact columns with a value of their own per gather: written without a Parquet
#: dictionary, which the writer would build for each and then drop (a third of its CPU).
UNIQUE_FACT_COLUMNS = ("gather_id", "run_id", "correl_id", "start_time", "end_time",
                       "completion_ms")  # fmt: skip


@dataclass
class Analysis:
    """What a run produced."""

    out: Path
    summary: dict[str, Any]
    skipped: dict[str, str] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)


def _to_pandas(frame: DataFrame) -> pd.DataFrame:
    return cast(pd.DataFrame, frame.toPandas())


def spark_session(
    master: str | None = "local[*]", app: str = "mqgather-analytics", java_options: str = ""
) -> SparkSession:
    """A SparkSession in UTC with a shuffle size that suits one machine.

    ``master=None`` keeps the master spark-submit set (local[*] when there is none);
    ``java_options`` go to the driver's JVM (a profiler's, say), when it starts here.
    """
    builder = SparkSession.builder if master is None else SparkSession.builder.master(master)
    if java_options:
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
    spark = (
        builder.appName(app)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        # Split large export files so every core parses JSON.
        .config("spark.sql.files.maxPartitionBytes", str(32 * 1024 * 1024))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@dataclass
class Checked:
    """What the pass over the export files found of the files."""

    good: list[str]
    skipped: dict[str, str]
    #: The good files that hold a history other than a gather's (a collector's, say).
    not_only_gathers: list[str]
    #: The good files that hold a gather whose result does not record its legs'
    #: arrivals (an older gather's): read again, with the replies' signals.
    unrecorded: list[str] = field(default_factory=list)
    #: The skipped files as Spark names them.
    bad_uris: list[str] = field(default_factory=list)
    #: When the good files' first and last gathers ended (None: no gathers).
    first_end: datetime | None = None
    last_end: datetime | None = None


# Columns of the job's pass over the lines: where each line came from, and what it is.
_FILE, _BAD, _OTHER = "_file", "_bad_line", "_not_a_gather"
#: What a line's row holds beside a gather's facts.
_LINE_COLUMNS = (_FILE, _BAD, _OTHER, FACT, UNRECORDED)


def read_lines(spark: SparkSession, files: list[str]) -> DataFrame:
    """Every line of export NDJSON ``files`` as a history record, a corrupt or truncated
    one included (its fields null), with its file's URI and two flags: ``_bad_line``
    (not a history record: not JSON, or without its workflow or run id) and
    ``_not_a_gather`` (a history other than a gather's).
    ``files`` holds one file at least."""
    return (
        spark.read.schema(RAW_SCHEMA)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json(files)
        .select(
            "*",
            F.input_file_name().alias(_FILE),
            # A record without its run id cannot be counted once per run.
            (
                F.col(CORRUPT).isNotNull() | F.col("workflowId").isNull() | F.col("runId").isNull()
            ).alias(_BAD),
            (~F.coalesce(F.col("workflowId").startswith(GATHER_ID_PREFIX), F.lit(False))).alias(
                _OTHER
            ),
        )
    )


def line_facts(spark: SparkSession, files: list[str], *, signals: bool = False) -> DataFrame:
    """The job's one pass over export NDJSON files: a row per line, with the line's
    file and flags (see :func:`read_lines`) and, for a closed gather, its facts (the
    column ``FACT`` tells which). Without ``signals``, the facts of results that do not
    record their legs' arrivals lack them (``UNRECORDED`` tells which: see
    :func:`unrecorded_facts`)."""
    return gather_facts(
        read_lines(spark, files),
        dedupe=False,
        carry=(_FILE, _BAD, _OTHER),
        every_row=True,
        signals=signals,
    )


def check_files(lines: DataFrame, files: list[str]) -> Checked:
    """From :func:`line_facts` rows: a file with a corrupt or truncated line is reported by
    name and left out entirely; and which files hold more than gathers."""
    ended = F.when(F.col(FACT), F.col("end_time"))
    per_file = lines.groupBy(_FILE).agg(
        F.max(_BAD).alias("corrupt"),
        F.max(unreadable_fact()).alias("unreadable"),
        F.max(_OTHER).alias("others"),
        F.max(F.col(FACT) & F.col(UNRECORDED)).alias("unrecorded"),
        F.min(ended).alias("first_end"),
        F.max(ended).alias("last_end"),
    )
    rows = per_file.collect()
    # Spark names a file by a URI that escapes some characters and not others (a space,
    # not an accented letter): matched to the inputs by the path it stands for.
    by_path = {_local_path(row[_FILE]): row for row in rows}
    found = {f: by_path.get(str(Path(f).absolute())) for f in files}
    why = {f: reason for f, row in found.items() if row and (reason := _bad_file(row))}
    good = [f for f in found if f not in why]
    kept = [row for row in rows if not _bad_file(row)]
    firsts = [r["first_end"] for r in kept if r["first_end"] is not None]
    lasts = [r["last_end"] for r in kept if r["last_end"] is not None]
    return Checked(
        first_end=min(firsts, default=None),
        last_end=max(lasts, default=None),
        good=good,
        skipped=why,
        # A file Spark gave no row for (an empty one) can hold nothing; one whose name
        # did not match is read again, to be safe.
        not_only_gathers=[f for f in good if (row := found[f]) is None or row["others"]],
        unrecorded=[f for f in good if (row := found[f]) is not None and row["unrecorded"]],
        bad_uris=sorted(row[_FILE] for row in rows if _bad_file(row)),
    )


def _bad_file(row: Row) -> str:
    """Why :func:`check_files` leaves the file of this per-file row out ("" to keep it)."""
    if row["corrupt"]:
        return "corrupt or truncated line (not a history record)"
    if row["unreadable"]:
        return (
            "a gather's record holds a value that cannot be read (an event time that is "
            "not a time, a result or input that does not decode): the file was altered "
            "or damaged"
        )
    return ""


def unrecorded_facts(spark: SparkSession, checked: Checked) -> DataFrame | None:
    """The facts of the gathers whose results do not record their legs' arrivals, read
    again from their files (:attr:`Checked.unrecorded`, good files only) with the
    replies' signals; None where there are none."""
    if not checked.unrecorded:
        return None
    again = line_facts(spark, checked.unrecorded, signals=True)
    return again.filter(F.col(FACT) & F.col(UNRECORDED)).drop(*_LINE_COLUMNS)


def good_facts(
    lines: DataFrame, checked: Checked, unrecorded: DataFrame | None = None
) -> DataFrame:
    """The gather facts of :func:`line_facts` rows, from the good files only; those
    whose results do not record their legs' arrivals replaced by ``unrecorded`` (from
    :func:`unrecorded_facts`), where given."""
    facts = lines.filter(F.col(FACT))
    if checked.bad_uris:
        facts = facts.filter(~F.col(_FILE).isin(checked.bad_uris))
    if unrecorded is not None:
        facts = facts.filter(~F.col(UNRECORDED))
    facts = facts.drop(*_LINE_COLUMNS)
    return facts if unrecorded is None else facts.unionByName(unrecorded)


def level_rows(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    """One level of :func:`~analytics.transforms.summaries`' rows (as pandas): its keys
    and :data:`~analytics.transforms.LEVEL_COLUMNS`, ordered by its keys."""
    keys = list(LEVEL_KEYS[name])
    rows = frame[frame["level"] == name].sort_values(keys, kind="stable")
    return rows[keys + LEVEL_COLUMNS[name]].reset_index(drop=True)


def _totals(frame: pd.DataFrame) -> dict[str, Any]:
    """The overall row of :func:`~analytics.transforms.summaries`' rows, as Python values
    (None where null); with no gathers, counts of 0 and nothing else."""
    rows = frame[frame["level"] == OVERALL]
    if not len(rows):
        return {c: 0 if c == "gathers" else None for c in frame.columns}
    row = rows.iloc[0].to_dict()
    return {
        k: None if pd.isna(v) else v.to_pydatetime() if isinstance(v, pd.Timestamp) else v
        for k, v in row.items()
    }


#: The aggregations over every batch that the run's summary adds to
#: :func:`~analytics.transforms.batch_summary`'s, by name (made when asked: a column
#: needs a running Spark).
_BATCH_TOTALS: dict[str, Callable[[], Column]] = {
    "destinations": lambda: F.countDistinct("collector", "destination"),
    "first_put": lambda: F.min("put_at"),
    "last_put": lambda: F.max("put_at"),
}


def write_empty_parquet(schema: StructType, where: Path) -> None:
    """Write a Parquet dataset of no rows with ``schema`` at ``where`` (replacing it), as
    Spark writes one, without a Spark job (which would plan and run one for nothing)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import to_arrow_schema

    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    table = pa.Table.from_batches([], to_arrow_schema(schema, timezone="UTC"))
    # Timestamps as Spark writes them (INT96), so every reader gets the same types.
    pq.write_table(table, where / "part-00000.snappy.parquet", compression="snappy",
                   use_deprecated_int96_timestamps=True)  # fmt: skip
    (where / "_SUCCESS").touch()


def write_parquet(frame: DataFrame, where: Path, unique: tuple[str, ...] = ()) -> None:
    """Write ``frame`` to Parquet at ``where`` (replacing it), its ``unique`` columns
    without a dictionary."""
    writer = frame.write.mode("overwrite")
    for column in unique:
        writer = writer.option(f"parquet.enable.dictionary#{column}", "false")
    writer.parquet(str(where))


def repeated_runs(facts: DataFrame, digest: Callable[..., Column] = F.xxhash64) -> bool:
    """Whether some gather has more than one fact row: a run read twice (Cloud exports
    are delivered at least once, and an export may be read twice), or the runs of a
    gather that a reset started again (:data:`~analytics.transforms.GATHER_START`).
    Asked of the small fact rows, not the histories.

    The keys are compared by their 64-bit ``digest`` first, which moves a long per row
    instead of an id and a time: a gather there twice digests alike twice, so no shared
    digest means none is. Two that share one (about once in 4 * 10^7 jobs of a million
    gathers) only send the question on to the keys themselves."""

    def repeated(*key: Column) -> bool:
        return bool(facts.groupBy(*key).count().filter("count > 1").take(1))

    keys = tuple(F.col(c) for c in GATHER_START)
    return repeated(digest(*keys)) and repeated(*keys)


def _local_path(uri: str) -> str:
    """The local path a file URI of Spark's stands for."""
    return unquote(urlsplit(uri).path) if "://" in uri else str(Path(uri).absolute())


def read_histories(spark: SparkSession, files: list[str]) -> DataFrame:
    """The history records of ``files`` (checked by :func:`check_files`)."""
    if not files:
        return spark.createDataFrame([], RAW_SCHEMA).drop(CORRUPT)
    return spark.read.schema(RAW_SCHEMA).json(files).drop(CORRUPT)


def analyze(
    spark: SparkSession,
    inputs: list[Path],
    out: Path,
    *,
    window: str | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> Analysis:
    """Run the whole job; returns the summary printed at the end.

    Args:
        window: the trend window (e.g. "15 minutes"); None picks one from the data's span.
    """
    if window is not None:
        window_seconds(window)  # a window Spark cannot take fails here, before any read
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    staging = out / "_staging"
    progress("reading inputs")
    found = collect(inputs, staging, PayloadCipher(load_key_ring()), progress=progress)
    if not found.ndjson:
        raise FileNotFoundError(f"no readable history files under {', '.join(map(str, inputs))}")
    progress("gather facts")
    # One pass over the lines: every line gives a small row (a closed gather's facts, or
    # nothing but its file and flags); the histories are never cached or shuffled, only
    # these rows are, and the file check, the facts and their deduplication (only when
    # needed) are asked of them.
    # As many partitions as a shuffle makes: the many small queries that follow each pay
    # per partition, and the input's split is for parsing, not for the facts.
    parts = int(spark.conf.get("spark.sql.shuffle.partitions") or 4)
    lines = line_facts(spark, found.ndjson).coalesce(parts).cache()
    checked = check_files(lines, found.ndjson)
    skipped = {**found.skipped, **checked.skipped}
    # Older gathers' results do not record their legs' arrivals: only their files are
    # read again, with the replies' signals, and those facts cached beside the others.
    unrecorded = unrecorded_facts(spark, checked)
    if unrecorded is not None:
        progress(
            f"reading {len(checked.unrecorded)} file(s) again for older gathers' "
            "leg arrivals (their results do not record them)"
        )
        unrecorded = unrecorded.coalesce(parts).cache()
    facts = good_facts(lines, checked, unrecorded)
    deduplicated = repeated_runs(facts)
    folded = 0
    if deduplicated:
        every = facts.count()
        facts = one_row_per_run(facts).coalesce(parts).cache()
        folded = every - facts.count()
    facts_dir = out / "facts"
    progress("batch facts")
    # Only the files that hold more than gathers can hold a collector's history. Without
    # such files the batch queries' answers are known (empty): neither planned nor asked,
    # and the empty batch facts written without Spark.
    batches: DataFrame | None = None
    batch_totals: dict[str, Any] = dict.fromkeys(batch_summary_columns([], list(_BATCH_TOTALS)))
    every_batch: DataFrame | None = None
    unreadable: list[str] = []
    if checked.not_only_gathers:
        every_batch = batch_facts(read_histories(spark, checked.not_only_gathers)).cache()
        unread = every_batch.filter(unreadable_batch()).select("workflow_id").collect()
        unreadable = [row[0] for row in unread]
        batches = every_batch.filter(~unreadable_batch())
        aggregations = {name: make() for name, make in _BATCH_TOTALS.items()}
        totals_row = batch_summary(batches, [], aggregations).first()
        if totals_row is not None:
            batch_totals = totals_row.asDict()
    batches_dir = out / "batch_facts"
    facts_done = time.perf_counter()
    progress("trends")
    picked = window is None
    if window is None:
        if checked.first_end and checked.last_end:
            span = (checked.last_end - checked.first_end).total_seconds()
        elif batch_totals["last_put"]:
            span = (batch_totals["last_put"] - batch_totals["first_put"]).total_seconds()
        else:
            span = 0
        window = pick_window(span)
    # Writing the facts and the batches, and a few queries over them (cached), each mostly
    # the driver's planning and a couple of short stages: run side by side, one's planning
    # overlaps another's tasks.
    queries: dict[str, DataFrame] = {
        "summaries": summaries(facts, window),
        "legs": leg_trends(facts, window),
        "advice": timeout_advice(facts),
    }
    if batches is not None:
        queries["destinations"] = destination_summary(batches)
        queries["batch_trends"] = batch_trends(batches, window)
    with ThreadPoolExecutor(QUERY_THREADS, thread_name_prefix="analytics-query") as pool:
        written = [pool.submit(write_parquet, facts, facts_dir, UNIQUE_FACT_COLUMNS)]
        if batches is None:
            write_empty_parquet(BATCH_FACTS_SCHEMA, batches_dir)
        else:
            written.append(pool.submit(write_parquet, batches, batches_dir))
        done = dict(zip(queries, pool.map(_to_pandas, queries.values()), strict=True))
        for write in written:
            write.result()
    if deduplicated:
        lines.unpersist()  # the deduplicated rows are cached apart
    done.setdefault("destinations", pd.DataFrame(columns=batch_summary_columns(DESTINATION_KEYS)))
    done.setdefault("batch_trends", pd.DataFrame(columns=batch_summary_columns(BATCH_TREND_KEYS)))
    levels: pd.DataFrame = done["summaries"]
    trend_df = level_rows(levels, BY_WINDOW)
    per_aggregate = level_rows(levels, BY_AGGREGATE).fillna({"most_missed_leg": ""})
    outcome_df = level_rows(levels, BY_OUTCOME).rename(columns={"gathers": "count"})
    totals = _totals(levels)
    leg_df: pd.DataFrame = done["legs"]
    advice_df: pd.DataFrame = done["advice"]
    destination_df: pd.DataFrame = done["destinations"]
    batch_trend_df: pd.DataFrame = done["batch_trends"]
    write_csv(destination_df, out / "destinations.csv")
    write_csv(batch_trend_df, out / "batch_trends.csv")
    write_csv(trend_df, out / "trends.csv")
    write_csv(leg_df, out / "leg_trends.csv")
    write_csv(advice_df, out / "advice.csv")
    outcomes = {str(k): int(v) for k, v in outcome_df.groupby("outcome")["count"].sum().items()}
    trends_done = time.perf_counter()
    gathers = int(totals["gathers"] or 0)
    timed_out = outcomes.get("TIMEOUT", 0)
    summary: dict[str, Any] = {
        "gathers": gathers,
        "completed": outcomes.get("COMPLETE", 0),
        "timed_out": timed_out,
        "timeout_rate": (timed_out / gathers) if gathers else 0.0,
        "outcomes": outcomes,
        "first_start": totals["first_start"],
        "last_end": totals["last_end"],
        "window": window,
        "window_picked": picked,
        "p50_ms": totals["p50_ms"],
        "p95_ms": totals["p95_ms"],
        "p99_ms": totals["p99_ms"],
        "late": int(totals["late"] or 0),
        "duplicates": int(totals["duplicates"] or 0),
        "unknown": int(totals["unknown"] or 0),
        "most_missed_leg": totals["most_missed_leg"] or "",
        "leg_deadlines": [found.text() for found in leg_deadlines(advice_df)],
        "rerequests": int(totals["rerequests"] or 0),
        "most_missed_by_aggregate": {
            str(r["aggregate"]): str(r["most_missed_leg"] or "")
            for r in per_aggregate.to_dict("records")
        },
        "events": int(totals["events"] or 0),
        "batches": int(batch_totals["batches"] or 0),
        "batched_messages": int(batch_totals["messages"] or 0),
        "destinations": int(batch_totals["destinations"] or 0),
        "batch_reasons": {r: int(batch_totals[f"by_{r}"] or 0) for r in CLOSE_REASONS},
        "batch_wait_ms": {p: batch_totals[f"wait_{p}_ms"] for p in ("p50", "p95", "p99")},
        "seconds": round(trends_done - started, 2),
        "skipped_files": len(skipped),
        "duplicate_histories_dropped": found.duplicates_dropped,
        # A gather's runs past its first fact: a run read twice, a reset's later run.
        "runs_counted_with_another": folded,
        # Left out, named by their collector runs: an altered or damaged export.
        "unreadable_batches": len(unreadable),
        "unreadable_batch_runs": sorted(set(unreadable)),
        # Not counted: a file written while they ran (`temporal workflow show`).
        "running_gathers": still_running(facts, found.running),
    }
    progress("charts and report")
    images = charts(trend_df, leg_df, out / "charts")
    for collector, paths in batch_charts(batch_trend_df, out / "charts").items():
        images[f"collector:{collector}"] = paths
    data = ReportData(summary, per_aggregate, outcome_df, trend_df, leg_df, advice_df,
                      destination_df, batch_trend_df)  # fmt: skip
    report = html_report(data, images, out / "report.html")
    shutil.rmtree(staging, ignore_errors=True)
    facts.unpersist()
    lines.unpersist()
    if every_batch is not None:
        every_batch.unpersist()
    if unrecorded is not None:
        unrecorded.unpersist()
    pictures = [p for paths in images.values() for p in paths]
    tables = ("trends.csv", "leg_trends.csv", "advice.csv", "destinations.csv",
              "batch_trends.csv")  # fmt: skip
    files = [facts_dir, batches_dir, *(out / n for n in tables), *pictures, report]
    timings = {
        "facts": facts_done - started,
        "trends": trends_done - facts_done,
        "report": time.perf_counter() - trends_done,
    }
    return Analysis(out=out, summary=summary, skipped=skipped, files=files, timings=timings)


def still_running(facts: DataFrame, runs: list[tuple[str, str]]) -> list[str]:
    """The gather ids of ``runs`` (read while they ran) that no other file gave as
    ended: an export of the same run, written after it closed, counts instead."""
    if not runs:
        return []
    ids = sorted({workflow_id for workflow_id, _ in runs})
    ended = facts.filter(F.col("gather_id").isin(ids)).select("gather_id", "run_id").collect()
    counted = {(row["gather_id"], row["run_id"]) for row in ended}
    return sorted(
        {workflow_id for workflow_id, run_id in runs if (workflow_id, run_id) not in counted}
    )


def format_summary(result: Analysis) -> str:
    """The short summary printed at the end of a run."""
    s = result.summary
    gathers = s["gathers"]
    shares = ", ".join(
        f"{n} {outcome.lower()} ({percent(n, gathers)})" for outcome, n in s["outcomes"].items()
    )
    lines = [
        f"{gathers} gathers from {when(s['first_start'])} to {when(s['last_end'])} "
        f"(trend window {s['window']})",
        f"{gathers} gathers: {s['completed']} completed, {s['timed_out']} timed out "
        f"({100 * s['timeout_rate']:.1f} %)",
        f"outcomes: {shares}",
        "completion latency p50/p95/p99: "
        + "/".join("-" if s[k] is None else f"{s[k]:.0f}" for k in ("p50_ms", "p95_ms", "p99_ms"))
        + " ms",
        f"late {s['late']}, duplicates {s['duplicates']}, unknown {s['unknown']}, "
        f"leg re-requests {s['rerequests']}",
        "most-missed leg: "
        + (", ".join(f"{agg}: {leg}" for agg, leg in s["most_missed_by_aggregate"].items() if leg)
           or "none"),
        f"{s['events']} history events in {s['seconds']} s",
    ]  # fmt: skip
    if s["batches"]:
        reasons = ", ".join(f"{r} {n}" for r, n in s["batch_reasons"].items() if n)
        waits = "/".join(millis(s["batch_wait_ms"][k]) for k in ("p50", "p95", "p99"))
        lines.insert(-1, f"{s['batches']} collector batches of {s['batched_messages']} messages "
                         f"to {s['destinations']} destinations (closed by {reasons}); "
                         f"first-message wait p50/p95/p99 {waits}")  # fmt: skip
    lines[-1:-1] = [f"advice: {text}" for text in s["leg_deadlines"]]
    if s["runs_counted_with_another"]:
        lines.append(f"{s['runs_counted_with_another']} run(s) counted with another run of "
                     "their gather (read twice, or started again by a reset)")  # fmt: skip
    if s["unreadable_batches"]:
        lines.append(f"{s['unreadable_batches']} collector batch(es) left out: their records "
                     "hold a value that cannot be read (a time that is not one, an input that "
                     "does not decode), in the runs of "
                     + ", ".join(s["unreadable_batch_runs"]))  # fmt: skip
    if running := s["running_gathers"]:
        lines.append(f"{len(running)} gather(s) still running when their file was written, "
                     "not counted (read them again once they close): "
                     + ", ".join(running))  # fmt: skip
    for name, reason in result.skipped.items():
        lines.append(f"skipped {name}: {reason}")
    lines.append(f"written to {result.out}: facts/ and batch_facts/ (Parquet), trends.csv, "
                 "leg_trends.csv, advice.csv, destinations.csv, batch_trends.csv, charts/*.png, "
                 "report.html")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """spark-submit entry point."""
    parser = argparse.ArgumentParser(description="Mine gather and collector histories for trends.")
    parser.add_argument("inputs", nargs="+", type=Path, help="history files or directories")
    parser.add_argument("--out", type=Path, default=Path("analytics-out"),
                        help="folder for the facts, trends, charts and report")  # fmt: skip
    parser.add_argument("--window", default=None, help="default: picked from the data's span")
    parser.add_argument("--master", default=None, help="default: spark-submit's, or local[*]")
    ns = parser.parse_args(argv)
    spark = spark_session(ns.master)
    try:
        result = analyze(spark, ns.inputs, ns.out, window=ns.window, progress=print)
    finally:
        spark.stop()
    print(format_summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
