"""The test harness's own promises, where a test relies on them."""

from __future__ import annotations

import socket

import pytest
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest

import tests.harness as harness
from mqgather.runtime.temporal import dev_server_args


@pytest.mark.parametrize("listening", [False, True], ids=["bound", "listening"])
@pytest.mark.timeout(20)  # a client left waiting on the listener waits 30 s
async def test_a_dev_server_whose_port_is_taken_as_it_starts_is_started_on_others(
    tmp_path, monkeypatch, listening
):
    # The first ports handed out are taken before the server binds them, as another
    # process can take a port found free; the second are free. A process listening on
    # the port never answers the client: the wait ends when the server exits, not when
    # the client gives up.
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    if listening:
        taken.listen()
    found = harness.free_ports
    handed: list[list[int]] = []

    def ports(n: int) -> list[int]:
        chosen = [taken.getsockname()[1], *found(n - 1)] if not handed else found(n)
        handed.append(chosen)
        return chosen

    monkeypatch.setattr(harness, "free_ports", ports)
    with taken:
        server, client, chosen = await harness.start_dev_server(
            tmp_path, lambda p: dev_server_args(str(tmp_path / "t.db"), *p), 2
        )
    try:
        assert len(handed) == 2 and chosen == handed[1]
        assert await client.workflow_service.get_system_info(GetSystemInfoRequest())
        # The first start's output is kept for a failure to quote.
        assert (tmp_path / "dev-server-0.log").read_text().strip()
    finally:
        server.terminate()
        server.wait(30)


def test_no_port_handed_out_is_one_a_browser_refuses(monkeypatch):
    # A UI on port 4045 was refused by Chromium (net::ERR_UNSAFE_PORT), and its test
    # failed: the first choice here is such a port, the port handed out the next free one.
    choices = iter([4045, 6666])

    def choose(low: int, high: int) -> int:
        return next(choices, 0) or _free_below(high)

    monkeypatch.setattr(harness.random, "randrange", choose)
    port = harness.free_ports(1)[0]
    assert port not in harness.BROWSER_UNSAFE_PORTS


def _free_below(high: int) -> int:
    for port in range(20_000, high):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port")
