"""Run a module as ``python -m`` runs it, timing every garbage collection of its process.

    python -m bench.gcwatch LOG MODULE [ARG ...]

Each collection appends one line to LOG: when it ended (Unix seconds), its generation,
how long it stopped the process (ms, wall) and how many objects it freed. A full
collection stops every thread of a worker while it walks the worker's objects, which at
10,000 open gathers takes 0.2-0.4 s: every gather in flight waits for it. The gather
bench runs the workers this way and reads back, with :func:`pauses`, the full
collections that fell inside each measure.
"""

from __future__ import annotations

import gc
import runpy
import sys
import time
from pathlib import Path
from typing import Any, TextIO

#: The generation a full collection collects.
FULL = 2


def watch(log: Path) -> TextIO:
    """Append a line to ``log`` for every garbage collection of this process from now on.

    Returns:
        The open log (line-buffered), for the caller to keep or close.
    """
    out = log.open("a", buffering=1)
    began: list[float] = [0.0]

    def timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
            return
        pause_ms = (time.perf_counter() - began[0]) * 1000
        out.write(f"{time.time():.6f} {info['generation']} {pause_ms:.3f} {info['collected']}\n")

    gc.callbacks.append(timed)
    return out


def pauses(log: Path, start: float, end: float, generation: int = FULL) -> list[float]:
    """The pauses (ms) of ``generation``'s collections that ended between ``start`` and
    ``end`` (Unix seconds), in the order they came; none for a log not written yet."""
    if not log.exists():
        return []
    found = []
    for line in log.read_text().splitlines():
        ended, gen, pause_ms, _ = line.split()
        if int(gen) == generation and start <= float(ended) <= end:
            found.append(float(pause_ms))
    return found


def main(argv: list[str]) -> None:
    """Watch this process's collections, then run the module as ``python -m`` would."""
    if len(argv) < 2:
        raise SystemExit("usage: python -m bench.gcwatch LOG MODULE [ARG ...]")
    log, module, *args = argv
    watch(Path(log))
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
