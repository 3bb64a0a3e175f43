"""One unit of work at a time per gather (or collector) in a worker process.

A local activity that outlives its timeout is retried while its thread still runs, for
Python cannot stop a thread: an MQ call that hangs (a queue manager that stalls, a
lock held long) leaves the first attempt inside its unit of work when the second
starts. Each looks on the ledger before the other commits, so each would PUT. An
attempt therefore waits for the earlier one's unit of work to end; the ledger then
tells it what was committed.

An attempt whose MQ call returns after its timeout has been retried already, maybe in
another worker or by an operator's salvage: it backs out instead of committing
(:func:`check_in_time`), so that past its timeout no attempt commits.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from mqgather.errors import MQGatherError


class EarlierAttemptRunning(MQGatherError):
    """An earlier attempt of the same MQ work still runs in this process; retried."""


class AttemptOutlived(MQGatherError):
    """An attempt reached its commit after its timeout, and backed out."""


def check_in_time(owner: str, started: datetime, timeout: timedelta | None) -> None:
    """Before a commit: raise :class:`AttemptOutlived` once the attempt of ``owner``'s
    MQ work that started at ``started`` has run ``timeout`` or longer (None: no limit)."""
    if timeout is None:
        return
    late = datetime.now(UTC) - started - timeout
    if late >= timedelta(0):
        raise AttemptOutlived(
            f"an attempt of the MQ work of {owner} reached its commit "
            f"{late.total_seconds():.0f} s after its {timeout.total_seconds():.0f} s "
            "timeout, when a later attempt (or a salvage) may run: it backed out, and the "
            "work is done once by whichever commits within its time"
        )


class OneAtATime:
    """Per-key mutual exclusion between threads, holding no lock for an idle key."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        # key -> (its lock, the threads holding or waiting for it)
        self._keys: dict[str, tuple[threading.Lock, int]] = {}

    def users(self, key: str) -> int:
        """Threads holding or waiting for ``key`` now."""
        with self._guard:
            return self._keys.get(key, (None, 0))[1]

    @contextmanager
    def hold(self, key: str, wait_s: float) -> Iterator[None]:
        """Run the block while no other thread runs one for ``key``.

        Raises:
            EarlierAttemptRunning: another thread held ``key`` for all of ``wait_s``
                seconds. Nothing was done yet, so the caller's retry is safe.
        """
        with self._guard:
            lock, users = self._keys.get(key) or (threading.Lock(), 0)
            self._keys[key] = (lock, users + 1)
        try:
            if not lock.acquire(timeout=wait_s):
                raise EarlierAttemptRunning(
                    f"an earlier attempt of the MQ work of {key} is still inside its unit "
                    f"of work in this worker after {wait_s:g}s (an MQ call that has not "
                    "returned); this attempt waits for it, so that nothing is put twice, "
                    "and is retried"
                )
            try:
                yield
            finally:
                lock.release()
        finally:
            with self._guard:
                lock, users = self._keys[key]
                if users == 1:
                    del self._keys[key]
                else:
                    self._keys[key] = (lock, users - 1)
