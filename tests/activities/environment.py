"""An activity environment whose attempt started now, with the gather's 60 s timeout (the
SDK's test default started in 1970 with a 1 s timeout, which every commit would find
past its time)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from temporalio.testing import ActivityEnvironment

from mqgather.constants import MQ_ATTEMPT_SECONDS


def attempt_env(started: datetime | None = None) -> ActivityEnvironment:
    """An environment for one attempt, started at ``started`` (default: now)."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info,
        started_time=started or datetime.now(UTC),
        start_to_close_timeout=timedelta(seconds=MQ_ATTEMPT_SECONDS),
        is_local=True,
    )
    return env
