"""`mqgather collector rules` as an operator types it."""

from __future__ import annotations

import json

from tests.mqgather.cli.test_queues import run


def config(tmp_path):
    file = tmp_path / "mqgather.toml"
    file.write_text(f'[collectors.cma]\nrules_db = "{tmp_path / "rules.db"}"\n')
    return str(file)


def test_rules_set_list_delete_from_a_shell(tmp_path):
    cfg = ["--config", config(tmp_path)]
    done = run(["collector", "rules", "set", "cma", "UK", "--queue", "CMAOUT.UK",
                "--max-messages", "5", "--max-delay", "15", *cfg], tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert b"new batches follow within 2 s" in done.stdout
    listed = run(["collector", "rules", "list", "cma", "--json", *cfg], tmp_path)
    rows = [json.loads(line) for line in listed.stdout.decode().splitlines()]
    assert rows == [{"destination": "UK", "target_queue": "CMAOUT.UK", "max_messages": 5,
                     "max_delay_seconds": 15.0, "max_bytes": 1048576, "format": "xml",
                     "separator": ""}]  # fmt: skip
    table = run(["collector", "rules", "list", "cma", *cfg], tmp_path).stdout.decode()
    assert "UK" in table and "(any other)" in table and "COLLECT.OUT.OTHER" in table
    assert run(["collector", "rules", "delete", "cma", "UK", *cfg], tmp_path).returncode == 0
    again = run(["collector", "rules", "delete", "cma", "UK", *cfg], tmp_path)
    assert again.returncode != 0 and b"no rule for 'UK'" in again.stderr


def test_an_invalid_rule_is_refused_with_the_column_and_reason(tmp_path):
    cfg = ["--config", config(tmp_path)]
    bad = run(["collector", "rules", "set", "cma", "UK", "--queue", "Q", "--format", "yaml",
               *cfg], tmp_path)  # fmt: skip
    assert bad.returncode != 0 and b"column format" in bad.stderr
    zero = run(["collector", "rules", "set", "cma", "UK", "--queue", "Q", "--max-messages", "0",
                *cfg], tmp_path)  # fmt: skip
    assert zero.returncode != 0 and b"column max_messages" in zero.stderr
    # A name MQ does not allow for a queue: every batch's PUT would fail.
    blank = run(["collector", "rules", "set", "cma", "UK", "--queue", "CMA OUT", *cfg], tmp_path)
    assert blank.returncode != 0 and b"column target_queue" in blank.stderr
    # The collector's own input (COLLECT.IN by default): its batches would loop.
    loop = run(["collector", "rules", "set", "cma", "UK", "--queue", "COLLECT.IN", *cfg], tmp_path)
    assert loop.returncode != 0 and b"is collector cma's input_queue" in loop.stderr
    listed = run(["collector", "rules", "list", "cma", "--json", *cfg], tmp_path)
    assert listed.stdout == b""
    unknown = run(["collector", "rules", "list", "nope", *cfg], tmp_path)
    assert unknown.returncode != 0 and b"collectors.nope" in unknown.stderr


def test_queues_check_finds_a_rules_target_queue_that_is_not_defined(tmp_path):
    cfg = ["--config", config(tmp_path)]
    run(["queues", "setup", *cfg], tmp_path)
    assert run(["queues", "check", *cfg], tmp_path).returncode == 0
    run(["collector", "rules", "set", "cma", "UK", "--queue", "CMAOUT.UK", *cfg], tmp_path)
    found = run(["queues", "check", "--json", *cfg], tmp_path)
    assert found.returncode == 1
    (finding,) = [json.loads(line) for line in found.stdout.splitlines()]
    assert finding["queue"] == "CMAOUT.UK" and finding["purpose"] == "batches of UK (collector cma)"
    assert finding["problem"].startswith("not defined: run `mqgather queues define`")
    run(["queues", "define", "CMAOUT.UK"], tmp_path)
    assert run(["queues", "check", *cfg], tmp_path).returncode == 0


def test_queues_check_finds_a_target_queue_shorter_than_its_rules_batches(tmp_path):
    cfg = ["--config", config(tmp_path)]
    run(["queues", "setup", *cfg], tmp_path)
    run(["queues", "define", "CMAOUT.UK", "--maxmsgl", "65536"], tmp_path)
    run(["collector", "rules", "set", "cma", "UK", "--queue", "CMAOUT.UK", "--max-bytes",
         "65536", *cfg], tmp_path)  # fmt: skip
    assert run(["queues", "check", *cfg], tmp_path).returncode == 0
    run(["collector", "rules", "set", "cma", "UK", "--queue", "CMAOUT.UK", "--max-bytes",
         "200000", *cfg], tmp_path)  # fmt: skip
    found = run(["queues", "check", "--json", *cfg], tmp_path)
    assert found.returncode == 1
    (finding,) = [json.loads(line) for line in found.stdout.splitlines()]
    assert finding["queue"] == "CMAOUT.UK"
    assert finding["problem"].startswith("MAXMSGL(65536) is below max_bytes (200000) of the "
                                         "rule of UK (collector cma)")  # fmt: skip
    assert "ALTER QLOCAL(CMAOUT.UK) MAXMSGL(200000)" in finding["problem"]
