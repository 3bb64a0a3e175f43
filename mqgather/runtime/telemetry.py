"""OpenTelemetry: traces that follow a gather from MQ GET through signal, workflow and
activity to the PUT, and the metrics operators watch.

``MQGATHER_OTEL`` picks the exporter: ``none`` (default), ``console`` or ``otlp`` (the
OTLP/HTTP exporter, configured by the standard ``OTEL_EXPORTER_OTLP_*`` variables; needs
``pip install 'mqgather[otel]'``). Trace context travels in MQ message properties as W3C
``traceparent`` / ``tracestate``, as IBM MQ's own instrumentation does.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from opentelemetry import context as otel_context
from opentelemetry import metrics, propagate, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from bridge.mq.models import PropertyValue
from mqgather.errors import ConfigError
from mqgather.names import ENV_OTEL, TRACE_PROPERTIES

if TYPE_CHECKING:
    from temporalio.client import Interceptor

INSTRUMENTATION = "mqgather"

_state = {"enabled": False}


def install(
    span_processor: SpanProcessor,
    metric_reader: MetricReader,
    service: str,
    extra_readers: Sequence[MetricReader] = (),
) -> None:
    """Make these the process's trace and metric pipelines (once per process)."""
    resource = Resource.create({"service.name": service})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(span_processor)
    trace.set_tracer_provider(tracer_provider)
    readers = [metric_reader, *extra_readers]
    metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=readers))
    _state["enabled"] = True


def configure(
    service: str, exporter: str | None = None, extra_readers: Sequence[MetricReader] = ()
) -> bool:
    """Set up exporting per ``MQGATHER_OTEL``; returns whether tracing is on.

    Args:
        extra_readers: metric readers wanted whatever the exporter (the Prometheus
            endpoint's); with ``none`` they are the only metric pipeline and no traces
            are kept.

    Raises:
        ConfigError: an unknown exporter, or otlp without its package.
    """
    choice = (exporter or os.environ.get(ENV_OTEL) or "none").lower()
    if choice == "none":
        if extra_readers:
            resource = Resource.create({"service.name": service})
            metrics.set_meter_provider(
                MeterProvider(resource=resource, metric_readers=list(extra_readers))
            )
        return False
    if choice == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        spans: SpanExporter = ConsoleSpanExporter()
        points: MetricExporter = ConsoleMetricExporter()
    elif choice == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                OTLPMetricExporter,
            )
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            raise ConfigError(ENV_OTEL, "otlp needs: pip install 'mqgather[otel]'") from exc
        spans, points = OTLPSpanExporter(), OTLPMetricExporter()
    else:
        raise ConfigError(ENV_OTEL, f"{choice!r} is not one of none, console, otlp")
    install(
        BatchSpanProcessor(spans),
        PeriodicExportingMetricReader(points, export_interval_millis=10_000),
        service,
        extra_readers,
    )
    return True


def shutdown() -> None:
    """Flush and stop the exporters (the process is about to end)."""
    if not enabled():
        return
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.shutdown()
    meters = metrics.get_meter_provider()
    if isinstance(meters, MeterProvider):
        meters.shutdown()


def enabled() -> bool:
    """Whether :func:`configure` or :func:`install` turned telemetry on."""
    return _state["enabled"]


def client_interceptors() -> list[Interceptor]:
    """Temporal interceptors: the SDK's tracing interceptor when telemetry is on."""
    if not enabled():
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor()]


def tracer() -> trace.Tracer:
    """mqgather's tracer (a no-op one while telemetry is off)."""
    return trace.get_tracer(INSTRUMENTATION)


def inject(properties: MutableMapping[str, PropertyValue]) -> None:
    """Write the current trace context into MQ message properties."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    for key in TRACE_PROPERTIES:
        if key in carrier:
            properties[key] = carrier[key]


def extract(properties: Mapping[str, PropertyValue]) -> otel_context.Context:
    """The trace context a message carries in its properties (empty if none)."""
    carrier = {
        k: str(properties[k]) for k in TRACE_PROPERTIES if isinstance(properties.get(k), str)
    }
    return propagate.extract(carrier)


@dataclass(frozen=True)
class Metrics:
    """The instruments (no-ops until a meter provider is installed)."""

    gathers_closed: metrics.Counter
    completion_latency: metrics.Histogram
    leg_latency: metrics.Histogram
    routed: metrics.Counter
    rerequests: metrics.Counter
    bridge_replies: metrics.Counter
    bridge_moved: metrics.Counter
    bridge_batch_size: metrics.Histogram
    bridge_commit_latency: metrics.Histogram
    bridge_rollbacks: metrics.Counter
    batches_put: metrics.Counter
    batch_wait: metrics.Histogram


@lru_cache(maxsize=1)
def instruments() -> Metrics:
    """The process's instruments (created once; the API upgrades them when a provider is
    installed later)."""
    meter = metrics.get_meter(INSTRUMENTATION)
    return Metrics(
        gathers_closed=meter.create_counter(
            "mqgather.gathers.closed", description="gathers ended, by aggregate and outcome"
        ),
        completion_latency=meter.create_histogram(
            "mqgather.gather.completion_latency",
            unit="ms",
            description="gather start to response PUT",
        ),
        leg_latency=meter.create_histogram(
            "mqgather.leg.latency", unit="ms", description="gather start to a leg's arrival"
        ),
        routed=meter.create_counter(
            "mqgather.replies.routed", description="late, unknown, duplicate, failure replies"
        ),
        rerequests=meter.create_counter(
            "mqgather.legs.rerequested", description="leg requests PUT again, by leg"
        ),
        bridge_replies=meter.create_counter("mqgather.bridge.replies", description="replies got"),
        bridge_moved=meter.create_counter(
            "mqgather.bridge.moved",
            description="replies moved by the bridge (late, failure, backout)",
        ),
        bridge_batch_size=meter.create_histogram(
            "mqgather.bridge.batch_size", description="replies per unit of work"
        ),
        bridge_commit_latency=meter.create_histogram(
            "mqgather.bridge.commit_latency", unit="ms", description="GET to MQCMIT of a batch"
        ),
        bridge_rollbacks=meter.create_counter(
            "mqgather.bridge.rollbacks", description="batches backed out"
        ),
        batches_put=meter.create_counter(
            "mqgather.collector.batches", description="collector batches PUT, by close reason"
        ),
        batch_wait=meter.create_histogram(
            "mqgather.collector.batch_wait",
            unit="ms",
            description="a batch's first message to its close",
        ),
    )


#: The gauge of gathers running now (the worker reports it from visibility).
OPEN_GATHERS = "mqgather.gathers.open"
OPEN_GATHERS_DESCRIPTION = "gathers running now in the namespace (from visibility)"


def observe_open_gathers(read: Callable[[], int | None]) -> None:
    """The ``mqgather.gathers.open`` gauge, from ``read()`` at each collection (None: not
    known yet, nothing reported)."""

    def observe(_: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        value = read()
        return [] if value is None else [metrics.Observation(value)]

    metrics.get_meter(INSTRUMENTATION).create_observable_gauge(
        OPEN_GATHERS, callbacks=[observe], description=OPEN_GATHERS_DESCRIPTION
    )
