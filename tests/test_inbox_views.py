"""Finding one's way in the inbox, in headless Chromium: a history of decisions with who and
when, filters kept in the address, a URL per approval that opens after signing in, a call's
story one click from its approval, "Connection lost" while the service process is stopped and
recovery when it is back, "Signed out." as information, and the phone's width; axe-core finds
no serious or critical violation in any of these states."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import Browser, Page

from approvals import ApprovalStore
from approvals.gate import approval_gate
from ledger.calls.model import CallContext, CallStatus, ToolCall
from ledger.calls.service import ToolLedger
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings

from .support.browser import (
    MOBILE,
    NO_CHROMIUM,
    assert_accessible,
    chromium,
    launched,
    open_inbox,
    sign_in,
)
from .support.http import token_for, unique
from .support.inbox import Served, serve, served, token_of
from .support.inbox_scenes import REFUND_ARGS, a_refund, a_team, an_email
from .support.ports import free_port
from .support.processes import TEST_KEK
from .support.scratch import scratch_database

pytestmark = pytest.mark.skipif(chromium() is None, reason=NO_CHROMIUM)


@pytest.fixture(scope="module")
async def database_url(server_url: str) -> AsyncIterator[str]:
    async with scratch_database(server_url, prefix="signoff_test") as url:
        yield url


@pytest.fixture(scope="module")
async def db(database_url: str) -> AsyncIterator[Database]:
    database = await Database.connect(database_url)
    yield database
    await database.close()


@pytest.fixture(scope="module")
async def ring(db: Database) -> KeyRing:
    return await KeyRing.open(db, LocalKek(TEST_KEK))


@pytest.fixture(scope="module")
async def inbox(database_url: str, ring: KeyRing) -> AsyncIterator[Served]:
    async with served(database_url) as serving:
        yield serving


@pytest.fixture(scope="module")
async def browser(inbox: Served) -> AsyncIterator[Browser]:
    async with launched() as chromium_browser:
        yield chromium_browser


async def decide(inbox: Served, headers: dict[str, str], approval_id: str, **body: Any) -> None:
    response = await inbox.client.post(
        f"/v1/approvals/{approval_id}/decision",
        json=body,
        headers={**headers, "Idempotency-Key": uuid.uuid4().hex},
    )
    assert response.status_code == 200, response.text


async def row_ids(page: Page) -> list[str | None]:
    return [
        await r.get_attribute("data-approval-id") for r in await page.locator("#history li").all()
    ]


async def test_the_history_lists_decisions_with_who_and_when_under_filters_in_the_address(
    browser: Browser, inbox: Served, db: Database, store: ApprovalStore
) -> None:
    team = await a_team(db)
    headers = await token_for(db, team.member)
    run_id = unique("r")
    refund = await a_refund(store, team, run_id=run_id)
    email = await an_email(store, team, run_id=run_id)
    waiting = await a_refund(store, team, run_id=run_id)
    await decide(inbox, headers, refund.approval_id, decision="reject", reason="duplicate")
    await decide(inbox, headers, email.approval_id, decision="approve")

    watched = await open_inbox(browser, inbox.base_url)
    page = watched.page
    await sign_in(watched, token_of(headers), f"/inbox?status=decided&run={run_id}")
    await page.locator("#history li").nth(1).wait_for()
    assert await row_ids(page) == [email.approval_id, refund.approval_id]  # newest first
    newest = page.locator("#history li").first
    assert await newest.locator(".by").text_content() == team.member
    assert await newest.locator(".at time").get_attribute("datetime") is not None
    assert "approved" in (await newest.locator(".said").text_content() or "")
    assert waiting.approval_id not in await row_ids(page)
    assert await page.locator("#f-status").input_value() == "decided"
    assert await page.locator("#f-run").input_value() == run_id
    await assert_accessible(page)

    # The filters are the address: choosing one changes it, and Back returns.
    await page.locator("#f-tool").fill("refund")
    await page.locator("#f-status").select_option("rejected")
    await page.wait_for_url(f"**/inbox?status=rejected&tool=refund&run={run_id}")
    await page.locator(f'#history li[data-approval-id="{refund.approval_id}"]').wait_for()
    assert await row_ids(page) == [refund.approval_id]
    await page.go_back()
    await page.wait_for_url(f"**/inbox?status=decided&run={run_id}")
    await page.locator("#history li").nth(1).wait_for()
    # A row opens its approval at its own address, where the reason is read (a reveal).
    await page.locator(f'#history li[data-approval-id="{refund.approval_id}"] a.tool').click()
    await page.wait_for_url(f"**/inbox/approvals/{refund.approval_id}")
    opened = page.locator(f'#detail li.decided[data-approval-id="{refund.approval_id}"]')
    await opened.locator(".reason").filter(has_text="duplicate").wait_for()
    assert await opened.locator(".by").text_content() == team.member
    assert watched.problems == []


async def test_an_approval_s_address_opens_it_after_signing_in(
    browser: Browser, inbox: Served, db: Database, store: ApprovalStore
) -> None:
    team = await a_team(db)
    refund = await a_refund(store, team)
    await a_refund(store, team)  # another one, not shown at this address
    watched = await open_inbox(browser, inbox.base_url)
    page = watched.page
    address = f"/inbox/approvals/{refund.approval_id}"
    response = await page.goto(address)
    assert response is not None and response.status == 200
    note = page.locator("#sign-in-note")
    await note.filter(has_text=f"Sign in to open approval {refund.approval_id}").wait_for()
    await page.fill("#token", token_of(await token_for(db, team.member)))
    await page.click("#sign-in-form button[type=submit]")
    card = page.locator(f'#detail li.card[data-approval-id="{refund.approval_id}"]')
    await card.locator('dl.headline dd[data-field="amount"]').wait_for()
    assert page.url.endswith(address)
    assert await page.locator("#detail li.card").count() == 1
    assert await page.locator("#list-panel").is_hidden()
    await assert_accessible(page)
    await card.locator("button.approve").click()
    await page.locator("#confirm-dialog button.yes").click()
    await page.locator(f'#detail li.decided[data-approval-id="{refund.approval_id}"]').wait_for()
    await page.locator("a.back").click()
    await page.wait_for_url("**/inbox")
    await page.locator("#list-panel:not([hidden])").wait_for()
    assert watched.problems == []


async def test_a_reviewer_outside_the_policy_sees_neither_its_history_nor_its_page(
    browser: Browser, inbox: Served, db: Database, store: ApprovalStore
) -> None:
    team, others = await a_team(db), await a_team(db, "other")
    refund = await a_refund(store, team)
    await decide(inbox, await token_for(db, team.member), refund.approval_id, decision="approve")
    watched = await open_inbox(browser, inbox.base_url)
    page = watched.page
    outsider = token_of(await token_for(db, others.member))
    await sign_in(watched, outsider, f"/inbox?status=all&run={refund.run_id}")
    await page.locator("#approvals-note").filter(has_text="Nothing here matches.").wait_for()
    assert await page.locator("#history li").count() == 0
    await page.goto(f"/inbox/approvals/{refund.approval_id}")
    await page.locator("#detail-note").filter(has_text="does not admit you").wait_for()
    assert await page.locator("#detail li").count() == 0
    assert watched.problems == []


@pytest.fixture(scope="module")
async def worker(database_url: str) -> AsyncIterator[ToolLedger]:
    """An agent worker's ledger: a login with only `signoff_app`, no reviewer KEK."""
    async with temporary_login(database_url, "signoff_app") as url:
        settings = Settings(database_url=url, kek=LocalKek(TEST_KEK), reviewer_kek=None)
        db = await Database.connect(url, pool_size=2, settings=settings)
        ring = await KeyRing.open(db, create_missing=False)
        ledger = ToolLedger(db, ring, lease_seconds=1.0, poll_interval=0.05)
        yield ledger
        await ledger.close()
        await db.close()


async def test_a_call_s_story_is_one_click_from_its_approval(
    browser: Browser, inbox: Served, db: Database, store: ApprovalStore, worker: ToolLedger
) -> None:
    team = await a_team(db)
    refund = await a_refund(store, team)
    assert refund.call_id is not None
    headers = await token_for(db, team.member)
    await decide(inbox, headers, refund.approval_id, decision="approve")

    async def refunds(args: dict[str, Any], context: CallContext) -> str:
        return f"refunded {args['amount']}"

    call = ToolCall(refund.run_id, refund.call_id, "refund", dict(REFUND_ARGS), turn_id="t1")
    consumer = ApprovalStore(worker.db, worker.ring)
    try:
        gate = approval_gate(
            consumer, refund.approval_id, f"{call.run_id}/{call.call_id}", call.args
        )
        assert (await worker.execute(call, refunds, gate=gate)).status is CallStatus.SUCCEEDED
    finally:
        await consumer.close()

    watched = await open_inbox(browser, inbox.base_url)
    page = watched.page
    await sign_in(watched, token_of(headers), f"/inbox/approvals/{refund.approval_id}")
    story = page.get_by_role(
        "button", name=f"The story of the call of refund for run {refund.run_id}"
    )
    await story.click()
    told = page.locator("#detail ol.story")
    await told.filter(has_text="call.succeeded").wait_for()
    text = await told.text_content() or ""
    assert "approval.requested" in text and "call.started" in text
    assert await story.get_attribute("aria-expanded") == "true"
    assert watched.problems == []


async def test_connection_lost_shows_while_the_service_is_stopped_and_the_page_recovers(
    browser: Browser, database_url: str, db: Database, store: ApprovalStore
) -> None:
    team = await a_team(db)
    before = await a_refund(store, team)
    port = free_port()
    async with temporary_login(database_url, "signoff_reviewer") as url:
        process = await serve(url, port)
        try:
            watched = await open_inbox(browser, f"http://127.0.0.1:{port}")
            page = watched.page
            await sign_in(watched, token_of(await token_for(db, team.member)))
            await page.locator(f'li.card[data-approval-id="{before.approval_id}"]').wait_for()
            banner = page.locator("#connection")
            assert await banner.is_hidden()

            process.kill()  # the service goes away, its event stream with it
            await process.wait()
            await banner.wait_for()
            assert await banner.text_content() == "Connection lost — retrying…"
            await assert_accessible(page)
            meanwhile = await a_refund(store, team)

            process = await serve(url, port)
            await banner.wait_for(state="hidden")
            # Read again on recovery: what arrived while the service was away is shown.
            await page.locator(f'li.card[data-approval-id="{meanwhile.approval_id}"]').wait_for()
            assert watched.problems == []
        finally:
            if process.returncode is None:
                process.terminate()
            await process.wait()


async def test_signed_out_is_information_and_the_page_fits_a_phone(
    browser: Browser, inbox: Served, db: Database, store: ApprovalStore
) -> None:
    team = await a_team(db)
    refund = await a_refund(store, team)
    watched = await open_inbox(browser, inbox.base_url, MOBILE)
    page = watched.page
    await sign_in(watched, token_of(await token_for(db, team.member)))
    card = page.locator(f'li.card[data-approval-id="{refund.approval_id}"]')
    await card.locator('dl.headline dd[data-field="amount"]').wait_for()
    fits = "() => document.documentElement.scrollWidth <= window.innerWidth"
    assert await page.evaluate(fits)
    assert (await card.bounding_box() or {"width": 999})["width"] <= MOBILE["width"]
    await assert_accessible(page)
    await card.locator("button.reject").click()
    await page.locator("#reject-dialog").wait_for()
    await assert_accessible(page)
    await page.keyboard.press("Escape")
    await card.locator("button.edit").click()
    await card.locator("form.editor").wait_for()
    assert await page.evaluate(fits)
    await assert_accessible(page)

    await page.click("#sign-out")
    note = page.locator("#sign-in-note")
    await note.filter(has_text="Signed out.").wait_for()
    assert await note.get_attribute("class") == "info"
    assert await page.locator("#sign-in-error").text_content() == ""
    assert await note.evaluate("e => getComputedStyle(e).color") != await page.locator(
        "#sign-in-error"
    ).evaluate("e => getComputedStyle(e).color")
    await assert_accessible(page)
    assert watched.problems == []


async def test_a_history_read_further_stays_as_long_when_news_arrives(
    browser: Browser, inbox: Served, db: Database, store: ApprovalStore
) -> None:
    team = await a_team(db)
    run_id = unique("r")
    for _ in range(201):  # the page reads 200 a time: two pages
        asked = await an_email(store, team, run_id=run_id)
        await store.cancel(asked.approval_id, by="ops")
    watched = await open_inbox(browser, inbox.base_url)
    page = watched.page
    await sign_in(
        watched, token_of(await token_for(db, team.member)), f"/inbox?status=decided&run={run_id}"
    )
    rows = page.locator("#history li")
    await rows.nth(199).wait_for()
    await page.locator("#more").click()
    await rows.nth(200).wait_for()
    news = await an_email(store, team, run_id=run_id)
    await store.cancel(news.approval_id, by="ops")
    await page.locator(f'#history li[data-approval-id="{news.approval_id}"]').wait_for()
    # The live refresh read as far as the reviewer had: nothing they scrolled to went away.
    assert await rows.count() == 202
    assert watched.problems == []
