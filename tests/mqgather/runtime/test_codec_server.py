"""The codec server over HTTP: Temporal's protocol, the bearer token, CORS."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload

from mqgather.runtime.codec import KeyRing, PayloadCipher, is_sealed, new_key
from mqgather.runtime.codec_server import CodecServer

RING = KeyRing("k1", {"k1": new_key()})
TOKEN = "t" * 32
UI = "http://localhost:8233"
AUTH = {"Authorization": f"Bearer {TOKEN}", "X-Namespace": "default"}


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
