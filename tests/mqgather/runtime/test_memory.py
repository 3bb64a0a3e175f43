"""Large buffers go back to the system when freed."""

from __future__ import annotations

import platform

import pytest

from mqgather.runtime.memory import return_large_buffers


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_the_mmap_threshold_is_fixed_where_the_c_library_is_glibc():
    assert return_large_buffers() is True
