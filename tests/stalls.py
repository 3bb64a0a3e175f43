"""A worker's queue manager that stalls mid-PUT, for tests of what happens meanwhile."""

from __future__ import annotations

import threading
from pathlib import Path

from temporalio import activity

from bridge.mq.local_qm import LocalQueueManager


class PutHangs(LocalQueueManager):
    """A queue manager whose first PUT to ``queue`` hangs until released; it tells what
    that unit of work did next, and how it ended."""

    def __init__(self, path: Path, queue: str, hung: Hung) -> None:
        super().__init__(path)
        self._queue, self._hung, self._putting = queue, hung, False

    def put(self, queue, message, options=None, **kw):
        if queue == self._queue and not self._hung.putting.is_set():
            self._putting = True
            self._hung.putting.set()
            if self._hung.until_cancelled:
                activity.wait_for_cancelled_sync(120)
                assert activity.is_cancelled()
            else:
                assert self._hung.release.wait(120)
        if self._putting:
            self._hung.calls.append(f"put {queue}")
        return super().put(queue, message, options, **kw)

    def commit(self) -> None:
        super().commit()
        self._end("committed")

    def backout(self) -> None:
        super().backout()
        self._end("backed out")

    def _end(self, how: str) -> None:
        if self._putting:
            self._putting = False
            self._hung.calls.append(how)


class Hung:
    """A worker whose first PUT to ``queue`` hangs until the test releases it (or, with
    ``until_cancelled``, until its attempt is cancelled): the connections it uses
    (:meth:`transport`), and what that unit of work did from the hung PUT on."""

    def __init__(self, queue: str, *, until_cancelled: bool = False) -> None:
        self.queue, self.until_cancelled = queue, until_cancelled
        self.putting, self.release = threading.Event(), threading.Event()
        #: Its puts ("put QUEUE") once the hung one returned, then "committed" or
        #: "backed out".
        self.calls: list[str] = []

    @property
    def ended(self) -> list[str]:
        """How that unit of work ended: empty while it runs."""
        return [c for c in self.calls if not c.startswith("put ")]

    def transport(self, path: Path) -> LocalQueueManager:
        return PutHangs(path, self.queue, self)
