"""The Temporal web UI of a dev server with real gathers, in headless Chromium: what an
operator following the operators guide's saved-view recipe (docs/guides/operators.md) sees."""

from __future__ import annotations

import asyncio
import re
import uuid
from urllib.parse import quote

from bridge.mq.models import parse_id
from mqgather.config import AggregateSpec, LegSpec
from mqgather.names import GATHER_STATE
from tests.browser import browser
from tests.harness import pipeline, status, until

LEGS = (LegSpec(name="CREDIT", sequence=10), LegSpec(name="STOCK", sequence=20),
        LegSpec(name="TAX", sequence=30))  # fmt: skip
#: The recipe's columns: the outcome and the missing legs beside the defaults.
RECIPE_COLUMNS = ("GatherState", "LegsMissing")


def _rows_by_id(page, ids: list[str]) -> dict[str, str]:
    rows = page.locator("table tbody tr")
    found = {}
    for i in range(rows.count()):
        text = rows.nth(i).inner_text()
        for gid in ids:
            if gid in text:
                found[gid] = text
    return found


def _frames_text(page, want: int = 3, timeout: float = 30.0) -> str:
    """The text of the page's rendered markdown frames, once ``want`` have content."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        texts = [_frame_text(f) for f in page.frames if f != page.main_frame]
        if sum(1 for t in texts if t) >= want or time.monotonic() > deadline:
            return "\n".join(texts)
        page.wait_for_timeout(100)  # the frames load on their own; nothing to await


def _frame_text(frame) -> str:
    """A frame's text, or "" when the UI replaced the frame while it was being read."""
    from playwright.sync_api import Error as PlaywrightError  # only where a browser runs

    try:
        return frame.inner_text("body", timeout=2_000).strip()
    except PlaywrightError:  # detached by a re-render: the next pass reads its successor
        return ""


def _look(ui: str, aggregate: str, text: str, ids: dict[str, str]) -> dict:
    """Configure the recipe's columns, then read the list, a text search and a detail page."""
    list_url = f"{ui}/namespaces/default/workflows"
    seen: dict = {}
    with browser() as chrome:
        page = chrome.new_page(viewport={"width": 1800, "height": 1000})
        page.goto(list_url)
        page.click("[data-testid=workflows-summary-table-configuration-button]")
        for column in RECIPE_COLUMNS:
            page.get_by_label(f"Add {column} column").click()
        page.keyboard.press("Escape")
        query = quote(f'AggregateName="{aggregate}"')
        page.goto(f"{list_url}?query={query}")
        page.wait_for_selector(f"text={ids['complete']}", timeout=30_000)
        page.wait_for_selector(f"text={ids['timeout']}", timeout=30_000)
        seen["header"] = page.locator("table thead").inner_text()
        seen["rows"] = _rows_by_id(page, list(ids.values()))
        page.goto(f"{list_url}?query={quote(f'CorrelIdText={chr(34)}{text}{chr(34)}')}")
        page.wait_for_selector(f"text={ids['open']}", timeout=30_000)
        seen["found"] = _rows_by_id(page, list(ids.values()))
        link = page.locator(f'a[href*="{quote(ids["open"])}"]').first
        page.goto(ui + link.get_attribute("href"))
        page.get_by_text("User Metadata", exact=True).click()
        # Summary, details and current details are rendered markdown, each in a frame.
        # A locator, not a JavaScript predicate: the UI's CSP forbids evaluating strings.
        page.locator("iframe").nth(2).wait_for(state="attached")
        seen["detail"] = _frames_text(page)
    return seen


async def test_an_operator_finds_gathers_and_tells_outcomes_apart_in_the_ui(temporal_env, tmp_path):
    aggregate = f"ui{uuid.uuid4().hex[:6]}"
    # STOCK is asked again when silent: its requests show in the gather's details.
    stock = LegSpec(name="STOCK", sequence=20, retries=2, retry_after_seconds=1, retry_backoff=10)
    spec = AggregateSpec(name=aggregate, legs=(LEGS[0], stock, LEGS[2]), timeout_seconds=300)
    client = temporal_env.client
    text = f"ORDER-{uuid.uuid4().hex[:8]}"
    async with pipeline(client, tmp_path, [spec]) as p:
        done = await p.scatter(spec)
        for leg in ("CREDIT", "STOCK", "TAX"):
            p.reply(spec, done.correl_id, leg, b"{}")
        late_id = parse_id(f"LATE-{uuid.uuid4().hex[:8]}")
        late, _ = await p.partial(spec, late_id, {"CREDIT": b"{}"}, 0.5)
        waiting = await p.scatter(spec, correl_id=text.encode())
        p.reply(spec, waiting.correl_id, "CREDIT", b"{}")
        handles = {
            "complete": p.handle(spec, done.correl_id),
            "timeout": p.handle(spec, late.correl_id),
            "open": p.handle(spec, waiting.correl_id),
        }
        await p.result(spec, done.correl_id)
        await p.result(spec, late.correl_id)
        await until(lambda: status(handles["open"]), lambda s: s.state == "PARTIAL")
        await until(lambda: status(handles["open"]), lambda s: s.legs[1].attempts >= 2)

        async def indexed() -> bool:
            for key, want in (("complete", "COMPLETE"), ("timeout", "TIMEOUT")):
                got = (await handles[key].describe()).typed_search_attributes.get(GATHER_STATE)
                if got != want:
                    return False
            query = f'CorrelIdText = "{text}"'
            return [w.id async for w in client.list_workflows(query)] == [handles["open"].id]

        await until(indexed, bool, 30)
        ids = {key: h.id for key, h in handles.items()}
        seen = await asyncio.to_thread(_look, temporal_env.ui_url, aggregate, text, ids)
    assert "GatherState" in seen["header"] and "LegsMissing" in seen["header"]
    rows = seen["rows"]
    # All three show COMPLETED/RUNNING as the workflow status; the outcome column tells.
    assert (
        re.search(r"\bCOMPLETE\b", rows[ids["complete"]]) and "TIMEOUT" not in rows[ids["complete"]]
    )
    assert "TIMEOUT" in rows[ids["timeout"]]
    assert "STOCK" in rows[ids["timeout"]] and "TAX" in rows[ids["timeout"]]
    assert list(seen["found"]) == [ids["open"]]
    detail = seen["detail"]
    hex_id = handles["open"].id.split(":")[2]
    # The markdown renderer curls the quotes.
    summary = rf"{aggregate}: CorrelId ['\u2018]{text}['\u2019] hex:{hex_id}"
    assert re.search(summary, detail), detail
    assert "timeout 300 s" in detail  # the static details: how the aggregate is set up
    assert re.search(r"STOCK\s+missing\s+[23] requests", detail), detail
    assert re.search(r"CREDIT\s+received", detail)
