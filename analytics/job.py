"""The analytics job: gather histories -> facts (Parquet), trends (CSV), charts (PNG) and
an HTML report. Run it as ``mqgather analyze PATH`` or with spark-submit:

    spark-submit --master spark://host:7077 analytics/job.py exports/ --out analytics-out
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from analytics.histories import collect
from analytics.report import charts, html_report
from analytics.transforms import (
    CORRUPT,
    RAW_SCHEMA,
    dedupe_histories,
    gather_facts,
    leg_trends,
    trends,
)


@dataclass
class Analysis:
    """What a run produced."""

    out: Path
    summary: dict[str, Any]
    skipped: dict[str, str] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)


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


def read_histories(spark: SparkSession, files: list[str]) -> tuple[DataFrame, dict[str, str]]:
    """Read export NDJSON files; a file with a corrupt or truncated line is reported by
    name and left out entirely."""

    def read() -> DataFrame:
        return (
            spark.read.schema(RAW_SCHEMA)
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", CORRUPT)
            .json(files)
            .withColumn("_file", F.input_file_name())
        )

    # A pruned pass finds the bad files; the full records are parsed once, later.
    check = read().select("_file", CORRUPT, "workflowId").cache()
    bad_rows = check.filter(F.col(CORRUPT).isNotNull() | F.col("workflowId").isNull())
    bad = sorted(row["_file"] for row in bad_rows.select("_file").distinct().collect())
    check.unpersist()
    skipped = {
        name.removeprefix("file://"): "corrupt or truncated line (not a history record)"
        for name in bad
    }
    return read().filter(~F.col("_file").isin(bad)).drop(CORRUPT, "_file"), skipped


def analyze(
    spark: SparkSession,
    inputs: list[Path],
    out: Path,
    *,
    window: str = "1 hour",
    progress: Callable[[str], None] = lambda _: None,
) -> Analysis:
    """Run the whole job; returns the summary printed at the end."""
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    staging = out / "_staging"
    progress("reading inputs")
    found = collect(inputs, staging)
    if not found.ndjson:
        raise FileNotFoundError(f"no readable history files under {', '.join(map(str, inputs))}")
    raw, corrupt = read_histories(spark, found.ndjson)
    skipped = {**found.skipped, **corrupt}
    progress("gather facts")
    facts = gather_facts(dedupe_histories(raw)).cache()
    facts_dir = out / "facts"
    facts.write.mode("overwrite").parquet(str(facts_dir))
    facts_done = time.perf_counter()
    progress("trends")
    trend_df: pd.DataFrame = trends(facts, window).toPandas()
    leg_df: pd.DataFrame = leg_trends(facts, window).toPandas()
    trend_df.to_csv(out / "trends.csv", index=False)
    leg_df.to_csv(out / "leg_trends.csv", index=False)
    totals = facts.agg(
        F.count("*").alias("gathers"),
        F.sum((F.col("outcome") == "COMPLETE").cast("long")).alias("completed"),
        F.sum((F.col("outcome") == "TIMEOUT").cast("long")).alias("timed_out"),
        F.expr(
            "percentile(CASE WHEN outcome = 'COMPLETE' THEN completion_ms END, "
            "array(0.5, 0.95, 0.99))"
        ).alias("p"),
        F.sum("late").alias("late"),
        F.sum("duplicates").alias("duplicates"),
        F.sum("unknown").alias("unknown"),
        F.sum("events").alias("events"),
    ).first()
    assert totals is not None
    missed = (
        facts.select(F.explode("legs_missing").alias("leg")).groupBy("leg").count()
        .orderBy(F.desc("count"), "leg").first()
    )  # fmt: skip
    trends_done = time.perf_counter()
    seconds = trends_done - started
    gathers = int(totals["gathers"] or 0)
    p = totals["p"] or [None, None, None]
    summary: dict[str, Any] = {
        "gathers": gathers,
        "completed": int(totals["completed"] or 0),
        "timed_out": int(totals["timed_out"] or 0),
        "timeout_rate": (int(totals["timed_out"] or 0) / gathers) if gathers else 0.0,
        "p50_ms": p[0],
        "p95_ms": p[1],
        "p99_ms": p[2],
        "late": int(totals["late"] or 0),
        "duplicates": int(totals["duplicates"] or 0),
        "unknown": int(totals["unknown"] or 0),
        "most_missed_leg": missed["leg"] if missed else "",
        "events": int(totals["events"] or 0),
        "seconds": round(seconds, 2),
        "skipped_files": len(skipped),
        "duplicate_histories_dropped": found.duplicates_dropped,
    }
    progress("charts and report")
    images = charts(trend_df, leg_df, out / "charts")
    report = html_report(summary, trend_df, leg_df, images, out / "report.html")
    shutil.rmtree(staging, ignore_errors=True)
    facts.unpersist()
    files = [facts_dir, out / "trends.csv", out / "leg_trends.csv", *images, report]
    timings = {
        "facts": facts_done - started,
        "trends": trends_done - facts_done,
        "report": time.perf_counter() - trends_done,
    }
    return Analysis(out=out, summary=summary, skipped=skipped, files=files, timings=timings)


def format_summary(result: Analysis) -> str:
    """The short summary printed at the end of a run."""
    s = result.summary
    lines = [
        f"{s['gathers']} gathers: {s['completed']} completed, {s['timed_out']} timed out "
        f"({100 * s['timeout_rate']:.1f} %)",
        "completion latency p50/p95/p99: "
        + "/".join("-" if s[k] is None else f"{s[k]:.0f}" for k in ("p50_ms", "p95_ms", "p99_ms"))
        + " ms",
        f"late {s['late']}, duplicates {s['duplicates']}, unknown {s['unknown']}; "
        f"most-missed leg: {s['most_missed_leg'] or 'none'}",
        f"{s['events']} history events in {s['seconds']} s",
    ]
    for name, reason in result.skipped.items():
        lines.append(f"skipped {name}: {reason}")
    lines.append(f"written to {result.out}: facts/ (Parquet), trends.csv, leg_trends.csv, "
                 "charts/*.png, report.html")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """spark-submit entry point."""
    parser = argparse.ArgumentParser(description="Mine gather histories for trends.")
    parser.add_argument("inputs", nargs="+", type=Path, help="history files or directories")
    parser.add_argument("--out", type=Path, default=Path("analytics-out"))
    parser.add_argument("--window", default="1 hour")
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
