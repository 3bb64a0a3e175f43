"""`mqgather dev`: the supervised stack from a shell."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import QueueAttributes
from mqgather.cli.devdemo import _check, _rerequests, _summary
from mqgather.config import default_aggregates
from mqgather.errors import MQGatherError
from tests.harness import free_ports, processes_mentioning
from workers.demo.driver import (
    Rates,
    expected_counts,
    plan_requests,
    planned_rerequests,
    retrying_legs,
)


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)  # polling another process's files; nothing to await on
    raise AssertionError(f"{what} did not happen within {timeout}s")


#: The demo aggregate with a short timeout, so planned drops and late legs end quickly.
SHORT_TIMEOUT_CONFIG = """
[aggregates.orders]
legs = [{name = "CREDIT", sequence = 10}, {name = "STOCK", sequence = 20},
        {name = "TAX", sequence = 30}]
timeout_seconds = 3
"""


class _Lines:
    """A process's output, read in the background so a test can wait for a line."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for raw in iter(stream.readline, b""):
            self.lines.append(raw.decode(errors="replace"))

    def wait_for(self, text: str, timeout: float) -> str:
        return _wait_for(
            lambda: next((line for line in self.lines if text in line), None),
            timeout,
            f"{text!r} in the dev console ({''.join(self.lines)[-2000:]})",
        )


@pytest.mark.timeout(300)
def test_dev_runs_supervises_and_stops_everything(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "MQGATHER_"))}
    (tmp_path / "mqgather.toml").write_text(SHORT_TIMEOUT_CONFIG)
    port, ui = free_ports(2)
    qm = tmp_path / ".mqgather" / "qm.db"
    cmd = [sys.executable, "-m", "mqgather.cli"]
    dev = subprocess.Popen(
        [*cmd, "dev", "--port", str(port), "--ui-port", str(ui)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        console = _Lines(dev.stdout)
        console.wait_for("dev stack up", 120)
        console.wait_for("Temporal UI: http://localhost:", 1)
        client_env = dict(env, TEMPORAL_ADDRESS=f"localhost:{port}")
        # drive: progress while it runs, then every outcome beside the plan.
        driven = subprocess.run(
            [*cmd, "drive", "--requests", "20", "--rate", "40", "--drop-rate", "0.1",
             "--late-rate", "0.1", "--duplicate-rate", "0.1"],
            cwd=tmp_path, env=client_env, capture_output=True, timeout=120,
        )  # fmt: skip
        report = driven.stdout.decode()
        assert driven.returncode == 0, driven.stderr.decode() + report
        assert "requests sent" in driven.stderr.decode()
        for outcome, count in (("completed", 16), ("timed out", 4), ("late", 2),
                               ("duplicates", 2)):  # fmt: skip
            assert re.search(rf"{outcome}\s*│\s*{count}\s*│\s*{count}\s*│", report), report
        assert "✗" not in report
        # A failing PUT: its MQ reason shows on the dev console.
        with LocalQueueManager(qm) as q:
            full = q.inquire("ORDER.RESPONSE").curdepth
            q.define(QueueAttributes(name="ORDER.RESPONSE", maxdepth=full), replace=True)
        out = subprocess.run(
            [*cmd, "scatter", "--aggregate", "orders"], cwd=tmp_path, env=client_env,
            capture_output=True, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        correl = out.stdout.decode().split()[0]
        warned = console.wait_for("MQRC_Q_FULL", 60)
        assert warned.startswith("[worker]") and "PUT of the response" in warned
        with LocalQueueManager(qm) as q:
            q.define(QueueAttributes(name="ORDER.RESPONSE", maxdepth=100_000), replace=True)

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
    for log in (tmp_path / ".mqgather").glob("*.log"):
        assert b"\x1b[" not in log.read_bytes(), f"terminal escape codes in {log}"


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
    port, ui = free_ports(2)
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


@pytest.mark.timeout(120)
def test_dev_whose_temporal_port_is_taken_says_so_and_what_to_do(tmp_path):
    """The embedded server exits as it starts when its UI port is taken: dev says why,
    from the server's own log, and which options choose other ports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "MQGATHER_"))}
    port, ui = free_ports(2)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ui))
        taken.listen()
        out = subprocess.run(
            [sys.executable, "-m", "mqgather.cli", "dev", "--port", str(port), "--ui-port",
             str(ui)], cwd=tmp_path, env=env, capture_output=True, timeout=100,
        )  # fmt: skip
    said = out.stderr.decode()
    assert out.returncode != 0, said
    assert f"127.0.0.1:{ui}: bind: address already in use" in said, said
    assert "--port and --ui-port" in said and "temporal.log" in said, said
    assert "cannot reach Temporal" not in said, said
    assert processes_mentioning(str(tmp_path)) == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--drop-rate", "2"], "not in the range 0<=x<=1"),
        (["--drop-rate", "nan"], "not a number"),
        (["--rate", "nan"], "not a number"),
        (["--rate", "0"], "not in the range"),
        (["--requests", "0"], "not in the range x>=1"),
        (["--drop-rate", "0.6", "--late-rate", "0.5"], "more than 1"),
    ],
)
def test_drive_refuses_what_it_cannot_plan_before_it_connects(args, says):
    from click.testing import CliRunner

    from mqgather.cli.main import cli

    # Port 9 (discard): nothing answers there, and no check should get that far.
    env = {"TEMPORAL_ADDRESS": "127.0.0.1:9"}
    result = CliRunner().invoke(cli, ["drive", "--no-wait", *args], env=env)
    assert result.exit_code == 2 and says in result.output


def test_a_reply_asked_again_for_being_slow_is_told_apart_from_one_without_cause(capsys):
    """On a busy machine a leg's reply can miss its retry_after_seconds: the gather asks
    it again, as configured. The demo says so and keeps its check; one asked again before
    it was due, or a planned one missing, still fails it."""
    spec = default_aggregates()["orders"]
    plans = plan_requests(100, spec, Rates())
    expected = expected_counts(plans, 0, 0, retrying_legs(spec))
    planned = planned_rerequests(plans, retrying_legs(spec))
    ok = [p.correl_id for p in plans if p.fate == "ok"]
    seen = {c: (("STOCK",), 3.1) for c in planned} | {ok[0]: (("STOCK",), 2.8)}
    figures = {**expected, **_rerequests(spec, plans, seen)}
    _summary(figures, expected, spec, title="t")
    _check(figures, expected)
    said = capsys.readouterr().out
    assert "Also 1 unplanned re-request: a reply not in by its leg's retry_after_seconds" in said
    assert "(STOCK 2.5 s)" in said and "✗" not in said
    for fault in ({ok[1]: (("STOCK",), 0.4)}, {sorted(planned)[0]: None}):
        broken = {c: v for c, v in (seen | fault).items() if v is not None}
        with pytest.raises(MQGatherError, match="differ from the plan for: rerequested"):
            _check({**expected, **_rerequests(spec, plans, broken)}, expected)
