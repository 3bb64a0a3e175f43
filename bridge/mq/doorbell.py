"""A wake-up for a get that waits on the embedded queue manager.

Every commit to the queue manager's file appends to its write-ahead log, whichever
process or connection makes it. On Linux the kernel reports each of those writes through
inotify, so a waiting get can sleep until the log changes instead of looking at the
file every few milliseconds. Where inotify cannot be had (another system, the user's
inotify instances used up, no log file) :func:`open_doorbell` returns None and the
caller keeps looking on its own; a missed ring costs only time, never a message, since
the caller checks the file itself after each wake-up.
"""

from __future__ import annotations

import ctypes
import math
import os
import select
import struct
import sys
import weakref
from functools import cache
from pathlib import Path

# From <sys/inotify.h>.
_IN_MODIFY = 0x002
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_IGNORED = 0x8000
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
#: What is watched: a write to the log, or the log going away.
_WATCHED = _IN_MODIFY | _IN_DELETE_SELF | _IN_MOVE_SELF
#: The log was removed or its watch dropped: no more rings will come.
_GONE = _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_IGNORED
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; a name of len bytes follows
#: Room for a burst of events; more stay queued for the next read.
_READ_BYTES = 65536


@cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    if not (hasattr(libc, "inotify_init1") and hasattr(libc, "inotify_add_watch")):
        return None  # a C library without them
    return libc


class Doorbell:
    """Rings when the watched file is written. Kept open between waits (closing an
    inotify instance makes the kernel wait out a grace period, milliseconds), so rings
    queue up meanwhile: ``wait(0)`` takes them before a wait that must not see them."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self.gone = False
        # A connection dropped without close() must not keep its watch for ever: the
        # user's inotify instances are few (128 by default).
        self._release = weakref.finalize(self, os.close, fd)
        # poll, not select: a busy process's descriptors may pass select's limit of 1024.
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)

    def wait(self, timeout: float) -> bool:
        """Block until the file is written or ``timeout`` seconds pass; whether it rang.

        Every ring queued since the last wait is taken with it."""
        if not self._poll.poll(max(0, math.ceil(timeout * 1000))):  # ms, never 0 too soon
            return False
        while True:
            try:
                data = os.read(self._fd, _READ_BYTES)
            except BlockingIOError:
                return True
            if not data:
                return True
            offset = 0
            while offset + _EVENT.size <= len(data):
                _, mask, _, length = _EVENT.unpack_from(data, offset)
                if mask & _GONE:
                    self.gone = True
                offset += _EVENT.size + length

    def close(self) -> None:
        """Release the watch (once, however often called)."""
        self._release()


def open_doorbell(path: Path) -> Doorbell | None:
    """A doorbell on writes to ``path``, or None where the system cannot give one."""
    libc = _libc()
    if libc is None:
        return None
    fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
    if fd < 0:
        return None  # EMFILE: the user's inotify instances are all in use
    if libc.inotify_add_watch(fd, os.fsencode(path), _WATCHED) < 0:
        os.close(fd)  # the file is not there (yet), or cannot be watched
        return None
    return Doorbell(fd)
