"""A sealed gather in the Temporal Web UI, in headless Chromium: decoded through the codec
server for a browser that carries the token, ciphertext without it or without the codec
endpoint."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

from temporalio.client import Client

from bridge.mq.models import parse_id
from mqgather.config import AggregateSpec, LegSpec
from mqgather.runtime.codec import KeyRing, PayloadCipher, new_key
from mqgather.runtime.codec_server import CodecServer
from mqgather.runtime.temporal import dev_server_args
from tests.browser import browser
from tests.harness import free_ports, pipeline, temporal_binary, until, with_keys

RING = KeyRing("ui1", {"ui1": new_key()})
TOKEN = "ui-token-" + "7" * 24
LEGS = (LegSpec(name="CREDIT", sequence=10), LegSpec(name="STOCK", sequence=20))
#: Field names of the gather's input and result: shown only when the payloads are opened.
DECODED = ("response_queue", "legs_received")


@contextlib.asynccontextmanager
async def _server_with_codec(tmp_path: Path) -> AsyncIterator[tuple[Client, str, CodecServer]]:
    """A dev server whose UI calls a codec server; (client, UI URL, codec server)."""
    port, ui, codec_port = free_ports(3)
    origins = [f"http://localhost:{ui}", f"http://127.0.0.1:{ui}"]
    codec = CodecServer(("127.0.0.1", codec_port), PayloadCipher(RING), [TOKEN], origins)
    codec.start()
    binary = temporal_binary()
    args = [*dev_server_args(str(tmp_path / "t.db"), port, ui), "--ui-codec-endpoint", codec.url]
    server = subprocess.Popen([binary, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:

        async def connected() -> Client | None:
            with contextlib.suppress(RuntimeError):
                return await Client.connect(f"localhost:{port}")
            return None

        client = await until(connected, lambda c: c is not None, 60)
        yield client, f"http://localhost:{ui}", codec
    finally:
        server.terminate()
        server.wait(30)
        codec.shutdown()
        codec.server_close()


async def _sealed_gather(client: Client, tmp_path: Path) -> str:
    """One completed gather whose payloads are sealed; its workflow id."""
    sealed = with_keys(client, RING)
    spec = AggregateSpec(name="uicodec", mode="static", legs=LEGS, timeout_seconds=60)
    correl = parse_id(f"UI-CODEC-{tmp_path.name[-8:]}")
    async with pipeline(sealed, tmp_path, [spec]) as p:
        for leg in ("CREDIT", "STOCK"):
            p.reply(spec, correl, leg, b'{"ok": 1}')
        await p.wait_message("ORDER.RESPONSE")
        await p.result(spec, correl)
    return p.handle(spec, correl).id


def _input_and_result(
    ui: str, workflow_id: str, token: str | None, codec: str | None = None
) -> str:
    """The text of the gather's page from its Input to its Timeline, once settled: decoded
    JSON shown, or the sealed text shown after the codec server (if any) has answered."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with browser() as chrome:
        viewport = {"width": 1600, "height": 2000}
        context = chrome.new_context(extra_http_headers=headers, viewport=viewport)
        page = context.new_page()
        query = quote(f'WorkflowId="{workflow_id}"')
        page.goto(f"{ui}/namespaces/default/workflows?query={query}")
        link = page.locator(f'a[href*="{quote(workflow_id)}"]').first
        link.wait_for(timeout=30_000)
        detail = ui + (link.get_attribute("href") or "")
        if codec is None:
            page.goto(detail)
        else:
            with page.expect_response(lambda r: r.url.startswith(codec), timeout=30_000):
                page.goto(detail)
        page.locator("text=/legs_received|[A-Za-z0-9+\\/]{200}/").first.wait_for(timeout=30_000)
        if token and codec:
            page.get_by_text("legs_received").first.wait_for(timeout=30_000)
        text = page.inner_text("body")
    start = text.find("Input")
    return text[start : text.find("Timeline", start)]


async def test_the_ui_shows_a_sealed_gather_decoded_only_through_the_codec_server(
    temporal_env, tmp_path
):
    (tmp_path / "codec").mkdir()
    async with _server_with_codec(tmp_path / "codec") as (client, ui, codec):
        workflow_id = await _sealed_gather(client, tmp_path / "codec")
        opened = await asyncio.to_thread(_input_and_result, ui, workflow_id, TOKEN, codec.url)
        refused = await asyncio.to_thread(_input_and_result, ui, workflow_id, None, codec.url)
    (tmp_path / "plain").mkdir()
    elsewhere = await _sealed_gather(temporal_env.client, tmp_path / "plain")
    no_endpoint = await asyncio.to_thread(_input_and_result, temporal_env.ui_url, elsewhere, TOKEN)
    for field in DECODED:
        assert field in opened, opened[:2000]
        assert field not in refused, refused[:2000]
        assert field not in no_endpoint, no_endpoint[:2000]
