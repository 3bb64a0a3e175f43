"""Finding sealed payloads in export files before Spark reads them."""

from __future__ import annotations

import pytest

from analytics.histories import SEALED_MARK, _holds

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
