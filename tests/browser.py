"""Headless Chromium for the UI tests: the distribution's browser, driven by Playwright.

``make test`` (through ``make browser``) installs Chromium from the distribution's
packages where it can; where it cannot, the browser tests skip and say why.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

#: Where the distributions put Chromium; MQGATHER_CHROMIUM overrides.
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]


def chromium_path() -> str | None:
    """The Chromium executable, or None."""
    explicit = os.environ.get("MQGATHER_CHROMIUM")
    if explicit:
        return explicit
    return next((p for p in map(shutil.which, CANDIDATES) if p), None)


@dataclass
class PageLog:
    """What a page reported: console errors, uncaught exceptions and failed requests."""

    errors: list[str] = field(default_factory=list)

    def watch(self, page: Any) -> None:
        page.on("console", lambda m: m.type == "error" and self.errors.append(f"console: {m.text}"))
        page.on("pageerror", lambda e: self.errors.append(f"exception: {e}"))
        page.on(
            "requestfailed",
            lambda r: self.errors.append(f"request failed: {r.url[:120]} {r.failure}"),
        )


@contextmanager
def browser() -> Iterator[Any]:
    """A headless Chromium; skips the test, naming the reason, when there is none."""
    path = chromium_path()
    if path is None:
        pytest.skip("no Chromium: `make browser` installs it from the distribution's packages")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed: pip install -e '.[dev]'")
    with sync_playwright() as p:
        chrome = p.chromium.launch(executable_path=path, args=FLAGS, headless=True)
        try:
            yield chrome
        finally:
            chrome.close()
