"""The test harness's own promises, where a test relies on them."""

from __future__ import annotations

import socket

from temporalio.api.workflowservice.v1 import GetSystemInfoRequest

import tests.harness as harness
from mqgather.runtime.temporal import dev_server_args


async def test_a_dev_server_whose_port_is_taken_as_it_starts_is_started_on_others(
    tmp_path, monkeypatch
):
    # The first ports handed out are taken before the server binds them, as another
    # process can take a port found free; the second are free. (Bound, not listening: a
    # client's connection is refused at once instead of waiting on a peer that never
    # answers.)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
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
