"""HTTP servers that a slow or flooding client cannot wear down: the codec server and the
metrics endpoints. Each connection is served in a thread of its own, so both a connection
left open and a flood of them would hold threads without bound."""

from __future__ import annotations

import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: A connection that sends nothing for this long (a request, its body, a TLS handshake)
#: is closed.
IDLE_SECONDS = 30.0
#: Connections served at once; one more is closed at once. A client that sends a byte
#: now and then keeps its connection past the idle limit: this bounds the threads held.
MAX_CONNECTIONS = 64
#: Seconds between two warnings that connections were closed for want of a place.
REFUSALS_LOGGED_EVERY = 60.0


class GuardedHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that closes idle connections and serves at most
    ``max_connections`` at once, warning on ``log`` (at most once a minute) of those it
    closed for want of a place."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        log: logging.Logger,
        idle_seconds: float = IDLE_SECONDS,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.log = log
        self.idle_seconds = idle_seconds
        self.max_connections = max_connections
        self._slots = threading.BoundedSemaphore(max_connections)
        # Connections closed for want of a place since the last warning, and when it was
        # (only the accepting thread touches them).
        self._refused = 0
        self._warned_at: float | None = None
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve a connection in a thread of its own, or close it when all are taken."""
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            self._refused += 1
            # At most one line a minute: a flood of connections is no flood of log lines.
            now = time.monotonic()
            if self._warned_at is None or now - self._warned_at >= REFUSALS_LOGGED_EVERY:
                self.log.warning(
                    "%d connections open, the most served at once: closed %d more since the "
                    "last warning (the latest from %s)",
                    self.max_connections, self._refused, client_address[0],
                )  # fmt: skip
                self._warned_at, self._refused = now, 0
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """Serve one connection, then give its place back."""
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Serve one connection, each wait on it (the request line, the headers, the
        body, a TLS handshake) bounded by ``idle_seconds``; the handler then closes it."""
        request.settimeout(self.idle_seconds)
        super().finish_request(request, client_address)
