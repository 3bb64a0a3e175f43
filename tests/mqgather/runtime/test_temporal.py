"""mqgather's Temporal clients: gRPC compression chosen by MQGATHER_GRPC_COMPRESSION."""

from __future__ import annotations

import re
import urllib.request
import uuid

import pytest
from temporalio import workflow
from temporalio.service import GrpcCompression
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from mqgather.errors import ConfigError
from mqgather.names import ENV_GRPC_COMPRESSION
from mqgather.runtime.temporal import (
    connect,
    connect_config,
    dev_server_args,
    grpc_compression,
)
from tests.harness import start_dev_server


def test_compression_is_off_unless_gzip_is_asked_for(monkeypatch):
    monkeypatch.delenv(ENV_GRPC_COMPRESSION, raising=False)
    assert grpc_compression() is GrpcCompression.NONE
    assert connect_config("temporal:7233")["grpc_compression"] is GrpcCompression.NONE
    monkeypatch.setenv(ENV_GRPC_COMPRESSION, " GZIP ")
    assert connect_config("temporal:7233")["grpc_compression"] is GrpcCompression.GZIP
    monkeypatch.setenv(ENV_GRPC_COMPRESSION, "none")
    assert grpc_compression() is GrpcCompression.NONE


def test_an_unknown_compression_is_refused_naming_the_setting(monkeypatch):
    monkeypatch.setenv(ENV_GRPC_COMPRESSION, "zstd")
    with pytest.raises(ConfigError) as caught:
        connect_config("temporal:7233")
    assert caught.value.key == ENV_GRPC_COMPRESSION
    assert "'zstd' is not a compression; use none or gzip" in str(caught.value)


@pytest.mark.parametrize(("setting", "expected"), [("", "NONE"), ("gzip", "GZIP")])
async def test_the_client_talks_to_the_server_with_the_compression_chosen(
    temporal_env, monkeypatch, setting, expected
):
    monkeypatch.setenv(ENV_GRPC_COMPRESSION, setting)
    client = await connect(temporal_env.client.service_client.config.target_host)
    assert client.service_client.config.grpc_compression is getattr(GrpcCompression, expected)
    # The server takes requests sent either way and answers them.
    assert await client.service_client.check_health() is True


@workflow.defn(name="Nothing")
class Nothing:
    @workflow.run
    async def run(self) -> None:
        return None


def _partitions(metrics: str, task_queue: str) -> set[str]:
    """The numbered partitions of ``task_queue`` the server's matching metrics name."""
    label = f'taskqueue="{re.sub(r"[^A-Za-z0-9_]", "_", task_queue)}"'
    return {
        found.group(1)
        for line in metrics.splitlines()
        if label in line and (found := re.search(r'partition="(\d+)"', line))
    }


async def test_the_dev_server_mqgather_starts_runs_one_partition_per_task_queue(tmp_path):
    def args_for(ports: list[int]) -> list[str]:
        port, metrics_port, ui_port = ports
        return [*dev_server_args(str(tmp_path / "t.db"), port, ui_port), "--headless",
                "--metrics-port", str(metrics_port)]  # fmt: skip

    server, client, (_, metrics_port, _) = await start_dev_server(tmp_path, args_for, 3)
    try:
        task_queue = f"partitions-{uuid.uuid4().hex[:10]}"
        async with Worker(client, task_queue=task_queue, workflows=[Nothing],
                          workflow_runner=UnsandboxedWorkflowRunner()):  # fmt: skip
            await client.execute_workflow(Nothing.run, id=task_queue, task_queue=task_queue)
            with urllib.request.urlopen(f"http://localhost:{metrics_port}/metrics") as answer:
                metrics = answer.read().decode()
    finally:
        server.terminate()
        server.wait(30)
    # The server's default (four) shows partitions 0 to 3 here once a worker has polled.
    assert _partitions(metrics, task_queue) == {"0"}
