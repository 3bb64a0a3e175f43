"""A get that waits on the embedded queue manager: woken by a commit, idle meanwhile."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.mq import doorbell, local_qm
from bridge.mq.errors import MQError, NoMessageAvailable
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage, QueueAttributes

LINUX = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the doorbell is Linux's inotify"
)
#: Long enough that a waiter woken only by its own clock fails the test's guard.
SLOW_CLOCK = 60.0


@pytest.fixture
def qms(tmp_path: Path) -> Iterator[tuple[LocalQueueManager, LocalQueueManager]]:
    waiter = LocalQueueManager(tmp_path / "qm.db")
    waiter.define(QueueAttributes(name="IN"))
    putter = LocalQueueManager(tmp_path / "qm.db")
    yield waiter, putter
    waiter.close()
    putter.close()


def _looks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the waiter's looks at the file (one per entry)."""
    looks: list[int] = []
    real = LocalQueueManager._data_version

    def counted(self: LocalQueueManager) -> int:
        looks.append(1)
        return real(self)

    monkeypatch.setattr(LocalQueueManager, "_data_version", counted)
    return looks


def _on_wait(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set once a waiter sleeps on its doorbell (a wait with a timeout)."""
    asleep = threading.Event()
    real = doorbell.Doorbell.wait

    def wait(self: doorbell.Doorbell, timeout: float) -> bool:
        if timeout > 0:
            asleep.set()
        return real(self, timeout)

    monkeypatch.setattr(doorbell.Doorbell, "wait", wait)
    return asleep


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except MQError as exc:
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _looks_of_an_empty_get(
    waiter: LocalQueueManager, monkeypatch: pytest.MonkeyPatch, **get: Any
) -> int:
    """How often a get on the empty IN looks at the file before it gives up."""
    looks = _looks(monkeypatch)
    with pytest.raises(NoMessageAvailable):
        waiter.get("IN", **get)
    return len(looks)


def _asleep_in_get(
    waiter: LocalQueueManager, monkeypatch: pytest.MonkeyPatch, wait_ms: int = 30_000
) -> tuple[threading.Thread, dict[str, Any]]:
    """A get on IN in a thread of its own, once it sleeps on the doorbell."""
    asleep = _on_wait(monkeypatch)
    waiting = _in_thread(lambda: waiter.get("IN", wait_ms=wait_ms))
    assert asleep.wait(30), "the get never slept on its doorbell"
    return waiting


@LINUX
def test_a_commit_wakes_a_waiting_get_long_before_its_clock_would(
    qms: tuple[LocalQueueManager, LocalQueueManager], monkeypatch: pytest.MonkeyPatch
) -> None:
    waiter, putter = qms
    monkeypatch.setattr(local_qm, "_IDLE_LOOK", SLOW_CLOCK)
    monkeypatch.setattr(local_qm, "RECOVERY_INTERVAL", SLOW_CLOCK)
    thread, out = _asleep_in_get(waiter, monkeypatch, int(SLOW_CLOCK * 1000))
    putter.put("IN", MQMessage(body=b"reply"))
    putter.commit()
    thread.join(30)
    assert not thread.is_alive(), "the commit did not wake the get"
    assert out["value"].body == b"reply"


@LINUX
def test_an_idle_wait_looks_at_the_file_a_few_times_not_every_few_milliseconds(
    qms: tuple[LocalQueueManager, LocalQueueManager], monkeypatch: pytest.MonkeyPatch
) -> None:
    waiter, _ = qms
    # Without the doorbell a second's wait looks some 200 times (every 5 ms at most);
    # with it, once per idle look (250 ms), at the sweep and on the way in.
    assert _looks_of_an_empty_get(waiter, monkeypatch, wait_ms=1000) <= 10


def test_a_get_without_a_wait_that_finds_nothing_opens_no_doorbell(
    qms: tuple[LocalQueueManager, LocalQueueManager], monkeypatch: pytest.MonkeyPatch
) -> None:
    waiter, _ = qms
    looks = _looks_of_an_empty_get(waiter, monkeypatch)
    assert looks == 0, "a get that may not wait looks no more than once, in its own try"
    assert waiter._bell is None


@pytest.mark.parametrize("bell", [True, False], ids=["doorbell", "clock"])
def test_a_get_waits_for_a_commit_with_or_without_a_doorbell(
    qms: tuple[LocalQueueManager, LocalQueueManager],
    monkeypatch: pytest.MonkeyPatch,
    bell: bool,
) -> None:
    if bell and not sys.platform.startswith("linux"):
        pytest.skip("the doorbell is Linux's inotify")
    waiter, putter = qms
    if not bell:
        monkeypatch.setattr(local_qm, "open_doorbell", lambda path: None)
    looks = _looks(monkeypatch)
    thread, out = _in_thread(lambda: waiter.get("IN", wait_ms=30_000))
    while not looks:  # the get has looked once and found nothing: it waits
        thread.join(0.01)
    putter.put("IN", MQMessage(body=b"reply"))
    putter.commit()
    thread.join(30)
    assert out["value"].body == b"reply"
    assert (waiter._bell is not None) is bell


@LINUX
def test_two_threads_waiting_on_one_connection_both_get_theirs(
    qms: tuple[LocalQueueManager, LocalQueueManager], monkeypatch: pytest.MonkeyPatch
) -> None:
    waiter, putter = qms
    first, out1 = _asleep_in_get(waiter, monkeypatch)
    # The second finds the doorbell taken and looks on its clock instead.
    second, out2 = _in_thread(lambda: waiter.get("IN", wait_ms=30_000))
    for body in (b"one", b"two"):
        putter.put("IN", MQMessage(body=body))
        putter.commit()
    first.join(30)
    second.join(30)
    assert {out1["value"].body, out2["value"].body} == {b"one", b"two"}


@LINUX
def test_closing_the_connection_during_a_wait_ends_it_and_drops_the_doorbell(
    qms: tuple[LocalQueueManager, LocalQueueManager], monkeypatch: pytest.MonkeyPatch
) -> None:
    waiter, _ = qms
    thread, out = _asleep_in_get(waiter, monkeypatch)
    waiter.close()
    thread.join(30)
    assert not thread.is_alive()
    assert isinstance(out.get("error"), MQError), out
    assert waiter._bell is None
