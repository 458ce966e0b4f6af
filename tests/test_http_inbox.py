"""The web inbox over plain HTTP (no browser): its page and files under a strict CSP, signing
in with a token into a cookie, CSRF on cookie-authenticated unsafe requests, signing out, and
`POST /v1/approvals/{id}/reveal` (the arguments in clear, recorded)."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from adapters.http.csrf import CsrfKey
from adapters.http.inbox import CONTENT_SECURITY_POLICY, MODULES
from adapters.http.limits import FailureLimit
from approvals import ApprovalStatus, ApprovalStore, ReviewerDirectory
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek, Purpose
from ledger.store import Database

from .support.http import ask, every_pending, token_for, unique
from .support.inbox import Served, served, sign_in, token_of
from .support.processes import TEST_KEK, TEST_REVIEWER_KEK

STRICT = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


@pytest.fixture(scope="module")
async def inbox(database_url: str, ring: KeyRing) -> AsyncIterator[Served]:
    async with served(database_url) as serving:
        yield serving


def assert_secured(headers: httpx.Headers) -> None:
    assert headers.get("content-security-policy") == STRICT
    assert headers.get("x-content-type-options") == "nosniff"
    assert headers.get("referrer-policy") == "no-referrer"


async def test_the_page_and_its_files_are_served_under_a_strict_csp(inbox: Served) -> None:
    assert CONTENT_SECURITY_POLICY == STRICT
    page = await inbox.client.get("/inbox")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert_secured(page.headers)
    html = page.text
    scripts = re.findall(r"<script\b[^>]*>", html, flags=re.IGNORECASE)
    assert scripts and all(re.search(r"\bsrc=", s) for s in scripts), scripts
    assert not re.search(r"<style\b", html, flags=re.IGNORECASE)
    assert not re.search(r"\sstyle\s*=", html, flags=re.IGNORECASE)
    assert not re.search(r"\son[a-z]+\s*=", html, flags=re.IGNORECASE)  # no inline handlers
    assert not re.search(r"(src|href)\s*=\s*\"(https?:)?//", html)  # nothing from elsewhere
    for name, kind in (("inbox.js", "text/javascript"), ("inbox.css", "text/css")):
        asset = await inbox.client.get(f"/inbox/static/{name}")
        assert asset.status_code == 200 and asset.headers["content-type"].startswith(kind)
        assert_secured(asset.headers)
    for module in MODULES:  # the entry script and every module it imports
        asset = await inbox.client.get(f"/inbox/static/{module}")
        assert asset.status_code == 200 and asset.headers["content-type"].startswith(
            "text/javascript"
        )
        assert_secured(asset.headers)
        assert "innerHTML" not in asset.text and "eval(" not in asset.text, module
        imported = re.findall(r'from "\./([a-z_]+\.js)"', asset.text)
        assert set(imported) <= set(MODULES), (module, imported)
    # An approval's address is the page too (it shows that approval), under the same headers.
    deep = await inbox.client.get("/inbox/approvals/apr-anything")
    assert deep.status_code == 200 and deep.text == html
    assert_secured(deep.headers)
    missing = await inbox.client.get("/inbox/static/../app.py")
    assert missing.status_code == 404
    assert_secured((await inbox.client.get("/inbox/static/nothing.js")).headers)


async def test_signing_in_sets_an_httponly_strict_cookie_holding_the_token(
    inbox: Served, db: Database
) -> None:
    token = token_of(await token_for(db, unique("ann")))
    refused = await inbox.client.post("/inbox/session", json={"token": token[:-3] + "abc"})
    assert refused.status_code == 401 and "set-cookie" not in refused.headers
    assert refused.headers["cache-control"] == "no-store"
    assert_secured(refused.headers)
    not_json = await inbox.client.post(
        "/inbox/session", content=f"token={token}", headers={"Content-Type": "text/plain"}
    )
    assert not_json.status_code in (415, 422) and "set-cookie" not in not_json.headers

    response = await inbox.client.post("/inbox/session", json={"token": token})
    inbox.client.cookies.clear()
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    assert_secured(response.headers)
    body = response.json()
    assert body["scope"] == "reviewer" and body["may_decide"] is True
    cookie = response.headers["set-cookie"]
    attributes = {a.strip().split("=")[0].lower() for a in cookie.split(";")[1:]}
    assert cookie.startswith(f"signoff_session={token};")
    assert {"httponly", "path", "samesite"} <= attributes
    assert "samesite=strict" in cookie.lower() and "path=/" in cookie.lower()
    assert "secure" not in attributes  # plain http on loopback: a browser would drop it
    assert body["csrf_token"] and body["csrf_token"] not in cookie


async def test_signing_in_is_throttled_like_bearer_tokens(database_url: str, db: Database) -> None:
    token = token_of(await token_for(db, unique("ann")))
    async with served(database_url, FailureLimit(2, 60)) as inbox:
        for _ in range(2):
            wrong = await inbox.client.post("/inbox/session", json={"token": token[:-3] + "abc"})
            assert wrong.status_code == 401
        throttled = await inbox.client.post("/inbox/session", json={"token": token})
        assert throttled.status_code == 429 and "set-cookie" not in throttled.headers
        assert throttled.headers["retry-after"]
        cookie = {"Cookie": f"signoff_session={token}"}
        assert (await inbox.client.get("/inbox/session", headers=cookie)).status_code == 429


async def test_the_cookie_is_secure_unless_the_browser_is_on_plain_http_on_loopback(
    inbox: Served, db: Database
) -> None:
    token = token_of(await token_for(db, unique("ann")))
    for headers in ({"Host": "signoff.example.com"}, {"Origin": "https://signoff.example.com"}):
        session = await sign_in(inbox.client, token, **headers)
        attributes = {a.strip().lower() for a in session.set_cookie.split(";")[1:]}
        assert "secure" in attributes, (headers, session.set_cookie)
        # `__Host-`: a browser keeps it only Secure, for Path=/ and from this host itself.
        assert session.set_cookie.startswith(f"__Host-signoff_session={token};")
        assert "path=/" in attributes and not any(a.startswith("domain") for a in attributes)


async def test_a_request_over_https_reads_only_the_host_cookie(inbox: Served, db: Database) -> None:
    """A sibling subdomain can plant a plain `signoff_session` cookie (a session of its
    choosing); a request that is not plain loopback http never reads that name."""
    token = token_of(await token_for(db, unique("ann")))
    remote = {"Host": "signoff.example.com"}
    planted = {**remote, "Cookie": f"signoff_session={token}"}
    assert (await inbox.client.get("/inbox/session", headers=planted)).status_code == 401
    assert (await inbox.client.get("/v1/approvals", headers=planted)).status_code == 401
    kept = {**remote, "Cookie": f"__Host-signoff_session={token}"}
    assert (await inbox.client.get("/inbox/session", headers=kept)).status_code == 200
    assert (await inbox.client.get("/v1/approvals", headers=kept)).status_code == 200


async def test_the_cookie_authenticates_the_api_and_unsafe_requests_need_the_csrf_token(
    inbox: Served, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    group, member = unique("leads"), unique("ann")
    await ReviewerDirectory(db).add(member, [group], by="admin")
    approval_id = await ask(store, f"group:{group}")
    session = await sign_in(inbox.client, token_of(await token_for(db, member)))
    someone_else = await sign_in(inbox.client, token_of(await token_for(db, unique("eve"))))

    listed = await every_pending(inbox.client, session.cookie)
    assert approval_id in {a["approval_id"] for a in listed}

    url = f"/v1/approvals/{approval_id}/decision"
    body = {"decision": "approve"}
    for headers in (
        session.cookie,
        {**session.cookie, "X-CSRF-Token": ""},
        {**session.cookie, "X-CSRF-Token": session.csrf[:-2] + "AA"},
        {**session.cookie, "X-CSRF-Token": someone_else.csrf},  # another session's
    ):
        forged = await inbox.client.post(
            url, json=body, headers={**headers, "Idempotency-Key": uuid.uuid4().hex}
        )
        assert forged.status_code == 403, forged.text
        assert forged.json()["error"] == "forbidden" and "X-CSRF-Token" in forged.json()["message"]
    revealed = await inbox.client.post(
        f"/v1/approvals/{approval_id}/reveal", headers=session.cookie
    )
    assert revealed.status_code == 403
    events = await journal.read_stream(f"approval:{approval_id}")
    assert [e.type for e in events] == ["approval.requested"]
    assert await journal.read_stream(f"reveal:{approval_id}") == []

    decided = await inbox.client.post(
        url, json=body, headers={**session.unsafe(), "Idempotency-Key": uuid.uuid4().hex}
    )
    assert decided.status_code == 200, decided.text
    approval = await store.get(approval_id)
    assert approval.status is ApprovalStatus.APPROVED and approval.decided_by == (member,)


async def test_a_bearer_request_needs_no_csrf_token_and_a_cookie_of_nobody_is_401(
    inbox: Served, db: Database, store: ApprovalStore
) -> None:
    member = unique("ann")
    approval_id = await ask(store, member)
    bearer = await token_for(db, member)
    decided = await inbox.client.post(
        f"/v1/approvals/{approval_id}/decision",
        json={"decision": "reject"},
        headers={**bearer, "Idempotency-Key": uuid.uuid4().hex},
    )
    assert decided.status_code == 200, decided.text
    nobody = await inbox.client.get("/v1/approvals", headers={"Cookie": "signoff_session=sgf_x"})
    assert nobody.status_code == 401
    none = await inbox.client.get("/v1/approvals")
    assert none.status_code == 401


async def test_another_replica_accepts_the_same_csrf_token(inbox: Served, db: Database) -> None:
    token = token_of(await token_for(db, unique("ann")))
    session = await sign_in(inbox.client, token)
    other = await KeyRing.open(
        db, LocalKek(TEST_KEK), reviewer_kek=LocalKek(TEST_REVIEWER_KEK), create_missing=False
    )
    assert await CsrfKey(other).check(token, session.csrf)
    assert not await CsrfKey(other).check(token + "x", session.csrf)


async def test_after_the_signing_key_rotates_the_session_gives_a_new_csrf_token(
    fresh_database_url: str,
) -> None:
    async with await Database.connect(fresh_database_url) as owner:
        ring = await KeyRing.open(
            owner, LocalKek(TEST_KEK), reviewer_kek=LocalKek(TEST_REVIEWER_KEK)
        )
        token = token_of(await token_for(owner, unique("ann")))
        async with served(fresh_database_url) as inbox:
            session = await sign_in(inbox.client, token)
            probe = "/v1/approvals/apr-none/reveal"  # 404 once past the CSRF check
            assert (await inbox.client.post(probe, headers=session.unsafe())).status_code == 404
            await ring.rotate(Purpose.DECISION_SIGNING)
            csrf = inbox.service.authentication.csrf
            assert csrf is not None
            await csrf.ring.refresh()  # as the service does every SIGNOFF_KEY_REFRESH_SECONDS
            stale = await inbox.client.post(probe, headers=session.unsafe())
            assert stale.status_code == 403 and "X-CSRF-Token" in stale.json()["message"]
            again = await inbox.client.get("/inbox/session", headers=session.cookie)
            renewed = again.json()["csrf_token"]
            assert again.status_code == 200 and renewed != session.csrf
            headers = {**session.cookie, "X-CSRF-Token": renewed}
            assert (await inbox.client.post(probe, headers=headers)).status_code == 404


async def test_the_session_is_read_again_after_a_reload_and_signing_out_ends_it(
    inbox: Served, db: Database
) -> None:
    token = token_of(await token_for(db, unique("ann")))
    session = await sign_in(inbox.client, token)
    again = await inbox.client.get("/inbox/session", headers=session.cookie)
    assert again.status_code == 200 and again.json()["csrf_token"] == session.csrf
    assert again.headers["cache-control"] == "no-store"
    assert (await inbox.client.get("/inbox/session")).status_code == 401

    forged = await inbox.client.post("/inbox/session/end", headers=session.cookie)
    assert forged.status_code == 403 and "set-cookie" not in forged.headers
    for method, path in (("POST", "/inbox/session/end"), ("DELETE", "/inbox/session")):
        ended = await inbox.client.request(method, path, headers=session.unsafe())
        inbox.client.cookies.clear()
        assert ended.status_code == 200, ended.text
        cleared = ended.headers["set-cookie"].lower()
        assert cleared.startswith('signoff_session="";') and "max-age=0" in cleared


async def test_revealing_shows_the_arguments_to_who_may_see_them_and_records_who(
    inbox: Served, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    member, outsider, auditor = unique("ann"), unique("bob"), unique("aud")
    approval_id = await ask(store, member)
    refused = await inbox.client.post(
        f"/v1/approvals/{approval_id}/reveal", headers=await token_for(db, outsider)
    )
    assert refused.status_code == 403, refused.text
    assert await journal.read_stream(f"reveal:{approval_id}") == []

    session = await sign_in(inbox.client, token_of(await token_for(db, member)))
    revealed = await inbox.client.post(
        f"/v1/approvals/{approval_id}/reveal", headers=session.unsafe()
    )
    assert revealed.status_code == 200, revealed.text
    assert revealed.json()["args"] == {"amount": 120}
    assert revealed.json()["hitl"]["action_requests"][0]["args"] == {"amount": 120}
    by_auditor = await inbox.client.post(
        f"/v1/approvals/{approval_id}/reveal", headers=await token_for(db, auditor, "auditor")
    )
    assert by_auditor.status_code == 200 and by_auditor.json()["args"] == {"amount": 120}
    events = await journal.read_stream(f"reveal:{approval_id}")
    assert [(e.type, e.actor) for e in events] == [
        ("ledger.revealed", member),
        ("ledger.revealed", auditor),
    ]
    assert all(e.data["approval_id"] == approval_id for e in events)
    unknown = await inbox.client.post("/v1/approvals/apr-none/reveal", headers=session.unsafe())
    assert unknown.status_code == 404
    assert len(await journal.read_stream(f"reveal:{approval_id}")) == 2


async def test_a_reveal_with_an_idempotency_key_is_recorded_once_and_answered_alike(
    inbox: Served, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    member = unique("ann")
    approval_id = await ask(store, member)
    path, token = f"/v1/approvals/{approval_id}/reveal", await token_for(db, member)
    key = {**token, "Idempotency-Key": unique("key")}
    first = await inbox.client.post(path, headers=key)
    again = await inbox.client.post(path, headers=key)
    assert first.status_code == again.status_code == 200, again.text
    assert first.json() == again.json() and first.json()["args"] == {"amount": 120}
    assert "idempotent-replayed" not in first.headers
    assert again.headers["idempotent-replayed"] == "true"
    (event,) = await journal.read_stream(f"reveal:{approval_id}")
    assert (event.actor, event.data["request_id"]) == (member, key["Idempotency-Key"])

    # Without a key, or with another, each reveal is recorded.
    for headers in (token, token, {**token, "Idempotency-Key": unique("other")}):
        shown = await inbox.client.post(path, headers=headers)
        assert shown.status_code == 200 and shown.json() == first.json()
    assert len(await journal.read_stream(f"reveal:{approval_id}")) == 4
    too_long = await inbox.client.post(path, headers={**token, "Idempotency-Key": "k" * 201})
    assert too_long.status_code == 422, too_long.text
    assert len(await journal.read_stream(f"reveal:{approval_id}")) == 4


async def test_a_refusal_before_any_route_carries_the_inbox_headers_too(inbox: Served) -> None:
    too_large = await inbox.client.post(
        "/inbox/session",
        content=b"{" + b" " * (inbox.service.max_body_bytes + 1) + b"}",
        headers={"Content-Type": "application/json"},
    )
    assert too_large.status_code == 413
    assert_secured(too_large.headers)
    assert too_large.headers["cache-control"] == "no-store"


async def test_a_token_too_long_for_a_cookie_is_refused_before_a_cookie_is_set(
    inbox: Served,
) -> None:
    # A browser drops a cookie past 4096 bytes without a word: the page would seem signed in.
    longest = 4096 - len("signoff_session=")
    for length in (longest + 1, 6000):
        token = "a." + "b" * (length - 4) + ".c"
        refused = await inbox.client.post("/inbox/session", json={"token": token})
        assert refused.status_code == 422 and "set-cookie" not in refused.headers
        assert "cookie" in refused.json()["message"]
