"""`mqgather worker` and `bridge` wait for Temporal instead of exiting."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest

from mqgather.runtime.temporal import dev_server_args
from tests.harness import free_port, free_ports, temporal_binary


def _env(port: int | str) -> dict[str, str]:
    """This process's environment pointed at Temporal on a local port or at an address."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "MQGATHER_"))}
    env["TEMPORAL_ADDRESS"] = f"localhost:{port}" if isinstance(port, int) else port
    return env


def _collect(proc: subprocess.Popen[bytes]) -> list[str]:
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.append(raw.decode(errors="replace"))

    threading.Thread(target=read, daemon=True).start()
    return lines


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)  # polling another process's output; nothing to await on
    raise AssertionError(f"{what} did not happen within {timeout}s")


def _dev_server(tmp_path, port: int) -> subprocess.Popen[bytes]:
    binary = temporal_binary()
    # Its output goes to a file a failing test can quote (a port taken meanwhile, say).
    ui_port = next(p for p in free_ports(2) if p != port)
    with open(tmp_path / "server.log", "wb") as log:
        return subprocess.Popen(
            [binary, *dev_server_args(str(tmp_path / "t.db"), port, ui_port)],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip


def _server_gone(server: subprocess.Popen[bytes], tmp_path) -> str:
    """Why the dev server is not there ("" while it runs)."""
    if server.poll() is None:
        return ""
    log = (tmp_path / "server.log").read_text(errors="replace")[-2000:]
    return f"the dev server exited ({server.returncode}) before the worker served:\n{log}"


@pytest.mark.parametrize("role", ["worker", "bridge"])
@pytest.mark.timeout(180)
def test_a_process_waits_for_temporal_then_serves(tmp_path, role):
    port = free_port()
    mq = f"local:{tmp_path / 'qm.db'}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqgather.cli", role, "--mq", mq], cwd=tmp_path, env=_env(port),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    server = None
    try:
        lines = _collect(proc)
        _wait_for(lambda: sum("not reachable (attempt" in x for x in lines) >= 2, 60,
                  "two logged attempts")  # fmt: skip
        assert proc.poll() is None, "".join(lines)
        assert any(f"Temporal at localhost:{port}" in x for x in lines)
        server = _dev_server(tmp_path, port)
        ready = "worker on task queue" if role == "worker" else "bridge serving"
        _wait_for(lambda: any(ready in x for x in lines), 90, f"'{ready}'")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        if server is not None:
            server.terminate()
            server.wait(60)
    assert proc.returncode == 0


def test_fail_fast_exits_at_once_naming_what_is_missing(tmp_path):
    port = free_port()
    out = subprocess.run(
        [sys.executable, "-m", "mqgather.cli", "worker", "--fail-fast", "--mq",
         f"local:{tmp_path / 'qm.db'}"],
        cwd=tmp_path, env=_env(port), capture_output=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1
    assert f"Temporal at localhost:{port} is not reachable" in out.stderr.decode()


async def test_a_namespace_that_does_not_exist_is_named_in_one_line(temporal_env, tmp_path):
    namespace = "no-such-namespace"
    env = _env(temporal_env.client.service_client.config.target_host)
    env["TEMPORAL_NAMESPACE"] = namespace
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "mqgather.cli", "worker", "--fail-fast", "--mq",
         f"local:{tmp_path / 'qm.db'}"],
        cwd=tmp_path, env=env, capture_output=True, timeout=60,
    )  # fmt: skip
    err = out.stderr.decode()
    assert out.returncode == 1, err
    assert "Traceback" not in err
    assert f"TEMPORAL_NAMESPACE: namespace '{namespace}' does not exist" in err
    assert f"temporal operator namespace create --namespace {namespace}" in err


@pytest.mark.timeout(180)
def test_a_worker_whose_server_went_away_ends_when_asked(tmp_path):
    """The server dies as the worker starts (as when `mqgather dev` is killed): asked to
    stop, the worker ends cleanly instead of hanging or dying with a traceback."""
    port = free_port()
    server = _dev_server(tmp_path, port)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqgather.cli", "worker", "--mq", f"local:{tmp_path / 'qm.db'}"],
        cwd=tmp_path, env=_env(port), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        # Read here, not in a thread: the kill follows the line at once, while the worker
        # is most likely still asking the server for its namespace.
        while not any("worker on task queue" in x for x in lines):
            line = proc.stdout.readline().decode(errors="replace")
            assert line, "the worker exited: " + "".join(lines)
            lines.append(line)
            # The worker logs each attempt to reach the server: one that cannot start
            # would have it wait for ever.
            gone = _server_gone(server, tmp_path)
            assert not gone, gone
    finally:
        server.kill()
        server.wait(60)
        proc.send_signal(signal.SIGTERM)
    try:
        rest, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()  # hung: fail, but leave nothing running
        raise
    lines.append(rest.decode(errors="replace"))
    assert proc.returncode == 0, "".join(lines)
    assert not any("Traceback" in x for x in lines), "".join(lines)


def test_back_ends_without_their_queues_end_naming_the_queue_and_what_to_do(tmp_path):
    # Each back end used to die in its thread with a traceback, the process left idle.
    out = subprocess.run(
        [sys.executable, "-m", "mqgather.cli", "backends", "--mq", f"local:{tmp_path / 'qm.db'}"],
        cwd=tmp_path, env=_env(free_port()), capture_output=True, timeout=60,
    )  # fmt: skip
    err = out.stderr.decode()
    assert out.returncode == 1, err
    assert "Traceback" not in err
    assert "MQRC_UNKNOWN_OBJECT_NAME (2085): queue 'BACKEND." in err
    assert "`mqgather queues setup`" in err


@pytest.mark.timeout(180)
async def test_registering_search_attributes_outlasts_a_server_that_restarts(tmp_path, caplog):
    """The server goes away between the worker's connect and its registration of the
    search attributes (it restarts): the worker retries instead of dying, and registers
    them once the server is back."""
    from mqgather.cli.processes import registered
    from mqgather.errors import MQGatherError
    from mqgather.names import AGGREGATE_NAME
    from tests.harness import connect_when_up

    port = free_port()
    server = _dev_server(tmp_path, port)
    try:
        client = await connect_when_up(f"localhost:{port}", server=server)
        server.kill()
        server.wait(30)
        with pytest.raises(MQGatherError, match=f"Temporal at localhost:{port} is not reachable"):
            await registered(client, asyncio.Event(), fail_fast=True)
        caplog.set_level("WARNING", logger="mqgather")
        waiting = asyncio.create_task(registered(client, asyncio.Event(), fail_fast=False))
        while not any("dropped the call" in r.getMessage() for r in caplog.records):
            assert not waiting.done(), waiting
            await asyncio.sleep(0.05)  # polling the log for the retry it writes
        server = _dev_server(tmp_path, port)
        assert await asyncio.wait_for(waiting, 120) is True
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
    finally:
        server.kill()
        server.wait(30)
    assert AGGREGATE_NAME.name in listed.custom_attributes
