"""The worker's budget of held-reply bytes in memory at once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest

from mqgather.runtime.budget import BudgetBusy, ByteBudget


def holding(hold: Callable[[], AbstractContextManager], inside: threading.Event,
            leave: threading.Event) -> threading.Thread:  # fmt: skip
    """A thread inside ``hold()`` (once it may enter) until ``leave`` is set."""

    def run() -> None:
        with hold():
            inside.set()
            leave.wait(30)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _holding(budget: ByteBudget, size: int, inside: threading.Event, leave: threading.Event):
    return holding(lambda: budget.hold(size, wait_s=30), inside, leave)


def test_a_second_holder_waits_until_the_first_leaves_room():
    budget = ByteBudget(100)
    first_in, first_out = threading.Event(), threading.Event()
    second_in, second_out = threading.Event(), threading.Event()
    first = _holding(budget, 60, first_in, first_out)
    assert first_in.wait(10)
    second = _holding(budget, 60, second_in, second_out)
    assert not second_in.wait(0.3)  # 60 + 60 > 100: it waits
    first_out.set()
    assert second_in.wait(10)
    second_out.set()
    first.join(10)
    second.join(10)
    assert budget.peak == 60


def test_holders_that_fit_run_together():
    budget = ByteBudget(100)
    a_in, b_in, out = threading.Event(), threading.Event(), threading.Event()
    threads = [_holding(budget, 40, a_in, out), _holding(budget, 40, b_in, out)]
    assert a_in.wait(10) and b_in.wait(10)
    assert budget.peak == 80
    out.set()
    for thread in threads:
        thread.join(10)


def test_one_larger_than_the_whole_budget_runs_alone():
    budget = ByteBudget(100)
    with budget.hold(10_000, wait_s=1):
        assert budget.peak == 100  # counted as the whole budget
        with pytest.raises(BudgetBusy, match="held-reply budget"), budget.hold(1, wait_s=0.05):
            pass


def test_a_holder_that_cannot_fit_in_time_fails_naming_the_budget():
    budget = ByteBudget(100)
    with (
        budget.hold(90, wait_s=1),
        pytest.raises(BudgetBusy, match=r"20 held bytes .*\(90 of 100 .*--held-mb"),
        budget.hold(20, wait_s=0.05),
    ):
        pass
    with budget.hold(20, wait_s=0.05):  # room again once the first left
        pass


def test_no_limit_and_nothing_held_never_wait():
    unlimited = ByteBudget(0)
    with unlimited.hold(10**9, wait_s=0), unlimited.hold(10**9, wait_s=0):
        pass
    budget = ByteBudget(10)
    with budget.hold(10, wait_s=1), budget.hold(0, wait_s=0):
        pass
