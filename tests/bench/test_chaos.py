"""The chaos benchmark's figures: each kill's recovery, by part, and the drain from the
last request, not the time left to send."""

from __future__ import annotations

import math

from bench.chaos import (
    DRAIN_TARGET_S,
    FLOOR_NAME,
    PARTS,
    drain,
    first_of,
    kill_schedule,
    median_and_worst,
    record_run,
    recoveries,
    report,
)
from bench.figures import ENV_RECORD, read


def test_a_duplicate_response_counts_at_the_first():
    assert first_of([b"a", b"b", b"a"], [1.0, 2.0, 5.0]) == {b"a": 1.0, b"b": 2.0}


def test_recovery_counts_from_the_kill_to_the_last_gather_in_flight_at_it():
    # a and b were sent before the worker's kill at 10, c after it; a was answered
    # before the kill, b at 14, c at 25 (the sending went on until 30).
    sent = {b"a": 1.0, b"b": 9.0, b"c": 12.0}
    done = {b"a": 9.5, b"b": 14.0, b"c": 25.0}
    assert recoveries(done, sent, [(10.0, "worker")]) == {"worker": [4.0]}


def test_each_part_keeps_each_of_its_kills():
    sent = {b"a": 1.0, b"b": 19.0, b"c": 29.0}
    done = {b"a": 12.0, b"b": 21.0, b"c": 29.5}
    kills = [(10.0, "worker"), (20.0, "worker"), (29.25, "server")]
    assert recoveries(done, sent, kills) == {"worker": [2.0, 1.0], "server": [0.25]}
    assert median_and_worst([2.0, 1.0, 10.0]) == (2.0, 10.0)


def test_a_kill_with_nothing_in_flight_recovers_at_once():
    sent = {b"a": 1.0}
    assert recoveries({b"a": 2.0}, sent, [(5.0, "bridge")]) == {"bridge": [0.0]}
    assert recoveries({b"a": 2.0}, sent, []) == {}


def test_a_gather_never_answered_leaves_its_kills_unknown():
    sent = {b"a": 1.0, b"b": 2.0}
    each = recoveries({b"a": 12.0}, sent, [(3.0, "worker"), (4.0, "server"), (0.5, "bridge")])
    assert math.isnan(each["worker"][0])
    assert math.isnan(each["server"][0])
    assert each["bridge"] == [0.0]  # nothing had been sent yet
    # One unknown kill of a part leaves its median and worst unknown.
    assert all(math.isnan(v) for v in median_and_worst([2.0, math.nan, 1.0]))


def test_drain_is_from_the_last_request():
    sent = {b"a": 10.0, b"b": 30.0}
    assert drain({b"a": 31.0, b"b": 33.5}, sent) == 3.5  # a's late answer is before b's
    assert drain({b"a": 11.0, b"b": 30.5}, sent) == 0.5
    assert math.isnan(drain({b"a": 11.0}, sent))


def test_the_floor_is_killed_before_the_same_sends():
    schedule = kill_schedule(1000, 3, seed=1)
    assert schedule == kill_schedule(1000, 3, seed=1)
    assert sorted(part for _, part in schedule) == sorted(PARTS * 3)
    assert all(100 <= i < 900 for i, _ in schedule)
    assert [i for i, _ in schedule] == sorted(i for i, _ in schedule)


def test_the_report_sets_each_timing_beside_the_floors_then_each_kill():
    figures = {"gathers": 10, "kills": 3, "lost responses": 0,
               "recovery after a kill of the worker, worst (s)": 10.0,
               "recovery after a kill of the bridge, worst (s)": 1.0,
               "drain after the last request (s)": 0.5}  # fmt: skip
    floor = {"floor workflows": 10, "kills": 2,
             "recovery after a kill of the worker, worst (s)": 8.0,
             "drain after the last request (s)": 0.0}  # fmt: skip
    text = report((figures, {"worker": [10.0, 0.25], "bridge": [1.0]}),
                  (floor, {"worker": [8.0, 0.5]}))  # fmt: skip
    lines = {line.split("  ")[0].strip(): line.split() for line in text.splitlines()}
    assert lines["recovery after a kill of the worker, worst (s)"][-3:] == ["10.0", "8.0", "1.25"]
    assert lines["recovery after a kill of the bridge, worst (s)"][-1] == "1.0"  # no floor
    assert lines["drain after the last request (s)"][-1] == "-"  # a floor of nothing
    assert lines["kills"][-2:] == ["3", "2"]
    assert "  the worker, gathers: 10.00, 0.25" in text.splitlines()
    assert "  the worker, floor: 8.00, 0.50" in text.splitlines()
    assert "  the bridge, gathers: 1.00" in text.splitlines()


def test_the_drain_is_judged_in_seconds_and_set_beside_the_floor_apart(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_RECORD, str(tmp_path / "f.jsonl"))
    figures = {"lost responses": 0, "duplicate responses": 0, "lost replies": 0,
               "replies elsewhere": 0, "recovery after a kill of the worker, worst (s)": 10.0,
               "recovery after a kill of the bridge, worst (s)": 4.0,
               "drain after the last request (s)": 15.0}  # fmt: skip
    floor = {"recovery after a kill of the worker, worst (s)": 10.0,
             "drain after the last request (s)": 5.0}  # fmt: skip
    record_run(figures, floor)
    rows = {(f.name, f.floor_name): f for f in read(tmp_path / "f.jsonl")}
    judged = rows[("drain after the last request", "")]
    # 15 s against 10 s: not met, though it is 3 x a floor of 5 s (a ratio under 10).
    assert (judged.value, judged.floor, judged.target) == (15.0, None, DRAIN_TARGET_S)
    beside = rows[("drain after the last request", FLOOR_NAME)]
    assert (beside.ratio, beside.target) == (3.0, None)
    assert rows[("recovery after a kill of the worker, worst", FLOOR_NAME)].ratio == 1.0
    assert rows[("recovery after a kill of the bridge, worst", "")].floor is None
    assert {f.name for f in rows.values() if f.target == 0} == {
        "lost responses",
        "duplicate responses",
        "lost replies",
        "replies elsewhere",
    }
