"""The production stack's secrets and certificates, made once on the machine that runs it.

``docker-compose.yml`` starts nothing without them: every password is required from
``.env`` and every hop carries TLS with certificates of the stack's own authority. This
module makes both, with random values and fresh keys, and never overwrites what exists
unless told to (a new password for a database that already holds the old one locks the
stack out of it).
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import os
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mqgather.errors import ConfigError
from mqgather.runtime.files import PRIVATE_DIR, write_whole

#: The secrets ``docker-compose.yml`` requires, each a random value in ``.env``.
SECRET_NAMES = (
    "MQ_APP_PASSWORD",
    "MQ_ADMIN_PASSWORD",
    "TEMPORAL_DB_PASSWORD",
    "GRAFANA_ADMIN_PASSWORD",
    "UI_PASSWORD",
    "CODEC_TOKEN",
)
#: The operators' sign-in name at the UI's proxy.
UI_USER = "operator"
#: What each service of the stack gets from the certificates volume: a directory of its
#: own (mounted alone, read-only), the user id its image runs as, and for a server the
#: host names it answers to. Keys are readable by that user only.
PARTS: dict[str, tuple[int, tuple[str, ...]]] = {
    "temporal": (1000, ("temporal", "localhost")),
    "ibmmq": (1001, ("ibmmq", "localhost")),
    "codec-server": (1001, ("codec-server", "localhost")),
    "ui-proxy": (101, ("localhost",)),  # nginx's workers read the sign-in file
    # Clients: the workers, bridges and CLI (mqgather's image), and the Temporal UI.
    "mqgather": (1001, ()),
    "temporal-ui": (1000, ()),
}
#: Written last by :func:`init_certs`: without it, a run that died halfway is redone.
COMPLETE = ".complete"
#: How long the stack's certificates are valid.
VALID_DAYS = 825


@dataclass
class Made:
    """What :func:`init_env` or :func:`init_certs` wrote and what it left as it was."""

    written: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)


def _private(path: Path, data: bytes) -> None:
    """Write ``data`` readable by its owner only: a new file, never one found there (an
    old one readable by others held the secret until a chmod; a link was written
    through)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    write_whole(path, data)


def _public(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_bytes(data)
    os.chmod(path, 0o644)  # certificates: its directory decides who reaches them


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


_CA_USAGE = x509.KeyUsage(
    digital_signature=False, content_commitment=False, key_encipherment=False,
    data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
    encipher_only=False, decipher_only=False,
)  # fmt: skip


def _authority(now: datetime) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mqgather stack CA")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_CA_USAGE, critical=True)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _issue(
    ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate],
    common_name: str,
    hosts: tuple[str, ...],
    now: datetime,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A certificate for ``common_name``: a server's (with ``hosts`` as its names, and
    client use too, as Temporal's own tools connect with it) or, without hosts, a
    client's."""
    key = _key()
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca[1].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    if hosts:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        names: list[x509.GeneralName] = [x509.DNSName(h) for h in hosts]
        names.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    return key, builder.sign(ca[0], hashes.SHA256())


def ssha(password: str) -> str:
    """A ``{SSHA}`` password hash as nginx's ``auth_basic_user_file`` reads it."""
    salt = secrets.token_bytes(8)
    digest = hashlib.sha1(password.encode() + salt, usedforsecurity=False).digest()
    return "{SSHA}" + base64.b64encode(digest + salt).decode()


def read_env(path: Path) -> dict[str, str]:
    """``KEY=value`` lines of an ``.env`` file (comments and blank lines skipped), in UTF-8
    whatever the locale, an editor's byte-order mark passed over (else the first name
    would hold it, and that secret be taken for missing and made anew).

    Raises:
        ConfigError: the file is not UTF-8 (nothing of it is shown: it holds secrets).
    """
    if not path.exists():
        return {}
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(str(path), "not UTF-8: save it so (its passwords are kept)") from None
    pairs = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#") and "=" in line:
            name, _, value = line.partition("=")
            pairs[name.strip()] = value.strip()
    return pairs


def init_env(root: Path, *, force: bool = False) -> Made:
    """Make ``root/.env`` with a random value for each of :data:`SECRET_NAMES` missing
    from it (all of them with ``force``); values already there are kept."""
    made = Made()
    env_path = root / ".env"
    env = {} if force else read_env(env_path)
    missing = [name for name in SECRET_NAMES if not env.get(name)]
    if not missing:
        made.kept.append(env_path)
        return made
    for name in missing:
        env[name] = secrets.token_urlsafe(24)
    lines = ["# The production stack's secrets (mqgather stack init). Keep this file",
             "# private; back it up with the databases that use these passwords."]  # fmt: skip
    _private(env_path, "\n".join([*lines, *(f"{k}={v}" for k, v in env.items())]).encode())
    made.written.append(env_path)
    return made


def _owned(path: Path, uid: int) -> None:
    if os.geteuid() == 0:  # only root gives files away; elsewhere they stay the caller's
        os.chown(path, uid, uid)


def init_certs(directory: Path, ui_password: str, *, force: bool = False) -> Made:
    """Make the stack's certificate authority and, per :data:`PARTS`, a directory with
    the CA certificate, the part's certificate and key (the MQ client's as a PKCS#12 key
    repository with its password), and the UI proxy's sign-in file. Kept if made before,
    unless ``force``."""
    made = Made()
    if (directory / COMPLETE).exists() and not force:
        made.kept.append(directory)
        return made
    (directory / COMPLETE).unlink(missing_ok=True)
    now = datetime.now(UTC)
    ca = _authority(now)
    _private(directory / "ca" / "ca.key", _pem_key(ca[0]))
    _public(directory / "ca" / "ca.crt", _pem(ca[1]))
    for part, (uid, hosts) in PARTS.items():
        home = directory / part
        key, cert = _issue(ca, part, hosts, now)
        _public(home / "ca.crt", _pem(ca[1]))
        _public(home / "tls.crt", _pem(cert) + _pem(ca[1]))
        _private(home / "tls.key", _pem_key(key))
        if part == "mqgather":
            _mq_key_repository(home, key, cert, ca[1])
        if part == "ui-proxy":
            _private(home / "ui.htpasswd", f"{UI_USER}:{ssha(ui_password)}\n".encode())
        for path in (home, *home.iterdir()):
            _owned(path, uid)
    _public(directory / COMPLETE, now.isoformat().encode())
    made.written.append(directory)
    return made


def _mq_key_repository(
    home: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate, ca: x509.Certificate
) -> None:
    """The MQ client's key repository: PKCS#12 with the stack's CA as its trust anchor,
    encrypted the way IBM's key tooling reads it (3DES, SHA-1 MAC), and its password."""
    password = secrets.token_urlsafe(24)
    encryption = (
        serialization.PrivateFormat.PKCS12.encryption_builder()
        .kdf_rounds(50_000)
        .key_cert_algorithm(pkcs12.PBES.PBESv1SHA1And3KeyTripleDESCBC)
        .hmac_hash(hashes.SHA1())
        .build(password.encode())
    )
    repository = pkcs12.serialize_key_and_certificates(b"mqgather", key, cert, [ca], encryption)
    _private(home / "mq-client.p12", repository)
    _private(home / "mq-client.password", password.encode())
