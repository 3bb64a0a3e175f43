"""The Temporal SDK core's own warnings reach a process's log as plain log lines."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time

import pytest

from mqgather.runtime.temporal import dev_server_args
from tests.harness import start_dev_server


def _wait_for(
    lines: list[str], text: str, timeout: float, server: subprocess.Popen[bytes] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while not any(text in line for line in lines):
        if server is not None and server.poll() is not None:
            raise AssertionError(f"the dev server exited with {server.returncode} before {text!r}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} not logged within {timeout}s: {''.join(lines)[-3000:]}")
        time.sleep(0.1)  # another process's output; nothing to await on


@pytest.mark.timeout(180)
def test_a_worker_that_loses_the_server_logs_the_cores_warnings_without_escape_codes(tmp_path):
    def args_for(ports: list[int]) -> list[str]:
        return dev_server_args(str(tmp_path / "t.db"), *ports)

    # Up and answering before the worker starts: a server that exits as it starts (a
    # port taken meanwhile) is started again on other ports.
    server, _, (port, _) = asyncio.run(start_dev_server(tmp_path, args_for, 2))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "MQGATHER_"))}
    env["TEMPORAL_ADDRESS"] = f"localhost:{port}"
    worker = subprocess.Popen(
        [sys.executable, "-m", "mqgather.cli", "worker", "--mq", f"local:{tmp_path}/qm.db",
         "--task-queue", f"core-logs-{port}"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    lines: list[str] = []
    assert worker.stdout is not None
    reader = threading.Thread(
        target=lambda: lines.extend(raw.decode(errors="replace") for raw in worker.stdout),
        daemon=True,
    )
    reader.start()
    try:
        _wait_for(lines, "worker on task queue", 120, server)
        server.kill()  # the worker's polls now fail: the SDK core warns
        _wait_for(lines, "temporalio.core", 60)
    finally:
        server.kill()
        worker.terminate()
        try:
            worker.wait(60)
        except subprocess.TimeoutExpired:
            # With no server the SDK's shutdown has outlasted a minute once, on a loaded
            # machine (in CI). What this test checks is the log, already read.
            worker.kill()
            worker.wait(10)
        reader.join(10)
    text = "".join(lines)
    assert "\x1b[" not in text, "terminal escape codes in the log"
    core = [line for line in lines if "temporalio.core" in line]
    assert core and all(" WARNING " in line or " ERROR " in line for line in core)
