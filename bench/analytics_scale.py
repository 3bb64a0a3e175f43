"""Analytics at scale: synthetic histories with the gather's real event shapes for 10k and
100k gathers; prints, per size, seconds for facts + trends in local mode (reading,
facts to Parquet, trends to CSV) and history events per second, plus the whole job's
time with charts and the report.

    python -m bench.analytics_scale [--sizes 10000 100000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from analytics.job import analyze, spark_session
from analytics.synth import synthesize


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


def main() -> None:
    """Run each size and print a table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    sizes = parser.parse_args().sizes
    spark = spark_session("local[*]", "mqgather-bench")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        write(Path(tmp) / "warm", 2000)
        analyze(spark, [Path(tmp) / "warm"], Path(tmp) / "warm-out")  # JVM warm-up
        for n in sizes:
            data = Path(tmp) / f"in-{n}"
            write(data, n)
            start = time.perf_counter()
            result = analyze(spark, [data], Path(tmp) / f"out-{n}")
            total = time.perf_counter() - start
            seconds = result.timings["facts"] + result.timings["trends"]
            events = result.summary["events"]
            rows.append((n, events, seconds, events / seconds))
            print(f"{n:>8} gathers  {events:>10,} events  facts+trends {seconds:6.1f} s  "
                  f"{events / seconds:>9,.0f} events/s  (whole job with charts and report "
                  f"{total:.1f} s)", flush=True)  # fmt: skip
    spark.stop()
    if len(rows) > 1:
        (n0, _, s0, _), (n1, _, s1, _) = rows[0], rows[-1]
        print(f"time grew {s1 / s0:.1f}x for {n1 / n0:.0f}x the gathers")


if __name__ == "__main__":
    main()
