"""Waiting for what a long-running process needs (Temporal, the queue manager) instead of
exiting when it is not up yet: retried with backoff, one log line per attempt."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from mqgather.errors import MQGatherError

T = TypeVar("T")
log = logging.getLogger("mqgather")

FIRST_DELAY = 0.5
MAX_DELAY = 15.0


async def until_reachable(
    what: str,
    attempt: Callable[[], Awaitable[T]],
    stop: asyncio.Event,
    *,
    retry_on: tuple[type[BaseException], ...],
    fail_fast: bool = False,
    first_delay: float = FIRST_DELAY,
    max_delay: float = MAX_DELAY,
) -> T | None:
    """``attempt()`` until it succeeds; None if ``stop`` is set first.

    Args:
        what: names the thing in the log lines ("Temporal at localhost:7233").
        retry_on: the errors that mean "not reachable yet"; any other propagates.
        fail_fast: raise the first such error instead of waiting.

    Raises:
        MQGatherError: with ``fail_fast``, naming ``what`` and the error.
    """
    delay, tries = first_delay, 0
    while not stop.is_set():
        tries += 1
        try:
            return await attempt()
        except retry_on as exc:
            if fail_fast:
                raise MQGatherError(f"{what} is not reachable: {exc}") from exc
            log.warning("%s not reachable (attempt %d: %s); retrying in %.1fs", what, tries,
                        exc, delay)  # fmt: skip
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=delay)
        delay = min(delay * 2, max_delay)
    return None
