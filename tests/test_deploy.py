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
         "spark-worker": 1, "codec-server": 1, "ui-proxy": 1}  # fmt: skip
#: Services without a health check, and why.
UNWATCHED = {
    "otel-collector": "its image has no shell to run a check in",
    "queues": "a one-shot job; the workers wait for it to complete",
    "keys": "a one-shot job; the workers and the codec server wait for it to complete",
    "certs": "a one-shot job; every part that uses its certificates waits for it",
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
        assert any(isinstance(v, str) and v.startswith("mqgather-keys:") and v.endswith(":ro")
                   for v in services[name]["volumes"]), name  # fmt: skip
        assert services[name]["depends_on"]["keys"]["condition"] == (
            "service_completed_successfully"
        ), name
    codec = services["codec-server"]
    command = codec["command"]
    port = command[command.index("--port") + 1]
    assert codec["environment"]["MQGATHER_CODEC_TOKEN_FILE"] == "/run/secrets/codec_token"
    assert "ports" not in codec  # only the proxy calls it
    ui = services["temporal-ui"]["environment"]
    assert ui["TEMPORAL_CODEC_ENDPOINT"] == "https://localhost:8443/codec"
    assert ui["TEMPORAL_CODEC_PASS_ACCESS_TOKEN"] == "false"
    proxy = (ROOT / "deploy/nginx/ui.conf.template").read_text()
    assert f"proxy_pass https://codec-server:{port}/;" in proxy
    assert 'proxy_set_header Authorization "Bearer ${CODEC_TOKEN}";' in proxy
    assert "https://localhost:8443" in command
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
            source = volume["source"] if isinstance(volume, dict) else volume.split(":")[0]
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


# ------------------------------------------------------------------ secure by default

#: ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, ${VAR?error}
_INTERPOLATION = re.compile(r"\$\{(\w+)(?:(:?[-?])([^}]*))?\}")
#: Where a secret may be read from a file: Docker secrets, the key ring, the stack's keys.
_SECRET_FILES = ("/run/secrets/", "/var/lib/mqgather/keys/", "/etc/temporal/tls/",
                 "/etc/temporal-ui/tls/", "/etc/mqgather/tls/")  # fmt: skip
#: Environment variables that carry a secret by their name.
_SECRET_NAME = re.compile(r"PASSWORD|TOKEN|SECRET|_KEY$", re.I)


def _required() -> list[str]:
    """The variables docker compose must be given, in file order."""
    text = (ROOT / "docker-compose.yml").read_text()
    return list(dict.fromkeys(m[1] for m in _INTERPOLATION.finditer(text) if m[2] in (":?", "?")))


def test_no_secret_has_a_default_and_every_one_is_required_from_env():
    from mqgather.runtime.stack import SECRET_NAMES

    text = (ROOT / "docker-compose.yml").read_text()
    for match in _INTERPOLATION.finditer(text):
        assert match[2] in (":?", "?"), f"${{{match[1]}}} has a default or may be empty"
    assert set(_required()) == set(SECRET_NAMES)  # exactly what `stack init` writes
    for name, service in _compose()["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if not _SECRET_NAME.search(key) or str(value) in ("true", "false"):
                continue  # a switch about a secret, not one
            if str(value).startswith("/"):  # a file: a secret, or a key of the stack's own
                assert str(value).startswith(_SECRET_FILES), f"{name}: {key} is {value}"
            else:
                assert str(value).startswith("${"), f"{name}: {key} is written in the file"
    for name, secret in _compose()["secrets"].items():
        assert secret.get("environment") in SECRET_NAMES, name


def test_without_an_env_file_compose_stops_naming_the_first_missing_secret():
    """What `docker compose config` does with no .env: interpolation fails on the first
    required variable, with the message written beside it."""
    text = (ROOT / "docker-compose.yml").read_text()
    first = next(m for m in _INTERPOLATION.finditer(text) if m[2] == ":?")
    assert first[1] == "MQ_APP_PASSWORD"
    assert "make stack-secrets" in first[3]


def test_the_spark_workers_read_the_exports_where_and_as_whom_the_analytics_job_wrote_them():
    services = _compose()["services"]
    job, worker = services["analytics"], services["spark-worker"]
    # The export's files are its user's alone: an executor reads them as that user.
    analytics_stage = (ROOT / "Dockerfile").read_text().split("AS analytics", 1)[1]
    uid = re.search(r"^USER (\d+)", analytics_stage, re.M)
    assert uid is not None and worker["user"] == f"{uid[1]}:{uid[1]}"
    # Where the job's driver names a file, an executor finds the same one.
    data = [v for v in job["volumes"] if isinstance(v, str) and v.endswith(":/data")]
    assert data and set(data) <= set(worker["volumes"])
    assert "/data/exports" in job["command"][0] and "spark://spark-master" in job["command"][0]


def test_the_spark_cluster_runs_the_spark_of_the_analytics_jobs_driver():
    services = _compose()["services"]
    tags = {services[n]["image"].split(":", 1)[1] for n in ("spark-master", "spark-worker")}
    pinned = re.search(r"^ARG SPARK_VERSION=(\S+)", (ROOT / "Dockerfile").read_text(), re.M)
    assert pinned is not None and tags == {pinned[1]}
    assert '"pyspark==${SPARK_VERSION}"' in (ROOT / "Dockerfile").read_text()


def test_only_loopback_is_published():
    for name, service in _compose()["services"].items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
    for name in ("temporal-ui", "codec-server", "otel-collector", "postgresql", "worker"):
        assert "ports" not in _compose()["services"][name], f"{name} is published"


def test_every_image_has_a_version_tag():
    for name, service in _compose()["services"].items():
        image = service.get("image", "")
        tag = image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else ""
        assert tag and tag != "latest", f"{name}: {image or 'no image'} is not pinned"
        assert re.search(r"\d", tag), f"{name}: {image} has no version in its tag"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert _compose()["services"]["worker"]["image"] == f"mqgather:{project}"


def test_every_client_of_temporal_and_mq_speaks_tls():
    services = _compose()["services"]
    for name, service in services.items():
        env = service.get("environment") or {}
        if "TEMPORAL_ADDRESS" in env and name != "temporal-ui":
            for key in ("CLIENT_CERT_PATH", "CLIENT_KEY_PATH", "SERVER_CA_CERT_PATH"):
                assert env.get(f"TEMPORAL_TLS_{key}"), f"{name} reaches Temporal without TLS"
        if "MQGATHER_MQ" in env:
            url = env["MQGATHER_MQ"]
            assert "cipher=" in url and "keyrepo=" in url, f"{name} reaches MQ without TLS"
            assert "keyrepo_password_file=" in url and "password=" not in url.replace(
                "keyrepo_password_file=", ""
            )
    ui = services["temporal-ui"]["environment"]
    assert ui["TEMPORAL_TLS_CERT"] and ui["TEMPORAL_TLS_CA"]
    server = services["temporal"]["environment"]
    assert server["TEMPORAL_TLS_REQUIRE_CLIENT_AUTH"] == "true"
    mqsc = (ROOT / "deploy/mq/tls.mqsc").read_text()
    assert "ALTER CHANNEL('DEV.APP.SVRCONN') CHLTYPE(SVRCONN) SSLCIPH(ANY_TLS13" in mqsc


def test_every_part_mounts_only_its_own_certificates():
    from mqgather.runtime.stack import PARTS

    for name, service in _compose()["services"].items():
        for volume in service.get("volumes", []):
            if isinstance(volume, dict) and volume.get("source") == "stack-tls":
                assert volume["read_only"] is True, name
                assert volume["volume"]["subpath"] in PARTS, name
                assert volume["volume"]["subpath"] in (name, "mqgather"), name


def test_metrics_listen_beyond_loopback_only_inside_the_stack():
    services = _compose()["services"]
    for name in ("worker", "bridge"):
        command = services[name]["command"]
        assert command[command.index("--metrics-host") + 1] == "0.0.0.0", name
        assert "ports" not in services[name], name


def test_the_ui_is_reached_only_through_the_signing_in_proxy():
    proxy = (ROOT / "deploy/nginx/ui.conf.template").read_text()
    assert "auth_basic_user_file /etc/nginx/tls/ui.htpasswd;" in proxy
    assert "listen 8443 ssl;" in proxy
    assert "proxy_pass http://temporal-ui:8080;" in proxy
    grafana = _compose()["services"]["grafana"]["environment"]
    assert grafana["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
