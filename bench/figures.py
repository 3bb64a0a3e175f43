"""What every benchmark shares: one benchmark at a time on the machine, and its headline
figures, each beside the floor measured in the same run, recorded for `make bench`'s
table (``bench/results/<date>.md``).
"""

from __future__ import annotations

import argparse
import ast
import fcntl
import json
import os
import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

#: The lock every benchmark holds while it runs (two at once would measure each other).
LOCK = Path(os.environ.get("MQGATHER_BENCH_LOCK", "/tmp/mqgather-bench.lock"))
#: Set by the runner of `make bench` for the benchmarks it starts: they run under its lock.
ENV_HELD = "MQGATHER_BENCH_LOCK_HELD"
#: Where a benchmark appends its figures (JSON lines), when the runner asks for them.
ENV_RECORD = "MQGATHER_BENCH_RECORD"
#: What a benchmark run by hand needs first, for an error that says what to do.
RUN_THROUGH_MAKE = "run it through `make bench`, or `make install` first"


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The docstring as written; each option with its default, unless it has none to
    show (a flag, a None) or its help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        told = action.help or ""
        if (
            not action.option_strings
            or action.default in (None, False, argparse.SUPPRESS)
            or "default" in told
        ):
            return told
        return f"{told} (default: %(default)s)"


def command_line(doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's command line: ``--help`` gives its whole docstring (what it measures,
    against which floor, how to run it) and every option's default."""
    return argparse.ArgumentParser(description=doc, formatter_class=_HelpFormatter)


def commands() -> dict[str, str]:
    """Every benchmark with a command line (built with :func:`command_line`), by module
    name, with its docstring: read from the sources, no benchmark imported or run."""
    found = {}
    for path in sorted(Path(__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text())
        if any(_builds_command_line(node) for node in ast.walk(tree)):
            found[path.stem] = ast.get_docstring(tree, clean=False) or ""
    return found


def _builds_command_line(node: ast.AST) -> bool:
    """Whether ``node`` is the call ``command_line(__doc__)``."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "command_line"
        and [ast.unparse(arg) for arg in node.args] == ["__doc__"]
    )


class BenchmarkBusy(RuntimeError):
    """Another benchmark holds the lock; the message names its process."""


@contextmanager
def exclusive() -> Iterator[None]:
    """Hold the benchmark lock for the block, or refuse at once naming the holder."""
    if os.environ.get(ENV_HELD):
        yield
        return
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with LOCK.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise BenchmarkBusy(
                f"another benchmark is running ({holder}; lock {LOCK}): figures taken "
                "side by side would measure each other. Wait for it, then run again."
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}: {' '.join(sys.argv)}\n")
        handle.flush()
        # A benchmark this one starts (another revision's, say) runs under this lock.
        os.environ[ENV_HELD] = "1"
        try:
            yield
        finally:
            del os.environ[ENV_HELD]
            handle.seek(0)
            handle.truncate()


@dataclass
class Figure:
    """One headline figure of a run and, where it has one, its floor (or ceiling)."""

    bench: str
    name: str
    value: float
    unit: str
    floor: float | None = None
    floor_name: str = ""
    #: "lower" when less is better (CPU, latency, seconds), "higher" for throughput.
    better: str = "lower"
    target: float | None = None

    @property
    def ratio(self) -> float | None:
        """value / floor."""
        return self.value / self.floor if self.floor else None


def percentile(values: list[float], pct: int) -> float:
    """The ``pct``-th percentile of ``values``, interpolated (NaN for none)."""
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[pct - 1]


def record(figure: Figure) -> None:
    """Print nothing; append ``figure`` for the runner's table when it asked for them."""
    path = os.environ.get(ENV_RECORD)
    if path:
        with open(path, "a") as out:
            out.write(json.dumps(asdict(figure)) + "\n")


def read(path: Path) -> list[Figure]:
    """The figures a run recorded."""
    if not path.exists():
        return []
    return [Figure(**json.loads(line)) for line in path.read_text().splitlines() if line]
