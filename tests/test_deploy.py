"""The production stack's files, checked as far as a machine without a container engine
allows: the compose file against the Compose Specification's schema, the Dockerfile's
references, and the configuration, scrape targets and dashboard they wire together."""

from __future__ import annotations

import importlib.resources
import json
import re
import tomllib
from pathlib import Path

import jsonschema
from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[1]
#: Every part the stack must run, and how many of each.
PARTS = {"ibmmq": 1, "postgresql": 1, "temporal": 1, "temporal-ui": 1, "worker": 2,
         "bridge": 2, "otel-collector": 1, "prometheus": 1, "grafana": 1, "spark-master": 1,
         "spark-worker": 1, "codec-server": 1}  # fmt: skip
#: Services without a health check, and why.
UNWATCHED = {
    "otel-collector": "its image has no shell to run a check in",
    "queues": "a one-shot job; the workers wait for it to complete",
    "keys": "a one-shot job; the workers and the codec server wait for it to complete",
    "analytics": "an on-demand job",
}


def _compose() -> dict:
    return YAML(typ="safe").load((ROOT / "docker-compose.yml").read_text())


def _stages() -> set[str]:
    text = (ROOT / "Dockerfile").read_text()
    return set(re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", text, re.M | re.I))


def test_the_compose_file_follows_the_compose_specification():
    schema_file = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    schema = json.loads((schema_file / "compose-spec.json").read_text())
    jsonschema.validate(_compose(), schema)


def test_the_stack_has_every_part_with_health_checks_and_the_environment_it_needs():
    services = _compose()["services"]
    for name, replicas in PARTS.items():
        assert name in services, name
        assert services[name].get("deploy", {}).get("replicas", 1) == replicas, name
    for name, service in services.items():
        assert "healthcheck" in service or name in UNWATCHED, f"{name} has no health check"
    for name in ("worker", "bridge", "queues"):
        env = services[name]["environment"]
        assert env["MQGATHER_MQ"].startswith("ibmmq://") and env["TEMPORAL_ADDRESS"], name
        assert env["MQGATHER_CONFIG"] == "/etc/mqgather/mqgather.toml", name
    assert services["temporal"]["environment"]["POSTGRES_SEEDS"] == "postgresql"
    assert services["temporal-ui"]["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"
    for name in ("worker", "bridge"):
        depends = services[name]["depends_on"]
        assert depends["queues"]["condition"] == "service_completed_successfully"


def test_the_stack_runs_encrypted_with_the_ui_reading_through_the_codec_server():
    services = _compose()["services"]
    ring = "/var/lib/mqgather/keys/keys.json"
    assert ring.endswith(
        services["keys"]["command"][services["keys"]["command"].index("--file") + 1]
    )
    for name in ("worker", "bridge", "codec-server", "analytics"):
        assert services[name]["environment"]["MQGATHER_KEYS_FILE"] == ring, name
        assert any(v.startswith("mqgather-keys:") and v.endswith(":ro")
                   for v in services[name]["volumes"]), name  # fmt: skip
        assert services[name]["depends_on"]["keys"]["condition"] == (
            "service_completed_successfully"
        ), name
    codec = services["codec-server"]
    command = codec["command"]
    port = command[command.index("--port") + 1]
    assert services["temporal-ui"]["environment"]["TEMPORAL_CODEC_ENDPOINT"].endswith(f":{port}")
    assert codec["environment"]["MQGATHER_CODEC_TOKEN_FILE"].startswith("/var/lib/mqgather/keys/")
    ui_port = services["temporal-ui"]["ports"][0].split(":")[0]
    assert f"http://localhost:{ui_port}" in command
    # Reachable from this host only.
    assert all(p.startswith("127.0.0.1:") for p in codec["ports"])
    # The image makes the keys' directory for its own user, so a fresh volume is theirs.
    assert "install -d -o 1001 -m 700 /var/lib/mqgather/keys" in (ROOT / "Dockerfile").read_text()


def test_builds_and_mounts_point_at_files_that_exist():
    stages = _stages()
    assert {"app", "analytics"} <= stages
    for name, service in _compose()["services"].items():
        build = service.get("build")
        if build:
            assert (ROOT / build["context"] / build["dockerfile"]).is_file(), name
            assert build["target"] in stages, name
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./") and source != "./analytics-out":
                assert (ROOT / source).exists(), f"{name} mounts missing {source}"


def test_the_dockerfile_copies_files_that_exist_and_every_package():
    text = (ROOT / "Dockerfile").read_text()
    copied = []
    for line in re.findall(r"^COPY\s+(.+)$", text, re.M):
        *sources, _dest = line.split()
        copied += [s for s in sources if not s.startswith("--")]
    for source in copied:
        assert (ROOT / source).exists(), f"COPY {source}: no such file"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages <= set(copied)
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert not any(source in ignored for source in copied)


def test_the_stack_configuration_is_valid_and_sets_up_its_queues():
    from mqgather.config import parse_config, referenced_queues

    config = parse_config(tomllib.loads((ROOT / "deploy/mqgather.toml").read_text()), "deploy")
    queues = referenced_queues(config)
    assert {"GATHER.IN", "GATHER.BACKOUT", "ORDER.RESPONSE", "BACKEND.CREDIT"} <= set(queues)
    assert _compose()["services"]["queues"]["command"] == ["queues", "setup"]


def test_prometheus_scrapes_the_ports_the_processes_serve():
    services = _compose()["services"]
    scrape = YAML(typ="safe").load((ROOT / "deploy/prometheus.yml").read_text())
    targets = {
        sd["names"][0]: sd["port"]
        for job in scrape["scrape_configs"]
        for sd in job.get("dns_sd_configs", [])
    }
    for name in ("worker", "bridge"):
        command = services[name]["command"]
        port = int(command[command.index("--metrics-port") + 1])
        assert targets[name] == port, name
        assert str(port) in " ".join(services[name]["healthcheck"]["test"])


def dashboard_metrics() -> set[str]:
    """The metric names the Grafana dashboard's queries use."""
    dashboard = json.loads((ROOT / "deploy/grafana/dashboards/mqgather.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert exprs
    found = set()
    for expr in exprs:
        found |= set(re.findall(r"\b((?:mqgather|temporal)_[a-z_]+)", expr))
    return found


def test_the_dashboard_is_provisioned_from_prometheus():
    dashboard = json.loads((ROOT / "deploy/grafana/dashboards/mqgather.json").read_text())
    source = YAML(typ="safe").load(
        (ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text()
    )
    uid = source["datasources"][0]["uid"]
    assert all(p["datasource"]["uid"] == uid for p in dashboard["panels"])
    assert {"mqgather_gathers_started", "mqgather_gathers_open"} <= dashboard_metrics()
