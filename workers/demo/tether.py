"""``python -m workers.demo.tether PARENT_PID COMMAND...``: run COMMAND so that it is sent
SIGTERM when the process that started it dies, however it dies (SIGKILL included).

The dev stack starts every child through this: Linux's parent-death signal is set here,
in a fresh single-threaded process, and survives the exec of COMMAND (the Temporal
server's binary or another mqgather process)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

#: prctl option that sets the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> None:
    """Set the parent-death signal, then become COMMAND."""
    parent, command = int(argv[0]), argv[1:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:
        sys.exit(f"the parent {parent} is gone already; not starting {command[0]}")
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
