"""Analytics at scale, against its floors: synthetic histories with the gather's real
event shapes for 10k and 100k gathers, and per size, in the same run and Spark session:

- the job: facts + trends (reading, facts to Parquet, trends to CSV), and the whole job
  with charts and the report;
- the floor: Spark reading the same files with the job's schema and counting the events;
- the single-node reference: the gather facts computed by DuckDB from the same files.

Then job / floor and job / single-node, and the time's growth for 10x the gathers. With
``--plan`` the physical plan of the job's heaviest stage (the gather facts) is printed;
with ``--against REV`` (repeatable) that revision's own benchmark runs right after, on this machine,
and the two are set side by side. With ``--profile`` the floor and the job's one pass over
the files (its gather facts, written to Spark's no-op sink) run once more each at the
largest size under Java Flight Recorder, and each one's JVM CPU is split by the area of
code its samples fall in (:mod:`bench.jfr`): what the pass costs beyond the floor's read.

    python -m bench.analytics_scale [--sizes 10000 100000] [--repeat N] [--plan]
        [--against REV] [--profile]
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from analytics.job import analyze, line_facts, spark_session
from analytics.synth import synthesize
from analytics.transforms import RAW_SCHEMA
from bench import jfr
from bench.analytics_duckdb import gather_facts as duckdb_facts
from bench.figures import ENV_RECORD, Figure, command_line, exclusive, record
from bench.gather_throughput import cpu_times

#: The issue's targets: facts + trends within 2x the read-and-count floor at 100,000
#: gathers, and time growing at most 3x for 10x the gathers.
TARGET_VS_FLOOR = 2.0
TARGET_GROWTH = 3.0


def write(directory: Path, n: int, per_file: int = 5000) -> None:
    """NDJSON files of ``per_file`` histories (`mqgather export --batch-size`)."""
    directory.mkdir(parents=True)
    out = None
    for i, (line, _) in enumerate(synthesize(n)):
        if i % per_file == 0:
            if out:
                out.close()
            out = (directory / f"histories-{i // per_file:04d}.ndjson").open("w")
        assert out is not None
        out.write(line + "\n")
    if out:
        out.close()


def read_and_count(spark: SparkSession, files: list[str]) -> tuple[float, int]:
    """The floor: seconds to read ``files`` with the job's schema and count the events."""
    start = time.perf_counter()
    row = (
        spark.read.schema(RAW_SCHEMA)
        .json(files)
        .select(F.size("history.events").alias("n"))
        .agg(F.sum("n"))
        .first()
    )
    assert row is not None
    return time.perf_counter() - start, int(row[0] or 0)


def single_node(files: list[str], out: Path) -> tuple[float, dict[str, int]]:
    """Seconds for DuckDB to compute the gather facts of ``files``, and its outcomes."""
    start = time.perf_counter()
    outcomes = duckdb_facts(files, str(out))
    return time.perf_counter() - start, outcomes


def heaviest_plan(spark: SparkSession, files: list[str]) -> str:
    """The physical plan of the job's one pass over the lines (the gather facts), its
    heaviest stage."""
    plan = line_facts(spark, files)
    return str(plan._jdf.queryExecution().executedPlan().toString())


def jvm_cpu(spark: SparkSession) -> tuple[int, float]:
    """The driver JVM's process id and the CPU seconds it has spent so far."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a running session has its gateway
    pid = int(jvm.java.lang.ProcessHandle.current().pid())
    return pid, sum(cpu_times(pid))


def profile_pass(spark: SparkSession, files: list[str]) -> None:
    """The floor and the job's one pass, each once under Java Flight Recorder: its JVM
    CPU, and its samples by area of code."""
    work: dict[str, Callable[[], object]] = {
        "the floor: Spark reading the files and counting the events": lambda: read_and_count(
            spark, files
        ),
        "the job's one pass, its facts to the no-op sink": lambda: (
            line_facts(spark, files).write.format("noop").mode("overwrite").save()
        ),
    }
    for name, run in work.items():
        pid, before = jvm_cpu(spark)
        try:
            found = jfr.record(pid, run)
        except subprocess.CalledProcessError as exc:
            # The figures above stand without it.
            said = (exc.stderr or b"").decode(errors="replace").strip() or f"exit {exc.returncode}"
            print(f"  the profile is left out: {exc.cmd[0]} failed ({said})")
            return
        spent = jvm_cpu(spark)[1] - before
        # The recorder's own work is in the CPU: compare the samples, not the seconds.
        print(f"  {name}: {found.samples} samples ({spent:.1f} s of JVM CPU while recording)")
        print("\n".join(found.lines()))


def against(revision: str, sizes: list[int], repeat: int) -> tuple[dict[int, list[float]], bool]:
    """Facts + trends seconds per size by ``revision``'s own benchmark (a worktree):
    ``repeat`` runs in one session, as this run takes its own, and True; or, where that
    revision cannot repeat a run, its one run and False (compare it with this run's
    first, which follows the same warm-up)."""
    root = Path(__file__).resolve().parent.parent
    shown = f"{revision}:bench/analytics_scale.py"
    script = subprocess.run(["git", "-C", str(root), "show", shown], capture_output=True,
                            text=True, check=True).stdout  # fmt: skip
    repeats = "--repeat" in script
    extra = ["--repeat", str(repeat)] if repeats else []
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", "-q", str(tree),
                        revision], check=True)  # fmt: skip
        try:
            # Its figures are read off its output, not recorded as this run's own.
            env = {k: v for k, v in os.environ.items() if k != ENV_RECORD}
            command = [sys.executable, "-m", "bench.analytics_scale", "--sizes", *map(str, sizes)]
            run = subprocess.run(
                [*command, *extra],
                cwd=tree,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
        finally:
            subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(tree)],
                           check=False)  # fmt: skip
    found = re.findall(r"^\s*(\d+) gathers .*facts\+trends\s+([\d.]+) s", run.stdout, re.M)
    runs: dict[int, list[float]] = {}
    for n, seconds in found:
        runs.setdefault(int(n), []).append(float(seconds))
    return runs, repeats


def measure(spark: SparkSession, data: Path, files: list[str], out: Path, n: int) -> float:
    """One run at one size: the job, its floor and DuckDB; facts + trends seconds."""
    floor, counted = read_and_count(spark, files)
    start = time.perf_counter()
    result = analyze(spark, [data], out)
    total = time.perf_counter() - start
    seconds = result.timings["facts"] + result.timings["trends"]
    events = result.summary["events"]
    reference, outcomes = single_node(files, out.with_suffix(".duckdb.parquet"))
    assert counted == events, f"the floor counted {counted} events, the job {events}"
    assert outcomes == result.summary["outcomes"], (outcomes, result.summary["outcomes"])
    print(f"{n:>8} gathers {events:>10,} events  facts+trends {seconds:6.1f} s "
          f"{events / seconds:>9,.0f} events/s  floor {floor:5.1f} s "
          f"{seconds / floor:5.1f} x  DuckDB {reference:5.1f} s "
          f"{seconds / reference:5.1f} x"
          f"  (whole job with charts and report {total:.1f} s)", flush=True)  # fmt: skip
    name = f"facts + trends, {n:,} gathers"
    record(Figure("analytics", name, seconds, "s", floor, "Spark read and count",
                  target=TARGET_VS_FLOOR if n >= 100_000 else None))  # fmt: skip
    record(Figure("analytics", name, seconds, "s", reference, "DuckDB gather facts"))
    return seconds


def main() -> None:
    """Run each size and print a table."""
    parser = command_line(__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000],
                        help="gathers exported and analysed, a measure each")  # fmt: skip
    parser.add_argument("--plan", action="store_true", help="print the gather facts' plan")
    parser.add_argument("--against", metavar="REV", action="append", default=[],
                        help="also run this git revision's own benchmark and compare "
                             "(repeat it for more)")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=1, metavar="N", help="run each size N times")
    parser.add_argument("--profile", action="store_true",
                        help="split the floor's and the pass's JVM CPU by area of code "
                             "(Java Flight Recorder; needs the JDK's jcmd and jfr)")  # fmt: skip
    ns = parser.parse_args()
    if ns.profile and (missing := jfr.available()):
        print(f"--profile left out: {missing}", flush=True)
        ns.profile = False
    spark = spark_session("local[*]", "mqgather-bench", jfr.JAVA_OPTIONS if ns.profile else "")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        write(Path(tmp) / "warm", 2000)
        analyze(spark, [Path(tmp) / "warm"], Path(tmp) / "warm-out")  # JVM warm-up
        for n in ns.sizes:
            data = Path(tmp) / f"in-{n}"
            write(data, n)
            files = sorted(str(p) for p in data.iterdir())
            runs = [measure(spark, data, files, Path(tmp) / f"out-{n}-{run}", n)
                    for run in range(ns.repeat)]  # fmt: skip
            rows.append((n, runs))
        if ns.plan:
            print("\nthe gather facts' physical plan (the heaviest stage):")
            print(heaviest_plan(spark, files))
        if ns.profile:
            print(f"\nwhere the JVM's CPU goes, {ns.sizes[-1]:,} gathers:")
            profile_pass(spark, files)
    spark.stop()
    if len(rows) > 1:
        (n0, s0), (n1, s1) = ((n, statistics.median(runs)) for n, runs in (rows[0], rows[-1]))
        print(f"time grew {s1 / s0:.1f}x for {n1 / n0:.0f}x the gathers "
              f"(target: at most {TARGET_GROWTH:g}x)")  # fmt: skip
        record(Figure("analytics", f"time growth for {n1 // n0}x the gathers", s1 / s0, "x",
                      target=TARGET_GROWTH))  # fmt: skip
    for revision in ns.against:
        print(f"\n{revision}'s own benchmark on this machine, right after:")
        theirs, repeated = against(revision, [n for n, _ in rows], ns.repeat)
        if not repeated:
            print("  (it cannot repeat a run: its one run against this run's first)")
        for n, runs in rows:
            then = theirs.get(n, [])
            # Run i against its run i (each the same place after the warm-up).
            pairs = list(zip(runs, then, strict=False))
            if not pairs:
                continue
            now_s = statistics.median(p[0] for p in pairs)
            then_s = statistics.median(p[1] for p in pairs)
            print(f"{n:>8} gathers  {revision}: {then_s:6.1f} s   now: {now_s:6.1f} s"
                  f"   now / then {now_s / then_s:.2f}  (median of {len(pairs)})")  # fmt: skip
            for mine, its in pairs:
                record(Figure("analytics", f"facts + trends, {n:,} gathers", mine, "s", its,
                              f"release {revision}"))  # fmt: skip


if __name__ == "__main__":
    with exclusive():
        main()
