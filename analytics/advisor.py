"""The timeout advisor: for each aggregate and leg, the timeout that would have kept the
timeout rate under a target on the observed arrival latencies.

A leg's latency is the time from the gather's start to its first arrival; a leg that
never arrived in time counts as later than any timeout. The timeout that keeps the rate
at or under ``r`` over ``n`` gathers is the ``k``-th smallest latency with
``k = n - floor(n * r)``: at most ``floor(n * r)`` gathers are later than it. Arrivals
after the configured timeout are not observed (the gather has closed), so when ``k`` is
beyond the arrivals the answer is only "above the configured timeout".

Only gathers that ended by completion or timeout count; released and cancelled ones
were ended by an operator.

When one leg is much slower than the others, raising the whole gather's timeout for it
makes every gather that lacks another leg wait as long: ``leg_deadlines`` advises a
deadline of its own for that leg instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analytics.transforms import ordered

#: The timeout rates the advisor aims at.
TARGETS = (0.001, 0.01)
#: The pseudo-leg whose latency is the gather's last arrival (the gather's own timeout).
WHOLE_GATHER = "(all legs)"
#: Float noise in ``n * r`` must not drop a gather from the allowance.
_EPSILON = 1e-9


def target_column(rate: float) -> str:
    """The name of the advice column for a target rate, e.g. ``timeout_ms_1pct``."""
    return f"timeout_ms_{100 * rate:g}pct".replace(".", "_")


def latencies(facts: DataFrame) -> DataFrame:
    """One row per counted gather and leg (and the whole gather): aggregate, leg, the
    configured timeout and the latency (null: not in time).

    One pass over the facts: each gather's legs and, after them, a null that stands for
    the whole gather (a leg's name is never null)."""
    counted = facts.filter(F.col("outcome").isin("COMPLETE", "TIMEOUT"))
    whole = F.when(
        (F.col("n_missing") == 0) & (F.size("leg_latency_ms") > 0),
        F.array_max(F.map_values("leg_latency_ms")),
    )
    return counted.select(
        "aggregate",
        "start_time",
        "timeout_ms",
        "leg_latency_ms",
        whole.alias("whole"),
        F.explode(F.concat("legs_expected", F.array(F.lit(None).cast("string")))).alias("leg"),
    ).select(
        "aggregate",
        "start_time",
        "timeout_ms",
        F.coalesce("leg", F.lit(WHOLE_GATHER)).alias("leg"),
        F.when(F.col("leg").isNull(), F.col("whole"))
        .otherwise(F.element_at("leg_latency_ms", F.col("leg")))
        .alias("latency_ms"),
    )


def timeout_advice(facts: DataFrame, targets: tuple[float, ...] = TARGETS) -> DataFrame:
    """Per aggregate and leg: gathers counted, arrivals in time, the configured timeout
    (the latest gather's), the timeout rate expected at it, and for each target the
    timeout that meets it (null: above the configured timeout, not observable).

    One aggregation per (aggregate, leg): the arrivals' latencies sorted once, and every
    figure read off that list (no window and no join)."""
    stats = (
        latencies(facts)
        .groupBy("aggregate", "leg")
        .agg(
            F.count("*").alias("gathers"),
            F.max_by("timeout_ms", "start_time").alias("configured_ms"),
            # collect_list leaves out the nulls: the legs that did not arrive in time.
            F.sort_array(F.collect_list("latency_ms")).alias("sorted"),
        )
    )
    in_time = F.size(F.filter("sorted", lambda x: x <= F.col("configured_ms")))
    ranks = {
        target_column(r): F.greatest(
            F.lit(1), F.col("gathers") - F.floor(F.col("gathers") * r + _EPSILON)
        ).cast("int")
        for r in targets
    }
    advice = stats.select(
        "aggregate",
        "leg",
        "gathers",
        F.size("sorted").cast("long").alias("arrived"),
        "configured_ms",
        ((F.col("gathers") - in_time) / F.col("gathers")).alias("rate_at_configured"),
        *(F.try_element_at("sorted", k).alias(name) for name, k in ranks.items()),
    )
    return ordered(advice, "aggregate", F.col("leg") == WHOLE_GATHER, "leg")


#: A leg whose advised timeout is at least this many times the next slowest leg's is
#: advised a deadline of its own.
SLOW_LEG_RATIO = 2.0


@dataclass(frozen=True)
class LegDeadline:
    """Advice for one aggregate: give its slow leg a deadline of its own (the leg's
    ``timeout_seconds``) and bound the gather by the other legs (its ``timeout_seconds``),
    instead of raising the whole gather's timeout for one leg."""

    aggregate: str
    leg: str
    leg_timeout_ms: float
    gather_timeout_ms: float
    configured_ms: float

    def text(self) -> str:
        """One sentence an operator can act on."""
        return (
            f"{self.aggregate}: leg {self.leg} needs {self.leg_timeout_ms / 1000:.3g} s, the "
            f"other legs {self.gather_timeout_ms / 1000:.3g} s: give {self.leg} its own "
            f"timeout_seconds = {math.ceil(self.leg_timeout_ms / 100) / 10:g} (and optional "
            "if the response can go without it), and the gather's timeout can be "
            f"{math.ceil(self.gather_timeout_ms / 100) / 10:g} s instead of "
            f"{self.configured_ms / 1000:g} s"
        )


def leg_deadlines(advice: pd.DataFrame, rate: float = 0.01) -> list[LegDeadline]:
    """From ``timeout_advice`` (as pandas): each aggregate whose slowest leg needs at
    least ``SLOW_LEG_RATIO`` times the timeout of the next slowest, at target ``rate``."""
    column = target_column(rate)
    found = []
    for aggregate, rows in advice.groupby("aggregate", sort=True):
        legs = rows[(rows["leg"] != WHOLE_GATHER) & rows[column].notna()]
        if len(legs) < 2:
            continue
        slow, second = legs.sort_values(column, ascending=False).iloc[:2].to_dict("records")
        if slow[column] >= SLOW_LEG_RATIO * second[column]:
            found.append(
                LegDeadline(
                    str(aggregate),
                    str(slow["leg"]),
                    float(slow[column]),
                    float(second[column]),
                    float(slow["configured_ms"]),
                )
            )
    return found
