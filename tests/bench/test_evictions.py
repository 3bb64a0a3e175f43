"""bench.evictions counts what is left in reference cycles, and only that, and leaves the
collector as it found it."""

from __future__ import annotations

import gc
from collections import Counter

from bench.evictions import cyclic_garbage, report


class Node:
    """An object of a type no other code makes, in a cycle of its own."""

    def __init__(self) -> None:
        self.me = self


class Leaf:
    """An object of a type no other code makes, in no cycle."""


async def test_objects_left_in_cycles_are_counted_by_type_and_the_rest_are_not() -> None:
    kept: list[Node] = []

    async def leave_garbage() -> None:
        for _ in range(40):
            Node()  # a cycle: only a collection frees it
        for _ in range(25):
            leaf = Leaf()  # freed at once by its count of references
        del leaf
        kept.extend(Node() for _ in range(5))  # in cycles, but still reachable

    found = await cyclic_garbage(leave_garbage)
    assert found[f"{Node.__module__}.{Node.__qualname__}"] == 40
    assert found[f"{Leaf.__module__}.{Leaf.__qualname__}"] == 0
    assert len(kept) == 5


async def test_the_collector_is_left_as_it_was() -> None:
    async def nothing() -> None:
        assert not gc.isenabled()  # off while the workflows open

    assert gc.isenabled()
    await cyclic_garbage(nothing)
    assert gc.isenabled() and gc.get_debug() == 0 and gc.garbage == []
    gc.disable()
    try:
        await cyclic_garbage(nothing)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_report_sets_each_kind_against_the_floor_and_names_the_gap() -> None:
    found = {
        "gather": Counter({"builtins.frame": 1300, "builtins.list": 2400, "x.Same": 500}),
        "visible floor": Counter({"builtins.list": 900, "x.Same": 500}),
        "floor": Counter({"builtins.list": 800, "x.Same": 500}),
    }
    text = report(found, n=100, top=2)
    assert "gather            42.0   / floor 3.23" in text
    assert "floor             13.0   / floor 1.00" in text
    assert "+16.0  builtins.list" in text and "+13.0  builtins.frame" in text
    assert "x.Same" not in text  # no gap: not among the top two
