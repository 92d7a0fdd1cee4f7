"""Headless Chromium for the dashboard tests: Debian's ``/usr/bin/chromium`` driven by
Playwright for Python (the ``browser`` extra). Playwright's own browser download
(``playwright install``) is never used: the machine's network reaches package registries
only, so the executable is the one ``apt-get install chromium`` put there.

- ``chromium``: a launched browser (one per test; a launch takes about a second).
- ``page``: a fresh context at 1280x800 (the size the dashboard is designed for); the test
  fails if the page logged an error or threw (a Content-Security-Policy violation is one).
- ``ARTIFACTS``: screenshots go to ``tests/browser/artifacts/`` (git-ignored).

Without Chromium or Playwright the tests are skipped, or fail under ``CI``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests._unavailable import unavailable

if TYPE_CHECKING:
    from playwright.async_api import Browser, ConsoleMessage, Error, Page

ARTIFACTS = Path(__file__).parent / "artifacts"

#: The flags the machine notes prescribe: without the background-networking ones Chromium
#: keeps trying hosts this closed network refuses.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def chromium_executable() -> str | None:
    """``$SHOAL_CHROMIUM``, else ``/usr/bin/chromium``, else ``chromium`` on PATH."""
    for candidate in (os.environ.get("SHOAL_CHROMIUM"), "/usr/bin/chromium"):
        if candidate and Path(candidate).is_file():
            return candidate
    return shutil.which("chromium")


@pytest.fixture
async def chromium() -> AsyncIterator[Browser]:
    try:
        from playwright.async_api import async_playwright  # noqa: PLC0415 (optional extra)
    except ImportError:
        unavailable("playwright is not installed (pip install -e '.[browser]')")
    executable = chromium_executable()
    if executable is None:
        unavailable("no Chromium at /usr/bin/chromium (apt-get install chromium)")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=executable, args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield browser
        finally:
            await browser.close()


@pytest.fixture
async def page(chromium: Browser) -> AsyncIterator[Page]:
    context = await chromium.new_context(viewport={"width": 1280, "height": 800})
    page = await context.new_page()
    problems: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            problems.append(f"console error: {message.text}")

    def on_page_error(error: Error) -> None:
        problems.append(f"page error: {error}")

    page.on("console", on_console)
    page.on("pageerror", on_page_error)
    try:
        yield page
    finally:
        await context.close()
    assert not problems, "\n".join(problems)


def artifact(name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / name
