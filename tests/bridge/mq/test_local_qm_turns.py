"""Writers on the embedded queue manager take turns on one file lock: a write waits
about as long as the one before it takes, not SQLite's sleeps of 1, 2, 5 ms and on."""

from __future__ import annotations

import fcntl
import multiprocessing
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import IO, Any

import pytest

from bridge.mq import local_qm
from bridge.mq.errors import MQError
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage, PutOptions, QueueAttributes

NO_SYNCPOINT = PutOptions(syncpoint=False)


@pytest.fixture
def qm(tmp_path: Path) -> Iterator[LocalQueueManager]:
    qm = LocalQueueManager(tmp_path / "qm.db")
    qm.define(QueueAttributes(name="OUT"))
    yield qm
    qm.close()


def _turn_path(tmp_path: Path) -> Path:
    return tmp_path / "qm.db.locks" / local_qm.TURN_FILE


@pytest.fixture
def turn(tmp_path: Path) -> Iterator[IO[str]]:
    """The writers' turn, held as another connection's write holds it."""
    with open(_turn_path(tmp_path), "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield held


def _pauses(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set once the queue manager pauses, as a writer waiting for its turn does."""
    paused = threading.Event()

    def sleep(seconds: float) -> None:
        paused.set()
        time.sleep(seconds)

    clock = SimpleNamespace(time=time.time, monotonic=time.monotonic, sleep=sleep)
    monkeypatch.setattr(local_qm, "time", clock)
    return paused


def _depth(qm: LocalQueueManager, queue: str = "OUT") -> int:
    return len(list(qm.browse(queue)))


@pytest.fixture
def reader(qm: LocalQueueManager, tmp_path: Path) -> Iterator[LocalQueueManager]:
    """A second connection, opened before the turn is held (opening one writes)."""
    with LocalQueueManager(tmp_path / "qm.db") as reader:
        yield reader


def test_a_write_waits_for_the_writers_turn_and_goes_on_once_it_passes(
    qm, reader, turn, monkeypatch
):
    paused = _pauses(monkeypatch)
    writing = threading.Thread(target=qm.put, args=("OUT", MQMessage(body=b"x"), NO_SYNCPOINT))
    writing.start()
    assert paused.wait(30), "the put did not wait for the turn another writer holds"
    assert writing.is_alive() and _depth(reader) == 0  # a read takes no turn
    fcntl.flock(turn, fcntl.LOCK_UN)
    writing.join(30)
    assert not writing.is_alive() and _depth(reader) == 1


def _turn_is_free(tmp_path: Path) -> bool:
    with open(_turn_path(tmp_path), "a") as other:
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(other, fcntl.LOCK_UN)
        return True


def test_a_write_passes_its_turn_on_when_it_ends_well_or_badly(qm, tmp_path):
    qm.put("OUT", MQMessage(body=b"x"), NO_SYNCPOINT)
    assert _turn_is_free(tmp_path)
    with pytest.raises(MQError, match="MQRC_UNKNOWN_OBJECT_NAME"):
        qm.put("NO.SUCH.QUEUE", MQMessage(body=b"x"), NO_SYNCPOINT)
    assert _turn_is_free(tmp_path)
    # Under syncpoint the write is the commit's.
    qm.put("OUT", MQMessage(body=b"y"), PutOptions(syncpoint=True))
    qm.commit()
    assert _turn_is_free(tmp_path) and _depth(qm) == 2


def _hold_the_turn(path: str, holding: Any) -> None:
    with open(path, "a") as turn:
        fcntl.flock(turn, fcntl.LOCK_EX)
        holding.set()
        time.sleep(3600)  # until killed


def test_a_turn_held_by_a_process_that_dies_passes_on_with_it(qm, tmp_path):
    # A writer killed in the middle of its write (SIGKILL, no finally) frees the turn.
    holding = multiprocessing.Event()
    holder = multiprocessing.Process(
        target=_hold_the_turn, args=(str(_turn_path(tmp_path)), holding), daemon=True
    )
    holder.start()
    assert holding.wait(30)
    assert not _turn_is_free(tmp_path)
    holder.kill()
    holder.join(30)
    assert _turn_is_free(tmp_path)
    qm.put("OUT", MQMessage(body=b"x"), NO_SYNCPOINT)
    assert _depth(qm) == 1


def test_a_turn_that_never_comes_leaves_the_write_to_sqlites_own_wait(qm, turn, monkeypatch):
    # A writer stuck holding the turn (stopped, say) holds up the others no longer than
    # the busy timeout; then SQLite decides, and here nothing holds its file.
    monkeypatch.setattr(local_qm, "_BUSY_TIMEOUT_MS", 50)
    qm.put("OUT", MQMessage(body=b"x"), NO_SYNCPOINT)
    assert _depth(qm) == 1
