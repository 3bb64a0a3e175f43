"""mqgather's Temporal clients: gRPC compression chosen by MQGATHER_GRPC_COMPRESSION."""

from __future__ import annotations

import pytest
from temporalio.service import GrpcCompression

from mqgather.errors import ConfigError
from mqgather.names import ENV_GRPC_COMPRESSION
from mqgather.runtime.temporal import connect, connect_config, grpc_compression


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
