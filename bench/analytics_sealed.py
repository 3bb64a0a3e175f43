"""The analytics job on exports kept sealed (``mqgather export --keep-encrypted``),
against the same job on the same exports opened: what opening every payload before
Spark reads them costs.

Synthetic gathers are written in export files of a thousand histories (the export's
own size), once opened and once with every payload sealed under a fresh key ring; the
job then runs on each in turn, alternated, in one Spark session (a first run on the
opened files warms the JVM). Each run is the whole job but the charts and the report:
reading the inputs (opening them, for the sealed ones), the facts and the trends.

    python -m bench.analytics_sealed [--gathers 20000] [--repeat 3]
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from analytics.job import analyze, spark_session
from analytics.synth import as_exported, synthesize
from bench.figures import Figure, command_line, exclusive, record
from mqgather.names import ENV_KEYS
from mqgather.runtime.codec import KeyRing, PayloadCipher, new_key

#: Histories per export file, as ``mqgather export`` writes them.
PER_FILE = 1000


def write_exports(n: int, plain: Path, sealed: Path, cipher: PayloadCipher) -> None:
    """``n`` synthetic gathers as export files under ``plain`` and, every payload sealed
    with ``cipher``, under ``sealed`` (the same histories, file for file)."""
    plain.mkdir(parents=True)
    sealed.mkdir(parents=True)
    lines = [line for line, _ in synthesize(n)]
    for first in range(0, n, PER_FILE):
        name = f"histories-{first // PER_FILE:05d}.ndjson"
        with (plain / name).open("w") as opened, (sealed / name).open("w") as kept:
            for line in lines[first : first + PER_FILE]:
                opened.write(as_exported(line) + "\n")
                kept.write(as_exported(line, cipher) + "\n")


def main() -> None:
    """Write the exports, run the job on each, print and record the ratio."""
    parser = command_line(__doc__)
    parser.add_argument("--gathers", type=int, default=20_000, help="gathers exported")
    parser.add_argument("--repeat", type=int, default=3, metavar="N", help="runs of each")
    ns = parser.parse_args()
    ring = KeyRing("bench", {"bench": new_key()})
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print(f"writing {ns.gathers:,} gathers' exports, opened and sealed …", flush=True)
        write_exports(ns.gathers, root / "opened", root / "sealed", PayloadCipher(ring))
        # The job reads its key ring where every process does: the environment.
        os.environ[ENV_KEYS] = ring.to_file_model().model_dump_json()
        spark = spark_session("local[*]", "mqgather-bench")
        try:
            analyze(spark, [root / "opened"], root / "warm")  # the JVM's warm-up
            ratios = []
            for run in range(ns.repeat):
                took = {}
                for kind in ("opened", "sealed"):
                    start = time.perf_counter()
                    result = analyze(spark, [root / kind], root / f"out-{kind}-{run}")
                    took[kind] = result.timings["facts"] + result.timings["trends"]
                    assert result.summary["gathers"] == ns.gathers, result.summary
                    assert not result.skipped, result.skipped
                    whole = time.perf_counter() - start
                    print(f"  run {run + 1}: {kind:6s} {took[kind]:5.1f} s "
                          f"(whole job {whole:.1f} s)", flush=True)  # fmt: skip
                ratios.append(took["sealed"] / took["opened"])
                record(Figure("analytics", f"facts + trends, {ns.gathers:,} gathers, exports "
                              "kept sealed", took["sealed"], "s", took["opened"],
                              "the same exports opened"))  # fmt: skip
        finally:
            spark.stop()
    print(
        f"sealed / opened: {statistics.median(ratios):.2f} x (median of {len(ratios)}; "
        f"{min(ratios):.2f} to {max(ratios):.2f}) on {os.cpu_count()} cores",
        flush=True,
    )


if __name__ == "__main__":
    with exclusive():
        main()
