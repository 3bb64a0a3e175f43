"""Analytics on real histories: gathers with known outcomes run on the dev server, are
exported, and are analysed from all three input formats."""

from __future__ import annotations

import asyncio
import csv
import html.parser
import json
import os
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
from temporalio.api.export.v1 import WorkflowExecution, WorkflowExecutions
from temporalio.api.history.v1 import History

from analytics.export import export_histories
from bridge.mq.models import parse_id
from mqgather.config import AggregateSpec, LegSpec
from mqgather.errors import MQGatherError
from tests.analytics.test_histories import running_copy
from tests.harness import pipeline, temporal_binary

LEGS = (LegSpec(name="CREDIT", sequence=10), LegSpec(name="STOCK", sequence=20),
        LegSpec(name="TAX", sequence=30))  # fmt: skip
# Long default timeout; the two gathers meant to time out get a short one at registration,
# after their replies are held, so the outcome never depends on the machine's speed.
SPEC = AggregateSpec(
    name="shop", legs=LEGS, timeout_seconds=60, unknown_timeout_seconds=3.0,
    late_window_seconds=5.0,
)  # fmt: skip


@dataclass
class Recorded:
    export_dir: Path
    truth: dict[str, dict]
    runs: list[tuple[str, str]]
    address: str


@pytest.fixture(scope="module")
async def recorded(temporal_env, tmp_path_factory) -> Recorded:
    """Six gathers with known outcomes, exported with the SDK."""
    client = temporal_env.client
    base = tmp_path_factory.mktemp("recorded")
    truth: dict[str, dict] = {}
    async with pipeline(client, base, [SPEC]) as p:
        plans = {
            "A1": (["CREDIT", "STOCK", "TAX"], "COMPLETE", [], 0, 0),
            "A2": (["TAX", "CREDIT", "STOCK"], "COMPLETE", [], 0, 0),
            "B": (["CREDIT", "CREDIT", "STOCK", "TAX"], "COMPLETE", [], 1, 0),
            "C": (["CREDIT", "STOCK"], "TIMEOUT", ["TAX"], 0, 1),
            "D": (["CREDIT"], "TIMEOUT", ["STOCK", "TAX"], 0, 0),
        }
        sent = {}
        for name, (legs, outcome, *_rest) in plans.items():
            bodies = {leg: json.dumps({"leg": leg}).encode() for leg in legs}
            if outcome == "TIMEOUT":
                sent[name], _ = await p.partial(SPEC, parse_id(f"SHOP-{name}"), bodies, 0.5)
                continue
            sent[name] = await p.scatter(SPEC)
            for leg in legs:
                p.reply(SPEC, sent[name].correl_id, leg, bodies[leg])
        await p.wait_message("GATHER.TIMEOUT")
        await p.wait_message("GATHER.TIMEOUT")
        # C's missing leg arrives late, inside the gather's late window.
        p.reply(SPEC, sent["C"].correl_id, "TAX", b'{"late":true}')
        p.reply(SPEC, parse_id("NEVER-REGISTERED"), "CREDIT", b"{}")
        results = {name: await p.result(SPEC, s.correl_id) for name, s in sent.items()}
        results["U"] = await p.result(SPEC, parse_id("NEVER-REGISTERED"))
        for name, (_, outcome, missing, dups, late) in plans.items():
            truth[results[name].gather_id] = {
                "outcome": outcome, "legs_missing": missing, "duplicates": dups, "late": late,
                "unknown": 0,
            }  # fmt: skip
        truth[results["U"].gather_id] = {
            "outcome": "UNKNOWN",
            "legs_missing": [],
            "duplicates": 0,
            "late": 0,
            "unknown": 1,
        }
        for name, r in results.items():
            assert r.state == truth[r.gather_id]["outcome"], name
    export_dir = base / "export"
    await _export_all(client, export_dir, len(truth))
    runs = []
    for file in export_dir.rglob("*.ndjson"):
        for line in file.read_text().splitlines():
            record = json.loads(line)
            runs.append((record["workflowId"], record["runId"]))
    return Recorded(export_dir, truth, runs, client.service_client.config.target_host)


async def _export_all(client, export_dir: Path, expected: int) -> None:
    """Export until the visibility store lists every closed gather (it may lag a close)."""
    total = 0
    for _ in range(100):
        result = await export_histories(client, export_dir, aggregate="shop")
        total += result.exported
        if total >= expected:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"exported {total} of {expected}")


def _facts(spark, out: Path) -> dict[str, dict]:
    rows = spark.read.parquet(str(out / "facts")).collect()
    return {r["gather_id"]: r.asDict() for r in rows}


def _trunc(ts: str) -> datetime:
    head, _, frac = ts.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00")


def _plain_python(export_dir: Path) -> tuple[list[float], dict[str, dict[str, float]]]:
    """Completion latencies of completed gathers and leg arrival latencies, straight
    from the history JSON."""
    import base64

    done: list[float] = []
    legs: dict[str, dict[str, float]] = {}
    for file in export_dir.rglob("*.ndjson"):
        for line in file.read_text().splitlines():
            record = json.loads(line)
            events = record["history"]["events"]
            start = _trunc(events[0]["eventTime"])
            last = events[-1]
            completed = last["workflowExecutionCompletedEventAttributes"]
            result = json.loads(base64.b64decode(completed["result"]["payloads"][0]["data"]))
            if result["state"] == "COMPLETE":
                done.append((_trunc(last["eventTime"]) - start).total_seconds() * 1000)
            # A leg arrives when the bridge got its first reply off the queue (each reply
            # carries that time); one got before the server started the gather counts 0.
            first: dict[str, float] = {}
            for e in events:
                attrs = e.get("workflowExecutionSignaledEventAttributes")
                if not attrs or attrs["signalName"] != "replies":
                    continue
                batch = json.loads(base64.b64decode(attrs["input"]["payloads"][0]["data"]))
                for reply in batch["replies"]:
                    if reply["leg"] not in result["legs_received"]:
                        continue
                    got = datetime.fromisoformat(reply["received_at"].replace("Z", "+00:00"))
                    ms = max((got - start).total_seconds() * 1000, 0.0)
                    first[reply["leg"]] = min(ms, first.get(reply["leg"], ms))
            legs[record["workflowId"]] = first
    return done, legs


def test_facts_equal_the_ground_truth(spark, recorded, tmp_path):
    from analytics.job import analyze

    out = tmp_path / "out"
    result = analyze(spark, [recorded.export_dir], out)
    facts = _facts(spark, out)
    assert set(facts) == set(recorded.truth)
    for gid, expected in recorded.truth.items():
        row = facts[gid]
        for key, value in expected.items():
            assert row[key] == value, (gid, key)
        assert row["aggregate"] == "shop"
        assert row["n_missing"] == len(expected["legs_missing"])
    done, legs = _plain_python(recorded.export_dir)
    q = statistics.quantiles(done, n=100, method="inclusive")
    s = result.summary
    assert (s["gathers"], s["completed"], s["timed_out"]) == (6, 3, 2)
    assert abs(s["p50_ms"] - q[49]) < 1e-6 and abs(s["p95_ms"] - q[94]) < 1e-6
    assert abs(s["p99_ms"] - q[98]) < 1e-6
    assert s["most_missed_leg"] == "TAX" and s["late"] == 1 and s["unknown"] == 1
    for gid, arrivals in legs.items():
        assert facts[gid]["leg_latency_ms"].keys() == arrivals.keys()
        for leg, ms in arrivals.items():
            assert abs(facts[gid]["leg_latency_ms"][leg] - ms) < 1e-6


def test_report_and_charts_show_the_csv_numbers(spark, recorded, tmp_path):
    from analytics.job import analyze

    out = tmp_path / "out"
    result = analyze(spark, [recorded.export_dir], out, window="1 hour")
    for name in ("shop-trends", "shop-legs"):
        png = (out / "charts" / f"{name}.png").read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 2000
    page = (out / "report.html").read_text()
    assert "data:image/png;base64," in page and len(page) > 10_000
    tables = _html_tables(page)
    for table_id, csv_name in (
        ("trends", "trends.csv"), ("leg_trends", "leg_trends.csv"), ("advice", "advice.csv")
    ):  # fmt: skip
        with (out / csv_name).open() as f:
            rows = list(csv.reader(f))
        shown = tables[table_id]
        assert shown[0] == rows[0]
        assert len(shown) == len(rows) > 1
        for got, want in zip(shown[1:], rows[1:], strict=True):
            for g, w in zip(got, want, strict=True):
                assert g == w or (w and abs(float(g) - float(w)) < 0.001), (table_id, g, w)
    assert result.summary["gathers"] == sum(int(r[2]) for r in tables["trends"][1:])


def test_the_report_shows_each_aggregates_facts_in_words(spark, recorded, tmp_path):
    """Outcomes with their shares (RELEASED, CANCELLED and FAILED listed too), the data's
    range, the most-missed leg of the aggregate, and the advisor beside the configured
    timeout, all equal to the recorded truth."""
    from analytics.job import analyze

    out = tmp_path / "out"
    result = analyze(spark, [recorded.export_dir], out)
    tables = _html_tables((out / "report.html").read_text())
    outcomes = {row[0]: row[1:] for row in tables["outcomes-shop"][1:]}
    assert outcomes["COMPLETE"] == ["3", "50.0 %"] and outcomes["TIMEOUT"] == ["2", "33.3 %"]
    assert outcomes["UNKNOWN"] == ["1", "16.7 %"]
    for never in ("RELEASED", "CANCELLED", "FAILED"):
        assert outcomes[never] == ["0", "0.00 %"]
    facts = dict(row for row in tables["facts-shop"][1:])
    assert facts["gathers"] == "6"
    assert facts["most-missed leg"] == "TAX: missing in 2 gathers (33.3 %)"
    s = result.summary
    assert facts["from"] == f"{s['first_start']:%Y-%m-%d %H:%M:%S} UTC"
    assert s["first_start"] <= s["last_end"]
    # Everything ended within seconds: the job picks one-minute windows.
    assert s["window"] == "1 minute" and s["window_picked"]
    summary = dict(row for row in tables["summary"][1:])
    assert summary["timeout"] == "2 (33.3 %)"
    advice = {row[0]: row for row in tables["advice-shop"][1:]}
    # C and D lacked TAX at the timeout: 2 of 5 counted gathers (U is not counted).
    tax = advice["TAX"]
    assert tax[1:4] == ["5", "60,000 ms", "40.0 %"]
    assert tax[4].startswith("> 60,000 ms") and tax[5].startswith("> 60,000 ms")
    assert advice["whole gather"][3] == "40.0 %"
    assert s["most_missed_by_aggregate"] == {"shop": "TAX"}


def test_the_report_renders_offline_in_a_browser(spark, recorded, tmp_path):
    """The report opened in headless Chromium with the network cut: no errors, every
    chart drawn, one section per aggregate; the screenshot is kept beside it."""
    from analytics.job import analyze
    from tests.browser import PageLog, browser

    out = tmp_path / "out"
    analyze(spark, [recorded.export_dir], out)
    with browser() as chrome:
        page = chrome.new_page(viewport={"width": 1100, "height": 900})
        log = PageLog()
        log.watch(page)
        outside: list[str] = []

        def only_local(route):
            if route.request.url.startswith(("file:", "data:")):
                return route.continue_()
            outside.append(route.request.url)
            return route.abort()

        page.route("**/*", only_local)
        page.goto((out / "report.html").as_uri())
        page.wait_for_load_state("load")
        drawn = page.eval_on_selector_all(
            "img", "imgs => imgs.map(i => i.complete && i.naturalWidth > 0)"
        )
        sections = page.locator("section[id^=aggregate-]").count()
        title = page.title()
        shot = out / "report.png"
        page.screenshot(path=str(shot), full_page=True)
    assert log.errors == [] and outside == []
    assert drawn and all(drawn)
    assert sections == 1 and "gathers from" in title
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 20_000


class _Tables(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._id = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self._id = dict(attrs).get("id")
            self.tables[self._id] = []
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._row is not None:
            self._row.append("".join(self._cell or []))
            self._cell = None
        elif tag == "tr" and self._id is not None:
            self.tables[self._id].append(self._row or [])

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _html_tables(page: str) -> dict[str, list[list[str]]]:
    parser = _Tables()
    parser.feed(page)
    return parser.tables


def test_cli_json_and_cloud_export_give_identical_facts(spark, recorded, tmp_path):
    from analytics.job import analyze

    binary = temporal_binary()
    cli_dir = tmp_path / "cli"
    cli_dir.mkdir()
    histories = []
    for i, (workflow_id, run_id) in enumerate(recorded.runs):
        out = subprocess.run(
            [binary, "workflow", "show", "--workflow-id", workflow_id, "--run-id", run_id,
             "--output", "json", "--address", recorded.address],
            capture_output=True, check=True, timeout=60,
        )  # fmt: skip
        (cli_dir / f"history-{i}.json").write_bytes(out.stdout)
    for file in recorded.export_dir.rglob("*.ndjson"):
        for line in file.read_text().splitlines():
            from google.protobuf import json_format

            histories.append(json_format.ParseDict(json.loads(line)["history"], History()))
    cloud_dir = tmp_path / "cloud"
    cloud_dir.mkdir()
    items = [WorkflowExecution(history=h) for h in histories]
    # At-least-once delivery: the first history comes again in a second file.
    (cloud_dir / "export-1.pb").write_bytes(WorkflowExecutions(items=items).SerializeToString())
    (cloud_dir / "export-2.pb").write_bytes(WorkflowExecutions(items=items[:1]).SerializeToString())

    def facts_from(inputs: Path, name: str) -> tuple[list[tuple], dict]:
        out = tmp_path / name
        result = analyze(spark, [inputs], out)
        rows = sorted(
            (r["gather_id"], r["run_id"], r["outcome"], tuple(r["legs_missing"]),
             r["duplicates"], r["late"], r["unknown"], r["completion_ms"],
             tuple(sorted(r["leg_latency_ms"].items())))
            for r in _facts(spark, out).values()
        )  # fmt: skip
        return rows, result.summary

    sdk, _ = facts_from(recorded.export_dir, "sdk")
    cli, _ = facts_from(cli_dir, "cli")
    cloud, cloud_summary = facts_from(cloud_dir, "cloud")
    assert len(sdk) == 6
    assert sdk == cli == cloud
    assert cloud_summary["duplicate_histories_dropped"] == 1


async def test_export_again_adds_nothing_then_only_the_new(temporal_env, recorded, tmp_path):
    client = temporal_env.client
    # A copy, so the other tests keep reading exactly the six recorded gathers.
    export_dir = tmp_path / "export"
    shutil.copytree(recorded.export_dir, export_dir)
    before = sorted(export_dir.rglob("*.ndjson"))
    again = await export_histories(client, export_dir, aggregate="shop")
    assert again.exported == 0 and again.files == []
    assert again.skipped_known == len(recorded.truth)  # listed again (overlap), all skipped
    assert sorted(export_dir.rglob("*.ndjson")) == before
    # From a shell, too.
    env = {"TEMPORAL_ADDRESS": recorded.address, "PATH": os.environ["PATH"]}
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "mqgather.cli", "export", str(export_dir), "--aggregate", "shop"],
        capture_output=True, env=env, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "exported 0 histories" in out.stdout.decode()
    # One more gather closes: the next export writes just that one.
    quick = AggregateSpec(name="shop", legs=LEGS[:1])
    async with pipeline(client, tmp_path / "more", [quick]) as p:
        sent = await p.scatter(quick)
        p.reply(quick, sent.correl_id, "CREDIT", b"{}")
        new = await p.result(quick, sent.correl_id)
    for _ in range(100):  # the visibility store may list the close a moment later
        more = await export_histories(client, export_dir, aggregate="shop")
        if more.exported:
            break
        await asyncio.sleep(0.1)
    assert more.exported == 1 and len(more.files) == 1
    line = json.loads(more.files[0].read_text())
    assert line["workflowId"] == new.gather_id
    # The files hold the messages' bodies: their owner's alone, in directories only the
    # owner enters (as the export made them), and no half-written file left beside them.
    made = recorded.export_dir
    assert made.stat().st_mode & 0o777 == 0o700
    assert {f.parent.stat().st_mode & 0o777 for f in made.rglob("*.ndjson")} == {0o700}
    assert {f.stat().st_mode & 0o777 for f in export_dir.rglob("*") if f.is_file()} == {0o600}
    assert not [f for f in export_dir.rglob("*") if f.name.endswith(".tmp")]


async def test_an_export_that_cannot_write_says_which_path_and_why(temporal_env, tmp_path):
    blocked = tmp_path / "export"
    blocked.write_text("a file where the export's directory goes")
    with pytest.raises(MQGatherError, match=r"export: cannot be written \(File exists\)"):
        await export_histories(temporal_env.client, blocked)
    assert blocked.read_text() == "a file where the export's directory goes"


@pytest.mark.parametrize(
    "state",
    [
        b"[]",  # JSON, not the state
        b'{"watermark": "yesterday", "recent": {}}',
        b'{"watermark": "2026-11-30T10:00:00", "recent": {}}',  # a time without its zone
        b'{"watermark": null, "recent": {"gather:a|r1": 7}}',
        b'{"watermark": null, "recent": {}}\xff',  # not UTF-8
    ],
)
async def test_an_export_state_that_is_not_one_says_so_and_is_left_as_it_was(
    temporal_env, tmp_path, state
):
    from analytics.export import STATE_FILE

    out = tmp_path / "export"
    out.mkdir()
    (out / STATE_FILE).write_bytes(state)
    with pytest.raises(MQGatherError, match=r"_export_state.json: not an export state \("):
        await export_histories(temporal_env.client, out)
    assert (out / STATE_FILE).read_bytes() == state
    assert sorted(p.name for p in out.iterdir()) == [STATE_FILE]


def test_corrupt_and_truncated_inputs_are_named_and_skipped(spark, recorded, tmp_path):
    from analytics.job import analyze, format_summary

    inputs = tmp_path / "inputs"
    shutil.copytree(recorded.export_dir, inputs)
    good = next(inputs.rglob("*.ndjson")).read_text()
    truncated = inputs / "truncated.ndjson"
    truncated.write_text(good[: len(good) // 2])
    garbage_json = inputs / "garbage.json"
    garbage_json.write_text("{ not json")
    garbage_pb = inputs / "garbage.pb"
    garbage_pb.write_bytes(b"\xff\xfe not protobuf")
    running = running_copy("quorum.json", inputs)  # `temporal workflow show` of an open one
    # One saved while it ran whose export, written once it ended, is read too: it counts.
    exported = json.loads(good.splitlines()[0])
    exported["history"]["events"] = exported["history"]["events"][:3]
    (inputs / "saved-while-open.json").write_text(json.dumps(exported["history"]))
    result = analyze(spark, [inputs], tmp_path / "out")
    assert set(result.skipped) == {str(truncated), str(garbage_json), str(garbage_pb)}
    assert result.summary["gathers"] == 6
    assert result.summary["running_gathers"] == [running]
    text = format_summary(result)
    assert f"skipped {truncated}" in text and "6 gathers" in text
    assert "1 gather(s) still running when their file was written, not counted" in text
    assert text.count(running) == 1
    page = (tmp_path / "out" / "report.html").read_text()
    assert "<td>gathers still running in their files (not counted)</td><td>1</td>" in page


def test_analyze_from_a_shell(recorded, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "mqgather.cli", "analyze", str(recorded.export_dir),
         "--out", str(tmp_path / "a"), "--window", "15 minutes"],
        capture_output=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    text = out.stdout.decode()
    assert "6 gathers: 3 completed, 2 timed out" in text
    assert (tmp_path / "a" / "report.html").stat().st_size > 0
