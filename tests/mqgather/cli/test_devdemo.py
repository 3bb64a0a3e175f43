"""`mqgather dev`: the supervised stack from a shell."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from bridge.mq.local_qm import LocalQueueManager
from tests.harness import free_port, processes_mentioning


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)  # polling another process's files; nothing to await on
    raise AssertionError(f"{what} did not happen within {timeout}s")


@pytest.mark.timeout(240)
def test_dev_runs_supervises_and_stops_everything(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "MQGATHER_"))}
    port = free_port()
    qm = tmp_path / ".mqgather" / "qm.db"
    cmd = [sys.executable, "-m", "mqgather.cli"]
    dev = subprocess.Popen(
        [*cmd, "dev", "--port", str(port), "--ui-port", str(free_port())],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    lines: list[str] = []
    try:
        assert dev.stdout is not None
        while not any("dev stack up" in line for line in lines):
            line = dev.stdout.readline().decode()
            assert line, "mqgather dev exited: " + "".join(lines)
            lines.append(line)
        assert any("Temporal UI: http://localhost:" in line for line in lines)
        client_env = dict(env, TEMPORAL_ADDRESS=f"localhost:{port}")
        out = subprocess.run(
            [*cmd, "scatter", "--aggregate", "orders"], cwd=tmp_path, env=client_env,
            capture_output=True, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        correl = out.stdout.decode().split()[0]

        def response():
            with LocalQueueManager(qm) as q:
                return [m for m in q.browse("ORDER.RESPONSE") if m.correl_id.hex() in correl]

        _wait_for(response, 60, "a response from the dev stack")
        # Supervision: a worker that dies is started again.
        workers = _wait_for(lambda: _pids(str(qm), " worker "), 10, "a worker process")
        os.kill(workers[0], signal.SIGKILL)
        _wait_for(lambda: (p := _pids(str(qm), " worker ")) and p != workers, 30, "a new worker")
    finally:
        dev.send_signal(signal.SIGINT)
        dev.wait(60)
    assert dev.returncode == 0
    assert processes_mentioning(str(tmp_path)) == []


def _pids(text: str, role: str) -> list[int]:
    from pathlib import Path

    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\x00", b" ").decode()
            except OSError:
                continue
            if text in cmdline and role in cmdline:
                found.append(int(proc.name))
    return found


@pytest.mark.timeout(240)
def test_dev_killed_leaves_nothing_behind_and_a_new_dev_recovers(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "MQGATHER_"))}
    port, ui = free_port(), free_port()
    cmd = [sys.executable, "-m", "mqgather.cli"]

    def start() -> subprocess.Popen[bytes]:
        dev = subprocess.Popen(
            [*cmd, "dev", "--port", str(port), "--ui-port", str(ui)],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        assert dev.stdout is not None
        seen = []
        while not any("dev stack up" in line for line in seen):
            line = dev.stdout.readline().decode()
            assert line, "mqgather dev exited: " + "".join(seen)
            seen.append(line)
        return dev

    client_env = dict(env, TEMPORAL_ADDRESS=f"localhost:{port}")
    dev = start()
    try:
        out = subprocess.run([*cmd, "scatter"], cwd=tmp_path, env=client_env,
                             capture_output=True, timeout=60)  # fmt: skip
        assert out.returncode == 0, out.stderr
        correl = out.stdout.decode().split()[0]
        _wait_for(lambda: len(_pids(str(tmp_path), " ")) >= 4, 30, "the stack's processes")
    finally:
        dev.kill()  # SIGKILL: no chance to clean up
        dev.wait(30)
    _wait_for(lambda: processes_mentioning(str(tmp_path)) == [], 60, "every child to end")
    dev = start()
    try:
        shown = subprocess.run([*cmd, "status", correl, "--json"], cwd=tmp_path,
                               env=client_env, capture_output=True, timeout=60)  # fmt: skip
    finally:
        dev.send_signal(signal.SIGINT)
        dev.wait(60)
    assert shown.returncode == 0, shown.stderr
    assert '"gather_id": "gather:orders:' in shown.stdout.decode()
    assert processes_mentioning(str(tmp_path)) == []
