"""``mqgather replay``: exported production histories against the code about to ship."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from temporalio.api.history.v1 import History

from analytics.histories import history_line
from analytics.replay import ReplayReport, read_histories
from bridge.mq.models import parse_id
from mqgather.config import AggregateSpec, LegSpec
from tests.harness import pipeline
from tests.workers.gather_v2 import GatherV2
from tests.workflows.record import HISTORIES
from workers.worker import build_worker

LEGS = (LegSpec(name="CREDIT", sequence=10), LegSpec(name="STOCK", sequence=20))


def replay_cli(*paths) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mqgather.cli", "replay", *map(str, paths), "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


async def test_replay_reports_the_clean_and_the_incompatible_histories(temporal_env, tmp_path):
    """Two gathers ran on other code (one timer more): in an export beside recorded
    gathers of this code, exactly those two fail, each named with its event."""
    spec = AggregateSpec(name="other-code", legs=LEGS, mode="static")
    lines = []
    async with pipeline(temporal_env.client, tmp_path, [spec], run_worker=False) as p:
        worker = build_worker(temporal_env.client, p.connect, task_queue=p.task_queue,
                              workflow_class=GatherV2)  # fmt: skip
        async with worker:
            ids = []
            for n in range(2):
                correl = parse_id(f"OTHER-{n}")
                p.reply(spec, correl, "CREDIT", b"{}")
                p.reply(spec, correl, "STOCK", b"{}")
                ids.append(p.handle(spec, correl))
            for _ in ids:
                await p.wait_message(spec.response_queue)
        for handle in ids:
            history = await handle.fetch_history()
            lines.append(history_line(handle.id, "", History(events=history.events)))
    export = tmp_path / "export" / "date=2026-11-23"
    export.mkdir(parents=True)
    good = sorted((HISTORIES / "0.1.0-initial").glob("*.json"))[:3]
    for path in good:  # this code's gathers, in the export format too
        events = json.loads(path.read_text())
        lines.append(json.dumps({"workflowId": path.stem, "runId": "", "history": events}))
    (export / "histories-1.ndjson").write_text("\n".join(lines) + "\n")
    shows = tmp_path / "shows"
    shows.mkdir()
    for path in good:  # and as `temporal workflow show -o json` files
        shutil.copy(path, shows / path.name)

    done = replay_cli(tmp_path / "export", shows)
    assert done.returncode == 1, done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])
    assert (summary["replayed"], summary["clean"], summary["failed"]) == (8, 6, 2)
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
    assert sorted(f.split()[1] for f in failed) == sorted(h.id for h in ids)
    assert all("at event" in line and "Nondeterminism" in line for line in failed)
    assert "replayed 8 histories (8 gathers, 0 collector runs): 6 clean, 2 failed" in done.stdout

    clean = replay_cli(shows)
    assert clean.returncode == 0, clean.stdout
    assert "replayed 3 histories (3 gathers, 0 collector runs): 3 clean, 0 failed" in clean.stdout


def test_unreadable_inputs_are_named_and_fail_the_run(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "broken.json").write_text("{")
    # JSON that json cannot read: a RecursionError and a ValueError, each a traceback.
    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "deep.json").write_text(deep)
    (tmp_path / "deep.ndjson").write_text(f'{{"workflowId": "w", "history": {deep}}}\n')
    (tmp_path / "digits.json").write_text('{"events": ' + "1" * 5000 + "}")
    done = replay_cli(tmp_path)
    assert done.returncode == 1
    assert "SKIPPED" in done.stdout and "broken.json" in done.stdout
    assert "notes.txt" in done.stdout
    for name in ("deep.json", "deep.ndjson:1"):
        assert f"{name}: not a" in done.stdout and "(nested too deep to read)" in done.stdout
    assert "digits.json: not a JSON history (Exceeds the limit" in done.stdout
    assert "replayed 0 histories" in done.stdout and "Traceback" not in done.stderr


def test_histories_with_a_byte_order_mark_or_in_utf16_are_read_as_the_analysis_reads_them(
    tmp_path,
):
    recorded = sorted((HISTORIES / "0.1.0-initial").glob("*.json"))[:3]
    lines = [
        json.dumps({"workflowId": p.stem, "runId": "", "history": json.loads(p.read_text())})
        for p in recorded[:2]
    ]
    # An export an editor saved with a mark, and a CLI history PowerShell wrote.
    (tmp_path / "edited.ndjson").write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode() + b"\n")
    (tmp_path / "shown.json").write_bytes(recorded[2].read_text().encode("utf-16"))
    report = ReplayReport()
    items = read_histories([tmp_path], report)
    assert report.unreadable == {}
    assert sorted(i.source for i in items) == ["edited.ndjson", "edited.ndjson", "shown.json"]
    assert {p.stem for p in recorded[:2]} <= {i.history.workflow_id for i in items}
