"""Gathers with payload encryption on the real dev server: nothing readable reaches the
server, keys rotate, a missing key stalls a gather visibly without losing it, and
histories that switch encryption on half-way complete and replay."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import subprocess
import uuid
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History

from analytics.export import export_histories
from analytics.histories import collect
from analytics.replay import ReplayItem, ReplayReport, replay
from bridge.mq.models import parse_id
from mqgather.config import AggregateSpec
from mqgather.runtime.codec import (
    KeyRing,
    PayloadCipher,
    data_converter,
    key_id_of,
    key_ids_in,
    new_key,
    payloads_in,
    read_key_ring_file,
    write_key_ring_file,
)
from mqgather.runtime.codec_server import CodecServer
from mqgather.runtime.keyuse import open_key_usage
from tests.harness import THREE_LEGS, pipeline, status, until, with_keys
from workers.worker import build_worker

#: Key ids unique to this run: `keys status` reads every open gather on the server.
RUN = uuid.uuid4().hex[:6]
A = KeyRing(f"a-{RUN}", {f"a-{RUN}": new_key()})
B_WITH_A = KeyRing(f"b-{RUN}", {A.active: A.keys[A.active], f"b-{RUN}": new_key()})
STRANGER = KeyRing(f"c-{RUN}", {f"c-{RUN}": new_key()})
TOKEN = secrets.token_hex(16)


def _cli(temporal_env, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``mqgather ARGS`` in a process of its own, against the session's server."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "MQGATHER_"))}
    address = temporal_env.client.service_client.config.target_host
    return subprocess.run(
        ["mqgather", *args], env={**clean, "TEMPORAL_ADDRESS": address, **env},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _spec(**kw) -> AggregateSpec:
    return AggregateSpec(
        name=f"enc{uuid.uuid4().hex[:6]}", legs=THREE_LEGS, timeout_seconds=120, **kw
    )


def _marked(marker: str, leg: str) -> bytes:
    return json.dumps({"note": f"{marker}-{leg}", "pan": "4111111111111111"}).encode()


async def _raw_history(client, workflow_id: str) -> bytes:
    """The history as the server stores it: no codec in between."""
    events = (await client.get_workflow_handle(workflow_id).fetch_history()).events
    return History(events=events).SerializeToString()


async def test_a_sealed_gather_leaves_no_message_content_on_the_server(temporal_env, tmp_path):
    client = with_keys(temporal_env.client, A)
    spec = _spec()
    marker = f"SECRET{uuid.uuid4().hex[:8]}"
    async with pipeline(client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec, request_msg_id=parse_id("REQ-SEALED"), reply_to_q="APP.R")
        bodies = {leg: _marked(marker, leg) for leg in ("CREDIT", "STOCK", "TAX")}
        p.reply(spec, sent.correl_id, "CREDIT", bodies["CREDIT"], note=f"{marker}-prop")
        p.reply(spec, sent.correl_id, "STOCK", bodies["STOCK"])
        handle = p.handle(spec, sent.correl_id)
        seen = await until(lambda: status(handle), lambda s: s.legs_received == ["CREDIT", "STOCK"])
        p.reply(spec, sent.correl_id, "TAX", bodies["TAX"])
        response = await p.wait_message("ORDER.RESPONSE")
        result = await p.result(spec, sent.correl_id)
        raw = await _raw_history(temporal_env.client, sent.gather_id)
    # Through the codec everything reads as usual: the query, the result, the response.
    assert seen.state == "PARTIAL" and result.state == "COMPLETE"
    doc = json.loads(response.body)
    assert doc["legs"]["credit"]["note"] == f"{marker}-CREDIT"
    # On the server: not the bodies (raw or as the JSON carries them), not the property
    # value, not the merged response, not the static summary's CorrelId text.
    as_carried = [base64.b64encode(b).decode() for b in bodies.values()]
    for secret in [marker, "4111111111111111", *as_carried]:
        assert secret.encode() not in raw, secret
    # Every payload a codec passes is sealed but the SDK core's own bookkeeping: each
    # local activity's (sequence, type, times) and each patch marker's (its id); search
    # attributes are never encoded.
    unsealed = [pl for pl in payloads_in(History.FromString(raw)) if key_id_of(pl) is None]
    bookkeeping = [set(json.loads(pl.data)) for pl in unsealed]
    assert all(
        keys >= {"seq", "activity_type"} or keys <= {"id", "deprecated"} for keys in bookkeeping
    ), bookkeeping
    assert set(key_ids_in(History.FromString(raw))) <= {A.active, ""}


async def test_a_worker_without_the_key_stalls_the_gather_visibly_until_one_with_it_runs(
    temporal_env, tmp_path
):
    sealed = with_keys(temporal_env.client, A)
    stranger = with_keys(temporal_env.client, STRANGER)
    spec = _spec(mode="static")
    correl = parse_id(f"NOKEY-{uuid.uuid4().hex[:6]}")
    async with pipeline(sealed, tmp_path, [spec], run_worker=False) as p:
        wrong = build_worker(stranger, p.connect, task_queue=p.task_queue)
        async with wrong:
            for leg in ("CREDIT", "STOCK", "TAX"):
                p.reply(spec, correl, leg, b'{"ok": true}')
            handle = p.handle(spec, correl)

            async def failed_task():
                events = (await handle.fetch_history()).events
                return [e for e in events
                        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]  # fmt: skip

            [event] = (await until(failed_task, bool, 60))[:1]
            assert (await handle.describe()).status.name == "RUNNING"
            assert p.empty("ORDER.RESPONSE") and p.depth("GATHER.IN") == 0
        failure = event.workflow_task_failed_event_attributes.failure
        # The failure was written by the worker that lacks the key, sealed with its own.
        error = await data_converter(STRANGER).decode_failure(failure)
        assert f"key id {A.active!r}" in str(error), error
        right = build_worker(sealed, p.connect, task_queue=p.task_queue)
        async with right:
            response = await p.wait_message("ORDER.RESPONSE", timeout=60)
            result = await p.result(spec, correl)
        # Nothing lost, nothing twice: one response, nothing anywhere else.
        assert p.empty("ORDER.RESPONSE")
        for queue in ("GATHER.IN", "GATHER.FAILURE", "GATHER.BACKOUT", "GATHER.LATE",
                      "SYSTEM.DEAD.LETTER.QUEUE"):  # fmt: skip
            assert p.empty(queue), queue
    assert result.state == "COMPLETE" and result.legs_received == ["CREDIT", "STOCK", "TAX"]
    assert json.loads(response.body)["legs"]["tax"] == {"ok": True}


async def test_keys_rotate_while_gathers_are_open_and_the_old_key_stays_until_they_close(
    temporal_env, tmp_path
):
    client = with_keys(temporal_env.client, A)
    codec = client.data_converter.payload_codec
    spec = _spec()
    async with pipeline(client, tmp_path, [spec]) as p:
        opened = [await p.scatter(spec) for _ in range(2)]
        for sent in opened:
            p.reply(spec, sent.correl_id, "CREDIT", b'{"under": "a"}')
        for sent in opened:
            await until(lambda s=sent: status(p.handle(spec, s.correl_id)),
                        lambda s: s.legs_received == ["CREDIT"])  # fmt: skip
        usage = await open_key_usage(client, query=f"AggregateName = '{spec.name}'")
        assert usage.workflows_by_key == {A.active: 2}
        ring_file = tmp_path / "keys.json"
        write_key_ring_file(ring_file, B_WITH_A)
        shown = await asyncio.to_thread(
            _cli, temporal_env, "keys", "status", "--query", f"AggregateName = '{spec.name}'",
            MQGATHER_KEYS_FILE=str(ring_file),
        )  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        assert f"{A.active}: 2 open workflow(s) — in use" in shown.stdout
        assert f"{B_WITH_A.active} (active): 0 open workflow(s) — may be retired" in shown.stdout
        refused = await asyncio.to_thread(
            _cli, temporal_env, "keys", "retire", A.active, "--file", str(ring_file)
        )
        assert refused.returncode == 1 and "refused" in refused.stderr, refused.stderr
        assert A.active in read_key_ring_file(ring_file).keys
        # Rotation: B made active, A kept to open the older payloads. (A process does this
        # by restarting with the new ring; swapping the cipher is the same for the codec.)
        codec.cipher = PayloadCipher(B_WITH_A)  # type: ignore[union-attr]
        for sent in opened:
            for leg in ("STOCK", "TAX"):
                p.reply(spec, sent.correl_id, leg, b'{"under": "b"}')
        results = [await p.result(spec, s.correl_id) for s in opened]
        histories = [await p.handle(spec, s.correl_id).fetch_history() for s in opened]
        after = await open_key_usage(client, query=f"AggregateName = '{spec.name}'")
    assert [r.state for r in results] == ["COMPLETE", "COMPLETE"]
    for history in histories:
        ids = key_ids_in(History(events=history.events))
        assert ids.get(A.active) and ids.get(B_WITH_A.active), ids
    assert after.workflows_by_key == {}  # closed: A may go
    retired = await asyncio.to_thread(
        _cli, temporal_env, "keys", "retire", A.active, "--file", str(ring_file)
    )
    assert retired.returncode == 0, retired.stderr
    assert set(read_key_ring_file(ring_file).keys) == {B_WITH_A.active}
    report = ReplayReport()
    await replay([_item(h) for h in histories], report, converter=data_converter(B_WITH_A))
    assert (report.replayed, report.clean) == (2, 2), [f.describe() for f in report.failures]
    without_a = ReplayReport()
    only_b = KeyRing(B_WITH_A.active, {B_WITH_A.active: B_WITH_A.keys[B_WITH_A.active]})
    await replay([_item(h) for h in histories], without_a, converter=data_converter(only_b))
    assert without_a.clean == 0 and f"key id {A.active!r}" in without_a.failures[0].error


def _payload_texts(shown: str) -> str:
    """The data of every payload in proto-JSON histories (``temporal workflow show -o
    json`` output, or export NDJSON), decoded."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "metadata" in node and "data" in node:
                found.append(base64.b64decode(node["data"]).decode("utf-8", "replace"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for line in shown.splitlines() if shown.startswith('{"workflowId') else [shown]:
        walk(json.loads(line))
    return "\n".join(found)


def _item(history) -> ReplayItem:
    return ReplayItem(history=history, source="test")


async def test_a_history_that_switches_encryption_on_half_way_completes_and_replays(
    temporal_env, tmp_path
):
    client = with_keys(temporal_env.client, None)
    spec = _spec()
    async with pipeline(client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        p.reply(spec, sent.correl_id, "CREDIT", b'{"before": 1}')
        await until(lambda: status(p.handle(spec, sent.correl_id)),
                    lambda s: s.legs_received == ["CREDIT"])  # fmt: skip
        # The rollout that switches encryption on, for bridge and worker alike.
        client.data_converter.payload_codec.cipher = PayloadCipher(A)  # type: ignore[union-attr]
        for leg in ("STOCK", "TAX"):
            p.reply(spec, sent.correl_id, leg, b'{"after": 1}')
        response = await p.wait_message("ORDER.RESPONSE")
        result = await p.result(spec, sent.correl_id)
        history = await p.handle(spec, sent.correl_id).fetch_history()
    assert result.state == "COMPLETE"
    assert json.loads(response.body)["legs"]["credit"] == {"before": 1}
    ids = key_ids_in(History(events=history.events))
    assert ids.get(A.active) and ids.get(""), ids
    report = ReplayReport()
    await replay([_item(history)], report, converter=data_converter(A))
    assert report.clean == 1, [f.describe() for f in report.failures]


async def test_operators_read_a_sealed_gather_through_the_codec_server_and_in_exports(
    temporal_env, tmp_path
):
    client = with_keys(temporal_env.client, A)
    spec = _spec(mode="static")
    marker = f"SECRET{uuid.uuid4().hex[:8]}"
    correl = parse_id(f"CODEC-{RUN}")
    async with pipeline(client, tmp_path, [spec]) as p:
        for leg in ("CREDIT", "STOCK", "TAX"):
            p.reply(spec, correl, leg, _marked(marker, leg))
        await p.wait_message("ORDER.RESPONSE")
        await p.result(spec, correl)
    gid = p.handle(spec, correl).id
    server = CodecServer(("127.0.0.1", 0), PayloadCipher(A), [TOKEN])
    server.start()
    try:

        def show(*extra: str) -> subprocess.CompletedProcess[str]:
            address = temporal_env.client.service_client.config.target_host
            return subprocess.run(
                ["temporal", "workflow", "show", "-w", gid, "--address", address,
                 "--output", "json", *extra],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip

        opened = await asyncio.to_thread(
            show, "--codec-endpoint", server.url, "--codec-auth", f"Bearer {TOKEN}"
        )
        sealed = await asyncio.to_thread(show)
    finally:
        server.shutdown()
        server.server_close()
    assert opened.returncode == 0, opened.stderr
    # A reply's body is base64 inside the JSON of its payload's data.
    body = base64.b64encode(_marked(marker, "CREDIT")).decode()
    assert body in _payload_texts(opened.stdout)
    assert body not in _payload_texts(sealed.stdout)
    # Exports: opened with the key ring by default, or kept sealed; analyze opens those.
    await until(lambda: client.count_workflows(f"WorkflowId = '{gid}' AND "
                                               "ExecutionStatus != 'Running'"),
                lambda c: c.count == 1)  # fmt: skip
    kept, plain = tmp_path / "kept", tmp_path / "plain"
    await export_histories(client, kept, aggregate=spec.name)
    await export_histories(client, plain, aggregate=spec.name, cipher=PayloadCipher(A))

    def text(folder: Path) -> str:
        return "".join(_payload_texts(f.read_text()) for f in folder.rglob("*.ndjson"))

    assert body in text(plain) and body not in text(kept)
    found = collect([kept], tmp_path / "staging", PayloadCipher(A))
    # Each kept file staged opened under its own name.
    assert sorted(Path(f).name.split("-", 1)[1] for f in found.ndjson) == sorted(
        f.name for f in kept.rglob("*.ndjson")
    )
    assert body in text(tmp_path / "staging")
    lacking = collect([kept], tmp_path / "staging2", PayloadCipher(None))
    assert A.active in next(iter(lacking.skipped.values()))


async def test_a_sealed_gather_terminated_by_hand_is_salvaged_with_the_key_ring(
    temporal_env, tmp_path
):
    """Salvage replays the sealed history with the key ring the operator's process has;
    without it, it says which key it lacks and sends nothing."""
    client = with_keys(temporal_env.client, A)
    spec = _spec()
    keys = tmp_path / "keys.json"
    write_key_ring_file(keys, A)
    async with pipeline(client, tmp_path, [spec]) as p:
        sent = await p.scatter(spec)
        credit = p.reply(spec, sent.correl_id, "CREDIT", _marked("SALVAGE", "CREDIT"))
        handle = p.handle(spec, sent.correl_id)
        await until(lambda: status(handle), lambda s: s.legs_received == ["CREDIT"])
        await handle.terminate(reason="by hand")
        where = (f"hex:{sent.correl_id.hex()}", "--aggregate", spec.name, "--mq",
                 f"local:{p.path}")  # fmt: skip
        blind = await asyncio.to_thread(_cli, temporal_env, "salvage", *where)
        assert p.empty("GATHER.LATE")
        done = await asyncio.to_thread(
            _cli, temporal_env, "salvage", *where, "--json", MQGATHER_KEYS_FILE=str(keys)
        )
        late = await p.wait_message("GATHER.LATE")
    assert blind.returncode != 0 and "Traceback" not in blind.stderr
    assert A.active in blind.stderr, blind.stderr
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["verdict"] for line in done.stdout.splitlines()] == ["sent"]
    assert (late.msg_id, late.body) == (credit.msg_id, credit.body)
