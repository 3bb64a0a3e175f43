"""The codec server over HTTP: Temporal's protocol, the bearer token, CORS."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload

from mqgather.runtime.codec import KeyRing, PayloadCipher, is_sealed, new_key
from mqgather.runtime.codec_server import MAX_BODY_BYTES, CodecServer

RING = KeyRing("k1", {"k1": new_key()})
TOKEN = "t" * 32
UI = "http://localhost:8233"
AUTH = {"Authorization": f"Bearer {TOKEN}", "X-Namespace": "default"}
BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def server() -> Iterator[CodecServer]:
    srv = CodecServer(("127.0.0.1", 0), PayloadCipher(RING), [TOKEN, "u" * 20], [UI], ["default"])
    srv.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _call(url: str, payloads: list[Payload], method: str = "POST", **headers: str):
    body = json.dumps({"payloads": [json_format.MessageToDict(p) for p in payloads]}).encode()
    request = urllib.request.Request(
        url, data=body if method == "POST" else None, method=method,
        headers={"Content-Type": "application/json", **headers},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def _payloads(raw: bytes) -> list[Payload]:
    return [json_format.ParseDict(p, Payload()) for p in json.loads(raw)["payloads"]]


def test_encode_then_decode_round_trips_under_both_path_forms(server):
    plain = Payload(metadata={"encoding": b"json/plain"}, data=b'{"card":"4111"}')
    status, _, raw = _call(f"{server.url}/encode", [plain], **AUTH)
    assert status == 200
    [sealed] = _payloads(raw)
    assert is_sealed(sealed) and b"4111" not in sealed.data
    status, _, raw = _call(
        f"{server.url}/default/decode", [sealed], Authorization=f"Bearer {TOKEN}"
    )
    assert status == 200 and _payloads(raw) == [plain]
    # Unsealed payloads come back as they are (a history from before encryption).
    status, _, raw = _call(f"{server.url}/decode", [plain], **AUTH)
    assert _payloads(raw) == [plain]


@pytest.mark.parametrize(
    "header", [None, "Bearer wrong-token-0000000000000", f"Basic {TOKEN}", f"Bearer {TOKEN}x"]
)
def test_without_a_valid_bearer_token_nothing_is_opened(server, header):
    sealed = PayloadCipher(RING).seal(Payload(data=b"secret"))
    headers = {"X-Namespace": "default", **({"Authorization": header} if header else {})}
    status, _, raw = _call(f"{server.url}/decode", [sealed], **headers)
    assert status == 401 and b"secret" not in raw


def test_a_second_token_works_and_other_namespaces_are_refused(server):
    sealed = PayloadCipher(RING).seal(Payload(data=b"x"))
    second = "Bearer " + "u" * 20
    status, _, _ = _call(f"{server.url}/default/decode", [sealed], Authorization=second)
    assert status == 200
    status, _, raw = _call(f"{server.url}/other/decode", [sealed], Authorization=second)
    assert status == 403 and b"other" in raw


def test_a_key_it_lacks_is_named_and_the_server_keeps_serving(server):
    foreign = PayloadCipher(KeyRing("k9", {"k9": new_key()})).seal(Payload(data=b"x"))
    status, _, raw = _call(f"{server.url}/decode", [foreign], **AUTH)
    assert status == 422 and b"k9" in raw
    status, _, _ = _call(f"{server.url}/encode", [Payload(data=b"y")], **AUTH)
    assert status == 200


def test_a_sealed_payload_cut_short_is_named_altered_and_the_server_keeps_serving(server):
    cut = PayloadCipher(RING).seal(Payload(data=b"x"))
    cut.data = cut.data[:5]  # under a nonce's length the cipher raised a bare ValueError
    status, _, raw = _call(f"{server.url}/decode", [cut], **AUTH)
    assert status == 422 and b"altered" in raw
    assert _call(f"{server.url}/encode", [Payload(data=b"y")], **AUTH)[0] == 200


def test_cors_answers_the_configured_ui_origin_only(server):
    status, headers, _ = _call(f"{server.url}/decode", [], method="OPTIONS", Origin=UI,
                               **{"Access-Control-Request-Method": "POST"})  # fmt: skip
    assert status == 204
    assert headers["Access-Control-Allow-Origin"] == UI
    assert "Authorization" in headers["Access-Control-Allow-Headers"]
    assert headers["Access-Control-Allow-Credentials"] == "true"
    _, headers, _ = _call(f"{server.url}/decode", [], method="OPTIONS", Origin="http://evil.test")
    assert "Access-Control-Allow-Origin" not in headers


def test_bad_requests_are_refused_with_a_reason(server):
    request = urllib.request.Request(f"{server.url}/decode", data=b"not json", method="POST",
                                     headers=AUTH)  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=10)
    assert info.value.code == 400
    assert _call(f"{server.url}/elsewhere", [], **AUTH)[0] == 404


def test_short_or_missing_tokens_are_refused_at_start():
    with pytest.raises(ValueError, match="16"):
        CodecServer(("127.0.0.1", 0), PayloadCipher(RING), ["short"])
    with pytest.raises(ValueError):
        CodecServer(("127.0.0.1", 0), PayloadCipher(RING), [])


def _raw(srv: CodecServer, request: bytes) -> tuple[bytes, bool]:
    """What the server sends back on one connection, and whether it closed it (within
    5 s: a server that waits for more holds the connection open)."""
    host, port = srv.server_address[:2]
    with socket.create_connection((str(host), port), timeout=5) as conn:
        conn.sendall(request)
        got = b""
        try:
            while chunk := conn.recv(65536):
                got += chunk
        except TimeoutError:
            return got, False
    return got, True


def _post(
    body: bytes,
    length: bytes | None = None,
    token: str = TOKEN,
    extra: bytes = b"",
    op: bytes = b"decode",
    last: bool = False,
) -> bytes:
    """A request as bytes; ``last`` asks the server to close the connection after it."""
    length = str(len(body)).encode() if length is None else length
    return (
        b"POST /default/" + op + b" HTTP/1.1\r\nHost: codec\r\nContent-Length: " + length
        + b"\r\n" + (b"Connection: close\r\n" if last else b"")
        + b"Authorization: Bearer " + token.encode() + b"\r\n\r\n" + body + extra
    )  # fmt: skip


@pytest.mark.parametrize("length", [b"-1", b"abc", b"1e3", str(MAX_BODY_BYTES + 1).encode()])
def test_a_length_that_is_not_a_whole_acceptable_number_is_refused_and_nothing_read(server, length):
    # -1 once read to the end of the stream: past the size limit, and a thread held open.
    got, closed = _raw(server, _post(b'{"payloads": []}', length=length))
    assert closed, got
    status = b"413" if length.isdigit() else b"400"
    assert got.startswith(b"HTTP/1.1 " + status) and b"Connection: close" in got
    assert got.count(b"HTTP/1.1") == 1


def test_a_chunked_body_is_refused_as_needing_a_length(server):
    request = (
        b"POST /default/decode HTTP/1.1\r\nHost: codec\r\nTransfer-Encoding: chunked\r\n"
        b"Authorization: Bearer " + TOKEN.encode() + b"\r\n\r\n10\r\n" + b'{"payloads": []}'
        b"\r\n0\r\n\r\n"
    )
    got, closed = _raw(server, request)
    assert closed and got.startswith(b"HTTP/1.1 411") and b"Content-Length" in got


def test_a_refused_requests_unread_body_is_not_taken_for_the_next_request(server):
    second = _post(b'{"payloads": []}')
    got, closed = _raw(server, _post(b'{"payloads": []}', token="x" * 32, extra=second))
    # Answered once, then closed: its body's bytes never parsed as a request line.
    assert closed and got.startswith(b"HTTP/1.1 401") and got.count(b"HTTP/1.1") == 1


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"payloads": 5}', b"must be a list"),
        (b'{"payloads": [5]}', b"payload 0 is not a JSON object"),
        (b'{"payloads": [{"data": "YQ=="}, null]}', b"payload 1 is not a JSON object"),
        (b'"payloads"', b"not a JSON object"),
        (b"[" * 100_000 + b"]" * 100_000, b"not a payloads document"),
        (b'{"payloads": [{"data": "!!!"}]}', b"payload 0: its data or metadata is not base64"),
        (b'{"payloads": [{"data": "YQ==YQ=="}]}', b"not base64"),
        (b'{"payloads": [{"metadata": {"encoding": "!!"}}]}', b"not base64"),
        (b'{"payloads": [{"metadata": 5}]}', b"not base64"),
        (b'{"payloads": [{"data": 5}]}', b"not base64"),
    ],
)
def test_a_malformed_document_is_refused_with_its_reason_and_the_server_keeps_serving(
    server, body, reason
):
    # protobuf alone takes "!!!" as no bytes and "YQ==YQ==" as b"a": sealed or opened
    # short, without a word.
    got, closed = _raw(server, _post(body, last=True))
    assert closed and got.startswith(b"HTTP/1.1 400") and reason in got, got[:300]
    status, _, _ = _call(f"{server.url}/encode", [Payload(data=b"y")], **AUTH)
    assert status == 200


def test_bytes_in_either_base64_alphabet_padded_or_not_are_taken_whole(server):
    # b"\xfb\xff" is "+/8=" in the standard alphabet and "-_8" URL-safe, unpadded.
    for text in ("+/8=", "-_8"):
        body = json.dumps({"payloads": [{"metadata": {"encoding": "YQ"}, "data": text}]})
        got, closed = _raw(server, _post(body.encode(), op=b"encode", last=True))
        assert closed and got.startswith(b"HTTP/1.1 200"), got[:300]
        [sealed] = _payloads(got.split(b"\r\n\r\n", 1)[1])
        assert is_sealed(sealed)
        opened = PayloadCipher(RING).open(sealed)
        assert opened.data == b"\xfb\xff" and opened.metadata["encoding"] == b"a"


def _encodes(srv: CodecServer) -> bool:
    """Whether an encode request is answered 200 now."""
    try:
        return _call(f"{srv.url}/encode", [Payload(data=b"y")], **BEARER)[0] == 200
    except (urllib.error.URLError, ConnectionError, http.client.HTTPException):
        return False  # closed without an answer


def test_a_connection_that_sends_nothing_or_stops_mid_body_is_closed_not_held():
    srv = CodecServer(("127.0.0.1", 0), PayloadCipher(RING), [TOKEN], idle_seconds=0.5)
    srv.start()
    try:
        # Each such connection held a thread for as long as the client kept it open.
        for request in (b"", _post(b'{"payloads": []}')[:-5]):
            got, closed = _raw(srv, request)
            assert closed and got == b""
        assert _encodes(srv)
    finally:
        srv.shutdown()
        srv.server_close()


def test_past_the_most_connections_at_once_one_more_is_closed_and_places_come_back(caplog):
    srv = CodecServer(("127.0.0.1", 0), PayloadCipher(RING), [TOKEN], max_connections=2)
    srv.start()
    try:
        host, port = srv.server_address[:2]
        held = [socket.create_connection((str(host), port), timeout=5) for _ in range(2)]
        # Accepted in turn: the two before it hold both places, so these are closed, and
        # the log says so once, not once each.
        with caplog.at_level(logging.WARNING, logger="mqgather.codec"):
            for _ in range(3):
                got, closed = _raw(srv, b"")
                assert closed and got == b""
        assert [r.getMessage().split(":")[0] for r in caplog.records] == [
            "2 connections open, the most served at once"
        ]
        for conn in held:
            conn.close()
        # A place comes back once its thread sees its connection closed.
        deadline = time.monotonic() + 10
        while not _encodes(srv):
            assert time.monotonic() < deadline, "the places were not given back"
    finally:
        srv.shutdown()
        srv.server_close()
