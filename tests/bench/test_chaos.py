"""The chaos benchmark's figures: recovery and drain, not the time left to send."""

from __future__ import annotations

import math

from bench.chaos import recovery_and_drain


def test_recovery_counts_from_the_kill_and_drain_from_the_last_request():
    # Gathers a and b were sent before the kill at t=10; c and d after it, the last
    # request at t=30. b's response came at 14 (a duplicate of it later, at 40).
    taken = [b"a", b"b", b"c", b"b", b"d"]
    at = [11.0, 14.0, 25.0, 40.0, 33.5]
    recovered, drained = recovery_and_drain(taken, at, {b"a", b"b", b"c", b"d"},
                                            {b"a", b"b"}, 10.0, 30.0)  # fmt: skip
    assert recovered == 4.0  # b at 14, not the sending that went on until 30
    # Answered before the kill: recovered at once.
    assert recovery_and_drain([b"a"], [9.0], {b"a"}, {b"a"}, 10.0, 8.0) == (0.0, 1.0)
    assert drained == 3.5  # d at 33.5; b's duplicate at 40 is not a later response


def test_a_gather_never_answered_leaves_the_figure_unknown():
    recovered, drained = recovery_and_drain([b"a"], [12.0], {b"a", b"c"}, {b"a"}, 10.0, 30.0)
    assert recovered == 2.0
    assert math.isnan(drained)
    recovered, _ = recovery_and_drain([b"c"], [31.0], {b"a", b"c"}, {b"a"}, 10.0, 30.0)
    assert math.isnan(recovered)


def test_no_restart_recovers_at_once():
    recovered, drained = recovery_and_drain([b"a"], [2.0], {b"a"}, set(), 0.0, 1.0)
    assert (recovered, drained) == (0.0, 1.0)
