"""Payload encryption: every payload leaves the process sealed with AES-256-GCM.

A sealed payload's metadata says ``encoding: binary/encrypted``, which key sealed it
(``encryption-key-id``) and whether the plaintext was compressed first
(``encryption-compression``). Its data is a fresh 12-byte nonce followed by the
ciphertext of the whole original payload (metadata and data), so the original encoding
comes back with it. The associated data binds the ciphertext to the outer metadata: a
payload whose key id, compression or encoding was altered does not open.

The codec is installed on every client, sealed or not: with no key ring it seals nothing
and stops, naming the key id, at a sealed payload it cannot open, instead of handing it
on as data. A payload it did not seal (written before encryption was switched on) passes
through, so one history may hold both.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import fcntl
import os
import re
import secrets
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticPayloadConverter, pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    PayloadCodec,
)

from mqgather.constants import COMPRESS_PAYLOADS_ABOVE_BYTES
from mqgather.errors import ConfigError, MQGatherError, first_problem
from mqgather.names import ENV_KEYS, ENV_KEYS_FILE
from mqgather.runtime.files import write_whole
from mqgather.secretfiles import read_secret

ENCODING = b"binary/encrypted"
META_ENCODING = "encoding"
META_KEY_ID = "encryption-key-id"
META_COMPRESSION = "encryption-compression"
COMPRESSION_NONE = b"none"
COMPRESSION_ZLIB = b"zlib"
NONCE_BYTES = 12
#: AES-GCM's authentication tag, at the end of every ciphertext.
TAG_BYTES = 16
KEY_BYTES = 32
#: Key ids travel in every payload's metadata and in ``keys status``: short and plain.
KEY_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_PAYLOAD = Payload.DESCRIPTOR.full_name


class SealedPayloadError(MQGatherError):
    """A sealed payload cannot be opened: its key is missing or does not fit."""


class UnknownKey(SealedPayloadError):
    """A payload was sealed with a key id that is not in the key ring."""


class PayloadTampered(SealedPayloadError):
    """A payload does not authenticate under the key its metadata names."""


class KeyRingFile(BaseModel):
    """The key ring as stored (``MQGATHER_KEYS`` or the file ``MQGATHER_KEYS_FILE``
    names): the id of the key that seals, and every key by id, base64 of 32 bytes."""

    active: str = Field(description="Id of the key new payloads are sealed with.")
    keys: dict[str, str] = Field(
        description="Every key by id (base64 of 32 random bytes); older ones still open."
    )

    @field_validator("keys")
    @classmethod
    def _keys_are_keys(cls, keys: dict[str, str]) -> dict[str, str]:
        if not keys:
            raise ValueError("the key ring holds no key")
        for key_id, text in keys.items():
            if not KEY_ID_PATTERN.match(key_id):
                raise ValueError(
                    f"key id {key_id!r}: letters, digits, '.', '_' and '-', at most 64"
                )
            try:
                raw = base64.b64decode(text, validate=True)
            except binascii.Error as exc:
                raise ValueError(f"key {key_id!r} is not base64 ({exc})") from exc
            if len(raw) != KEY_BYTES:
                raise ValueError(f"key {key_id!r} is {len(raw)} bytes; AES-256 takes 32")
        return keys

    @model_validator(mode="after")
    def _active_is_in_ring(self) -> KeyRingFile:
        if self.active not in self.keys:
            raise ValueError(f"active key {self.active!r} is not among the keys")
        return self


@dataclasses.dataclass(frozen=True)
class KeyRing:
    """Keys by id; ``active`` seals, every key opens what it sealed."""

    active: str
    keys: Mapping[str, bytes]

    @classmethod
    def from_file_model(cls, model: KeyRingFile) -> KeyRing:
        """The ring a validated key-ring document describes."""
        return cls(model.active, {k: base64.b64decode(v) for k, v in model.keys.items()})

    def to_file_model(self) -> KeyRingFile:
        """The ring as stored."""
        return KeyRingFile(
            active=self.active,
            keys={k: base64.b64encode(v).decode() for k, v in self.keys.items()},
        )


def new_key() -> bytes:
    """32 random bytes from the operating system's generator."""
    return secrets.token_bytes(KEY_BYTES)


def parse_key_ring(text: str, source: str) -> KeyRing:
    """A key ring from its JSON text.

    Raises:
        ConfigError: naming ``source`` (the variable or file) and what is wrong; never
            the key material.
    """
    try:
        model = KeyRingFile.model_validate_json(text)
    except ValidationError as exc:
        # The message, never the input: the input holds the keys.
        raise ConfigError(source, f"not a key ring ({first_problem(exc, 'document')})") from None
    return KeyRing.from_file_model(model)


def read_key_ring_file(path: Path) -> KeyRing:
    """The key ring stored in ``path``.

    Raises:
        ConfigError: the file cannot be read, is readable by others, or is no key ring.
    """
    source = f"{ENV_KEYS_FILE} ({path})"
    return parse_key_ring(read_secret(path, source, private=True), source)


def write_key_ring_file(path: Path, ring: KeyRing) -> None:
    """Store ``ring`` in ``path`` (mode 600), replacing the file in one step, on disk
    before it replaces the old one (a ring lost in a crash leaves every sealed payload
    unreadable): :func:`~mqgather.runtime.files.write_whole`.

    Raises:
        ConfigError: the file cannot be written, naming it and why.
    """
    try:
        write_whole(path, ring.to_file_model().model_dump_json(indent=1) + "\n")
    except OSError as exc:
        raise ConfigError(
            f"{ENV_KEYS_FILE} ({path})", f"cannot write the key ring ({exc.strerror})"
        ) from exc


@contextlib.contextmanager
def key_ring_changes(path: Path) -> Iterator[None]:
    """One change of the ring in ``path`` at a time, from reading it to writing it: two
    commands run at once would each write what they read, and the first one's key would
    be lost (with it every payload sealed under it). An exclusive lock on a file beside
    the ring (``.<name>.lock``), dropped by the kernel if the holder dies."""
    where = path.with_name(f".{path.name}.lock")
    try:
        # Never through a link planted at its name (opening one would create its target).
        lock = os.open(where, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise ConfigError(
            f"{ENV_KEYS_FILE} ({path})",
            f"cannot take the key ring's lock {where} ({exc.strerror}): the directory must "
            "be writable, and the lock a plain file (remove a link there)",
        ) from exc
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
    finally:
        os.close(lock)  # and with it the lock


def load_key_ring(env: Mapping[str, str] | None = None) -> KeyRing | None:
    """The key ring from ``MQGATHER_KEYS`` (its JSON) or ``MQGATHER_KEYS_FILE`` (a path),
    or None when neither is set: encryption is off.

    Raises:
        ConfigError: both are set, or what is set is not a key ring.
    """
    env = os.environ if env is None else env
    text, file = env.get(ENV_KEYS, ""), env.get(ENV_KEYS_FILE, "")
    if text and file:
        raise ConfigError(ENV_KEYS, f"set {ENV_KEYS} or {ENV_KEYS_FILE}, not both")
    if file:
        return read_key_ring_file(Path(file))
    if text:
        return parse_key_ring(text, ENV_KEYS)
    return None


def _meta(payload: Payload, key: str) -> bytes:
    return payload.metadata.get(key, b"")


def is_sealed(payload: Payload) -> bool:
    """Whether ``payload`` is one this codec sealed."""
    return _meta(payload, META_ENCODING) == ENCODING


def key_id_of(payload: Payload) -> str | None:
    """The id of the key that sealed ``payload``, or None if it is not sealed."""
    if not is_sealed(payload):
        return None
    return _meta(payload, META_KEY_ID).decode("utf-8", "replace")


def _associated(key_id: bytes, compression: bytes) -> bytes:
    return b"\0".join((ENCODING, key_id, compression))


class PayloadCipher:
    """Seals and opens single payloads with a key ring (or none: then it seals nothing)."""

    def __init__(
        self, ring: KeyRing | None, compress_above: int = COMPRESS_PAYLOADS_ABOVE_BYTES
    ) -> None:
        self.ring = ring
        self.compress_above = compress_above
        self._aead = {k: AESGCM(v) for k, v in ring.keys.items()} if ring else {}

    def seal(self, payload: Payload) -> Payload:
        """``payload`` sealed with the active key (as it is when there is no key ring)."""
        if self.ring is None:
            return payload
        plain = payload.SerializeToString()
        compression = COMPRESSION_NONE
        if len(plain) > self.compress_above:
            packed = zlib.compress(plain, 1)
            if len(packed) < len(plain):
                plain, compression = packed, COMPRESSION_ZLIB
        key_id = self.ring.active.encode()
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._aead[self.ring.active].encrypt(
            nonce, plain, _associated(key_id, compression)
        )
        return Payload(
            metadata={
                META_ENCODING: ENCODING,
                META_KEY_ID: key_id,
                META_COMPRESSION: compression,
            },
            data=nonce + sealed,
        )

    def open(self, payload: Payload) -> Payload:
        """The original of a sealed payload; any other payload as it is.

        Raises:
            UnknownKey: the key id is not in the ring (the message names it).
            PayloadTampered: it does not authenticate under that key.
        """
        if not is_sealed(payload):
            return payload
        key_id = _meta(payload, META_KEY_ID)
        compression = _meta(payload, META_COMPRESSION)
        name = key_id.decode("utf-8", "replace")
        aead = self._aead.get(name)
        if aead is None:
            held = ", ".join(sorted(self._aead)) or "no key: encryption is off here"
            raise UnknownKey(
                f"a payload is sealed with key id {name!r}, which this process's key ring "
                f"does not hold ({held}); add that key to {ENV_KEYS} / {ENV_KEYS_FILE} "
                "and restart it"
            )
        data = payload.data
        if len(data) < NONCE_BYTES + TAG_BYTES:
            # Shorter than a nonce the cipher takes a ValueError, not a failed tag.
            raise PayloadTampered(
                f"a payload sealed with key id {name!r} holds {len(data)} bytes, too few to "
                f"be sealed (a nonce and a tag take {NONCE_BYTES + TAG_BYTES}): it was altered"
            )
        try:
            plain = aead.decrypt(
                data[:NONCE_BYTES], data[NONCE_BYTES:], _associated(key_id, compression)
            )
        except InvalidTag:
            raise PayloadTampered(
                f"a payload sealed with key id {name!r} does not open with the key of that "
                "id here: the key ring holds a different key under that id, or the payload "
                "was altered"
            ) from None
        try:
            if compression == COMPRESSION_ZLIB:
                plain = zlib.decompress(plain)
            elif compression != COMPRESSION_NONE:
                raise PayloadTampered(f"unknown compression {compression!r} (key id {name!r})")
            return Payload.FromString(plain)
        except (zlib.error, DecodeError) as exc:
            raise PayloadTampered(f"a payload under key id {name!r} is corrupt ({exc})") from exc


class EncryptionCodec(PayloadCodec):
    """The Temporal payload codec over :class:`PayloadCipher`."""

    def __init__(self, cipher: PayloadCipher) -> None:
        self.cipher = cipher

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Seal each payload with the active key."""
        return [self.cipher.seal(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Open each sealed payload; pass the others through."""
        return [self.cipher.open(p) for p in payloads]


class SharedPydanticPayloadConverter(PydanticPayloadConverter):
    """The pydantic payload converter, its instances sharing one set of converters.

    The SDK makes a payload converter anew for every workflow it runs and for every
    activation it decodes, and each new pydantic converter starts with an empty cache of
    type adapters: every payload decoded by type built its adapter again (tens of
    microseconds each, three to a gather). Sharing the converters shares that cache. They
    hold no state but the cache (thread-safe), and the payloads they write are the same.
    """

    _shared: dict[str, Any] | None = None

    def __init__(self) -> None:
        shared = SharedPydanticPayloadConverter._shared
        if shared is None:
            super().__init__()
            SharedPydanticPayloadConverter._shared = dict(self.__dict__)
        else:
            self.__dict__.update(shared)


def data_converter(ring: KeyRing | None) -> DataConverter:
    """The pydantic data converter with the codec; with a key ring, failures' messages
    and stack traces are sealed too (they can quote message content)."""
    codec = EncryptionCodec(PayloadCipher(ring))
    shared = dataclasses.replace(
        pydantic_data_converter,
        payload_converter_class=SharedPydanticPayloadConverter,
        payload_codec=codec,
    )
    if ring is None:
        return shared
    return dataclasses.replace(
        shared, failure_converter_class=DefaultFailureConverterWithEncodedAttributes
    )


def converter_from_env() -> DataConverter:
    """The data converter this process's key ring (environment) calls for."""
    return data_converter(load_key_ring())


#: Fields whose payloads never pass a codec: the server indexes search attributes, and
#: headers (trace context) are not encoded by the clients.
_NEVER_ENCODED = frozenset({"search_attributes", "header"})


def payloads_in(message: Message) -> Iterator[Payload]:
    """Every ``Payload`` a codec encodes inside a protobuf message (a history, an event, a
    failure), as live references: replacing one's contents changes ``message``."""
    for field, value in message.ListFields():
        if field.type != FieldDescriptor.TYPE_MESSAGE or field.name in _NEVER_ENCODED:
            continue
        entry = field.message_type
        assert entry is not None  # a message field always has its type
        if entry.GetOptions().map_entry:
            inner = entry.fields_by_name["value"]
            items = list(value.values()) if inner.type == FieldDescriptor.TYPE_MESSAGE else []
        elif field.is_repeated:
            items = list(value)
        else:
            items = [value]
        for item in items:
            if item.DESCRIPTOR.full_name == _PAYLOAD:
                yield item
            else:
                yield from payloads_in(item)


def open_all(message: Message, cipher: PayloadCipher) -> int:
    """Open every sealed payload inside ``message`` in place; how many were sealed."""
    opened = 0
    for payload in payloads_in(message):
        if is_sealed(payload):
            payload.CopyFrom(cipher.open(payload))
            opened += 1
    return opened


#: The same fields as proto-JSON names them (lowerCamelCase), or keeps their proto names.
_NEVER_ENCODED_JSON = _NEVER_ENCODED | {
    re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name) for name in _NEVER_ENCODED
}
#: A sealed payload's encoding as proto-JSON writes it (bytes in standard base64).
SEALED_JSON_ENCODING = base64.b64encode(ENCODING).decode()


def open_all_json(value: Any, cipher: PayloadCipher) -> int:
    """Open every sealed payload inside parsed proto-JSON ``value`` (a history as
    ``json_format.MessageToDict`` writes it, through ``json.loads``) in place, each as
    ``MessageToDict`` writes a payload; how many were sealed.

    Only the sealed payloads are touched: a whole history parsed into a message and
    written out again costs several times the opening itself.

    Raises:
        UnknownKey: a payload's key id is not in the ring.
        PayloadTampered: a payload does not authenticate, or is corrupt.
        ValueError: a sealed payload's fields are not a payload's proto-JSON.
    """
    opened = 0
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            meta = node.get("metadata")
            if isinstance(meta, dict) and meta.get(META_ENCODING) == SEALED_JSON_ENCODING:
                plain = _json_payload(cipher.open(_payload_of_json(node)))
                node.clear()
                node.update(plain)
                opened += 1
            else:
                stack.extend(v for k, v in node.items() if k not in _NEVER_ENCODED_JSON)
    return opened


def _payload_of_json(node: dict[str, Any]) -> Payload:
    """The payload a proto-JSON object stands for (bytes in either base64 alphabet)."""
    meta, data = node.get("metadata", {}), node.get("data", "")
    try:
        if node.keys() - {"metadata", "data"} or not isinstance(data, str):
            raise TypeError("fields other than metadata and data")
        return Payload(
            metadata={key: _json_bytes(text) for key, text in meta.items()},
            data=_json_bytes(data),
        )
    except (TypeError, AttributeError, binascii.Error) as exc:
        raise ValueError(f"a sealed payload is not a payload's proto-JSON ({exc})") from exc


def _json_bytes(text: str) -> bytes:
    """Proto-JSON bytes: base64, standard or URL-safe, padded or not."""
    return base64.b64decode(text.translate(_URL_SAFE) + "=" * (-len(text) % 4), validate=True)


_URL_SAFE = str.maketrans("-_", "+/")


def is_json_bytes(value: object) -> bool:
    """Whether ``value`` is proto-JSON bytes whole. protobuf's own parser reads ``"!!!"``
    as no bytes and stops at the first padding: a payload mangled on its way would be
    sealed or opened short without a word."""
    if not isinstance(value, str):
        return False
    try:
        _json_bytes(value)
    except binascii.Error:
        return False
    return True


def _json_payload(payload: Payload) -> dict[str, Any]:
    """``payload`` as ``json_format.MessageToDict`` writes it."""
    if payload.external_payloads:
        return json_format.MessageToDict(payload)
    shown: dict[str, Any] = {}
    if payload.metadata:
        shown["metadata"] = {k: base64.b64encode(v).decode() for k, v in payload.metadata.items()}
    if payload.data:
        shown["data"] = base64.b64encode(payload.data).decode()
    return shown


def key_ids_in(message: Message) -> dict[str, int]:
    """How many payloads inside ``message`` each key id sealed (``""``: not sealed)."""
    counts: dict[str, int] = {}
    for payload in payloads_in(message):
        key_id = key_id_of(payload) or ""
        counts[key_id] = counts.get(key_id, 0) + 1
    return counts
