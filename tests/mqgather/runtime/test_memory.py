"""Large buffers go back to the system when freed; what starting made is left out of
later collections."""

from __future__ import annotations

import gc
import platform

import pytest

from mqgather.runtime.memory import freeze_startup_objects, return_large_buffers


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_the_mmap_threshold_is_fixed_where_the_c_library_is_glibc():
    assert return_large_buffers() is True


def test_what_the_process_made_while_starting_is_left_out_of_later_collections():
    started = [[n] for n in range(1000)]  # containers, which the collector tracks
    try:
        frozen = freeze_startup_objects()
        assert frozen >= len(started)
        # A frozen object that dies meanwhile (in another of the suite's threads, say)
        # leaves the frozen set, so the count may since have fallen: by dozens in a busy
        # suite, never by more than a sliver of what was frozen.
        assert 0 <= frozen - gc.get_freeze_count() <= frozen // 100
        walked = {id(o) for o in gc.get_objects()}
        assert not any(id(o) in walked for o in started)
        served = [[n] for n in range(10)]  # made after: collected as before
        walked = {id(o) for o in gc.get_objects()}
        assert all(id(o) in walked for o in served)
    finally:
        gc.unfreeze()
