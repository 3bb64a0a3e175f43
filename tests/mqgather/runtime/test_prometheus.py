"""Prometheus text from worker and bridge: it parses, and the counters move."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid

import pytest
from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client.parser import text_string_to_metric_families

from bridge.fanout import scatter
from bridge.mq.local_qm import LocalQueueManager
from bridge.mq.models import MQMessage, PutOptions
from mqgather.cli.options import DEFAULT_AGGREGATE
from mqgather.config import load_config
from mqgather.runtime.prometheus import render
from tests.harness import free_port, free_ports, prepare_queues, until
from tests.test_deploy import dashboard_metrics


def families(text: str) -> dict[str, dict[tuple, float]]:
    """Samples by family name, each keyed by (sample name, sorted labels)."""
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        samples = out.setdefault(family.name, {})
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_counters_histograms_and_gauges_render_as_prometheus_parses_them():
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("t")
    closed = meter.create_counter("mqgather.gathers.closed")
    closed.add(2, {"aggregate": 'or"d\\ers\n', "outcome": "COMPLETE"})
    closed.add(1, {"aggregate": "orders", "outcome": "TIMEOUT"})
    latency = meter.create_histogram("mqgather.gather.completion_latency", unit="ms")
    for ms in (3, 40, 40, 9000):
        latency.record(ms, {"aggregate": "orders"})
    meter.create_observable_gauge("mqgather.gathers.open", callbacks=[lambda _: [Observation(7)]])
    parsed = families(render(reader.get_metrics_data()))
    counts = parsed["mqgather_gathers_closed"]
    assert counts[("mqgather_gathers_closed_total",
                   (("aggregate", 'or"d\\ers\n'), ("outcome", "COMPLETE")))] == 2  # fmt: skip
    assert counts[("mqgather_gathers_closed_total",
                   (("aggregate", "orders"), ("outcome", "TIMEOUT")))] == 1  # fmt: skip
    hist = parsed["mqgather_gather_completion_latency_ms"]
    assert hist[("mqgather_gather_completion_latency_ms_count", (("aggregate", "orders"),))] == 4
    assert hist[("mqgather_gather_completion_latency_ms_sum", (("aggregate", "orders"),))] == 9083
    inf = (
        "mqgather_gather_completion_latency_ms_bucket",
        (("aggregate", "orders"), ("le", "+Inf")),
    )
    assert hist[inf] == 4
    buckets = sorted(
        (float(dict(labels)["le"]), value)
        for (name, labels), value in hist.items()
        if name.endswith("_bucket")
    )
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)  # cumulative
    assert parsed["mqgather_gathers_open"][("mqgather_gathers_open", ())] == 7
    assert render(None) == ""


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return answer.read().decode()


def sample(text: str, family: str, name: str, **labels: str) -> float:
    found = families(text).get(family, {})
    return sum(
        v for (n, ls), v in found.items() if n == name and labels.items() <= dict(ls).items()
    )


@pytest.mark.timeout(240)
async def test_worker_and_bridge_serve_metrics_that_move_as_gathers_complete(
    temporal_env, tmp_path
):
    path = tmp_path / "qm.db"
    prepare_queues(path)
    spec = load_config(None).aggregate(DEFAULT_AGGREGATE)
    task_queue = f"test-{uuid.uuid4().hex[:10]}"
    env = dict(os.environ, TEMPORAL_ADDRESS=temporal_env.client.service_client.config.target_host)
    ports = dict(zip(("worker", "bridge"), free_ports(2), strict=True))
    args = ["--mq", f"local:{path}", "--task-queue", task_queue, "--metrics-port"]
    procs = {}
    for role, port in ports.items():
        procs[role] = subprocess.Popen(
            [sys.executable, "-m", "mqgather.cli", role, *args, str(port)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    async def text(role: str) -> str:
        try:
            return await asyncio.to_thread(scrape, ports[role])
        except urllib.error.URLError:
            return ""  # not listening yet

    def complete(t: str) -> float:
        return sample(t, "mqgather_gathers_closed", "mqgather_gathers_closed_total",
                      aggregate=spec.name, outcome="COMPLETE")  # fmt: skip

    try:
        before = await until(lambda: text("worker"), lambda t: "temporal" in t, 60)
        await until(lambda: text("bridge"), lambda t: "temporal" in t, 60)
        sent = []
        with LocalQueueManager(path) as qm:
            for _ in range(2):
                g = await scatter(temporal_env.client, qm, spec, task_queue=task_queue)
                for leg in spec.legs:
                    legs = {spec.leg_property: leg.name}
                    reply = MQMessage(correl_id=g.correl_id, properties=legs, body=b"{}")
                    qm.put(spec.reply_queue, reply, PutOptions(syncpoint=False))
                sent.append(g)
            # No CorrelId: the bridge moves it to the failure queue (a "moved" count).
            poison = MQMessage(properties={spec.leg_property: "CREDIT"}, body=b"poison")
            qm.put(spec.reply_queue, poison, PutOptions(syncpoint=False))
        after = await until(lambda: text("worker"), lambda t: complete(t) >= 2, 60)
        bridged = await until(
            lambda: text("bridge"),
            lambda t: (
                sample(t, "mqgather_bridge_replies", "mqgather_bridge_replies_total") >= 7
                and "mqgather_bridge_moved_total" in t
            ),
            60,
        )
        opened = await until(lambda: text("worker"), lambda t: "mqgather_gathers_open" in t, 30)
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            proc.wait(60)
    assert complete(before) == 0 and complete(after) == 2
    assert any("gathers_started" in name for name in families(after))
    assert any(name.startswith("temporal_") for name in families(bridged))  # the SDK's own
    gauge = next(f for f in text_string_to_metric_families(opened)
                 if f.name == "mqgather_gathers_open")  # fmt: skip
    # A count from visibility (other tests' gathers share the server, so not a fixed one).
    assert gauge.type == "gauge" and [s.value == int(s.value) >= 0 for s in gauge.samples] == [True]
    assert all(proc.returncode == 0 for proc in procs.values())
    # Every metric the Grafana dashboard queries is one the processes serve (the two that
    # only appear after trouble not staged here: a backout, a reply routed by a gather).
    served = set()
    for t in (after, bridged, opened):
        for family in text_string_to_metric_families(t):
            served |= {family.name} | {sample.name for sample in family.samples}
    rare = {"mqgather_bridge_rollbacks_total", "mqgather_replies_routed_total"}
    assert dashboard_metrics() - rare <= {re.sub(r"_bucket$", "", n) for n in served} | served


def test_metrics_listen_on_loopback_unless_told_otherwise():
    from mqgather.runtime.prometheus import MetricsEndpoint

    endpoint = MetricsEndpoint(free_port())
    endpoint.start()
    try:
        assert endpoint._server is not None
        assert endpoint._server.server_address[0] == "127.0.0.1"
    finally:
        endpoint.stop()


def test_a_scrape_connection_that_sends_nothing_is_closed_not_held():
    from mqgather.runtime.prometheus import MetricsEndpoint

    endpoint = MetricsEndpoint(free_port(), idle_seconds=0.5)
    endpoint.start()
    try:
        # It held a thread of the worker's or the bridge's process for as long as it stayed.
        with socket.create_connection(("127.0.0.1", endpoint.port), timeout=5) as conn:
            assert conn.recv(1024) == b""  # closed by the endpoint (a hold would time out)
        with urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}/metrics", timeout=10) as r:
            assert r.status == 200
    finally:
        endpoint.stop()


def test_the_processes_take_a_metrics_host():
    from click.testing import CliRunner

    from mqgather.cli.main import cli

    for command in (["worker"], ["bridge"], ["collector", "run"]):
        shown = CliRunner().invoke(cli, [*command, "--help"]).output
        assert "--metrics-host" in shown and "127.0.0.1" in shown, command
