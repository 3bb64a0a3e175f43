"""Secrets read from files: taken as mounted, refused where others may write them."""

from __future__ import annotations

import pytest

from mqgather.errors import ConfigError
from mqgather.secretfiles import read_secret


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o640, 0o644, 0o444])
def test_a_secret_only_its_owner_may_write_is_read(tmp_path, mode):
    path = tmp_path / "secret"
    path.write_text("s3cret\n")
    path.chmod(mode)
    assert read_secret(path, "MQGATHER_X_FILE") == "s3cret\n"


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666, 0o660])
def test_a_secret_others_may_write_is_refused_naming_the_key_and_the_fix(tmp_path, mode):
    path = tmp_path / "secret"
    path.write_text("s3cret\n")
    path.chmod(mode)
    with pytest.raises(ConfigError) as refused:
        read_secret(path, "MQGATHER_X_FILE")
    text = str(refused.value)
    assert "MQGATHER_X_FILE" in text and f"{mode:o}" in text and "chmod go-w" in text
    assert "s3cret" not in text


def test_a_missing_secret_file_names_the_key_and_the_file(tmp_path):
    with pytest.raises(ConfigError) as missing:
        read_secret(tmp_path / "nope", "MQGATHER_X_FILE")
    assert "MQGATHER_X_FILE" in str(missing.value) and "nope" in str(missing.value)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644])
def test_a_private_secret_others_may_read_is_refused(tmp_path, mode):
    path = tmp_path / "ring"
    path.write_text("s3cret\n")
    path.chmod(mode)
    with pytest.raises(ConfigError, match="chmod 600"):
        read_secret(path, "MQGATHER_KEYS_FILE", private=True)
    path.chmod(0o600)
    assert read_secret(path, "MQGATHER_KEYS_FILE", private=True) == "s3cret\n"


@pytest.mark.parametrize("codec", ["utf-8", "utf-8-sig", "utf-16", "utf-16-be"])
def test_a_secret_reads_alike_in_each_encoding_an_editor_or_shell_writes(tmp_path, codec):
    # Whatever the process's locale: a password may hold a letter outside ASCII, and
    # Windows PowerShell's `>` writes UTF-16 with a byte-order mark.
    path = tmp_path / "secret"
    data = "pässwörd\n".encode(codec)
    path.write_bytes(b"\xfe\xff" + data if codec == "utf-16-be" else data)
    path.chmod(0o600)
    assert read_secret(path, "MQGATHER_X_FILE") == "pässwörd\n"


def test_a_secret_that_is_not_text_is_refused_without_showing_it(tmp_path):
    path = tmp_path / "secret"
    path.write_bytes(b"s3cr\xe9t\xff")  # Latin-1, not UTF-8
    path.chmod(0o600)
    with pytest.raises(ConfigError) as refused:
        read_secret(path, "MQGATHER_X_FILE")
    text = str(refused.value)
    assert "MQGATHER_X_FILE" in text and "not text in UTF-8" in text
    assert "s3cr" not in text
