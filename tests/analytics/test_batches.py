"""Collector batch facts from real histories: the recorded collector paths (each batch's
size, close reason and wait are known), and a collector run exported from the server."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil

import pandas as pd
import pytest

from analytics.export import export_histories
from tests.collecting import collecting, order
from tests.harness import reset_to_first_task, until
from tests.workflows.record import COLLECT_SCENARIOS, HISTORIES
from tests.workflows.test_replay import LATEST
from workflows.collect_models import collector_id

#: Per recorded destination: (messages, close reason) of each batch, in order; the
#: continue-as-new path's batches depend on when the server suggested it.
TRUTH = {
    "collect_count": [(3, "count")],
    "collect_delay": [(2, "delay")],
    "collect_bytes": [(1, "bytes"), (1, "delay")],
    "collect_released": [(2, "released")],
    "collect_group": [(2, "count")],
    "collect_put_retried": [(1, "count")],
}


def test_batch_facts_of_every_recorded_collector_path(spark, tmp_path):
    from analytics.job import analyze, format_summary

    result = analyze(spark, [HISTORIES / LATEST], tmp_path / "out")
    batches = pd.read_parquet(tmp_path / "out" / "batch_facts").sort_values(
        ["destination", "batch"]
    )
    assert set(batches["destination"]) == set(COLLECT_SCENARIOS)
    for destination, expected in TRUTH.items():
        rows = batches[batches["destination"] == destination]
        assert list(zip(rows["messages"], rows["reason"], strict=True)) == expected, destination
        assert list(rows["batch"]) == list(range(1, len(expected) + 1))
    # The continue-as-new path: batches of 2 on both sides of the hand-over, none twice.
    can = batches[batches["destination"] == "collect_continue_as_new"]
    assert set(can["messages"]) == {2} and set(can["reason"]) == {"count"}
    assert can["run_id"].nunique() == 2 and list(can["batch"]) == list(range(1, len(can) + 1))
    assert (batches["wait_ms"] >= batches["open_ms"]).all() and (batches["open_ms"] >= 0).all()
    delayed = batches[batches["destination"] == "collect_delay"].iloc[0]
    # The rule's 1 s delay closed it, counted from its first message's arrival at the
    # bridge: the batch opened when that message reached the workflow, a moment later.
    assert 1000 <= delayed["wait_ms"] < 5000 and 0 < delayed["open_ms"] <= delayed["wait_ms"]
    retried = batches[batches["destination"] == "collect_put_retried"].iloc[0]
    assert retried["wait_ms"] >= 2000  # a failed round of PUTs waits 2 s before the next

    s = result.summary
    assert s["batches"] == len(batches) and s["batched_messages"] == batches["messages"].sum()
    assert s["batch_reasons"] == batches["reason"].value_counts().to_dict() | {
        r: 0 for r in ("count", "bytes", "delay", "released") if r not in set(batches["reason"])
    }
    # Gathers of the same set still count once each; runs that continued as new are the
    # next run's to report and do not stop the job.
    gathers = {p.stem.split("_run")[0] for p in (HISTORIES / LATEST).glob("*.json")}
    assert s["gathers"] == len(gathers - set(COLLECT_SCENARIOS))
    assert s["runs_counted_with_another"] == 1  # the reset gather's later run
    assert "1 run(s) counted with another run of their gather" in format_summary(result)
    table = pd.read_csv(tmp_path / "out" / "destinations.csv")
    bytes_row = table[table["destination"] == "collect_bytes"].iloc[0]
    assert (bytes_row["batches"], bytes_row["by_bytes"], bytes_row["by_delay"]) == (2, 1, 1)
    keys = list(zip(table["collector"], table["destination"], strict=True))
    assert len(keys) > 3 and keys == sorted(keys)  # in order of collector and destination
    trend = pd.read_csv(tmp_path / "out" / "batch_trends.csv")
    assert trend["batches"].sum() == len(batches)
    keys = list(zip(trend["window_start"], trend["collector"], trend["destination"], strict=True))
    assert keys == sorted(keys)
    page = (tmp_path / "out" / "report.html").read_text()
    collector = batches["collector"].iloc[0]
    assert f'id="collector-{collector}"' in page and "collect_released" in page
    assert (tmp_path / "out" / "charts" / f"collector-{collector}.png").stat().st_size > 0
    assert f"{len(batches)} collector batches of" in format_summary(result)


async def test_an_exported_collector_run_gives_its_batches(temporal_env, spark, tmp_path):
    from analytics.job import analyze

    client = temporal_env.client
    async with collecting(client, tmp_path, run_bridge=False) as c:
        c.rule("Export", "CMAOUT.FR", max_messages=2)
        c.start_bridge()
        for n in range(4):
            c.send("Export", order(f"export {n}"))
        await until(lambda: c.status("Export"), lambda st: st.batches == 2)
        handle = client.get_workflow_handle(collector_id(c.spec.name, "Export"))
        await handle.terminate("closed for the export")  # as a continue-as-new would
    out = await _exported(client, tmp_path / "export", handle.id, runs=1)
    await asyncio.to_thread(analyze, spark, [out], tmp_path / "out")
    batches = pd.read_parquet(tmp_path / "out" / "batch_facts")
    ours = batches[batches["collector"] == c.spec.name]
    assert list(ours.sort_values("batch")["messages"]) == [2, 2]
    assert set(ours["destination"]) == {"Export"}


def test_a_run_without_collectors_writes_their_outputs_empty_as_a_run_with_them(spark, tmp_path):
    from analytics.job import analyze
    from analytics.transforms import BATCH_FACTS_SCHEMA

    gathers_only = tmp_path / "gathers"
    gathers_only.mkdir()
    for path in (HISTORIES / LATEST).glob("*.json"):
        if path.stem.split("_run")[0] not in COLLECT_SCENARIOS:
            (gathers_only / path.name).write_bytes(path.read_bytes())
    with_them = analyze(spark, [HISTORIES / LATEST], tmp_path / "with")
    without = analyze(spark, [gathers_only], tmp_path / "without")
    assert with_them.summary["batches"] > 0 and without.summary["batches"] == 0
    assert without.summary["gathers"] == with_them.summary["gathers"]
    # The batch facts: no rows, and the types Spark and pandas read are a real run's.
    written = {name: spark.read.parquet(str(tmp_path / name / "batch_facts"))
               for name in ("with", "without")}  # fmt: skip
    assert written["without"].count() == 0 and written["with"].count() > 0
    assert written["without"].schema.simpleString() == written["with"].schema.simpleString()
    frames = {name: pd.read_parquet(tmp_path / name / "batch_facts") for name in written}
    assert frames["without"].empty
    assert dict(frames["without"].dtypes) == dict(frames["with"].dtypes)
    # The declared schema is what the batch facts query writes.
    assert [(f.name, f.dataType) for f in written["with"].schema.fields] == [
        (f.name, f.dataType) for f in BATCH_FACTS_SCHEMA.fields
    ]
    for table in ("destinations.csv", "batch_trends.csv"):
        header = (tmp_path / "without" / table).read_text().splitlines()
        assert header == (tmp_path / "with" / table).read_text().splitlines()[:1], table


async def _exported(client, out, workflow_id: str, runs: int):
    """Export the server's closed runs to ``out`` until ``runs`` of ``workflow_id`` are
    there (the visibility store may list a close a moment later)."""
    for _ in range(100):
        done = await export_histories(client, out)
        lines = [json.loads(line) for f in done.files for line in f.read_text().splitlines()]
        if sum(line["workflowId"] == workflow_id for line in lines) >= runs:
            return out
        await asyncio.sleep(0.1)
    raise AssertionError(f"{runs} run(s) of {workflow_id} were not exported")


async def test_a_reset_collector_counts_each_batch_put_once(temporal_env, spark, tmp_path):
    """B waits in an open batch when the collector is reset; the run after the reset
    takes A and B into a batch numbered as A's was, and puts only B. The facts hold A's
    batch once (the run after the reset has a copy of the run before's history) and B's
    as a batch of one: the messages put, each once."""
    from analytics.job import analyze

    client = temporal_env.client
    async with collecting(client, tmp_path) as c:
        c.rule("Reset", "CMAOUT.FR", max_messages=100, max_delay_seconds=3)
        c.send("Reset", order("A"))
        await until(lambda: c.status("Reset"), lambda st: st.batches == 1, timeout=30)
        c.send("Reset", order("B"))
        await until(lambda: c.status("Reset"), lambda st: st.open_messages == 1)
        handle = client.get_workflow_handle(collector_id(c.spec.name, "Reset"))
        after = await reset_to_first_task(client, handle)
        await until(lambda: c.status("Reset"),
                    lambda st: st.messages == 2 and st.open_messages == st.waiting_to_put == 0,
                    timeout=30)  # fmt: skip
        await client.get_workflow_handle(handle.id, run_id=after).terminate("exported")
    out = await _exported(client, tmp_path / "export", handle.id, runs=2)
    await asyncio.to_thread(analyze, spark, [out], tmp_path / "out")
    batches = pd.read_parquet(tmp_path / "out" / "batch_facts")
    ours = batches[batches["destination"] == "Reset"].sort_values("put_at")
    assert list(ours["messages"]) == [1, 1] and list(ours["batch"]) == [1, 1]
    assert ours["run_id"].iloc[1] == after != ours["run_id"].iloc[0]


# closed_at: a time every batch has; first_received_at: one an older collector's batch
# lacks (its wait then counts from opened_at), which is no licence to pass over one that
# is there and cannot be read.
@pytest.mark.parametrize("altered_field", ["closed_at", "first_received_at"])
def test_a_batch_whose_record_cannot_be_read_is_left_out_and_named(spark, tmp_path, altered_field):
    from analytics.job import analyze, format_summary

    data = tmp_path / "in"
    shutil.copytree(HISTORIES / LATEST, data)
    altered = data / "collect_count.json"
    history = json.loads(altered.read_text())
    for event in history["events"]:
        details = event.get("markerRecordedEventAttributes", {}).get("details", {})
        if "result" in details:  # the batch's PUT
            payload = details["result"]["payloads"][0]
            put = json.loads(base64.b64decode(payload["data"]))
            put["batch"][altered_field] = "soon"  # JSON still, a time no longer
            payload["data"] = base64.b64encode(json.dumps(put).encode()).decode()
    altered.write_text(json.dumps(history))
    run = history["events"][0]["workflowExecutionStartedEventAttributes"]["workflowId"]

    result = analyze(spark, [data], tmp_path / "out")
    batches = pd.read_parquet(tmp_path / "out" / "batch_facts")
    assert "collect_count" not in set(batches["destination"])
    assert set(batches["destination"]) == set(COLLECT_SCENARIOS) - {"collect_count"}
    s = result.summary
    assert (s["unreadable_batches"], s["unreadable_batch_runs"]) == (1, [run])
    assert s["batches"] == len(batches)
    said = format_summary(result)
    assert "1 collector batch(es) left out: their records hold a value that cannot be read" in said
    assert said.count(run) == 1
    page = (tmp_path / "out" / "report.html").read_text()
    assert "<td>collector batches left out (a value that cannot be read)</td><td>1</td>" in page


def test_a_batch_that_records_no_first_arrival_waits_from_its_opening(spark, tmp_path):
    from analytics.job import read_histories
    from analytics.transforms import batch_facts, unreadable_batch

    history = json.loads((HISTORIES / LATEST / "collect_count.json").read_text())
    for event in history["events"]:
        details = event.get("markerRecordedEventAttributes", {}).get("details", {})
        if "result" in details:
            payload = details["result"]["payloads"][0]
            put = json.loads(base64.b64decode(payload["data"]))
            put["batch"]["first_received_at"] = None  # as a batch of no recorded arrival
            payload["data"] = base64.b64encode(json.dumps(put).encode()).decode()
    line = {"workflowId": "collect:c:count", "runId": "r1", "history": history}
    export = tmp_path / "one.ndjson"
    export.write_text(json.dumps(line) + "\n")
    rows = batch_facts(read_histories(spark, [str(export)]))
    [batch] = rows.collect()
    assert rows.filter(unreadable_batch()).count() == 0
    assert batch["first_received_at"] is None
    expected = (batch["put_at"] - batch["opened_at"]).total_seconds() * 1000
    assert batch["wait_ms"] == pytest.approx(expected)
