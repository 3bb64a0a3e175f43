"""Files written whole and private."""

from __future__ import annotations

import pytest

from mqgather.runtime.files import write_whole


def test_a_file_is_written_whole_for_its_owner_alone_and_replaces_the_old(tmp_path):
    path = tmp_path / "state.json"
    path.write_text("old")
    path.chmod(0o644)
    write_whole(path, "new")
    assert path.read_text() == "new" and path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_write_that_fails_leaves_the_old_file_and_no_other(tmp_path):
    path = tmp_path / "state.json"
    path.write_text("old")
    with pytest.raises(UnicodeEncodeError):
        write_whole(path, "half \udcff")  # fails after its file is made, before the swap
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]
