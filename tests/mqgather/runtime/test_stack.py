"""The production stack's secrets and certificates."""

from __future__ import annotations

import base64
import hashlib
import stat

import pytest
from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_private_key, pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID

from mqgather.cli.main import cli
from mqgather.errors import ConfigError
from mqgather.runtime.stack import (
    COMPLETE,
    PARTS,
    SECRET_NAMES,
    UI_USER,
    init_certs,
    init_env,
    read_env,
)

UI_PASSWORD = "a-long-operator-password"


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_init_writes_every_secret_once_and_privately(tmp_path):
    made = CliRunner().invoke(cli, ["stack", "init", "--dir", str(tmp_path)])
    assert made.exit_code == 0, made.output
    env = read_env(tmp_path / ".env")
    assert set(env) == set(SECRET_NAMES)
    assert len(set(env.values())) == len(SECRET_NAMES)
    assert all(len(value) >= 32 for value in env.values())
    assert _mode(tmp_path / ".env") == 0o600
    again = CliRunner().invoke(cli, ["stack", "init", "--dir", str(tmp_path)])
    assert "kept" in again.output and read_env(tmp_path / ".env") == env


def test_init_fills_in_what_is_missing_and_force_replaces_all(tmp_path):
    (tmp_path / ".env").write_text("MQ_APP_PASSWORD=chosen-by-the-operator\n")
    init_env(tmp_path)
    env = read_env(tmp_path / ".env")
    assert env["MQ_APP_PASSWORD"] == "chosen-by-the-operator" and set(env) == set(SECRET_NAMES)
    init_env(tmp_path, force=True)
    replaced = read_env(tmp_path / ".env")
    assert all(replaced[name] != env[name] for name in SECRET_NAMES)


def test_an_env_an_editor_saved_keeps_its_passwords(tmp_path):
    # Notepad's byte-order mark and line ends: the operator's password is still theirs,
    # not taken for missing and replaced (the databases keep the one they were made with).
    chosen = "MQ_APP_PASSWORD=chosen-by-the-operator\r\nUI_PASSWORD=théirs\r\n"
    (tmp_path / ".env").write_bytes(b"\xef\xbb\xbf" + chosen.encode())
    init_env(tmp_path)
    env = read_env(tmp_path / ".env")
    assert env["MQ_APP_PASSWORD"] == "chosen-by-the-operator" and env["UI_PASSWORD"] == "théirs"
    assert set(env) == set(SECRET_NAMES)


def test_an_env_not_in_utf8_is_refused_and_left_as_it_was(tmp_path):
    (tmp_path / ".env").write_bytes(b"UI_PASSWORD=th\xe9irs\n")
    with pytest.raises(ConfigError, match="not UTF-8: save it so"):
        init_env(tmp_path)
    assert (tmp_path / ".env").read_bytes() == b"UI_PASSWORD=th\xe9irs\n"


def test_each_part_gets_a_certificate_of_the_stacks_authority_for_its_names(tmp_path):
    init_certs(tmp_path, UI_PASSWORD)
    ca = x509.load_pem_x509_certificate((tmp_path / "ca" / "ca.crt").read_bytes())
    authority = ca.public_key()
    assert isinstance(authority, ec.EllipticCurvePublicKey)
    for part, (_uid, hosts) in PARTS.items():
        home = tmp_path / part
        cert = x509.load_pem_x509_certificate((home / "tls.crt").read_bytes())
        authority.verify(
            cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm)
        )
        key = load_pem_private_key((home / "tls.key").read_bytes(), None)
        assert key.public_key().public_numbers() == cert.public_key().public_numbers()
        assert _mode(home / "tls.key") == 0o600 and _mode(home) == 0o700
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert ExtendedKeyUsageOID.CLIENT_AUTH in usages
        if hosts:
            names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            assert set(hosts) <= set(names.get_values_for_type(x509.DNSName)), part
            assert ExtendedKeyUsageOID.SERVER_AUTH in usages


def test_the_mq_client_key_repository_opens_with_its_password_and_trusts_the_ca(tmp_path):
    init_certs(tmp_path, UI_PASSWORD)
    home = tmp_path / "mqgather"
    password = (home / "mq-client.password").read_bytes()
    key, cert, extra = pkcs12.load_key_and_certificates(
        (home / "mq-client.p12").read_bytes(), password
    )
    ca = x509.load_pem_x509_certificate((tmp_path / "ca" / "ca.crt").read_bytes())
    assert key is not None and cert is not None and extra == [ca]


def test_the_ui_proxy_signs_in_the_operator_with_the_ui_password(tmp_path):
    init_certs(tmp_path, UI_PASSWORD)
    user, _, stored = (tmp_path / "ui-proxy" / "ui.htpasswd").read_text().strip().partition(":")
    raw = base64.b64decode(stored.removeprefix("{SSHA}"))
    digest, salt = raw[:20], raw[20:]
    assert user == UI_USER
    assert hashlib.sha1(UI_PASSWORD.encode() + salt, usedforsecurity=False).digest() == digest


def test_certificates_are_kept_unless_forced(tmp_path):
    init_certs(tmp_path, UI_PASSWORD)
    first = (tmp_path / "ca" / "ca.crt").read_bytes()
    assert init_certs(tmp_path, UI_PASSWORD).kept == [tmp_path]
    assert (tmp_path / "ca" / "ca.crt").read_bytes() == first
    init_certs(tmp_path, UI_PASSWORD, force=True)
    assert (tmp_path / "ca" / "ca.crt").read_bytes() != first


def test_a_run_that_died_halfway_is_made_again(tmp_path):
    init_certs(tmp_path, UI_PASSWORD)
    first = (tmp_path / "ca" / "ca.crt").read_bytes()
    (tmp_path / COMPLETE).unlink()  # as if killed before its last write
    (tmp_path / "temporal" / "tls.key").unlink()
    assert init_certs(tmp_path, UI_PASSWORD).written == [tmp_path]
    assert (tmp_path / "ca" / "ca.crt").read_bytes() != first
    assert (tmp_path / "temporal" / "tls.key").exists()


def test_a_private_key_is_written_as_a_new_file_never_through_one_found_there(tmp_path):
    init_certs(tmp_path, UI_PASSWORD)
    key = tmp_path / "ca" / "ca.key"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("not a key")
    elsewhere.chmod(0o644)
    key.unlink()
    key.symlink_to(elsewhere)  # a link where the key goes: once written through
    init_certs(tmp_path, UI_PASSWORD, force=True)
    assert elsewhere.read_text() == "not a key"
    assert not key.is_symlink() and _mode(key) == 0o600
    load_pem_private_key(key.read_bytes(), None)


def test_certs_refuse_to_run_without_a_ui_password(tmp_path, monkeypatch):
    monkeypatch.delenv("UI_PASSWORD", raising=False)
    got = CliRunner().invoke(cli, ["stack", "certs", "--dir", str(tmp_path)])
    assert got.exit_code != 0 and "UI_PASSWORD" in got.output


def test_temporal_clients_take_the_stacks_client_certificate_from_the_environment(
    tmp_path, monkeypatch
):
    from mqgather.runtime.temporal import connect_config

    init_certs(tmp_path, UI_PASSWORD)
    home = tmp_path / "mqgather"
    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", str(home / "tls.crt"))
    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", str(home / "tls.key"))
    monkeypatch.setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", str(home / "ca.crt"))
    monkeypatch.setenv("TEMPORAL_TLS_SERVER_NAME", "temporal")
    tls = connect_config("temporal:7233")["tls"]
    assert tls.domain == "temporal"
    assert tls.client_cert == (home / "tls.crt").read_bytes()
    assert tls.server_root_ca_cert == (home / "ca.crt").read_bytes()
