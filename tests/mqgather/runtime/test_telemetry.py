"""Traces follow a gather from MQ through Temporal to the PUT; metrics count it."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from mqgather.config import AggregateSpec, LegSpec
from mqgather.errors import ConfigError
from mqgather.runtime import telemetry
from tests.harness import pipeline

LEGS = (LegSpec(name="CREDIT", sequence=10), LegSpec(name="STOCK", sequence=20))


@pytest.fixture(scope="module")
def otel():
    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    telemetry.install(SimpleSpanProcessor(spans), reader, "mqgather-test")
    return spans, reader


def _points(reader, name):
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == name:
                    yield from metric.data.data_points


async def test_trace_follows_a_gather_and_metrics_count_it(temporal_env, tmp_path, otel):
    spans, reader = otel
    address = temporal_env.client.service_client.config.target_host
    client = await Client.connect(
        address, data_converter=pydantic_data_converter,
        interceptors=telemetry.client_interceptors(),
    )  # fmt: skip
    spec = AggregateSpec(name="traced", legs=LEGS)
    tracer = telemetry.tracer()
    async with pipeline(client, tmp_path, [spec]) as p:
        with tracer.start_as_current_span("front-end request") as request:
            sent = await p.scatter(spec)
        with tracer.start_as_current_span("back end reply") as backend:
            carried: dict = {}
            telemetry.inject(carried)
        assert set(carried) >= {"traceparent"}
        for leg in ("CREDIT", "STOCK"):
            p.reply(spec, sent.correl_id, leg, b"{}", **carried)
        response = await p.wait_message("ORDER.RESPONSE")
        await p.result(spec, sent.correl_id)
    gather_trace = request.get_span_context().trace_id
    reply_trace = backend.get_span_context().trace_id
    finished = spans.get_finished_spans()
    by_trace: dict[int, set[str]] = {}
    for span in finished:
        by_trace.setdefault(span.context.trace_id, set()).add(span.name)
    # The reply's trace: back end -> bridge -> signal-with-start -> the workflow's handler.
    # The reply's trace: back end -> bridge -> signal-with-start into the gather.
    assert {"back end reply", "mqgather.bridge.signal", "SignalWithStartWorkflow:Gather"} <= (
        by_trace[reply_trace]
    )
    # The gather's trace: registration, the reply handled, workflow, merge-and-PUT activity.
    assert {
        "SignalWithStartWorkflow:Gather",
        "HandleSignal:replies",
        "RunWorkflow:Gather",
        "StartActivity:put_response",
        "RunActivity:put_response",
    } <= by_trace[gather_trace]
    batch = [s for s in finished if s.name == "mqgather.bridge.batch"]
    assert batch and batch[-1].attributes["messaging.destination.name"] == "GATHER.IN"
    signal = next(s for s in finished if s.name == "mqgather.bridge.signal")
    assert {link.context.span_id for link in signal.links} & {b.context.span_id for b in batch}
    # The response carries the gather's trace on to the requester.
    assert f"{gather_trace:032x}" in str(response.properties["traceparent"])
    closed = [
        pt for pt in _points(reader, "mqgather.gathers.closed")
        if pt.attributes == {"aggregate": "traced", "outcome": "COMPLETE"}
    ]  # fmt: skip
    assert [pt.value for pt in closed] == [1]
    legs = {pt.attributes["leg"]: pt.count for pt in _points(reader, "mqgather.leg.latency")
            if pt.attributes.get("aggregate") == "traced"}  # fmt: skip
    assert legs == {"CREDIT": 1, "STOCK": 1}
    assert sum(pt.value for pt in _points(reader, "mqgather.bridge.replies")) >= 2


def test_unknown_exporter_is_a_config_error():
    with pytest.raises(ConfigError, match="MQGATHER_OTEL"):
        telemetry.configure("x", exporter="zipkin")
