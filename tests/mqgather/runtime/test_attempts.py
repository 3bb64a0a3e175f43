"""One unit of work at a time per gather in a worker: an attempt waits for the one
before it that still runs."""

from __future__ import annotations

import threading

import pytest

from mqgather.runtime.attempts import EarlierAttemptRunning, OneAtATime
from tests.mqgather.runtime.test_budget import holding


def _holding(turns: OneAtATime, key: str, inside: threading.Event, leave: threading.Event):
    return holding(lambda: turns.hold(key, wait_s=30), inside, leave)


def _until(check, timeout: float = 10.0) -> None:
    done = threading.Event()
    deadline = threading.Timer(timeout, done.set)
    deadline.start()
    try:
        while not check():
            if done.wait(0.01):
                raise AssertionError("condition not met in time")
    finally:
        deadline.cancel()


def test_a_second_attempt_for_the_same_key_waits_until_the_first_leaves():
    turns = OneAtATime()
    first_in, first_out = threading.Event(), threading.Event()
    second_in, second_out = threading.Event(), threading.Event()
    first = _holding(turns, "gather:a", first_in, first_out)
    assert first_in.wait(10)
    second = _holding(turns, "gather:a", second_in, second_out)
    _until(lambda: turns.users("gather:a") == 2)  # the second is waiting, not inside
    assert not second_in.is_set()
    first_out.set()
    assert second_in.wait(10)
    second_out.set()
    first.join(10)
    second.join(10)
    assert turns.users("gather:a") == 0  # an idle key keeps no lock


def test_different_keys_run_together():
    turns = OneAtATime()
    a_in, b_in, out = threading.Event(), threading.Event(), threading.Event()
    threads = [_holding(turns, "gather:a", a_in, out), _holding(turns, "gather:b", b_in, out)]
    assert a_in.wait(10) and b_in.wait(10)
    out.set()
    for thread in threads:
        thread.join(10)


def test_an_attempt_that_waits_too_long_fails_naming_the_key_and_leaves_nothing_held():
    turns = OneAtATime()
    with turns.hold("gather:a", wait_s=1):
        with (
            pytest.raises(EarlierAttemptRunning, match=r"of gather:a is still inside .*0\.05s"),
            turns.hold("gather:a", wait_s=0.05),
        ):
            pass
        assert turns.users("gather:a") == 1
    assert turns.users("gather:a") == 0
    with turns.hold("gather:a", wait_s=0.05):  # free again once the first left
        pass


def test_an_error_inside_releases_the_key():
    turns = OneAtATime()
    with pytest.raises(ValueError), turns.hold("gather:a", wait_s=1):
        raise ValueError("the work failed")
    with turns.hold("gather:a", wait_s=0.05):
        pass
    assert turns.users("gather:a") == 0


def test_an_attempt_commits_only_within_its_timeout():
    from datetime import UTC, datetime, timedelta

    from mqgather.runtime.attempts import AttemptOutlived, check_in_time

    now, minute = datetime.now(UTC), timedelta(seconds=60)
    check_in_time("gather:a:00", now - timedelta(seconds=59), minute)
    check_in_time("gather:a:00", now - timedelta(days=1), None)  # no limit
    with pytest.raises(AttemptOutlived, match=r"gather:a:00 reached its commit \d+ s after"):
        check_in_time("gather:a:00", now - timedelta(seconds=61), minute)
