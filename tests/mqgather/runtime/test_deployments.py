"""Rollout calls: what they refuse and how they say it."""

from __future__ import annotations

import uuid

import pytest

from mqgather.runtime.deployments import DeploymentError, describe, open_gathers_query, promote


def test_open_gathers_are_counted_per_pinned_version_or_unversioned():
    pinned = open_gathers_query("mqgather", "0.2.0-abc")
    assert 'TemporalWorkerDeploymentVersion = "mqgather:0.2.0-abc"' in pinned
    assert 'TemporalWorkflowVersioningBehavior = "Pinned"' in pinned
    assert 'ExecutionStatus = "Running"' in pinned and 'WorkflowType = "Gather"' in pinned
    assert "TemporalWorkerDeploymentVersion IS NULL" in open_gathers_query(None, None)


async def test_an_unknown_deployment_says_how_to_start_one(temporal_env):
    name = f"nothing-{uuid.uuid4().hex[:6]}"
    with pytest.raises(DeploymentError, match=f"--deployment {name} --build-id"):
        await describe(temporal_env.client, name)
    with pytest.raises(DeploymentError, match="no worker deployment"):
        await promote(temporal_env.client, name, "v1")
