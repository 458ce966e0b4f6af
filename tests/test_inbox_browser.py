"""The web inbox end to end in headless Chromium (the system's, driven by Playwright): a
reviewer signs in with a token, sees the pending refund and its arguments, approves it, and an
agent waiting in another OS process runs the tool once; a reviewer outside the policy sees
nothing to decide; an invalid edit is refused in the page; the page runs under its CSP with no
inline script or style; a cookie-authenticated POST without the CSRF header is 403.

The screenshot of the inbox with the pending refund is written to `SIGNOFF_SCREENSHOT_DIR`
when set, else to the test's temporary folder."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Route

from approvals import (
    ApprovalPolicy,
    ApprovalStatus,
    ApprovalStore,
    DecisionKind,
    ReviewerDirectory,
)
from ledger.calls.model import CallContext, CallStatus, ToolCall
from ledger.calls.service import ToolLedger
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek, Purpose
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings

from .support.browser import NO_CHROMIUM, Watched, chromium, launched, sign_in
from .support.browser import open_inbox as open_page
from .support.http import token_for, unique
from .support.inbox import Served, served, token_of
from .support.processes import TEST_KEK, TEST_REVIEWER_KEK, kek_env, start_program
from .support.scratch import scratch_database
from .support.until import until

pytestmark = pytest.mark.skipif(chromium() is None, reason=NO_CHROMIUM)


# A database of this module's own: "nothing to decide" is about the reviewer, and the session's
# database holds other tests' approvals that anyone may decide.
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


async def open_inbox(browser: Browser, inbox: Served) -> Watched:
    return await open_page(browser, inbox.base_url)


async def a_refund(db: Database, store: ApprovalStore) -> tuple[str, str, str]:
    """A pending refund for a group of its own: (approval id, run id, a member)."""
    group, member = unique("leads"), unique("ann")
    await ReviewerDirectory(db).add(member, [group], by="admin")
    run_id = unique("inbox")
    approval = await store.request(
        run_id=run_id,
        tool="refund",
        args={"amount": 120},
        call_id="c1",
        requested_by="support-agent",
        policy=ApprovalPolicy(
            approvers=frozenset({f"group:{group}"}), description="Refund 120 to the customer?"
        ),
    )
    return approval.approval_id, run_id, member


def screenshot_path(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("SIGNOFF_SCREENSHOT_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / "inbox-pending-refund.png"


async def test_a_reviewer_approves_in_the_browser_and_a_waiting_agent_runs_the_tool_once(
    browser: Browser,
    inbox: Served,
    db: Database,
    store: ApprovalStore,
    database_url: str,
    tmp_path: Path,
) -> None:
    approval_id, run_id, member = await a_refund(db, store)
    worker_env = {**kek_env(), "SIGNOFF_REVIEWER_KEK": ""}  # an agent worker holds none
    async with temporary_login(database_url, "signoff_app") as worker_url:
        process = await start_program(
            "tests.support.http_workers",
            worker_url,
            approval_id,
            run_id,
            "c1",
            "120",
            env=worker_env,
        )
        assert process.stdout is not None
        try:
            ready = await asyncio.wait_for(process.stdout.readline(), 60)
            assert ready.decode().strip() == "ready"

            watched = await open_inbox(browser, inbox)
            page = watched.page
            await sign_in(watched, token_of(await token_for(db, member)))
            card = page.locator(f'li.card[data-approval-id="{approval_id}"]')
            await card.wait_for()
            assert await card.locator(".tool").text_content() == "refund"
            assert await card.locator(".description").text_content() == (
                "Refund 120 to the customer?"
            )
            policy = await card.locator(".policy").text_content() or ""
            assert policy.startswith("one of leads-"), policy  # in plain words
            # A policy naming a group is four-eyes, and the card says so.
            tier = await card.locator(".tier").text_content() or ""
            assert tier.startswith("four-eyes"), tier
            assert "expires in" in (await card.locator(".expiry").text_content() or "")
            # A reviewer the policy admits reads the arguments inline, no click needed.
            amount = card.locator('dl.args dd[data-field="amount"]')
            await amount.wait_for()
            assert await amount.text_content() == "120"

            shot = screenshot_path(tmp_path)
            await page.screenshot(path=str(shot), full_page=True)
            assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

            await card.locator("button.approve").click()
            await card.wait_for(state="detached")  # no longer pending: a row in its place
            row = page.locator(f'li.decided[data-approval-id="{approval_id}"]')
            assert "Approved" in (await row.text_content() or "")
            status = await page.locator("#status").text_content() or ""
            assert "approved refund for run " + run_id in status, status
            stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert process.returncode == 0, stderr.decode()[-2000:]
    result = json.loads(stdout.decode().strip().splitlines()[-1])
    assert result["approval"] == "approved" and result["status"] == "succeeded"
    assert result["runs"] == 1 and result["result"] == {"refunded": 120}
    approval = await store.get(approval_id)
    assert approval.consumed and approval.decided_by == (member,)
    assert watched.problems == []


async def test_a_reviewer_outside_the_policy_signs_in_by_link_and_sees_nothing_to_decide(
    browser: Browser, inbox: Served, db: Database, store: ApprovalStore
) -> None:
    approval_id, _, _ = await a_refund(db, store)
    outsider = unique("bob")
    await ReviewerDirectory(db).add(outsider, [unique("other")], by="admin")
    watched = await open_inbox(browser, inbox)
    page = watched.page
    await page.goto("/inbox#token=" + token_of(await token_for(db, outsider)))
    await page.wait_for_selector("#inbox:not([hidden])")
    assert "#" not in page.url  # the sign-in link's token left the address bar at once
    note = page.locator("#approvals-note")
    await note.filter(has_text="Nothing waits for your decision.").wait_for()
    assert await page.locator(f'li.card[data-approval-id="{approval_id}"]').count() == 0
    assert await page.locator("#approvals li.card").count() == 0
    assert await page.locator("#who-name").text_content() == outsider

    await page.reload()  # the cookie signs the page in again; the CSRF token comes anew
    await page.wait_for_selector("#inbox:not([hidden])")
    cookies = await page.context.cookies()
    assert [(c["name"], c["httpOnly"], c["sameSite"]) for c in cookies] == [
        ("signoff_session", True, "Strict")
    ]
    await page.click("#sign-out")
    await page.wait_for_selector("#sign-in:not([hidden])")
    assert await page.context.cookies() == []
    await page.reload()
    await page.wait_for_selector("#sign-in:not([hidden])")
    assert watched.problems == []


async def test_an_edit_with_invalid_json_is_refused_in_the_page_and_records_nothing(
    browser: Browser, inbox: Served, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    approval_id, _, member = await a_refund(db, store)
    watched = await open_inbox(browser, inbox)
    page = watched.page
    decisions: list[str] = []
    page.on("request", lambda r: decisions.append(r.url) if "/decision" in r.url else None)
    await sign_in(watched, token_of(await token_for(db, member)))
    card = page.locator(f'li.card[data-approval-id="{approval_id}"]')
    await card.locator("button.edit").click()
    editor = card.locator("form.editor textarea")
    await editor.wait_for()
    assert json.loads(await editor.input_value()) == {"amount": 120}  # the revealed arguments
    for text, said in (('{"amount": 12', "Not valid JSON"), ("[1, 2]", "a JSON object")):
        await editor.fill(text)
        await card.locator("form.editor button.send").click()
        await card.locator("p.error").filter(has_text=said).wait_for()
    assert decisions == []
    assert (await store.get(approval_id)).status is ApprovalStatus.PENDING
    events = await journal.read_stream(f"approval:{approval_id}")
    assert [e.type for e in events] == ["approval.requested"]
    assert watched.problems == []


async def test_the_page_has_no_inline_script_and_cookie_posts_need_the_csrf_header(
    browser: Browser, inbox: Served, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    approval_id, _, member = await a_refund(db, store)
    watched = await open_inbox(browser, inbox)
    page = watched.page
    response = await page.goto("/inbox")
    assert response is not None
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "style-src 'self'" in csp and "unsafe" not in csp
    assert response.headers["x-content-type-options"] == "nosniff"
    served_html = await response.text()
    counts = await page.evaluate(
        """(html) => {
            const doc = new DOMParser().parseFromString(html, "text/html");
            return {
                inline: doc.querySelectorAll("script:not([src])").length,
                scripts: doc.querySelectorAll("script[src]").length,
                styled: doc.querySelectorAll("[style]").length,
                styles: doc.querySelectorAll("style").length,
            };
        }""",
        served_html,
    )
    assert counts == {"inline": 0, "scripts": 1, "styled": 0, "styles": 0}

    await sign_in(watched, token_of(await token_for(db, member)))
    status = await page.evaluate(
        """async (id) => (await fetch("/v1/approvals/" + id + "/decision", {
            method: "POST",
            headers: {"Content-Type": "application/json", "Idempotency-Key": crypto.randomUUID()},
            body: JSON.stringify({decision: "approve"}),
        })).status""",
        approval_id,
    )
    assert status == 403
    assert (await store.get(approval_id)).status is ApprovalStatus.PENDING
    assert [e.type for e in await journal.read_stream(f"approval:{approval_id}")] == [
        "approval.requested"
    ]
    assert watched.problems == []


async def test_a_new_request_appears_live_with_its_invisible_characters_shown(
    browser: Browser, inbox: Served, db: Database, store: ApprovalStore
) -> None:
    group, member = unique("leads"), unique("ann")
    await ReviewerDirectory(db).add(member, [group], by="admin")
    watched = await open_inbox(browser, inbox)
    page = watched.page
    await sign_in(watched, token_of(await token_for(db, member)))
    await page.locator("#approvals-note").filter(has_text="Nothing waits").wait_for()

    # Arrives through the event stream the page reads with fetch (the cookie authenticates it).
    hidden = "pay\u200bee \u202egnp.exe"
    approval = await store.request(
        run_id=unique("inbox"),
        tool="refund",
        args={"to": hidden, "amount": 5},
        call_id="c1",
        requested_by="support-agent",
        policy=ApprovalPolicy(approvers=frozenset({f"group:{group}"})),
    )
    card = page.locator(f'li.card[data-approval-id="{approval.approval_id}"]')
    await card.wait_for()
    args = card.locator('dl.args dd[data-field="to"]')
    await args.wait_for()
    marks = await args.locator("span.invisible").all_text_contents()
    assert marks == ["\\u200b", "\\u202e"]
    shown = await args.text_content() or ""
    assert "\u200b" not in shown and "\u202e" not in shown
    assert shown == "pay\\u200bee \\u202egnp.exe"

    # The editor writes them as JSON escapes: the same value, and nothing hidden in the text.
    await card.locator("button.edit").click()
    editor = card.locator("form.editor textarea")
    await editor.wait_for()
    text = await editor.input_value()
    assert (
        "\u200b" not in text
        and "\\u200b" in text
        and json.loads(text) == {"to": hidden, "amount": 5}
    )
    await editor.fill(text.replace('"amount": 5', '"amount": 4'))
    await card.locator("form.editor button.send").click()
    await card.wait_for(state="detached")
    decided = await store.get(approval.approval_id, reveal=True)
    assert decided.decision is not None and decided.decision.kind is DecisionKind.EDIT
    assert decided.decision.args == {"to": hidden, "amount": 4}
    assert watched.problems == []


async def test_an_auditor_reads_and_reveals_the_pending_approvals_and_decides_none(
    browser: Browser, inbox: Served, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    approval_id, _, _ = await a_refund(db, store)
    auditor = unique("aud")
    watched = await open_inbox(browser, inbox)
    page = watched.page
    await sign_in(watched, token_of(await token_for(db, auditor, "auditor")))
    card = page.locator(f'li.card[data-approval-id="{approval_id}"]')
    await card.wait_for()
    assert await card.locator(".actions button:visible").count() == 0  # no decision
    assert await card.locator("dl.args").is_hidden()  # an auditor's reading is a choice
    await card.locator("button.reveal").click()
    await card.locator('dl.args dd[data-field="amount"]').wait_for()
    assert [e.actor for e in await journal.read_stream(f"reveal:{approval_id}")] == [auditor]
    assert await page.locator("#story-section").is_visible()
    assert "(auditor)" in (await page.locator("#who-name").text_content() or "")
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


async def test_a_reviewer_resolves_an_outcome_unknown_call_and_an_auditor_reads_its_story(
    browser: Browser, inbox: Served, db: Database, worker: ToolLedger
) -> None:
    async def hangs_up(args: dict[str, Any], context: CallContext) -> str:
        raise ConnectionError("the payment provider hung up mid-request")

    call = ToolCall(unique("run/inbox"), "refund/1", "refund", {"amount": 7}, turn_id="t1")
    assert (await worker.execute(call, hangs_up)).status is CallStatus.OUTCOME_UNKNOWN
    member = unique("ann")
    watched = await open_inbox(browser, inbox)
    page = watched.page
    await sign_in(watched, token_of(await token_for(db, member)))
    card = page.locator("#unknown li.card").filter(has_text=call.run_id)
    await card.wait_for()
    assert await card.locator(".tool").text_content() == "refund"
    await card.locator("button.failed").click()
    await card.wait_for(state="detached")
    resolved = await worker.get(call.run_id, call.call_id)
    assert resolved.status is CallStatus.FAILED and resolved.resolved_by == member

    audit = await open_inbox(browser, inbox)
    await sign_in(audit, token_of(await token_for(db, unique("aud"), "auditor")))
    await audit.page.fill("#story-run", call.run_id)
    await audit.page.fill("#story-call", call.call_id)
    await audit.page.click("#story-form button[type=submit]")
    story = audit.page.locator("#story")
    await story.filter(has_text="call.resolved").wait_for()
    told = json.loads(await story.text_content() or "")
    assert [e["type"] for e in told["events"]] == [
        "call.started",
        "call.outcome_unknown",
        "call.resolved",
    ]
    assert watched.problems == [] and audit.problems == []


async def test_signing_out_after_the_signing_key_rotated_ends_the_session(
    browser: Browser, inbox: Served, db: Database
) -> None:
    # The page's CSRF token is stale once the decision-signing key rotates: signing out must
    # fetch a new one, or say it did not sign out; never leave the cookie behind a "Signed out".
    watched = await open_inbox(browser, inbox)
    page = watched.page
    await sign_in(watched, token_of(await token_for(db, unique("ann"))))
    owner = await KeyRing.open(
        db, LocalKek(TEST_KEK), reviewer_kek=LocalKek(TEST_REVIEWER_KEK), create_missing=False
    )
    await owner.rotate(Purpose.DECISION_SIGNING)
    csrf = inbox.service.authentication.csrf
    assert csrf is not None
    await csrf.ring.refresh()  # as the service does every SIGNOFF_KEY_REFRESH_SECONDS
    await page.click("#sign-out")
    await page.locator("#sign-in-note").filter(has_text="Signed out.").wait_for()
    assert await page.context.cookies() == []
    await page.reload()
    await page.wait_for_selector("#sign-in:not([hidden])")
    assert await page.locator("#inbox").is_hidden()
    assert watched.problems == []


async def test_a_request_answered_after_signing_out_leaves_the_page_signed_out(
    browser: Browser, inbox: Served, db: Database
) -> None:
    # Requests the page had in flight meet the ended session (401) once signing out is done:
    # that is no session that ended under the reviewer, and must not replace "Signed out.".
    watched = await open_inbox(browser, inbox)
    page = watched.page
    held: list[Route] = []
    await page.route("**/v1/approvals?*", lambda route: held.append(route))  # its first read
    await sign_in(watched, token_of(await token_for(db, unique("ann"))))
    await until(lambda: bool(held), what="the inbox's first read")
    await page.click("#sign-out")
    await page.locator("#sign-in-note").filter(has_text="Signed out.").wait_for()
    async with page.expect_response("**/v1/approvals?*") as late:
        await held[0].continue_()
    assert (await late.value).status == 401
    await page.evaluate("() => new Promise(done => setTimeout(done, 200))")  # page reads it
    assert await page.locator("#sign-in-note").text_content() == "Signed out."
    assert await page.locator("#sign-in-error").text_content() == ""
    assert watched.problems == []


async def test_a_sign_in_link_does_not_replace_the_session_of_a_signed_in_browser(
    browser: Browser, inbox: Served, db: Database
) -> None:
    # Anyone can send a link with a token of theirs: opening it must not silently sign a
    # browser that is signed in as its reviewer in as someone else (login CSRF).
    reviewer, other = unique("ann"), unique("mallory")
    watched = await open_inbox(browser, inbox)
    page = watched.page
    token = token_of(await token_for(db, reviewer))
    await sign_in(watched, token)
    link = "/inbox#token=" + token_of(await token_for(db, other))
    opened = Watched(await page.context.new_page())  # a link opened in a new tab
    # ... and one pasted into the tab on the inbox (only the fragment changes: no new load).
    for tab in (opened, watched):
        await tab.page.goto(link)
        await tab.page.locator("#status").filter(has_text="signed in already").wait_for()
        assert "#" not in tab.page.url
        assert await tab.page.locator("#who-name").text_content() == reviewer
        assert [c["value"] for c in await page.context.cookies()] == [token]
        assert tab.problems == []
