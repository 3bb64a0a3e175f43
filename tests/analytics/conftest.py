"""One SparkSession for the whole session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from analytics.job import spark_session

    session = spark_session("local[2]", "mqgather-tests")
    yield session
    session.stop()
