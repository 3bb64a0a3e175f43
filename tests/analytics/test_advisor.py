"""The timeout advisor against latency distributions with a known answer."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from analytics.advisor import WHOLE_GATHER, leg_deadlines, target_column, timeout_advice

T0 = datetime(2026, 3, 1, tzinfo=UTC)
COLUMNS = (
    "aggregate string, start_time timestamp, outcome string, legs_expected array<string>, "
    "leg_latency_ms map<string,double>, n_missing int, timeout_ms double"
)


def _fact(aggregate, i, outcome, latencies, timeout_ms, legs=("A", "B")):
    missing = sum(1 for leg in legs if leg not in latencies)
    return (aggregate, T0 + timedelta(seconds=i), outcome, list(legs), latencies, missing,
            timeout_ms)  # fmt: skip


def _advice(spark, rows):
    frame = spark.createDataFrame(rows, COLUMNS)
    advice = timeout_advice(frame).collect()
    order = [(r["aggregate"], r["leg"] == WHOLE_GATHER, r["leg"]) for r in advice]
    assert order == sorted(order)  # by aggregate, each one's whole gather after its legs
    return {(r["aggregate"], r["leg"]): r.asDict() for r in advice}


def test_ranks_on_a_ladder_of_latencies(spark):
    """Leg A arrives at 1..1000 ms; leg B the same, but its last 10 never arrive."""
    rows = []
    for i in range(1, 1001):
        lat = {"A": float(i)} | ({"B": float(i)} if i <= 990 else {})
        rows.append(_fact("ladder", i, "COMPLETE" if i <= 990 else "TIMEOUT", lat, 1000.0))
    # Ended by an operator: not counted, however slow.
    rows.append(_fact("ladder", 2000, "RELEASED", {"A": 5000.0}, 1000.0))
    # The configured timeout is the latest gather's.
    rows.append(_fact("changed", 1, "COMPLETE", {"A": 10.0, "B": 10.0}, 1000.0))
    rows.append(_fact("changed", 2, "COMPLETE", {"A": 20.0, "B": 20.0}, 2500.0))
    got = _advice(spark, rows)
    one, tenth = target_column(0.01), target_column(0.001)
    a, b, whole = got[("ladder", "A")], got[("ladder", "B")], got[("ladder", WHOLE_GATHER)]
    assert (a["gathers"], a["arrived"], a["configured_ms"]) == (1000, 1000, 1000.0)
    assert (a[one], a[tenth], a["rate_at_configured"]) == (990.0, 999.0, 0.0)
    # 1 % of 1000 may be late: the 990th arrival. 0.1 % needs the 999th: never observed.
    assert (b["arrived"], b[one], b[tenth], b["rate_at_configured"]) == (990, 990.0, None, 0.01)
    assert (whole[one], whole[tenth], whole["rate_at_configured"]) == (990.0, None, 0.01)
    assert got[("changed", "A")]["configured_ms"] == 2500.0


def test_an_exponential_distribution_gives_its_quantiles(spark):
    """Latencies at the quantiles of an exponential with a 200 ms mean: the advice is
    the distribution's 99th and 99.9th percentiles, 200 ln 100 and 200 ln 1000."""
    n, mean = 20_000, 200.0
    rows = [
        _fact("exp", i, "COMPLETE", {"A": -mean * math.log(1 - (i - 0.5) / n)}, 5000.0, ("A",))
        for i in range(1, n + 1)
    ]
    got = _advice(spark, rows)[("exp", "A")]
    for rate in (0.01, 0.001):
        advised = got[target_column(rate)]
        # The distribution's quantile, up to the sample's granularity ...
        assert advised == pytest.approx(mean * math.log(1 / rate), rel=0.005)
        # ... and exactly the sample's k-th latency, k = n - n * rate.
        k = n - round(n * rate)
        assert advised == pytest.approx(-mean * math.log(1 - (k - 0.5) / n), rel=1e-12)
    expected_rate = math.exp(-5000.0 / mean)  # the share later than the configured 5 s
    assert got["rate_at_configured"] == pytest.approx(expected_rate, abs=1 / n)


def test_a_slow_leg_is_advised_a_deadline_of_its_own(spark):
    """Leg B takes ten times as long as A: B gets its own deadline, the gather A's."""
    rows = [_fact("slowleg", i, "COMPLETE", {"A": float(i), "B": 10.0 * i}, 20_000.0)
            for i in range(1, 1001)]  # fmt: skip
    rows += [_fact("even", i, "COMPLETE", {"A": float(i), "B": 1.5 * i}, 5000.0)
             for i in range(1, 101)]  # fmt: skip
    frame = spark.createDataFrame(rows, COLUMNS)
    found = leg_deadlines(timeout_advice(frame).toPandas())
    assert [(d.aggregate, d.leg) for d in found] == [("slowleg", "B")]  # not "even"
    (advice,) = found
    assert (advice.leg_timeout_ms, advice.gather_timeout_ms) == (9900.0, 990.0)
    assert "give B its own timeout_seconds = 9.9" in advice.text()
    assert "the gather's timeout can be 1 s instead of 20 s" in advice.text()
