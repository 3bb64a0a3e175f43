"""Every benchmark, one after another, quietly: each one's output goes to a log, a line
per benchmark shows progress, and one table is written to ``bench/results/<date>.md``
with every headline figure beside its floor, the ratio (median and range over the runs)
and the target, and the machine's core count; at the end it prints the headline ratios
beside the runs before and, after a whole run into ``bench/results``, writes the latest
into the README's and docs/performance.md's run-by-run tables (``bench.trend``).
Refuses to start while another benchmark runs (they would measure each other).

    python -m bench.suite [--only NAME ...] [--out DIR]      # make bench
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from bench.figures import ENV_HELD, ENV_RECORD, BenchmarkBusy, Figure, command_line, exclusive, read
from bench.trend import RESULTS, BadResults, runs_in, trend_table, update_pages

#: The releases the analytics job is compared with: the one whose figures the README once
#: gave, and the one before the arrivals came with each gather's result.
ANALYTICS_RELEASES = ("246f2c6", "a7d0c82")

#: Runs, this one included, in the run-by-run table printed at the end.
TREND_RUNS = 3

#: (name, module arguments): the order they run in.
BENCHMARKS: tuple[tuple[str, list[str]], ...] = (
    ("mq_throughput", ["bench.mq_throughput"]),
    ("qm_commits", ["bench.qm_commits", "--rounds", "3"]),
    ("gather_throughput",
     ["bench.gather_throughput", "--gathers", "600", "--open", "0,10000", "--repeat", "3"]),
    ("bridge_floor", ["bench.bridge_floor", "--gathers", "600", "--rounds", "3"]),
    ("worker_direct", ["bench.worker_direct", "--workflows", "300", "--rounds", "3"]),
    ("evictions", ["bench.evictions", "-n", "300"]),
    ("evictions_completed", ["bench.evictions", "-n", "300", "--completed"]),
    ("evictions_live", ["bench.evictions", "-n", "300", "--live"]),
    ("collector_throughput", ["bench.collector_throughput"]),
    ("analytics_scale",
     ["bench.analytics_scale", "--repeat", "3", "--plan", "--profile",
      *(arg for rev in ANALYTICS_RELEASES for arg in ("--against", rev))]),
    ("analytics_sealed", ["bench.analytics_sealed", "--gathers", "20000", "--repeat", "3"]),
    ("chaos", ["bench.chaos"]),
    ("large_replies", ["bench.large_replies", "--gathers", "10"]),
    ("hold_check", ["bench.hold_check", "--repeat", "3"]),
)  # fmt: skip


def _commit() -> str:
    run = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         check=False)  # fmt: skip
    return run.stdout.strip() or "unknown"


def _spread(values: list[float], digits: int) -> str:
    """``median (min to max)``, or the one value."""
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} ({min(values):.{digits}f} to {max(values):.{digits}f})"


def table(figures: list[Figure]) -> list[str]:
    """The Markdown table: one row per figure and floor, over all its runs."""
    groups: dict[tuple[str, str, str], list[Figure]] = defaultdict(list)
    for figure in figures:
        groups[(figure.bench, figure.name, figure.floor_name)].append(figure)
    lines = [
        "| benchmark | figure | runs | value | against | floor | ratio | target | met |",
        "|---|---|---:|---:|---|---:|---:|---:|:-:|",
    ]
    for (bench, name, floor_name), runs in groups.items():
        first = runs[0]
        digits = 2 if first.unit in ("ms", "x") else 1
        value = f"{_spread([r.value for r in runs], digits)} {first.unit}"
        ratios = [r.ratio for r in runs if r.ratio is not None]
        floors = [r.floor for r in runs if r.floor is not None]
        floor = f"{_spread(floors, digits)} {first.unit}" if floors else ""
        # A floor of nothing (a kill the platform's workflows did not notice) has no ratio.
        ratio = _spread(ratios, 2) if ratios else ("-" if floors else "")
        met = ""
        if first.target is not None:
            judged = statistics.median(ratios) if ratios else statistics.median(
                [r.value for r in runs])  # fmt: skip
            ok = judged >= first.target if first.better == "higher" else judged <= first.target
            met = "yes" if ok else "no"
        sign = "≥" if first.better == "higher" else "≤"
        target = f"{sign} {first.target:g}" if first.target is not None else ""
        lines.append(f"| {bench} | {name} | {len(runs)} | {value} | {floor_name} | {floor} | "
                     f"{ratio} | {target} | {met} |")  # fmt: skip
    return lines


def results_lines(
    stamp: datetime, commit: str, figures: list[Figure], failed: list[str]
) -> list[str]:
    """The results file of a run: its day, commit, hour and machine, then the table."""
    lines = [
        f"# Benchmarks, {stamp:%Y-%m-%d}",
        "",
        f"Commit {commit}, {stamp:%H:%M} UTC; {os.cpu_count()} cores, "
        f"{platform.machine()}, Python {platform.python_version()}. Every ratio is to a floor "
        "measured in the same run; a value is the median over the runs, the range in "
        "brackets. The full output is in the log beside this file.",
        "",
        *table(figures),
    ]
    if failed:
        lines += ["", f"Failed (see the log): {', '.join(failed)}"]
    return lines


def main() -> int:
    """Run the benchmarks; 0 when every one ran (met or not), 1 when one failed."""
    parser = command_line(__doc__)
    names = [name for name, _ in BENCHMARKS]
    parser.add_argument("--only", nargs="+", choices=names, help="run only these")
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help="where the table and the log go")  # fmt: skip
    ns = parser.parse_args()
    chosen = [(n, args) for n, args in BENCHMARKS if not ns.only or n in ns.only]
    ns.out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC)
    day = stamp.strftime("%Y-%m-%d")
    log_path = ns.out / f"{day}.log"
    failed: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        recorded = Path(tmp) / "figures.jsonl"
        env = dict(os.environ, **{ENV_HELD: "1", ENV_RECORD: str(recorded)})
        with log_path.open("w") as log:
            for i, (name, args) in enumerate(chosen, 1):
                print(f"[{i}/{len(chosen)}] {name} …", end=" ", flush=True)
                log.write(f"\n===== {name}: python -m {' '.join(args)}\n")
                log.flush()
                began = time.monotonic()
                run = subprocess.run([sys.executable, "-m", *args], stdout=log,
                                     stderr=subprocess.STDOUT, env=env, check=False)  # fmt: skip
                took = time.monotonic() - began
                if run.returncode:
                    failed.append(name)
                print(f"{'FAILED (exit ' + str(run.returncode) + ')' if run.returncode else 'done'}"
                      f" in {took / 60:.1f} min", flush=True)  # fmt: skip
        figures = read(recorded)
    results = ns.out / f"{day}.md"
    results.write_text("\n".join(results_lines(stamp, _commit(), figures, failed)) + "\n")
    print(f"\n{len(figures)} figures from {len(chosen) - len(failed)} of {len(chosen)} "
          f"benchmarks -> {results} (log {log_path})")  # fmt: skip
    try:
        print("\nThe headline figures, this run beside the ones before it (✓ met, ✗ not):")
        print("\n".join(trend_table(runs_in(ns.out)[-TREND_RUNS:])))
        # A whole run into the repository's results: the pages' run-by-run tables follow
        # it (a part run, or one elsewhere, would put a column of gaps there).
        if not ns.only and ns.out.resolve() == RESULTS.resolve():
            for page in update_pages(ns.out):
                print(f"{page}: its run-by-run table now ends with this run")
    except BadResults as exc:
        print(f"No run-by-run table: {exc}")
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        with exclusive():
            sys.exit(main())
    except BenchmarkBusy as exc:
        print(f"make bench: {exc}", file=sys.stderr)
        sys.exit(2)
