"""Finding sealed payloads in export files before Spark reads them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import json_format
from temporalio.api.history.v1 import History

from analytics.histories import SEALED_MARK, _holds, collect, history_line
from analytics.synth import synthesize
from mqgather.runtime.codec import KeyRing, PayloadCipher, new_key, payloads_in

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
    """An export file of ``lines`` as the export writes them, every payload sealed with
    ``cipher`` (if given)."""
    with path.open("w") as out:
        for line in lines:
            record = json.loads(line)
            history = json_format.ParseDict(record["history"], History())
            if cipher is not None:
                for payload in payloads_in(history):
                    payload.CopyFrom(cipher.seal(payload))
            out.write(history_line(record["workflowId"], record["runId"], history) + "\n")
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
