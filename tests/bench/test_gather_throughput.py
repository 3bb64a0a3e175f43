"""The gather bench's floor runs on the same transport as the gathers it is set against."""

from __future__ import annotations

import subprocess
import sys

from bench.gather_throughput import trivial_worker
from mqgather.names import ENV_GRPC_COMPRESSION


def test_the_floors_worker_compresses_grpc_as_mqgathers_clients_do(monkeypatch):
    monkeypatch.delenv(ENV_GRPC_COMPRESSION, raising=False)
    args = trivial_worker("localhost:7233")
    assert args[args.index("--grpc-compression") + 1] == "none"
    monkeypatch.setenv(ENV_GRPC_COMPRESSION, "gzip")
    args = trivial_worker("localhost:7233", sandbox=True)
    assert args[args.index("--grpc-compression") + 1] == "gzip"
    assert args[-1] == "--sandbox"


def test_the_floors_worker_takes_the_compression_it_is_given():
    # Its own parser accepts exactly the settings mqgather's clients know.
    run = [sys.executable, "-m", "bench.trivial", "--address", "x", "--task-queue", "q"]
    refused = subprocess.run([*run, "--grpc-compression", "zstd"], capture_output=True, text=True)
    assert refused.returncode == 2 and "invalid choice: 'zstd'" in refused.stderr
