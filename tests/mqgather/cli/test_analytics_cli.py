"""`mqgather export` and `analyze`: what they refuse, before any work starts."""

from __future__ import annotations

import os
import subprocess

from tests.mqgather.cli.test_queues import MQGATHER, run


def test_analyze_refuses_an_out_that_is_a_file(tmp_path):
    (tmp_path / "report").write_text("mine")
    done = run(["analyze", str(tmp_path), "--out", str(tmp_path / "report")], tmp_path)
    assert done.returncode == 2
    assert b"Invalid value for '--out'" in done.stderr and b"is a file" in done.stderr
    assert (tmp_path / "report").read_text() == "mine"


def test_analyze_refuses_a_master_spark_would_not_take(tmp_path):
    done = run(["analyze", str(tmp_path), "--master", "bogus://x"], tmp_path)
    assert done.returncode == 2
    assert b"'bogus://x' is not a Spark master: local[*], local[N]" in done.stderr


def test_a_master_spark_cannot_start_with_is_named_not_a_stack_trace(tmp_path):
    # It passes the first check; Spark's JVM exits, saying why in its log.
    done = run(["analyze", str(tmp_path), "--out", str(tmp_path / "o"), "--master", "local[x]"],
               tmp_path)  # fmt: skip
    assert done.returncode != 0
    last = done.stderr.decode().strip().splitlines()[-1]
    assert last.startswith("Error: --master: Spark did not start with master 'local[x]'")
    assert b"Traceback" not in done.stderr


def test_export_refuses_a_bad_time_before_reaching_temporal(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MQGATHER_", "TEMPORAL_"))}
    done = subprocess.run(
        [MQGATHER or "mqgather", "export", str(tmp_path / "out"), "--since", "yesterday"],
        cwd=tmp_path, capture_output=True, timeout=60,
        env={**env, "TEMPORAL_ADDRESS": "127.0.0.1:1"},  # nothing listens there
    )  # fmt: skip
    assert done.returncode != 0
    assert b"--since: 'yesterday' is not an ISO date/time" in done.stderr
    assert b"cannot reach Temporal" not in done.stderr
