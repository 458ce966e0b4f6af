"""The inbox's screenshots in the docs (`docs/pages/images/inbox/*.png`), made again in the
system's Chromium against a scratch database and a `signoff serve` process of their own:

    cd <repository> && SIGNOFF_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        PYTHONPATH=. python docs/inbox_screenshots.py [output folder]

It uses the test suite's helpers (`tests/support`): the same scenes the browser tests decide.
It prints the axe-core violations of each state, by impact.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from playwright.async_api import Page

from approvals import ApprovalStore
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database, resolve_url
from ledger.store.logins import temporary_login
from tests.support.browser import DESKTOP, MOBILE, launched, open_inbox, sign_in, violations
from tests.support.http import token_for
from tests.support.inbox import serve, token_of
from tests.support.inbox_scenes import a_refund, a_team, an_email
from tests.support.ports import free_port
from tests.support.processes import TEST_KEK, TEST_REVIEWER_KEK
from tests.support.scratch import migrated_template, scratch_database

FOLDER = Path(__file__).resolve().parent / "pages" / "images" / "inbox"


async def shoot(page: Page, folder: Path, name: str) -> None:
    await page.wait_for_timeout(300)  # let the focus ring and fonts settle for the picture
    await page.screenshot(path=str(folder / f"{name}.png"))
    found = await violations(page)
    counts = {impact: len(rules) for impact, rules in sorted(found.items())}
    print(f"{name}.png: axe-core violations by impact {counts or 'none'}")


async def main(folder: Path) -> None:
    server = resolve_url()
    async with (
        migrated_template(server),
        scratch_database(server, prefix="signoff_shots") as url,
        temporary_login(url, "signoff_reviewer") as reviewer_url,
    ):
        db = await Database.connect(url)
        ring = await KeyRing.open(db, LocalKek(TEST_KEK), reviewer_kek=LocalKek(TEST_REVIEWER_KEK))
        store = ApprovalStore(db, ring)
        team = await a_team(db, "support-leads")
        refund = await a_refund(store, team, run_id="r-4711")
        await an_email(store, team, run_id="r-4712")
        earlier = [await a_refund(store, team, run_id="r-4690") for _ in range(2)]
        headers = await token_for(db, team.member)
        port = free_port()
        process = await serve(reviewer_url, port)
        try:
            base = f"http://127.0.0.1:{port}"
            async with launched() as browser:
                watched = await open_inbox(browser, base, DESKTOP)
                page = watched.page
                await sign_in(watched, token_of(headers))
                for approval in earlier:  # a history to show
                    card = page.locator(f'li.card[data-approval-id="{approval.approval_id}"]')
                    await card.locator("button.reject").click()
                    await page.fill("#reject-reason", "Refunded by hand already.")
                    await page.click("#reject-dialog button.yes")
                    await page.locator(
                        f'li.decided[data-approval-id="{approval.approval_id}"]'
                    ).wait_for()
                await page.goto("/inbox")
                card = page.locator(f'li.card[data-approval-id="{refund.approval_id}"]')
                await card.locator('dl.headline dd[data-field="amount"]').wait_for()
                await shoot(page, folder, "pending")
                await card.locator("button.edit").click()
                await card.locator("form.editor").wait_for()
                await card.locator("form.editor").scroll_into_view_if_needed()
                await shoot(page, folder, "edit-form")
                await card.get_by_role("textbox", name="Amount (required)").fill("lots")
                await card.locator("form.editor button.send").click()
                await card.locator("p.error").filter(has_text="Nothing was recorded").wait_for()
                await card.locator("p.error").scroll_into_view_if_needed()
                await shoot(page, folder, "edit-refused")
                await page.keyboard.press("Escape")
                await card.locator("button.approve").click()
                await shoot(page, folder, "confirm-dialog")
                await page.keyboard.press("Escape")
                await card.locator("button.reject").click()
                await page.fill("#reject-reason", "The customer asked for store credit instead.")
                await shoot(page, folder, "reject-dialog")
                await page.keyboard.press("Escape")
                await page.goto("/inbox?status=decided")
                await page.locator("#history li").first.wait_for()
                await shoot(page, folder, "history")

                phone = await open_inbox(browser, base, MOBILE)
                await sign_in(phone, token_of(headers))
                await phone.page.locator("dl.headline dd").first.wait_for()
                await shoot(phone.page, folder, "mobile")

                await page.goto("/inbox")
                await card.locator('dl.headline dd[data-field="amount"]').wait_for()
                process.kill()
                await process.wait()
                await page.locator("#connection").wait_for()
                await shoot(page, folder, "connection-lost")
        finally:
            if process.returncode is None:
                process.kill()
            await process.wait()
            await store.close()
            await db.close()
    print(f"written to {folder}")


if __name__ == "__main__":
    into = Path(sys.argv[1]) if len(sys.argv) > 1 else FOLDER
    into.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(into))
