"""A salvage's lease on its own: when it stops a salvage."""

from __future__ import annotations

import asyncio

import pytest

from mqgather.constants import SALVAGE_LEASE_MARGIN_SECONDS
from tests.harness import until
from workers.lease import Lease, SalvageStopped, lease_id


def test_a_lease_stops_its_salvage_before_it_lapses():
    """With less than the margin left, no unit of work is begun: one begun then could
    commit after another salvage took the lease."""
    check = Lease("gather:a:00", SALVAGE_LEASE_MARGIN_SECONDS).checker()
    with pytest.raises(SalvageStopped, match=r"lease \(salvage:gather:a:00\) was about to lapse"):
        check()


def test_a_lease_with_time_left_lets_its_salvage_go_on_until_asked_to_stop():
    lease = Lease("gather:a:00", SALVAGE_LEASE_MARGIN_SECONDS + 60)
    asked = [False]
    check = lease.checker(lambda: asked[0])
    check()
    assert lease.stopped is None
    asked[0] = True
    with pytest.raises(SalvageStopped, match="gather:a:00 stopped as asked"):
        check()
    assert lease.stopped == "stopped as asked"


def test_a_lease_is_named_after_the_workflow_it_guards():
    assert lease_id("collect:c:France") == "salvage:collect:c:France"


async def test_a_salvage_stops_once_its_lease_was_ended_by_hand(temporal_env):
    """An operator terminates a running salvage's lease (from the UI, say): another
    salvage could now start, so this one stops before its next unit of work."""
    from workers.lease import salvage_lease

    client = temporal_env.client
    async with salvage_lease(client, "gather:ended-by-hand:00") as lease:
        check = lease.checker()
        await asyncio.to_thread(check)  # held
        await client.get_workflow_handle(lease.id).terminate(reason="looked stuck")

        async def stopped() -> str | None:
            try:
                await asyncio.to_thread(check)
            except SalvageStopped as exc:
                return str(exc)
            return None

        said = await until(stopped, bool)
    assert "its lease (salvage:gather:ended-by-hand:00) was ended meanwhile (terminated)" in said
