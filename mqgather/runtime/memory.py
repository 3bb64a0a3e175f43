"""How a long-running process manages its memory: large buffers, and the objects it made
while starting.

glibc serves a buffer above its mmap threshold with mmap and unmaps it when freed, but it
raises that threshold to the size of each mapped buffer freed (up to 32 MB). After the
first large reply, 10 MB bodies then come from the heap, and the heap of each thread
keeps what it once held: the worker's RSS grows with every thread that merged a large
gather. A fixed threshold keeps large bodies mapped and returned on free.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging

log = logging.getLogger("mqgather")

#: mallopt's parameter for the mmap threshold (malloc.h), and the threshold kept: the
#: default glibc starts from, now kept fixed.
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 128 * 1024


def return_large_buffers() -> bool:
    """Fix the C allocator's mmap threshold, where the C library is glibc.

    Returns:
        Whether it was set (False on other C libraries, where nothing is changed).
    """
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    if not done:
        log.debug("mallopt(M_MMAP_THRESHOLD) refused; large buffers may stay in the heap")
    return done


def freeze_startup_objects() -> int:
    """Leave what the process made while starting (modules, classes, the worker) out of
    every later garbage collection; call it once, just before serving.

    Those objects live as long as the process, yet each full collection walks them all:
    in a worker, about 30 ms a time, a pause for every gather in flight. Frozen, a full
    collection walks only what serving made since.

    Returns:
        How many objects are now frozen.
    """
    gc.collect()  # what starting left as garbage is freed, not frozen
    gc.freeze()
    return gc.get_freeze_count()
