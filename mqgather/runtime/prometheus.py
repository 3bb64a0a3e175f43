"""Prometheus text on ``/metrics``: mqgather's own instruments and the Temporal SDK's.

The worker and the bridge take ``--metrics-port``. mqgather's OpenTelemetry instruments
are read on each scrape and written in the Prometheus text format. The Temporal SDK
serves its own metrics (workflow task latency, slots, polls, and the workflow's
``mqgather_gathers_started``) on a loopback port of its own; each scrape appends them, so
one target carries both.
"""

from __future__ import annotations

import logging
import math
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from http.server import BaseHTTPRequestHandler
from typing import Any

from opentelemetry.sdk.metrics.export import (
    Gauge,
    Histogram,
    InMemoryMetricReader,
    MetricsData,
    Sum,
)

from mqgather.constants import DEFAULT_METRICS_HOST
from mqgather.runtime.httpserve import IDLE_SECONDS, GuardedHTTPServer

log = logging.getLogger("mqgather.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: How long a scrape waits for the Temporal SDK's own endpoint.
SDK_SCRAPE_SECONDS = 2.0


def metric_name(name: str, unit: str = "") -> str:
    """A Prometheus metric name: dots and dashes become underscores, the unit a suffix."""
    base = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    if unit and unit != "1" and not base.endswith("_" + unit):
        base += "_" + "".join(c if c.isalnum() else "_" for c in unit)
    return base


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(attributes: Any, extra: Sequence[tuple[str, str]] = ()) -> str:
    pairs = [(metric_name(str(k)), str(v)) for k, v in (attributes or {}).items()]
    pairs += list(extra)
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value)) if isinstance(value, float) else str(value)


def render(data: MetricsData | None) -> str:
    """The Prometheus text exposition of collected OpenTelemetry metrics (cumulative)."""
    lines: list[str] = []
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                lines += _render_one(metric)
    return "\n".join(lines) + ("\n" if lines else "")


def _render_one(metric: Any) -> Iterable[str]:
    name = metric_name(metric.name, metric.unit or "")
    help_text = (metric.description or metric.name).replace("\\", "\\\\").replace("\n", " ")
    data = metric.data
    if isinstance(data, Sum):
        kind = "counter" if data.is_monotonic else "gauge"
        sample = name + "_total" if data.is_monotonic else name
        yield f"# HELP {sample} {help_text}"
        yield f"# TYPE {sample} {kind}"
        for point in data.data_points:
            yield f"{sample}{_labels(point.attributes)} {_number(point.value)}"
    elif isinstance(data, Gauge):
        yield f"# HELP {name} {help_text}"
        yield f"# TYPE {name} gauge"
        for point in data.data_points:
            yield f"{name}{_labels(point.attributes)} {_number(point.value)}"
    elif isinstance(data, Histogram):
        yield f"# HELP {name} {help_text}"
        yield f"# TYPE {name} histogram"
        for bucketed in data.data_points:
            running = 0
            bounds = [*bucketed.explicit_bounds, math.inf]
            for bound, count in zip(bounds, bucketed.bucket_counts, strict=True):
                running += count
                le = (("le", _number(float(bound))),)
                yield f"{name}_bucket{_labels(bucketed.attributes, le)} {running}"
            yield f"{name}_sum{_labels(bucketed.attributes)} {_number(bucketed.sum)}"
            yield f"{name}_count{_labels(bucketed.attributes)} {bucketed.count}"


def _free_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MetricsEndpoint:
    """One process's ``/metrics``: install :attr:`reader` in the meter provider, let the
    Temporal runtime serve the SDK's metrics at :attr:`sdk_address`, then :meth:`start`."""

    def __init__(
        self, port: int, host: str = DEFAULT_METRICS_HOST, idle_seconds: float = IDLE_SECONDS
    ) -> None:
        self.port = port
        self.host = host
        self.idle_seconds = idle_seconds
        self.reader = InMemoryMetricReader()
        self.sdk_address = f"127.0.0.1:{_free_loopback_port()}"
        # Each connection holds a thread of the worker's or the bridge's process.
        self._server: GuardedHTTPServer | None = None

    def text(self) -> str:
        """Everything one scrape returns."""
        ours = render(self.reader.get_metrics_data())
        try:
            url = f"http://{self.sdk_address}/metrics"
            with urllib.request.urlopen(url, timeout=SDK_SCRAPE_SECONDS) as answer:
                theirs = answer.read().decode("utf-8", errors="replace")
        except (urllib.error.URLError, OSError) as exc:
            # No Temporal client yet (the process is still waiting for the server).
            theirs = f"# Temporal SDK metrics unavailable: {exc}\n"
        return ours + theirs

    def start(self) -> None:
        """Serve in a background thread until the process ends.

        Raises:
            OSError: the port is taken; the message names it.
        """
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404, "metrics are on /metrics")
                    return
                body = endpoint.text().encode()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("scrape: " + format, *args)

        try:
            self._server = GuardedHTTPServer(
                (self.host, self.port), Handler, log, idle_seconds=self.idle_seconds
            )
        except OSError as exc:
            raise OSError(
                f"--metrics-port {self.port}: cannot listen ({exc.strerror}); choose a free port"
            ) from exc
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        log.info("Prometheus metrics on http://%s:%d/metrics", self.host, self.port)

    def stop(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
