"""A worker's budget of held-reply bytes in memory at once.

A gather's held replies are read into memory to merge them, and its response is built
there too: about twice the gather's bytes while its activity runs. Eight activity
threads merging 30 MB gathers at once would hold half a gigabyte. The budget lets
activities through while their held bytes fit, and one gather larger than the whole
budget through alone.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from mqgather.errors import MQGatherError


class BudgetBusy(MQGatherError):
    """The held bytes did not fit within the wait; the activity is retried."""


class ByteBudget:
    """Bytes in use by concurrent activities, at most ``capacity`` (0: no limit)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._used = 0
        self._peak = 0
        self._ready = threading.Condition()

    @property
    def peak(self) -> int:
        """The most bytes held at once so far."""
        return self._peak

    @contextmanager
    def hold(self, size: int, wait_s: float) -> Iterator[None]:
        """Hold ``size`` bytes (at most the whole budget) while the block runs.

        Raises:
            BudgetBusy: they did not fit within ``wait_s`` seconds. Nothing was done yet,
                so the caller's retry is safe; waiting longer would outlive the
                activity's timeout while its thread still waits to do the work.
        """
        need = min(size, self.capacity) if self.capacity else 0
        if need <= 0:
            yield
            return
        with self._ready:
            if not self._ready.wait_for(lambda: self._used + need <= self.capacity, wait_s):
                raise BudgetBusy(
                    f"{size} held bytes wait for the worker's held-reply budget "
                    f"({self._used} of {self.capacity} bytes in use for {wait_s:g}s); "
                    "retried. Raise --held-mb if the worker has the memory"
                )
            self._used += need
            self._peak = max(self._peak, self._used)
        try:
            yield
        finally:
            with self._ready:
                self._used -= need
                self._ready.notify_all()
