"""The doorbell a waiting get sleeps on: it rings on writes to the watched file."""

from __future__ import annotations

import gc
import os
import resource
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.mq.doorbell import Doorbell, open_doorbell

#: A descriptor past select()'s limit, as a busy process's may be.
HIGH_FD = 1500

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the doorbell is Linux's inotify"
)


def _watch(tmp_path: Path) -> tuple[Path, Doorbell]:
    """An empty log and a bell on it."""
    log = tmp_path / "qm.db-wal"
    log.write_bytes(b"")
    bell = open_doorbell(log)
    assert bell is not None
    return log, bell


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[Path, Doorbell]]:
    log, bell = _watch(tmp_path)
    yield log, bell
    bell.close()


def test_a_write_rings_once_however_many_wait(watched: tuple[Path, Doorbell]) -> None:
    log, bell = watched
    assert not bell.wait(0)
    with log.open("ab") as f:
        f.write(b"frame")
        f.flush()
    assert bell.wait(5)
    assert not bell.wait(0), "the ring was taken by the wait that saw it"
    for _ in range(3):
        with log.open("ab") as f:
            f.write(b"frame")
    assert bell.wait(0), "rings queue up between waits"
    assert not bell.wait(0)
    assert not bell.gone


def test_a_removed_file_leaves_the_bell_gone(watched: tuple[Path, Doorbell]) -> None:
    log, bell = watched
    log.unlink()
    assert bell.wait(5)
    assert bell.gone


def test_no_file_no_bell(tmp_path: Path) -> None:
    assert open_doorbell(tmp_path / "absent-wal") is None


def test_a_bell_dropped_without_closing_releases_its_watch(tmp_path: Path) -> None:
    _, bell = _watch(tmp_path)  # not the fixture's: it would hold the bell
    fd = bell._fd
    os.fstat(fd)
    del bell
    gc.collect()
    with pytest.raises(OSError):
        os.fstat(fd)


def test_a_bell_on_a_descriptor_past_1024_still_rings(watched: tuple[Path, Doorbell]) -> None:
    log, bell = watched
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft <= HIGH_FD:
        if hard != resource.RLIM_INFINITY and hard <= HIGH_FD:
            pytest.skip(f"this process may open no descriptor past {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (HIGH_FD + 1, hard))
    try:
        high = Doorbell(os.dup2(bell._fd, HIGH_FD))
        try:
            assert not high.wait(0)
            with log.open("ab") as f:
                f.write(b"frame")
            assert high.wait(5)
        finally:
            high.close()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
