"""``mqgather keys`` on files: init, add, activate, retire's refusals that need no server,
one change of the ring at a time."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from mqgather.cli import keys as keys_cli
from mqgather.cli.main import cli
from mqgather.runtime.codec import (
    KeyRing,
    key_ring_changes,
    new_key,
    read_key_ring_file,
    write_key_ring_file,
)


def _run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_init_makes_a_private_ring_and_token_once(tmp_path):
    ring, token = tmp_path / "keys.json", tmp_path / "token"
    first = _run("keys", "init", "--file", str(ring), "--token-file", str(token))
    assert first.exit_code == 0, first.output
    made = read_key_ring_file(ring)
    secret = token.read_text()
    assert (ring.stat().st_mode & 0o777, token.stat().st_mode & 0o777) == (0o600, 0o600)
    assert len(secret.strip()) == 64
    again = _run("keys", "init", "--file", str(ring), "--token-file", str(token))
    assert again.exit_code == 0 and "unchanged" in again.output
    assert read_key_ring_file(ring) == made and token.read_text() == secret
    # No key material on the terminal.
    for key in made.keys.values():
        assert key.hex() not in first.output + again.output
    assert secret.strip() not in first.output


def test_add_activate_and_the_refusals_that_keep_a_ring_whole(tmp_path):
    ring = tmp_path / "keys.json"
    assert _run("keys", "add", "--file", str(ring)).exit_code == 0
    assert _run("keys", "add", "--file", str(ring), "--no-activate").exit_code == 0
    made = read_key_ring_file(ring)
    assert made.active == "k1" and set(made.keys) == {"k1", "k2"}
    assert _run("keys", "activate", "--file", str(ring), "k2").exit_code == 0
    assert read_key_ring_file(ring).active == "k2"
    assert read_key_ring_file(ring).keys == made.keys  # no key replaced
    dup = _run("keys", "add", "--file", str(ring), "--id", "k1")
    assert dup.exit_code != 0 and "never replaced" in dup.output
    active = _run("keys", "retire", "--file", str(ring), "k2")
    assert active.exit_code != 0 and "active key" in active.output
    missing = _run("keys", "activate", "--file", str(ring), "k9")
    assert missing.exit_code != 0 and "k9" in missing.output


@pytest.mark.timeout(60)  # a codec server that starts instead of refusing fails here
def test_the_codec_server_refuses_to_start_without_a_token_or_a_ring(tmp_path, monkeypatch):
    for name in ("MQGATHER_KEYS", "MQGATHER_KEYS_FILE", "MQGATHER_CODEC_TOKEN",
                 "MQGATHER_CODEC_TOKEN_FILE"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    no_ring = _run("codec-server")
    assert no_ring.exit_code != 0 and "MQGATHER_KEYS" in no_ring.output
    _run("keys", "init", "--file", str(tmp_path / "k.json"))
    monkeypatch.setenv("MQGATHER_KEYS_FILE", str(tmp_path / "k.json"))
    no_token = _run("codec-server")
    assert no_token.exit_code != 0 and "MQGATHER_CODEC_TOKEN" in no_token.output
    monkeypatch.setenv("MQGATHER_CODEC_TOKEN", "short")
    short = _run("codec-server")
    assert short.exit_code != 0 and "16 characters" in short.output
    monkeypatch.delenv("MQGATHER_CODEC_TOKEN")
    token = tmp_path / "token"
    token.write_text("a-token-of-their-own-choosing\n")
    token.chmod(0o646)
    monkeypatch.setenv("MQGATHER_CODEC_TOKEN_FILE", str(token))
    writable = _run("codec-server")
    assert writable.exit_code != 0 and "MQGATHER_CODEC_TOKEN_FILE" in writable.output
    assert "chmod go-w" in writable.output and "their-own" not in writable.output


@pytest.mark.timeout(60)  # a codec server that starts instead of refusing fails here
@pytest.mark.parametrize(
    ("args", "said"),
    [
        # Origins no browser sends: allowing them would let no Web UI call.
        (["--ui-origin", "localhost:8233"], "give the Web UI's scheme, host and port"),
        (["--ui-origin", "http://localhost:8233/ui"], "scheme, host and port only"),
        (["--ui-origin", "http://localhost:99999"], "Port out of range"),
        # A namespace no request's path could name.
        (["--namespace", "pay ments"], "a namespace holds letters, digits"),
        # Where it cannot listen: said, not a traceback.
        (["--host", "no-such-host.invalid"], "--host/--port: cannot listen on no-such-host"),
        (["--port", "TAKEN"], "Address already in use"),
    ],
)
def test_the_codec_server_refuses_what_would_serve_no_one(tmp_path, monkeypatch, args, said):
    _run("keys", "init", "--file", str(tmp_path / "k.json"))
    monkeypatch.setenv("MQGATHER_KEYS_FILE", str(tmp_path / "k.json"))
    monkeypatch.setenv("MQGATHER_CODEC_TOKEN", "a-token-long-enough-to-pass")
    # Every case runs on a port already taken: a check that no longer refuses ends in
    # "Address already in use", not in a server that serves until the timeout.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        out = _run("codec-server", "--port", port, *[port if a == "TAKEN" else a for a in args])
    assert out.exit_code != 0, out.output
    assert said in out.output


def test_a_key_command_waits_for_a_change_under_way_so_neither_key_is_lost(tmp_path, monkeypatch):
    path = tmp_path / "keys.json"
    write_key_ring_file(path, KeyRing("a", {"a": new_key()}))
    read = threading.Event()

    def watched(p: Path) -> KeyRing:
        read.set()
        return read_key_ring_file(p)

    monkeypatch.setattr(keys_cli, "read_key_ring_file", watched)
    added = threading.Thread(target=keys_cli.add.callback, args=(path, "b", False))
    with key_ring_changes(path):  # another command's change, under way
        added.start()
        # Not read until that change is written: it would write back what it read.
        assert not read.wait(0.5)
        ring = read_key_ring_file(path)
        write_key_ring_file(path, KeyRing(ring.active, {**ring.keys, "c": new_key()}))
    added.join(10)
    assert read.is_set() and set(read_key_ring_file(path).keys) == {"a", "b", "c"}


def test_the_rings_lock_is_never_opened_through_a_link(tmp_path):
    path = tmp_path / "keys.json"
    target = tmp_path / "made-through-the-link"
    (tmp_path / ".keys.json.lock").symlink_to(target)
    result = _run("keys", "init", "--file", str(path))
    assert result.exit_code == 1 and not target.exists() and not path.exists()
    assert "remove a link there" in result.output and "Traceback" not in result.output
