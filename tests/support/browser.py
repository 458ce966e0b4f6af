"""The inbox in the system's Chromium, driven by Playwright: a page whose CSP violations and
errors are kept, signing in as a reviewer does, and the axe-core check of what a page shows."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from axe_playwright_python.async_playwright import Axe
from playwright.async_api import Browser, ConsoleMessage, Page, async_playwright

GUARD = 60_000  # ms a step may wait before it fails instead of hanging; nothing here is timed
DESKTOP = {"width": 1280, "height": 900}
MOBILE = {"width": 390, "height": 844}
SEVERE = ("serious", "critical")


def chromium() -> str | None:
    found = ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser"))
    for candidate in found:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


NO_CHROMIUM = "no Chromium binary (apt-get install -y chromium gives /usr/bin/chromium)"


@asynccontextmanager
async def launched() -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        browser = await p.chromium.launch(
            executable_path=chromium(), headless=True, args=["--no-sandbox"]
        )
        try:
            yield browser
        finally:
            await browser.close()


class Watched:
    """A page whose CSP violations and page errors are kept, to be asserted empty."""

    def __init__(self, page: Page) -> None:
        self.page, self.problems = page, list[str]()
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error" and "Content Security Policy" in message.text:
            self.problems.append(message.text)


async def open_inbox(
    browser: Browser, base_url: str, viewport: dict[str, int] | None = None
) -> Watched:
    context = await browser.new_context(base_url=base_url, viewport=viewport or DESKTOP)  # type: ignore[arg-type]
    context.set_default_timeout(GUARD)
    return Watched(await context.new_page())


async def sign_in(watched: Watched, token: str, path: str = "/inbox") -> None:
    page = watched.page
    await page.goto(path)
    await page.fill("#token", token)
    await page.click("#sign-in-form button[type=submit]")
    await page.wait_for_selector("#inbox:not([hidden])")


async def violations(page: Page) -> dict[str, list[str]]:
    """axe-core's violations on what `page` shows, by impact: {impact: ["rule: selectors"]}."""
    results = await Axe().run(page)
    found: dict[str, list[str]] = {}
    for violation in results.response["violations"]:
        targets = ", ".join(str(n["target"]) for n in violation["nodes"])
        found.setdefault(violation["impact"], []).append(f"{violation['id']}: {targets}")
    return found


async def assert_accessible(page: Page) -> None:
    """No serious or critical axe-core violation on what `page` shows."""
    found = await violations(page)
    severe = {impact: found[impact] for impact in SEVERE if impact in found}
    assert severe == {}, severe
