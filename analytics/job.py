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
from pathlib import Path
from typing import Any, cast

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from analytics.advisor import leg_deadlines, timeout_advice
from analytics.histories import collect
from analytics.report import ReportData, batch_charts, charts, html_report, millis, percent, when
from analytics.transforms import (
    CLOSE_REASONS,
    CORRUPT,
    RAW_SCHEMA,
    aggregate_summary,
    batch_facts,
    batch_summary,
    batch_trends,
    destination_summary,
    gather_facts,
    leg_trends,
    most_missed,
    one_row_per_run,
    outcome_counts,
    pick_window,
    summarise,
    trends,
)
from mqgather.names import GATHER_ID_PREFIX
from mqgather.runtime.codec import PayloadCipher, load_key_ring

#: Trend queries run side by side (each is small; see :func:`analyze`).
QUERY_THREADS = 4


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


def spark_session(master: str | None = "local[*]", app: str = "mqgather-analytics") -> SparkSession:
    """A SparkSession in UTC with a shuffle size that suits one machine.

    ``master=None`` keeps the master spark-submit set (local[*] when there is none).
    """
    builder = SparkSession.builder if master is None else SparkSession.builder.master(master)
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
    """What the pruned pass over the export files found."""

    good: list[str]
    skipped: dict[str, str]
    #: The good files that hold a history other than a gather's (a collector's, say).
    not_only_gathers: list[str]


def check_files(spark: SparkSession, files: list[str]) -> Checked:
    """One pruned pass over export NDJSON files (Spark tokenizes each line but builds no
    history): a file with a corrupt or truncated line is reported by name and left out
    entirely; and which files hold more than gathers."""
    per_file = (
        spark.read.schema(RAW_SCHEMA)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json(files)
        .groupBy(F.input_file_name().alias("_file"))
        .agg(
            F.max(F.col(CORRUPT).isNotNull() | F.col("workflowId").isNull()).alias("bad"),
            F.max(
                ~F.coalesce(F.col("workflowId").startswith(GATHER_ID_PREFIX), F.lit(False))
            ).alias("others"),
        )
    )
    found = {row["_file"]: (row["bad"], row["others"]) for row in per_file.collect()}
    good = [f for f in files if not found.get(_uri(f), (False, False))[0]]
    return Checked(
        good=good,
        skipped={
            name.removeprefix("file://"): "corrupt or truncated line (not a history record)"
            for name, (bad, _) in sorted(found.items())
            if bad
        },
        not_only_gathers=[f for f in good if found.get(_uri(f), (False, True))[1]],
    )


def repeated_runs(facts: DataFrame) -> bool:
    """Whether some run has more than one fact row (Cloud exports are delivered at least
    once, and an export may be read twice): asked of the small fact rows, not the
    histories."""
    return facts.groupBy("gather_id", "run_id").count().filter("count > 1").limit(1).count() > 0


def _uri(path: str) -> str:
    return path if "://" in path else Path(path).absolute().as_uri()


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
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    staging = out / "_staging"
    progress("reading inputs")
    found = collect(inputs, staging, PayloadCipher(load_key_ring()))
    if not found.ndjson:
        raise FileNotFoundError(f"no readable history files under {', '.join(map(str, inputs))}")
    checked = check_files(spark, found.ndjson)
    skipped = {**found.skipped, **checked.skipped}
    progress("gather facts")
    # Facts straight from the parsed lines: the histories are never cached or shuffled,
    # only the facts (a small row per gather) are, and deduplicated only when needed.
    histories = read_histories(spark, checked.good)
    # As many partitions as a shuffle makes: the many small queries that follow each pay
    # per partition, and the input's split is for parsing, not for the facts.
    parts = int(spark.conf.get("spark.sql.shuffle.partitions") or 4)
    parsed = facts = gather_facts(histories, dedupe=False).coalesce(parts).cache()
    if repeated_runs(parsed):
        facts = one_row_per_run(parsed).coalesce(parts).cache()
    facts_dir = out / "facts"
    facts.write.mode("overwrite").parquet(str(facts_dir))
    if facts is not parsed:
        parsed.unpersist()  # the deduplicated rows are cached now
    progress("batch facts")
    # Only the files that hold more than gathers can hold a collector's history.
    batches = batch_facts(read_histories(spark, checked.not_only_gathers)).cache()
    batches_dir = out / "batch_facts"
    batches.write.mode("overwrite").parquet(str(batches_dir))
    batch_totals = batch_summary(
        batches,
        [],
        {
            "destinations": F.countDistinct("collector", "destination"),
            "first_put": F.min("put_at"),
            "last_put": F.max("put_at"),
        },
    ).first()
    assert batch_totals is not None
    facts_done = time.perf_counter()
    progress("trends")
    totals = summarise(
        facts,
        [],
        {
            "first_start": F.min("start_time"),
            "first_end": F.min("end_time"),
            "last_end": F.max("end_time"),
            "events": F.sum("events"),
            "rerequests": F.sum("rerequests"),
        },
    ).first()
    assert totals is not None
    picked = window is None
    if window is None:
        if totals["last_end"]:
            span = (totals["last_end"] - totals["first_end"]).total_seconds()
        elif batch_totals["last_put"]:
            span = (batch_totals["last_put"] - batch_totals["first_put"]).total_seconds()
        else:
            span = 0
        window = pick_window(span)
    # Small queries over the cached facts, each mostly the driver's planning and a
    # couple of short stages: run side by side, one's planning overlaps another's tasks.
    queries: dict[str, DataFrame] = {
        "trends": trends(facts, window),
        "legs": leg_trends(facts, window),
        "advice": timeout_advice(facts),
        "per_aggregate": aggregate_summary(facts),
        "outcomes": outcome_counts(facts),
        "destinations": destination_summary(batches),
        "batch_trends": batch_trends(batches, window),
        "missed": most_missed(facts, []),
    }
    with ThreadPoolExecutor(QUERY_THREADS, thread_name_prefix="analytics-query") as pool:
        done = dict(zip(queries, pool.map(_to_pandas, queries.values()), strict=True))
    trend_df: pd.DataFrame = done["trends"]
    leg_df: pd.DataFrame = done["legs"]
    advice_df: pd.DataFrame = done["advice"]
    per_aggregate: pd.DataFrame = done["per_aggregate"]
    outcome_df: pd.DataFrame = done["outcomes"]
    destination_df: pd.DataFrame = done["destinations"]
    batch_trend_df: pd.DataFrame = done["batch_trends"]
    destination_df.to_csv(out / "destinations.csv", index=False)
    batch_trend_df.to_csv(out / "batch_trends.csv", index=False)
    trend_df.to_csv(out / "trends.csv", index=False)
    leg_df.to_csv(out / "leg_trends.csv", index=False)
    advice_df.to_csv(out / "advice.csv", index=False)
    outcomes = {str(k): int(v) for k, v in outcome_df.groupby("outcome")["count"].sum().items()}
    missed = done["missed"].to_dict("records")[0] if len(done["missed"]) else None
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
        "most_missed_leg": missed["most_missed_leg"] if missed else "",
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
    batches.unpersist()
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
    parser.add_argument("--out", type=Path, default=Path("analytics-out"))
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
