"""A codec server: the Temporal Web UI and the ``temporal`` CLI send it sealed payloads
and get them back opened (and the reverse), so authorised people read gathers.

Protocol (Temporal's): ``POST /encode`` and ``POST /decode`` (also under
``/<namespace>/``), body ``{"payloads": [<proto-JSON Payload>, ...]}``, the same shape
back; the namespace may come in the ``X-Namespace`` header.

Access: every request but the CORS preflight carries ``Authorization: Bearer <token>``
with one of the configured tokens (compared in constant time). The ``temporal`` CLI sends
it with ``--codec-auth``; the Web UI forwards the signed-in user's access token when its
codec setting "pass access token" is on, so the token the UI's identity provider issues
for it is configured here. CORS answers only the configured Web UI origins.

Nothing of a payload is logged: a request line names the path, the status and the
number of payloads.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import ssl
import threading
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from google.protobuf import json_format
from temporalio.api.common.v1 import Payload

from mqgather.errors import ConfigError
from mqgather.runtime.codec import PayloadCipher, SealedPayloadError, is_json_bytes
from mqgather.runtime.httpserve import IDLE_SECONDS, MAX_CONNECTIONS, GuardedHTTPServer

log = logging.getLogger("mqgather.codec")

#: A request body larger than this is refused: the UI sends one event's payloads at once.
MAX_BODY_BYTES = 16 * 1024 * 1024
#: A namespace as a request's path can name it.
_NAMESPACE = "[A-Za-z0-9._-]+"
_PATH = re.compile(rf"^(?:/(?P<namespace>{_NAMESPACE}))?/(?P<op>encode|decode)/?$")


def origin_problem(origin: str) -> str | None:
    """Why a browser never sends ``origin`` as its Origin header (scheme, host and port
    only), so that allowing it would allow nothing; None when it could."""
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "give the Web UI's scheme, host and port, e.g. http://localhost:8233"
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        return "an origin is scheme, host and port only: no path, query or user"
    try:
        parts.port  # noqa: B018 - urlsplit checks the port when asked for it
    except ValueError as exc:
        return str(exc)
    return None


def namespace_problem(namespace: str) -> str | None:
    """Why no request could name ``namespace`` (its path takes letters, digits, '.', '_'
    and '-'), or None."""
    if re.fullmatch(_NAMESPACE, namespace):
        return None
    return "a namespace holds letters, digits, '.', '_' and '-' only"


class BadRequest(ValueError):
    """A request the server refuses, with the HTTP status and why (said to the client)."""

    def __init__(self, status: HTTPStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def parse_payloads(body: bytes) -> list[Payload]:
    """The payloads of a request body, ``{"payloads": [<proto-JSON Payload>, ...]}``.

    Raises:
        BadRequest: naming what is wrong and, for a payload, its index.
    """
    try:
        document = json.loads(body or b"{}")
    except (ValueError, RecursionError) as exc:
        raise BadRequest(HTTPStatus.BAD_REQUEST, f"not a payloads document ({exc})") from None
    if not isinstance(document, dict):
        raise BadRequest(HTTPStatus.BAD_REQUEST, "not a payloads document (not a JSON object)")
    items = document.get("payloads", [])
    if not isinstance(items, list):
        raise BadRequest(HTTPStatus.BAD_REQUEST, '"payloads" must be a list')
    payloads = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise BadRequest(HTTPStatus.BAD_REQUEST, f"payload {index} is not a JSON object")
        metadata = item.get("metadata", {})
        values = list(metadata.values()) if isinstance(metadata, dict) else [None]
        if not all(is_json_bytes(v) for v in [*values, item.get("data", "")]):
            raise BadRequest(
                HTTPStatus.BAD_REQUEST, f"payload {index}: its data or metadata is not base64"
            )
        try:
            payloads.append(json_format.ParseDict(item, Payload()))
        except json_format.ParseError as exc:
            raise BadRequest(HTTPStatus.BAD_REQUEST, f"payload {index}: {exc}") from None
    return payloads


def server_tls(cert: Path, key: Path) -> ssl.SSLContext:
    """A server-side TLS context (TLS 1.2 at least) with this certificate and key.

    Raises:
        ConfigError: naming the file that cannot be loaded.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError("--tls-cert/--tls-key", f"cannot load {cert} with {key}: {exc}") from exc
    return context


class CodecServer(GuardedHTTPServer):
    """The HTTP server; ``handle_request`` threads share the cipher (it is stateless)."""

    def __init__(
        self,
        address: tuple[str, int],
        cipher: PayloadCipher,
        tokens: Sequence[str],
        origins: Sequence[str] = (),
        namespaces: Sequence[str] = (),
        tls: ssl.SSLContext | None = None,
        idle_seconds: float = IDLE_SECONDS,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        if not tokens or any(len(t) < 16 for t in tokens):
            raise ValueError("the codec server needs tokens of at least 16 characters")
        self.cipher = cipher
        self.tokens = [t.encode() for t in tokens]
        self.origins = frozenset(o.rstrip("/") for o in origins)
        self.namespaces = frozenset(namespaces)
        super().__init__(address, _Handler, log, idle_seconds, max_connections)
        self.tls = tls is not None
        if tls is not None:
            # The handshake happens in each request's thread, not in accept(): a client
            # that stalls mid-handshake holds up only itself.
            self.socket = tls.wrap_socket(
                self.socket, server_side=True, do_handshake_on_connect=False
            )

    @property
    def url(self) -> str:
        """The server's base URL."""
        host, port = self.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host!s}:{port}"

    def start(self) -> threading.Thread:
        """Serve in a background thread (for tests and embedding)."""
        thread = threading.Thread(target=self.serve_forever, name="codec-server", daemon=True)
        thread.start()
        return thread

    def authorised(self, header: str | None) -> bool:
        """Whether an ``Authorization`` header carries one of the tokens."""
        if not header or not header.startswith("Bearer "):
            return False
        given = header[len("Bearer ") :].strip().encode()
        # Every token is compared, so the time taken tells nothing about which matched.
        return sum(hmac.compare_digest(given, t) for t in self.tokens) > 0


class _Handler(BaseHTTPRequestHandler):
    server: CodecServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.client_address[0], *args)

    def _cors(self) -> None:
        origin = (self.headers.get("Origin") or "").rstrip("/")
        if origin and origin in self.server.origins:
            self.send_header("Access-Control-Allow-Origin", origin)
            self.send_header("Access-Control-Allow-Credentials", "true")
            self.send_header("Access-Control-Allow-Methods", "POST, OPTIONS")
            self.send_header(
                "Access-Control-Allow-Headers", "Authorization, Content-Type, X-Namespace"
            )
            self.send_header("Access-Control-Max-Age", "600")
            self.send_header("Vary", "Origin")

    def _answer(self, status: HTTPStatus, body: dict[str, Any], close: bool = False) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self._cors()
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        if close:
            # The request's body may be unread: on a kept connection its bytes would be
            # taken for the next request.
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        """The request's body, read whole once its length is known to be acceptable.

        Raises:
            BadRequest: a chunked body, or a length that is not a whole number of bytes
                or is over :data:`MAX_BODY_BYTES` (nothing read).
        """
        if self.headers.get("Transfer-Encoding"):
            raise BadRequest(HTTPStatus.LENGTH_REQUIRED, "send the body with a Content-Length")
        given = (self.headers.get("Content-Length") or "0").strip()
        if not (given.isascii() and given.isdigit()):
            raise BadRequest(HTTPStatus.BAD_REQUEST, f"Content-Length {given!r} is not a length")
        length = int(given)
        if length > MAX_BODY_BYTES:
            raise BadRequest(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {MAX_BODY_BYTES} bytes"
            )
        return self.rfile.read(length)

    def do_OPTIONS(self) -> None:
        """The CORS preflight: no credentials are sent with it, so none are asked for."""
        self.send_response(HTTPStatus.NO_CONTENT)
        self._cors()
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        """``/encode`` or ``/decode``, optionally under ``/<namespace>``."""
        match = _PATH.match(self.path.split("?", 1)[0])
        if match is None:
            self._answer(HTTPStatus.NOT_FOUND, {"error": "POST /encode or /decode"}, close=True)
            return
        if not self.server.authorised(self.headers.get("Authorization")):
            error = {"error": "a valid bearer token is required"}
            self._answer(HTTPStatus.UNAUTHORIZED, error, close=True)
            return
        namespace = match["namespace"] or self.headers.get("X-Namespace") or ""
        if self.server.namespaces and namespace not in self.server.namespaces:
            error = {"error": f"namespace {namespace!r} not served"}
            self._answer(HTTPStatus.FORBIDDEN, error, close=True)
            return
        try:
            body = self._body()
        except BadRequest as exc:
            self._answer(exc.status, {"error": str(exc)}, close=True)
            return
        try:
            payloads = parse_payloads(body)
        except BadRequest as exc:
            self._answer(exc.status, {"error": str(exc)})
            return
        cipher = self.server.cipher
        try:
            if match["op"] == "encode":
                out = [cipher.seal(p) for p in payloads]
            else:
                out = [cipher.open(p) for p in payloads]
        except SealedPayloadError as exc:
            # The UI shows the payload as it is when decoding fails: say why, keep serving.
            self._answer(HTTPStatus.UNPROCESSABLE_ENTITY, {"error": str(exc)})
            return
        log.info("%s %s: %d payload(s)", match["op"], namespace or "-", len(out))
        self._answer(HTTPStatus.OK, {"payloads": [json_format.MessageToDict(p) for p in out]})
