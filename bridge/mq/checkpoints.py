"""The embedded queue manager's checkpoints, taken off the message path.

SQLite copies its write-ahead log back into the file (a checkpoint) inside the COMMIT
that takes the log past a thousand pages: that commit pays a few milliseconds, two
fsyncs among them, and with writers taking turns (:mod:`bridge.mq.local_qm`) so does
every writer waiting behind it. Each process that has the queue manager open runs one
thread per file that checkpoints it every :data:`INTERVAL` seconds instead. Passive: it
waits for no reader and holds up no writer, and with nothing new in the log it copies
nothing. The connections keep SQLite's own checkpoint as a backstop, at a log ten times
the size, for a process whose thread falls behind.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from pathlib import Path

#: Seconds between two checkpoints. At the bench's 60 gathers a second, a few hundred
#: pages of log each.
INTERVAL = 0.25
#: Pages of log at which a connection's own commit checkpoints all the same.
BACKSTOP_PAGES = 10_000
#: Seconds a closing connection waits for the thread's checkpoint under way.
STOP_WAIT = 10.0


class _Checkpointer:
    def __init__(self, path: Path) -> None:
        self.users = 0
        self._stop = threading.Event()
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._thread = threading.Thread(target=self._run, name="qm-checkpoints", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.wait(INTERVAL):
                # A checkpoint that fails copies nothing and loses nothing: the log keeps
                # every committed page until one succeeds.
                with _calls, contextlib.suppress(sqlite3.Error):
                    self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        finally:
            with _calls:
                self._db.close()

    def stop(self) -> None:
        """Stop, and close the connection before returning: the last connection to the
        file to close checkpoints it and removes its log, as the process's last
        ``close()`` is expected to."""
        self._stop.set()
        self._thread.join(STOP_WAIT)


_lock = threading.Lock()
_running: dict[tuple[int, str], _Checkpointer] = {}
#: Held by a thread while it is inside SQLite, and across a fork: a child forked in the
#: middle of a checkpoint would inherit SQLite's locks held by a thread it does not have,
#: and hang in its first call.
_calls = threading.Lock()
_fork_hooks = False


def _forked() -> None:
    """In a forked child: no thread came along, so none runs; the locks start free."""
    global _lock, _calls
    _lock, _calls = threading.Lock(), threading.Lock()
    _running.clear()


def _before_fork() -> None:
    _lock.acquire()
    _calls.acquire()


def _after_fork_in_parent() -> None:
    _calls.release()
    _lock.release()


def hold(path: Path) -> None:
    """Checkpoint ``path`` from this process while at least one holder remains."""
    global _fork_hooks
    key = (os.getpid(), str(path.resolve()))
    with _lock:
        if not _fork_hooks:
            _fork_hooks = True
            os.register_at_fork(
                before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_forked
            )
        checkpointer = _running.get(key)
        if checkpointer is None:
            checkpointer = _running[key] = _Checkpointer(path)
        checkpointer.users += 1


def release(path: Path) -> None:
    """One holder of ``path`` is done; the last stops its checkpoints."""
    key = (os.getpid(), str(path.resolve()))
    with _lock:
        checkpointer = _running.get(key)
        if checkpointer is None:
            return
        checkpointer.users -= 1
        if checkpointer.users > 0:
            return
        del _running[key]
    checkpointer.stop()
