"""The ``mqgather`` entry point ends the process itself, whatever a command did."""

from __future__ import annotations

import subprocess
import sys
import textwrap

#: A command that fails with an error mqgather did not raise on purpose, and an exit
#: handler that shows whether the interpreter's own finalisation ran.
SCRIPT = textwrap.dedent(
    """
    import atexit, sys
    from mqgather.cli import main as entry

    atexit.register(lambda: print("finalised", flush=True))

    @entry.cli.command("boom")
    def boom() -> None:
        raise RuntimeError("an error no command expected")

    sys.argv = ["mqgather", "boom"]
    entry.main()
    """
)


def test_an_unexpected_error_is_shown_and_ends_the_process_without_finalisation():
    # Finalisation is where the Temporal client's native threads can hang the process
    # (a worker whose server had gone did): the entry point ends before it either way.
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, timeout=60)
    assert out.returncode == 1
    assert "RuntimeError: an error no command expected" in out.stderr.decode()
    assert "finalised" not in out.stdout.decode()
