"""The embedded queue manager's log is copied back into its file by a thread of each
process that has it open, not inside the commit that fills it."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

import pytest

from bridge.mq import checkpoints
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage, PutOptions, QueueAttributes
from tests.harness import until


def _threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "qm-checkpoints"]


async def _running_threads() -> int:
    return len(_threads())


@pytest.fixture(autouse=True)
def _none_left_running():
    # Every test's connections are closed by its end, so no thread of theirs may remain.
    yield
    assert not checkpoints._running


async def test_what_is_committed_reaches_the_file_with_no_commit_checkpointing(tmp_path):
    path = tmp_path / "qm.db"
    with LocalQueueManager(path) as qm:
        qm.define(QueueAttributes(name="OUT"))
        # A commit checkpoints only past the backstop; these few pages stay far below it.
        pages = qm._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
        assert pages == checkpoints.BACKSTOP_PAGES
        size = path.stat().st_size
        for i in range(50):
            qm.put("OUT", MQMessage(body=bytes([i]) * 8000), PutOptions(syncpoint=False))

        # Only a checkpoint writes the file itself; the commits wrote the log.
        async def file_size() -> int:
            return path.stat().st_size

        await until(file_size, lambda grown: grown > size + 50 * 8000)


async def test_one_thread_per_file_runs_while_a_connection_has_it_open(tmp_path: Path):
    first = LocalQueueManager(tmp_path / "a.db")
    second = LocalQueueManager(tmp_path / "a.db")
    other = LocalQueueManager(tmp_path / "b.db")
    assert len(_threads()) == 2
    first.close()
    other.close()
    await until(_running_threads, lambda n: n == 1)
    second.close()
    await until(_running_threads, lambda n: n == 0)


def _open_and_put(path: str) -> None:
    with LocalQueueManager(path) as qm:
        qm.put("OUT", MQMessage(body=b"from the child"), PutOptions(syncpoint=False))


def test_a_process_forked_while_checkpoints_run_opens_the_file(tmp_path, monkeypatch):
    # Checkpoints back to back, so that a fork all but always lands inside one: a child
    # that inherited SQLite's locks from the thread would hang in its first call.
    monkeypatch.setattr(checkpoints, "INTERVAL", 0.0)
    path = tmp_path / "qm.db"
    fork = multiprocessing.get_context("fork")
    with LocalQueueManager(path) as qm:
        qm.define(QueueAttributes(name="OUT"))
        for _ in range(20):
            child = fork.Process(target=_open_and_put, args=(str(path),), daemon=True)
            child.start()
            child.join(30)
            if child.is_alive():
                child.kill()
                pytest.fail("a forked child hung on the file")
            assert child.exitcode == 0
        assert len(list(qm.browse("OUT"))) == 20
