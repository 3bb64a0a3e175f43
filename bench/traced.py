"""Run a Python module under a tracing profiler that counts every call, in every thread.

    python -m bench.traced OUT MODULE [ARGS ...]

The module runs as ``python -m MODULE ARGS`` would. SIGUSR2 clears what was counted so
far (after a warm-up, say); SIGUSR1 writes every Python function's calls and own CPU
time to OUT, one line each: ``calls<TAB>seconds<TAB>file:line:name``. Own time excludes
the Python functions a function calls and includes the C code it calls (SQLite,
pydantic's validators, protobuf). A tracer slows every call, so its times are inflated,
short functions most: compare counts, and times only between two processes traced
alike.
"""

from __future__ import annotations

import runpy
import signal
import sys
from pathlib import Path
from types import FrameType


def _dump(out: Path) -> None:
    import yappi

    lines = [
        f"{stat.ncall}\t{stat.tsub:.6f}\t{stat.module}:{stat.lineno}:{stat.name}"
        for stat in yappi.get_func_stats()
    ]
    out.write_text("\n".join(lines) + "\n")


def main() -> None:
    """Trace the module named on the command line until it exits."""
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, module = Path(sys.argv[1]), sys.argv[2]
    import yappi

    def clear(_signum: int, _frame: FrameType | None) -> None:
        yappi.clear_stats()

    def dump(_signum: int, _frame: FrameType | None) -> None:
        _dump(out)

    signal.signal(signal.SIGUSR2, clear)
    signal.signal(signal.SIGUSR1, dump)
    yappi.set_clock_type("cpu")
    yappi.start(builtins=False, profile_threads=True)
    sys.argv = [module, *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
