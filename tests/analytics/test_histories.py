"""Reading history files before Spark does: sealed payloads in export files, and the
encodings a CLI history file comes in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analytics.histories import SEALED_MARK, _holds, collect, read_cli_json
from analytics.synth import as_exported, synthesize
from mqgather.runtime.codec import KeyRing, PayloadCipher, new_key
from tests.workflows.record import HISTORIES
from tests.workflows.test_replay import LATEST

BLOCK = 1 << 22  # what _holds reads at a time


@pytest.mark.parametrize("before_boundary", [0, 1, len(SEALED_MARK) // 2, len(SEALED_MARK)])
def test_a_sealed_mark_across_a_block_boundary_is_found(tmp_path, before_boundary):
    path = tmp_path / "x.ndjson"
    path.write_bytes(b"x" * (BLOCK - before_boundary) + SEALED_MARK.encode() + b"\n")
    assert _holds(path, SEALED_MARK)


def test_a_file_without_the_mark_or_with_part_of_it_is_not_sealed(tmp_path):
    path = tmp_path / "x.ndjson"
    cut = SEALED_MARK.encode()[:-1]
    path.write_bytes(b"x" * (BLOCK - len(cut)) + cut + b"y" * 10)
    assert not _holds(path, SEALED_MARK)


def _export(path: Path, lines: list[str], cipher: PayloadCipher | None = None) -> Path:
    path.write_text("".join(as_exported(line, cipher) + "\n" for line in lines))
    return path


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("workers", [1, 2])
def test_sealed_exports_are_staged_opened_each_under_its_own_name(tmp_path, workers):
    ring = KeyRing("k1", {"k1": new_key()})
    said: list[str] = []
    lines = [line for line, _ in synthesize(30, arrivals_in_result=False)]
    plain = [_export(tmp_path / f"plain-{i}.ndjson", lines[i::3]) for i in range(3)]
    sealed_dir = tmp_path / "kept"
    sealed_dir.mkdir()
    sealed = [
        _export(sealed_dir / f"h-{i}.ndjson", lines[i::3], PayloadCipher(ring)) for i in range(3)
    ]
    assert all(SEALED_MARK in path.read_text() for path in sealed)
    found = collect([sealed_dir], tmp_path / "staging", PayloadCipher(ring), workers=workers,
                    progress=said.append)  # fmt: skip
    assert found.skipped == {}
    staged = [Path(name) for name in found.ndjson]
    assert [p.name for p in staged] == [f"{i:05d}-h-{i}.ndjson" for i in range(3)]
    assert all(p.parent == tmp_path / "staging" / "opened" for p in staged)
    # The staged files hold opened payloads: the staging directory is its owner's alone.
    assert (tmp_path / "staging").stat().st_mode & 0o777 == 0o700
    for opened, original in zip(staged, plain, strict=True):
        assert SEALED_MARK not in opened.read_text()
        assert _records(opened) == _records(original)
    assert said == ["opening the sealed payloads of 3 export file(s)"]


def test_a_sealed_export_that_does_not_open_is_skipped_naming_the_key(tmp_path):
    ours, theirs = KeyRing("ours", {"ours": new_key()}), KeyRing("theirs", {"theirs": new_key()})
    lines = [line for line, _ in synthesize(6)]
    good = _export(tmp_path / "a.ndjson", lines[:3], PayloadCipher(ours))
    bad = _export(tmp_path / "b.ndjson", lines[3:], PayloadCipher(theirs))
    found = collect([good, bad], tmp_path / "staging", PayloadCipher(ours), workers=2)
    assert list(found.skipped) == [str(bad)] and "'theirs'" in found.skipped[str(bad)]
    assert [Path(name).name for name in found.ndjson] == ["00000-a.ndjson"]
    # Nothing half-written is left of the file that did not open.
    assert sorted(p.name for p in (tmp_path / "staging" / "opened").iterdir()) == ["00000-a.ndjson"]


def test_a_script_without_a_main_guard_still_gets_its_files_opened(tmp_path):
    """Worker processes import the calling script's main module; one that runs the job
    at its top level breaks them, and the files are opened in the script's process."""
    ring = KeyRing("k1", {"k1": new_key()})
    lines = [line for line, _ in synthesize(4)]
    for i in range(2):
        _export(tmp_path / f"h-{i}.ndjson", lines[i::2], PayloadCipher(ring))
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import json, sys\n"
        "from pathlib import Path\n"
        "from analytics.histories import collect\n"
        "from mqgather.runtime.codec import PayloadCipher, load_key_ring\n"
        f"root = Path({str(tmp_path)!r})\n"
        "said = []\n"
        "found = collect(sorted(root.glob('h-*.ndjson')), root / 'staging',\n"
        "                PayloadCipher(load_key_ring()), workers=2, progress=said.append)\n"
        "print(json.dumps({'ndjson': found.ndjson, 'skipped': found.skipped, 'said': said}))\n"
    )
    env = dict(os.environ, MQGATHER_KEYS=ring.to_file_model().model_dump_json(),
               PYTHONPATH=str(Path(__file__).resolve().parents[2]))  # fmt: skip
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                         text=True, timeout=120, check=True)  # fmt: skip
    # The workers' own attempts die before they print anything: the last line is ours.
    result = json.loads(run.stdout.splitlines()[-1])
    said = result["said"]
    assert said[0] == "opening the sealed payloads of 2 export file(s)"
    assert said[1].startswith("the processes opening them stopped (")
    assert said[1].endswith("); opening them here instead") and len(said) == 2
    assert result["skipped"] == {}
    staged = [Path(name) for name in result["ndjson"]]
    assert [p.name for p in staged] == ["00000-h-0.ndjson", "00001-h-1.ndjson"]
    assert all(SEALED_MARK not in p.read_text() and p.read_text() for p in staged)


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-be", "utf-32"])
def test_a_cli_history_reads_alike_in_each_encoding_a_shell_writes(tmp_path, encoding):
    # `temporal workflow show -o json > h.json` in Windows PowerShell writes UTF-16 with a
    # byte-order mark; other shells and editors write UTF-8, with or without one.
    recorded = next(
        p for p in sorted((HISTORIES / LATEST).glob("*.json")) if "collect" not in p.name
    )
    text = recorded.read_text(encoding="utf-8")
    staged = {}
    for name, codec in (("plain", "utf-8"), ("other", encoding)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "h.json").write_bytes(text.encode(codec))
        found = collect([folder], tmp_path / f"staging-{name}")
        assert found.skipped == {}
        staged[name] = Path(found.ndjson[0]).read_text(encoding="utf-8")
    assert staged["other"] == staged["plain"]
    assert len(staged["plain"].splitlines()) == 1


def test_a_sealed_export_with_a_byte_order_mark_is_opened_as_one_without(tmp_path):
    ring = KeyRing("k1", {"k1": new_key()})
    lines = [line for line, _ in synthesize(4)]
    plain = _export(tmp_path / "plain.ndjson", lines)
    (tmp_path / "kept").mkdir()
    marked = _export(tmp_path / "kept" / "h.ndjson", lines, PayloadCipher(ring))
    marked.write_bytes(b"\xef\xbb\xbf" + marked.read_bytes())
    found = collect([marked.parent], tmp_path / "staging", PayloadCipher(ring), workers=1)
    assert found.skipped == {}
    assert _records(Path(found.ndjson[0])) == _records(plain)


def running_copy(recorded: str, folder: Path, events: int = 3) -> str:
    """A recorded history cut to its first ``events``, as ``temporal workflow show``
    writes a run that has not ended, into ``folder``; its workflow id."""
    history = json.loads((HISTORIES / LATEST / recorded).read_text())
    history["events"] = history["events"][:events]
    path = folder / f"running-{events}-{recorded}"
    path.write_text(json.dumps(history))
    [(workflow_id, _, _)] = read_cli_json(path)
    return workflow_id


def test_a_gather_still_running_in_a_cli_file_is_named_and_the_ended_are_not(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for ended in ("timeout_xml.json", "continue_as_new_run1.json", "collect_count.json"):
        (folder / ended).write_bytes((HISTORIES / LATEST / ended).read_bytes())
    running = running_copy("quorum.json", folder)
    running_copy("collect_count.json", folder)  # a collector runs for ever: its batches count
    found = collect([folder], tmp_path / "staging")
    assert found.skipped == {}
    assert [workflow_id for workflow_id, _ in found.running] == [running]
    assert found.duplicates_dropped == 1  # the collector's, read twice


@pytest.mark.parametrize("recorded", ["timeout_xml.json", "collect_count.json"])
@pytest.mark.parametrize("fullest_first", [True, False])
def test_a_run_read_more_than_once_counts_by_its_fullest_copy_in_either_order(
    tmp_path, recorded, fullest_first
):
    # `temporal workflow show` saved while the run went on, and again later (a gather
    # once it had ended; a collector, which never ends, further on).
    folder = tmp_path / "in"
    folder.mkdir()
    whole = (HISTORIES / LATEST / recorded).read_bytes()
    (folder / ("a.json" if fullest_first else "z.json")).write_bytes(whole)
    running_copy(recorded, folder, events=3)
    running_copy(recorded, folder, events=5)
    found = collect([folder], tmp_path / "staging")
    assert (found.running, found.duplicates_dropped) == ([], 2)
    [line] = Path(found.ndjson[0]).read_text().splitlines()
    assert json.loads(line)["history"] == json.loads(whole)


def test_files_json_cannot_read_are_skipped_by_name(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    cli = tmp_path / "cli"
    cli.mkdir()
    (cli / "deep.json").write_text(deep)
    (cli / "digits.json").write_text('{"events": ' + "1" * 5000 + "}")
    sealed = tmp_path / "sealed.ndjson"
    sealed.write_text(f'{{"history": {deep}, "note": "{SEALED_MARK}"}}\n')
    ring = KeyRing("k1", {"k1": new_key()})
    found = collect([cli, sealed], tmp_path / "staging", PayloadCipher(ring), workers=1)
    assert found.ndjson == []
    assert "nested too deep to read" in found.skipped[str(cli / "deep.json")]
    assert "Exceeds the limit" in found.skipped[str(cli / "digits.json")]
    assert found.skipped[str(sealed)] == "a line nested too deep to read as JSON"
