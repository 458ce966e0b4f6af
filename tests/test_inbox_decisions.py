"""Deciding in the inbox as a reviewer does, in headless Chromium: a card carries the decision
(headline large, arguments inline, sensitive ones behind a click, times, who asked, the policy
in plain words, runs told apart), reject asks for a reason, an irreversible tool is confirmed,
an edit goes through the form the tool's schema gives, respond has a named text box; Escape
closes and gives focus back; a decision leaves a row where its card stood and moves focus on;
axe-core finds no serious or critical violation in any of these states."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Browser, Locator, Page, Route

from approvals import (
    ApprovalPolicy,
    ApprovalStatus,
    ApprovalStore,
    DecisionKind,
    ReviewerDirectory,
)
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database

from .support.browser import (
    NO_CHROMIUM,
    assert_accessible,
    chromium,
    launched,
    open_inbox,
    sign_in,
)
from .support.http import token_for, unique
from .support.inbox import Served, served, token_of
from .support.inbox_scenes import REFUND_ARGS, REFUND_CONTEXT, a_refund, a_team, an_email
from .support.processes import TEST_KEK
from .support.scratch import scratch_database
from .support.until import until

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
def journal(db: Database) -> Journal:
    return Journal(db)


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


def card_of(page: Page, approval_id: str) -> Locator:
    return page.locator(f'li.card[data-approval-id="{approval_id}"]')


async def focused_label(page: Page) -> str | None:
    label: str | None = await page.evaluate(
        "() => document.activeElement && document.activeElement.getAttribute('aria-label')"
    )
    return label


async def events_of(journal: Journal, approval_id: str) -> list[str]:
    return [e.type for e in await journal.read_stream(f"approval:{approval_id}")]


async def test_a_card_carries_the_decision_and_cards_of_two_runs_look_different(
    browser: Browser, inbox: Served, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    team = await a_team(db)
    refund = await a_refund(store, team)
    email = await an_email(store, team)
    watched = await open_inbox(browser, inbox.base_url)
    page = watched.page
    await sign_in(watched, token_of(await token_for(db, team.member)))
    card = card_of(page, refund.approval_id)
    amount = card.locator('dl.headline dd[data-field="amount"]')
    await amount.wait_for()  # revealed inline: no click
    assert await amount.text_content() == "120"
    assert await card.locator('dl.headline dd[data-field="currency"]').text_content() == "EUR"
    font = await amount.evaluate("e => parseFloat(getComputedStyle(e).fontSize)")
    order = card.locator('dl.args dd[data-field="order_id"]')
    assert await order.text_content() == "A-1042"
    assert font > await order.evaluate("e => parseFloat(getComputedStyle(e).fontSize)")
    # The sensitive IBAN stays behind one more click, and each kind of viewing is journaled once.
    assert REFUND_ARGS["iban"] not in (await card.text_content() or "")
    reveals = f"reveal:{refund.approval_id}"
    assert [e.actor for e in await journal.read_stream(reveals)] == [team.member]
    await card.locator("button.show-sensitive").click()
    iban = card.locator('dl.args dd[data-field="iban"]')
    await iban.wait_for()
    assert await iban.text_content() == REFUND_ARGS["iban"]
    assert len(await journal.read_stream(reveals)) == 2

    requested = card.locator(".requested time")
    assert await requested.get_attribute("datetime") == refund.requested_at.isoformat()
    assert "(" in (await requested.text_content() or "")  # relative (absolute)
    assert await card.locator(".expires time").get_attribute("datetime") is not None
    assert await card.locator(".requester").text_content() == "support-agent"
    assert await card.locator(".policy").text_content() == f"one of {team.group}"
    assert await card.locator(".irreversible").is_visible()
    # What led to the call, as the agent's adapter captured it.
    assert await card.locator(".context .reason").text_content() == REFUND_CONTEXT.reason
    said = await card.locator(".context .said").text_content()
    assert said == REFUND_CONTEXT.last_user_message
    assert await card.locator("button.approve").get_attribute("aria-label") == (
        f"Approve refund for run {refund.run_id}"
    )
    # Two runs: two headers, each with its id, in colours of their own.
    heads = page.locator("section.run")
    assert await heads.count() == 2
    colours = [
        await h.locator(".run-head").evaluate("e => getComputedStyle(e).borderLeftColor")
        for h in await heads.all()
    ]
    assert colours[0] != colours[1]
    email_card = card_of(page, email.approval_id)
    await email_card.locator('dl.args dd[data-field="to"]').wait_for()
    assert await email_card.locator(".context").is_hidden()  # nothing captured: no block
    assert await email_card.locator("xpath=ancestor::section[1]").get_attribute("data-run-id") == (
        email.run_id
    )
    await assert_accessible(page)

    # A reload reads the arguments again under the same request id: nothing new recorded.
    await page.reload()
    await card.locator('dl.headline dd[data-field="amount"]').wait_for()
    assert len(await journal.read_stream(reveals)) == 2
    assert watched.problems == []


async def test_only_the_cards_that_come_on_screen_are_revealed(
    browser: Browser, inbox: Served, db: Database, store: ApprovalStore
) -> None:
    team = await a_team(db)
    run_id = unique("r")
    made = [await a_refund(store, team, run_id=run_id) for _ in range(12)]
    watched = await open_inbox(browser, inbox.base_url)
    page = watched.page
    reveals: list[str] = []
    page.on("request", lambda r: reveals.append(r.url) if r.url.endswith("/reveal") else None)
    await sign_in(watched, token_of(await token_for(db, team.member)))
    await page.locator("li.card").nth(11).wait_for(state="attached")
    await card_of(page, made[0].approval_id).locator("dl.headline dd").first.wait_for()
    assert 1 <= len(reveals) < len(made)  # the first cards, not the twelve
    last = card_of(page, made[-1].approval_id)
    await last.scroll_into_view_if_needed()
    await last.locator("dl.headline dd").first.wait_for()  # read once it is seen
    shown = page.locator("li.card dl.headline:not([hidden])")

    async def each_answered() -> bool:  # a card next to the last may still be being read
        return await shown.count() == len(reveals)

    await until(each_answered, what="every reveal asked shown")
    assert len(reveals) < len(made)  # one reveal per card seen, none for the cards passed by
    assert watched.problems == []


async def test_reject_asks_for_an_optional_reason_and_escape_gives_focus_back(
    browser: Browser, inbox: Served, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    team = await a_team(db)
    refund = await a_refund(store, team)
    watched = await open_inbox(browser, inbox.base_url)
    page = watched.page
    await sign_in(watched, token_of(await token_for(db, team.member)))
    card = card_of(page, refund.approval_id)
    reject = card.locator("button.reject")
    await reject.click()
    dialog = page.locator("#reject-dialog")
    await dialog.wait_for()
    reason = page.get_by_role("textbox", name="Reason (optional; sealed, and the agent is told)")
    assert await reason.is_visible()
    await assert_accessible(page)
    await page.keyboard.press("Escape")
    await dialog.wait_for(state="hidden")
    assert await focused_label(page) == f"Reject refund for run {refund.run_id}"
    assert await events_of(journal, refund.approval_id) == ["approval.requested"]

    await reject.click()
    await reason.fill("The order was already refunded.")
    await dialog.locator("button.yes").click()
    row = page.locator(f'li.decided[data-approval-id="{refund.approval_id}"]')
    await row.wait_for()
    assert "Rejected" in (await row.text_content() or "")
    assert await row.locator(".reason").text_content() == "The order was already refunded."
    decided = await store.get(refund.approval_id, reveal=True)
    assert decided.status is ApprovalStatus.REJECTED
    assert decided.decision is not None and decided.decision.reason == (
        "The order was already refunded."
    )
    assert watched.problems == []


async def test_an_irreversible_tool_is_confirmed_and_a_decision_keeps_the_page_still(
    browser: Browser, inbox: Served, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    team = await a_team(db)
    run_id = unique("r")
    first = await a_refund(store, team, run_id=run_id)
    second = await a_refund(store, team, run_id=run_id)
    watched = await open_inbox(browser, inbox.base_url)
    page = watched.page
    await sign_in(watched, token_of(await token_for(db, team.member)))
    card = card_of(page, first.approval_id)
    await card.locator('dl.headline dd[data-field="amount"]').wait_for()
    await card.locator("button.approve").click()
    dialog = page.locator("#confirm-dialog")
    await dialog.wait_for()
    assert "120" in (await dialog.locator(".confirm-args").text_content() or "")
    await assert_accessible(page)
    await dialog.locator("button.no").click()
    await dialog.wait_for(state="hidden")
    assert await focused_label(page) == f"Approve refund for run {run_id}"
    assert await events_of(journal, first.approval_id) == ["approval.requested"]

    title_at = await page.locator("#list-title").bounding_box()
    card_at = await card.bounding_box()
    await card.locator("button.approve").click()
    await dialog.locator("button.yes").click()
    row = page.locator(f'li.decided[data-approval-id="{first.approval_id}"]')
    await row.wait_for()
    # The row stands where the card stood; nothing above it moved.
    row_at = await row.bounding_box()
    assert title_at == await page.locator("#list-title").bounding_box()
    assert card_at is not None and row_at is not None and row_at["y"] == card_at["y"]
    # Focus moves on to the next card's first decision.
    await page.wait_for_function(
        "id => document.activeElement && document.activeElement.closest"
        "(`li.card[data-approval-id='${id}']`)",
        arg=second.approval_id,
    )
    assert (await store.get(first.approval_id)).status is ApprovalStatus.APPROVED
    assert (await store.get(second.approval_id)).status is ApprovalStatus.PENDING
    assert watched.problems == []


async def test_an_edit_goes_through_the_form_of_the_tool_s_schema(
    browser: Browser, inbox: Served, db: Database, store: ApprovalStore
) -> None:
    team = await a_team(db)
    refund = await a_refund(store, team)
    watched = await open_inbox(browser, inbox.base_url)
    page = watched.page
    await sign_in(watched, token_of(await token_for(db, team.member)))
    card = card_of(page, refund.approval_id)
    edit = card.locator("button.edit")
    await edit.click()
    amount = card.get_by_role("textbox", name="Amount (required)")
    await amount.wait_for()
    assert await amount.input_value() == "120"
    assert await page.evaluate("() => document.activeElement.dataset.field") == "amount"
    currency = card.get_by_role("combobox", name="Currency (required)")
    assert await currency.locator("option:checked").text_content() == "EUR"
    notify = card.get_by_role("checkbox", name="Notify the customer")
    assert await notify.is_checked()
    assert await card.get_by_role("textbox", name="lines (JSON)").is_visible()  # nested
    await assert_accessible(page)
    await page.keyboard.press("Escape")
    await card.locator("form.editor").wait_for(state="hidden")
    assert await focused_label(page) == f"Edit the arguments of refund for run {refund.run_id}"

    await edit.click()
    await amount.fill("60")
    await currency.select_option(label="USD")
    await notify.uncheck()
    await card.locator("form.editor button.send").click()
    await page.locator(f'li.decided[data-approval-id="{refund.approval_id}"]').wait_for()
    decided = await store.get(refund.approval_id, reveal=True)
    assert decided.decision is not None and decided.decision.kind is DecisionKind.EDIT
    assert decided.decision.args == {
        **REFUND_ARGS,
        "amount": 60,
        "currency": "USD",
        "notify_customer": False,
    }
    assert watched.problems == []


async def test_a_refused_edit_is_shown_in_the_card_and_records_nothing(
    browser: Browser, inbox: Served, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    team = await a_team(db)
    email = await an_email(store, team)  # no schema: the arguments as one JSON box
    watched = await open_inbox(browser, inbox.base_url)
    page = watched.page
    await sign_in(watched, token_of(await token_for(db, team.member)))
    card = card_of(page, email.approval_id)
    await card.locator("button.edit").click()
    box = card.get_by_role("textbox", name="The arguments to run instead (a JSON object)")
    await box.wait_for()
    # Valid JSON the service cannot store (a lone surrogate): its 422, in the card.
    await box.fill('{"to": "\\ud800"}')
    await card.locator("form.editor button.send").click()
    error = card.locator("p.error")
    await error.filter(has_text="Nothing was recorded").wait_for()
    assert (await error.text_content() or "").startswith("Not recorded:")
    assert await events_of(journal, email.approval_id) == ["approval.requested"]
    assert await card.locator("form.editor").is_visible()  # the reviewer can correct it
    assert watched.problems == []


async def test_an_edit_that_breaks_the_tool_s_schema_is_refused_and_records_nothing(
    browser: Browser, inbox: Served, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    team = await a_team(db)
    refund = await a_refund(store, team)
    watched = await open_inbox(browser, inbox.base_url)
    page = watched.page
    await sign_in(watched, token_of(await token_for(db, team.member)))
    card = card_of(page, refund.approval_id)
    await card.locator("button.edit").click()
    amount = card.get_by_role("textbox", name="Amount (required)")
    await amount.fill("lots")
    await card.locator("form.editor button.send").click()
    error = card.locator("p.error")
    await error.filter(has_text="Nothing was recorded").wait_for()
    assert "amount" in (await error.text_content() or "")
    assert await events_of(journal, refund.approval_id) == ["approval.requested"]
    assert (await store.get(refund.approval_id)).status is ApprovalStatus.PENDING
    # Corrected in the same form, it is recorded.
    await amount.fill("100")
    await card.locator("form.editor button.send").click()
    await page.locator(f'li.decided[data-approval-id="{refund.approval_id}"]').wait_for()
    decided = await store.get(refund.approval_id, reveal=True)
    assert decided.decision is not None and decided.decision.args is not None
    assert decided.decision.args["amount"] == 100
    assert watched.problems == []


async def test_respond_has_a_named_text_box_and_records_the_answer(
    browser: Browser, inbox: Served, db: Database, store: ApprovalStore
) -> None:
    team = await a_team(db)
    email = await an_email(store, team)
    watched = await open_inbox(browser, inbox.base_url)
    page = watched.page
    await sign_in(watched, token_of(await token_for(db, team.member)))
    card = card_of(page, email.approval_id)
    respond = card.get_by_role("button", name=f"Respond to send_email for run {email.run_id}")
    await respond.click()
    answer = card.get_by_role("textbox", name="Your answer to the agent (the tool does not run)")
    await answer.wait_for()
    await card.locator("form.editor button.send").click()
    await card.locator("p.error").filter(has_text="Write a message first").wait_for()
    await answer.fill("Send it tomorrow morning instead.")
    await card.locator("form.editor button.send").click()
    await page.locator(f'li.decided[data-approval-id="{email.approval_id}"]').wait_for()
    decided = await store.get(email.approval_id, reveal=True)
    assert decided.status is ApprovalStatus.RESPONDED
    assert decided.decision is not None
    assert decided.decision.message == "Send it tomorrow morning instead."
    assert watched.problems == []


async def test_a_decision_whose_answer_was_lost_is_sent_again_under_its_request_id(
    browser: Browser, inbox: Served, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    team = await a_team(db)
    await ReviewerDirectory(db).add(unique("bo"), [team.group], by="admin")
    email = await store.request(
        run_id=unique("r"),
        tool="send_email",
        args={"to": "customer@example.com"},
        call_id=unique("call"),
        requested_by="mail-agent",
        policy=ApprovalPolicy(approvers=team.approvers, quorum=2),
    )
    watched = await open_inbox(browser, inbox.base_url)
    page = watched.page
    lost: list[str] = []

    async def answer_lost_once(route: Route) -> None:
        if lost:
            await route.continue_()
            return
        await route.fetch()  # the service records it; its answer never reaches the page
        lost.append(route.request.headers.get("idempotency-key", ""))
        await route.abort("connectionreset")

    await page.route("**/decision", answer_lost_once)
    await sign_in(watched, token_of(await token_for(db, team.member)))
    card = card_of(page, email.approval_id)
    approve = card.get_by_role("button", name=f"Approve send_email for run {email.run_id}")
    await approve.click()
    await until(lambda: bool(lost), what="the first decision reached the service")
    error = card.locator("p.error")
    await error.filter(has_text="cannot be reached").wait_for()
    # Recorded for all the page knows: it does not say otherwise.
    assert "Not recorded" not in (await error.text_content() or "")
    await page.locator("#connection").wait_for(state="hidden")
    await approve.click()  # the reviewer tries again: the same request, answered as recorded
    await page.locator(f'li.decided[data-approval-id="{email.approval_id}"]').wait_for()
    decided = [e for e in await events_of(journal, email.approval_id) if e == "approval.decided"]
    assert decided == ["approval.decided"]
    assert watched.problems == []


async def test_a_dialog_left_open_on_an_approval_closed_meanwhile_records_nothing(
    browser: Browser, inbox: Served, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    team = await a_team(db)
    refund = await a_refund(store, team)
    watched = await open_inbox(browser, inbox.base_url)
    page = watched.page
    await sign_in(watched, token_of(await token_for(db, team.member)))
    card = card_of(page, refund.approval_id)
    await card.locator('dl.headline dd[data-field="amount"]').wait_for()
    await card.locator("button.approve").click()
    dialog = page.locator("#confirm-dialog")
    await dialog.wait_for()
    await store.cancel(refund.approval_id, by="ops", reason="asked twice")
    await card.wait_for(state="detached")  # the live stream took the card away
    await dialog.locator("button.yes").click()
    await page.locator("#status").filter(has_text="meanwhile").wait_for()
    assert await events_of(journal, refund.approval_id) == [
        "approval.requested",
        "approval.cancelled",
    ]
    assert watched.problems == []


async def test_an_edit_keeps_an_argument_named_like_a_javascript_prototype(
    browser: Browser, inbox: Served, db: Database, store: ApprovalStore
) -> None:
    team = await a_team(db)
    args = {"amount": 120, "__proto__": {"amount": 1}, "constructor": "x"}
    asked = await store.request(
        run_id=unique("r"),
        tool="transfer",
        args=args,
        call_id=unique("call"),
        requested_by="agent",
        policy=ApprovalPolicy(approvers=team.approvers),
    )
    watched = await open_inbox(browser, inbox.base_url)
    page = watched.page
    await sign_in(watched, token_of(await token_for(db, team.member)))
    card = card_of(page, asked.approval_id)
    await card.locator("button.edit").click()
    box = card.get_by_role("textbox", name="The arguments to run instead (a JSON object)")
    await box.wait_for()
    text = await box.input_value()
    await box.fill(text.replace('"amount": 120', '"amount": 60'))
    await card.locator("form.editor button.send").click()
    await page.locator(f'li.decided[data-approval-id="{asked.approval_id}"]').wait_for()
    decided = await store.get(asked.approval_id, reveal=True)
    # What the reviewer saw in the box is what runs: no argument silently dropped.
    assert decided.decision is not None and decided.decision.args == {**args, "amount": 60}
    assert watched.problems == []
