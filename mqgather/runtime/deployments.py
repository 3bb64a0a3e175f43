"""Rollout of new gather code through Temporal worker deployments.

A worker started with a deployment name and a build id is one *version* of that
deployment. New gathers start on the deployment's current version (or, while one is
ramping, on the ramping version for the ramp's share of them); a gather stays pinned to
the version it started on until it closes. These calls read and change that routing
and count, from visibility, the gathers still open on each version.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC
from typing import Any

from temporalio.api.enums.v1 import WorkerDeploymentVersionStatus
from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    ListWorkerDeploymentsRequest,
    SetWorkerDeploymentCurrentVersionRequest,
    SetWorkerDeploymentRampingVersionRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from mqgather.errors import MQGatherError
from mqgather.names import GATHER_WORKFLOW, SA_DEPLOYMENT_VERSION, SA_VERSIONING_BEHAVIOR

IDENTITY = "mqgather deploy"


class DeploymentError(MQGatherError):
    """A rollout call the server refused; the message says what to do."""


@dataclass
class VersionInfo:
    """One version of a deployment as the server and visibility see it."""

    build_id: str
    status: str  # current | ramping | draining | drained | inactive
    created: str
    open_gathers: int
    ramp_percent: float | None = None


@dataclass
class DeploymentInfo:
    """A deployment's routing, its versions and the unversioned gathers still open."""

    name: str
    current: str | None
    ramping: str | None
    ramp_percent: float
    versions: list[VersionInfo] = field(default_factory=list)
    unversioned_open: int = 0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return asdict(self)


def version_string(deployment: str, build_id: str) -> str:
    """How visibility spells a version: ``<deployment>:<build id>``."""
    return f"{deployment}:{build_id}"


def open_gathers_query(deployment: str | None, build_id: str | None) -> str:
    """Visibility query for running gathers on one version (None, None: unversioned)."""
    query = f'WorkflowType = "{GATHER_WORKFLOW}" AND ExecutionStatus = "Running"'
    if deployment is None or build_id is None:
        return f"{query} AND {SA_DEPLOYMENT_VERSION} IS NULL"
    return (
        f'{query} AND {SA_DEPLOYMENT_VERSION} = "{version_string(deployment, build_id)}"'
        f' AND {SA_VERSIONING_BEHAVIOR} = "Pinned"'
    )


async def open_gathers(client: Client, deployment: str | None, build_id: str | None) -> int:
    """How many gathers are open and pinned to this version (None, None: unversioned)."""
    return (await client.count_workflows(open_gathers_query(deployment, build_id))).count


async def deployments(client: Client) -> list[str]:
    """Names of the namespace's worker deployments."""
    names: list[str] = []
    token = b""
    while True:
        page = await client.workflow_service.list_worker_deployments(
            ListWorkerDeploymentsRequest(namespace=client.namespace, next_page_token=token)
        )
        names += [d.name for d in page.worker_deployments]
        token = page.next_page_token
        if not token:
            return sorted(names)


def _status(value: int) -> str:
    name = WorkerDeploymentVersionStatus.Name(WorkerDeploymentVersionStatus.ValueType(value))
    return name.removeprefix("WORKER_DEPLOYMENT_VERSION_STATUS_").lower()


async def describe(client: Client, deployment: str) -> DeploymentInfo:
    """The deployment's routing and versions, each with its open gathers.

    Raises:
        DeploymentError: when no worker of that deployment has ever polled.
    """
    try:
        answer = await client.workflow_service.describe_worker_deployment(
            DescribeWorkerDeploymentRequest(namespace=client.namespace, deployment_name=deployment)
        )
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise DeploymentError(
                f"no worker deployment named {deployment!r}; start a worker with "
                f"`mqgather worker --deployment {deployment} --build-id ID` first"
            ) from exc
        raise
    info = answer.worker_deployment_info
    routing = info.routing_config
    current = routing.current_deployment_version.build_id or None
    ramping = routing.ramping_deployment_version.build_id or None
    out = DeploymentInfo(
        name=deployment,
        current=current,
        ramping=ramping,
        ramp_percent=routing.ramping_version_percentage if ramping else 0.0,
        unversioned_open=await open_gathers(client, None, None),
    )
    for summary in sorted(info.version_summaries, key=lambda s: s.create_time.ToDatetime()):
        build = summary.deployment_version.build_id
        created = summary.create_time.ToDatetime().replace(tzinfo=UTC)
        out.versions.append(
            VersionInfo(
                build_id=build,
                status=_status(summary.status),
                created=created.isoformat(timespec="seconds"),
                open_gathers=await open_gathers(client, deployment, build),
                ramp_percent=out.ramp_percent if build == ramping else None,
            )
        )
    return out


def _address(
    request: SetWorkerDeploymentCurrentVersionRequest | SetWorkerDeploymentRampingVersionRequest,
    client: Client,
    deployment: str,
    build_id: str,
) -> None:
    request.namespace = client.namespace
    request.deployment_name = deployment
    request.build_id = build_id
    request.identity = IDENTITY


async def promote(
    client: Client, deployment: str, build_id: str, ramp_percent: float | None = None
) -> DeploymentInfo:
    """Make ``build_id`` the current version, or ramp it to a share of new gathers.

    Raises:
        DeploymentError: the version is unknown (no worker of it has polled yet) or the
            percentage is out of range.
    """
    known = {v.build_id for v in (await describe(client, deployment)).versions}
    if build_id not in known:
        raise DeploymentError(
            f"version {build_id!r} of deployment {deployment!r} is unknown (known: "
            f"{', '.join(sorted(known)) or 'none'}); start `mqgather worker --deployment "
            f"{deployment} --build-id {build_id}` and promote it once it runs"
        )
    if ramp_percent is not None and not 0 <= ramp_percent <= 100:
        raise DeploymentError(f"--ramp must be between 0 and 100, not {ramp_percent}")
    service = client.workflow_service
    try:
        if ramp_percent is None:
            current = SetWorkerDeploymentCurrentVersionRequest()
            _address(current, client, deployment, build_id)
            await service.set_worker_deployment_current_version(current)
        else:
            ramping = SetWorkerDeploymentRampingVersionRequest(percentage=ramp_percent)
            _address(ramping, client, deployment, build_id)
            await service.set_worker_deployment_ramping_version(ramping)
    except RPCError as exc:
        raise DeploymentError(
            f"the server refused to promote {build_id!r} of {deployment!r}: {exc.message}"
        ) from exc
    return await describe(client, deployment)
