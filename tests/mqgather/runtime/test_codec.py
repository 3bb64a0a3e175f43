"""The payload codec and key ring, without a server."""

from __future__ import annotations

import base64
import json
import os

import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import History, HistoryEvent

from mqgather.errors import ConfigError
from mqgather.names import ENV_KEYS, ENV_KEYS_FILE
from mqgather.runtime.codec import (
    COMPRESSION_NONE,
    COMPRESSION_ZLIB,
    META_COMPRESSION,
    META_KEY_ID,
    KeyRing,
    PayloadCipher,
    PayloadTampered,
    SharedPydanticPayloadConverter,
    UnknownKey,
    data_converter,
    is_json_bytes,
    key_ids_in,
    load_key_ring,
    new_key,
    open_all,
    open_all_json,
    read_key_ring_file,
    write_key_ring_file,
)

A = KeyRing("a", {"a": new_key()})


def _payload(data: bytes = b'{"secret":"CARD-4111"}') -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=data)


def test_a_sealed_payload_opens_to_its_original_and_shows_no_plaintext():
    cipher = PayloadCipher(A)
    original = _payload()
    sealed = cipher.seal(original)
    assert b"CARD-4111" not in sealed.SerializeToString()
    assert b"json/plain" not in sealed.SerializeToString()  # the inner encoding is sealed too
    assert sealed.metadata[META_KEY_ID] == b"a"
    assert cipher.open(sealed) == original


def test_every_seal_takes_a_fresh_nonce():
    cipher = PayloadCipher(A)
    sealed = {cipher.seal(_payload()).data for _ in range(50)}
    assert len(sealed) == 50
    assert len({d[:12] for d in sealed}) == 50


def test_large_payloads_are_compressed_before_sealing_and_small_ones_not():
    cipher = PayloadCipher(A, compress_above=100)
    big = _payload(b'{"text":"' + b"abc" * 10_000 + b'"}')
    sealed = cipher.seal(big)
    assert sealed.metadata[META_COMPRESSION] == COMPRESSION_ZLIB
    assert len(sealed.data) < len(big.data) // 10
    assert cipher.open(sealed) == big
    small = cipher.seal(_payload(b"{}"))
    assert small.metadata[META_COMPRESSION] == COMPRESSION_NONE
    random = _payload(os.urandom(5000))  # does not shrink: kept as it is
    assert cipher.seal(random).metadata[META_COMPRESSION] == COMPRESSION_NONE


def test_the_metadata_is_bound_to_the_ciphertext():
    cipher = PayloadCipher(A, compress_above=10)
    sealed = cipher.seal(_payload(b"x" * 500))
    sealed.metadata[META_COMPRESSION] = COMPRESSION_NONE
    with pytest.raises(PayloadTampered, match="'a'"):
        cipher.open(sealed)
    flipped = cipher.seal(_payload())
    flipped.data = flipped.data[:-1] + bytes([flipped.data[-1] ^ 1])
    with pytest.raises(PayloadTampered):
        cipher.open(flipped)


@pytest.mark.parametrize("length", [0, 5, 11, 12, 27])
def test_a_sealed_payload_cut_short_is_refused_as_altered(length):
    # Under 8 bytes the cipher itself raises a ValueError about its nonce.
    cut = PayloadCipher(A).seal(_payload())
    cut.data = cut.data[:length]
    with pytest.raises(PayloadTampered, match="altered"):
        PayloadCipher(A).open(cut)


def test_a_missing_key_is_named_and_a_wrong_key_under_its_id_refused():
    sealed = PayloadCipher(A).seal(_payload())
    with pytest.raises(UnknownKey, match=r"key id 'a'.*\(b\)"):
        PayloadCipher(KeyRing("b", {"b": new_key()})).open(sealed)
    with pytest.raises(UnknownKey, match="encryption is off here"):
        PayloadCipher(None).open(sealed)
    with pytest.raises(PayloadTampered, match="different key under that id"):
        PayloadCipher(KeyRing("a", {"a": new_key()})).open(sealed)


def test_rotation_seals_with_the_active_key_and_opens_with_every_key():
    old = PayloadCipher(A).seal(_payload(b'"old"'))
    rotated = PayloadCipher(KeyRing("b", {"a": A.keys["a"], "b": new_key()}))
    new = rotated.seal(_payload(b'"new"'))
    assert new.metadata[META_KEY_ID] == b"b"
    assert rotated.open(old).data == b'"old"' and rotated.open(new).data == b'"new"'


def test_unsealed_payloads_pass_through_and_no_ring_seals_nothing():
    plain = _payload()
    assert PayloadCipher(A).open(plain) == plain
    assert PayloadCipher(None).seal(plain) == plain


async def test_the_converter_round_trips_a_model_and_seals_failures():
    from temporalio.api.failure.v1 import Failure

    from bridge.mq.models import MQMessage

    converter = data_converter(A)
    message = MQMessage(body=b"\xff\x00secret", properties={"leg": "CREDIT"})
    [payload] = await converter.encode([message])
    assert b"secret" not in payload.SerializeToString()
    [back] = await converter.decode([payload], [MQMessage])
    assert back == message
    failure = Failure()
    await converter.encode_failure(RuntimeError("body was CARD-4111"), failure)
    assert b"CARD-4111" not in failure.SerializeToString()
    assert "CARD-4111" in str(await converter.decode_failure(failure))


def test_every_payload_converter_the_worker_makes_shares_one_cache_of_type_adapters():
    from temporalio.contrib.pydantic import PydanticPayloadConverter

    from workflows.models import ReplyBatch

    # The SDK makes a payload converter for every workflow and activation, through the
    # data converter's class; each of ours must find the adapters an earlier one built.
    converter_class = data_converter(None).payload_converter_class
    assert converter_class is SharedPydanticPayloadConverter
    first, second = converter_class(), converter_class()
    json_plain = b"json/plain"
    assert first.converters[json_plain] is second.converters[json_plain]
    batch = ReplyBatch(replies=[])
    [payload] = first.to_payloads([batch])
    assert second.from_payloads([payload], [ReplyBatch]) == [batch]
    adapters = second.converters[json_plain]._type_adapter  # type: ignore[attr-defined]
    hits = adapters.cache_info().hits
    converter_class().from_payloads([payload], [ReplyBatch])
    assert adapters.cache_info().hits == hits + 1
    # The payloads are the stock pydantic converter's, byte for byte.
    assert PydanticPayloadConverter().to_payloads([batch]) == [payload]


async def test_a_history_is_opened_in_place_and_its_key_ids_counted():
    cipher = PayloadCipher(A)
    event = HistoryEvent()
    attrs = event.workflow_execution_started_event_attributes
    attrs.input.payloads.append(cipher.seal(_payload()))
    attrs.input.payloads.append(_payload(b'"plain"'))
    attrs.memo.fields["m"].CopyFrom(cipher.seal(_payload(b'"memo"')))
    # Never encoded by Temporal, so never counted: search attributes and headers.
    attrs.search_attributes.indexed_fields["CorrelId"].CopyFrom(_payload(b'"ab"'))
    attrs.header.fields["traceparent"].CopyFrom(_payload(b'"00-ab"'))
    history = History(events=[event])
    assert key_ids_in(history) == {"a": 2, "": 1}
    assert open_all(history, cipher) == 2
    assert key_ids_in(history) == {"": 3}
    assert b"CARD-4111" in history.SerializeToString()


def _sealed_history(cipher: PayloadCipher) -> History:
    event = HistoryEvent()
    attrs = event.workflow_execution_started_event_attributes
    attrs.input.payloads.append(cipher.seal(_payload()))
    attrs.input.payloads.append(_payload(b'"plain"'))
    attrs.memo.fields["m"].CopyFrom(cipher.seal(_payload(b"x" * 4096)))  # compressed
    # Sealed-looking, where Temporal never encodes: left as they are.
    attrs.search_attributes.indexed_fields["CorrelId"].CopyFrom(cipher.seal(_payload(b'"ab"')))
    attrs.header.fields["traceparent"].CopyFrom(cipher.seal(_payload(b'"00-ab"')))
    signalled = HistoryEvent()
    signalled.workflow_execution_signaled_event_attributes.input.payloads.append(
        cipher.seal(_payload(b'{"body":"\\u00ff"}'))
    )
    return History(events=[event, signalled])


def test_proto_json_opens_to_what_the_message_opens_to():
    cipher = PayloadCipher(A)
    history = _sealed_history(cipher)
    as_json = json.loads(json.dumps(json_format.MessageToDict(history)))
    assert open_all_json(as_json, cipher) == 3
    assert open_all(history, cipher) == 3
    assert as_json == json_format.MessageToDict(history)
    assert b"CARD-4111" in json_format.ParseDict(as_json, History()).SerializeToString()
    assert open_all_json(as_json, cipher) == 0  # nothing sealed is left


def test_proto_json_bytes_open_in_either_base64_alphabet_padded_or_not():
    cipher = PayloadCipher(A)
    history = _sealed_history(cipher)
    standard = json.loads(json.dumps(json_format.MessageToDict(history)))
    other = json.loads(json.dumps(standard))
    payload = other["events"][0]["workflowExecutionStartedEventAttributes"]["input"]
    sealed = payload["payloads"][0]
    sealed["data"] = sealed["data"].replace("+", "-").replace("/", "_").rstrip("=")
    sealed["metadata"] = {k: v.rstrip("=") for k, v in sealed["metadata"].items()}
    sealed["metadata"]["encoding"] = standard["events"][0][
        "workflowExecutionStartedEventAttributes"
    ]["input"]["payloads"][0]["metadata"]["encoding"]
    assert open_all_json(standard, cipher) == open_all_json(other, cipher) == 3
    assert other == standard


def test_proto_json_that_does_not_open_says_why():
    history = json_format.MessageToDict(_sealed_history(PayloadCipher(A)))
    other = KeyRing("b", {"b": new_key()})
    with pytest.raises(UnknownKey, match="'a'"):
        open_all_json(json.loads(json.dumps(history)), PayloadCipher(other))
    payload = history["events"][0]["workflowExecutionStartedEventAttributes"]["input"]
    payload["payloads"][0]["data"] = "not base64!"
    with pytest.raises(ValueError, match="not a payload"):
        open_all_json(history, PayloadCipher(A))


def test_the_key_ring_comes_from_the_environment_or_a_private_file(tmp_path):
    text = json.dumps({"active": "a", "keys": {"a": base64.b64encode(A.keys["a"]).decode()}})
    assert load_key_ring({ENV_KEYS: text}) == A
    assert load_key_ring({}) is None
    path = tmp_path / "keys.json"
    write_key_ring_file(path, A)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert load_key_ring({ENV_KEYS_FILE: str(path)}) == A
    with pytest.raises(ConfigError, match="not both"):
        load_key_ring({ENV_KEYS: text, ENV_KEYS_FILE: str(path)})
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        read_key_ring_file(path)


def test_a_key_ring_is_written_through_a_file_of_its_own_never_a_name_left_there(tmp_path):
    path = tmp_path / "keys.json"
    # What the fixed name once used could find: a file readable by others, and a link.
    left = tmp_path / ".keys.json.tmp"
    left.write_text("left")
    left.chmod(0o644)
    write_key_ring_file(path, A)
    assert oct(path.stat().st_mode & 0o777) == "0o600" and read_key_ring_file(path) == A
    assert left.read_text() == "left"
    left.unlink()
    elsewhere = tmp_path / "elsewhere"
    left.symlink_to(elsewhere)
    write_key_ring_file(path, KeyRing("b", {"b": new_key()}))
    assert not elsewhere.exists() and read_key_ring_file(path).active == "b"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".keys.json.tmp", "keys.json"]


@pytest.mark.parametrize(
    ("ring", "says"),
    [
        ({"active": "a", "keys": {"a": base64.b64encode(b"short").decode()}}, "5 bytes"),
        ({"active": "z", "keys": {"a": base64.b64encode(bytes(32)).decode()}}, "'z'"),
        ({"active": "a b", "keys": {"a b": base64.b64encode(bytes(32)).decode()}}, "key id"),
        ({"active": "a", "keys": {"a": "not base64!"}}, "not base64"),
    ],
)
def test_a_bad_key_ring_is_named_without_its_keys(ring, says):
    text = json.dumps(ring)
    with pytest.raises(ConfigError, match=ENV_KEYS) as info:
        load_key_ring({ENV_KEYS: text})
    assert says in str(info.value)
    for value in ring["keys"].values():
        assert value not in str(info.value)


@pytest.mark.parametrize(
    ("text", "whole"),
    [("", True), ("YQ==", True), ("YQ", True), ("YWI=", True), ("YWI", True), ("-_8", True),
     ("YQ=", True), ("Y", False), ("YQ==YQ==", False), ("!!!", False), ("a b", False),
     (None, False), (5, False)],
)  # fmt: skip
def test_base64_is_whole_or_refused(text, whole):
    assert is_json_bytes(text) is whole
