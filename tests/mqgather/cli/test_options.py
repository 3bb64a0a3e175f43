"""What the commands share: a salvage's progress."""

from __future__ import annotations


def test_a_long_salvage_tells_how_far_it_has_come(capsys):
    from mqgather.cli.options import with_progress

    checks = []
    check = with_progress(lambda: checks.append(1), "gather:a:00", every=0)
    for _ in range(3):
        check()
    told = capsys.readouterr().err.splitlines()
    assert len(checks) == 3
    assert [line.split(" (")[0] for line in told] == [
        f"gather:a:00: sending message {n}" for n in (1, 2, 3)]  # fmt: skip
    quiet = with_progress(lambda: None, "gather:a:00")  # every 2 s: not yet
    quiet()
    assert capsys.readouterr().err == ""
