"""API tokens: made and revoked by the owner (journaled, never with the secret), checked on a
login that has only `signoff_reviewer` (or `signoff_auditor`) through `signoff_token_use`."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from approvals import (
    ApiTokens,
    CredentialExpired,
    CredentialRevoked,
    CredentialScopeRefused,
    InvalidApprovalRequest,
    InvalidCredential,
    InvalidReviewerId,
    ReviewerDirectory,
    Scope,
    UnknownCredential,
)
from approvals.credentials import parse_token, secret_hash
from ledger.errors import EventNotPermitted, PermissionDenied
from ledger.journal import Journal, NewEvent
from ledger.store import Database
from ledger.store.logins import temporary_login

from .support.processes import run_cli


def reviewer_name() -> str:
    return f"tok-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
async def reviewer_db(database_url: str) -> AsyncIterator[Database]:
    """The service's login: only signoff_reviewer."""
    async with (
        temporary_login(database_url, "signoff_reviewer") as url,
        await Database.connect(url, pool_size=2) as db,
    ):
        yield db


async def test_a_token_authenticates_on_a_login_with_only_signoff_reviewer(
    db: Database, reviewer_db: Database
) -> None:
    who = reviewer_name()
    await ReviewerDirectory(db).add(who, ["support-leads"], by="admin")
    created = await ApiTokens(db).create(f" {who}", by="admin")  # normalised
    assert created.token.startswith(f"sgf_{created.info.token_id}_")
    assert created.info.reviewer == who and created.info.last_used_at is None
    assert created.token not in repr(created)

    identity = await ApiTokens(reviewer_db).authenticate(created.token)
    assert identity.reviewer == who
    assert identity.scope is Scope.REVIEWER and identity.may_decide
    assert identity.groups == frozenset({"support-leads"})
    assert identity.credential == f"token:{created.info.token_id}"
    used = await ApiTokens(db).get(created.info.token_id)
    assert used.last_used_at is not None


async def test_an_auditor_token_reads_only(db: Database, database_url: str) -> None:
    created = await ApiTokens(db).create(reviewer_name(), scope="auditor", by="admin")
    async with (
        temporary_login(database_url, "signoff_auditor") as url,
        await Database.connect(url, pool_size=1) as auditor_db,
    ):
        identity = await ApiTokens(auditor_db).authenticate(created.token)
    assert identity.scope is Scope.AUDITOR and not identity.may_decide
    assert identity.groups == frozenset()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "sgf_",
        "Bearer sgf_x",
        "sgf_0123456789abcdef_" + "A" * 42,
        "sgf_0123456789ABCDEF_" + "A" * 43,
        "sgf_0123456789abcdef_" + "A" * 43 + "\n",
    ],
)
async def test_malformed_tokens_are_refused_before_the_database(text: str) -> None:
    with pytest.raises(InvalidCredential):
        parse_token(text)


async def test_a_wrong_secret_or_an_unknown_id_is_invalid(
    db: Database, reviewer_db: Database
) -> None:
    created = await ApiTokens(db).create(reviewer_name(), by="admin")
    token_id, secret = parse_token(created.token)
    other = "sgf_" + token_id + "_" + ("B" * 43)
    with pytest.raises(InvalidCredential):
        await ApiTokens(reviewer_db).authenticate(other)
    with pytest.raises(InvalidCredential):
        await ApiTokens(reviewer_db).authenticate(created.token.replace(token_id, "0" * 16))
    assert (await ApiTokens(db).get(token_id)).last_used_at is None
    assert len(secret_hash(secret)) == 32


async def test_a_revoked_token_authenticates_nobody(db: Database, reviewer_db: Database) -> None:
    tokens = ApiTokens(db)
    created = await tokens.create(reviewer_name(), by="admin")
    revoked = await tokens.revoke(created.info.token_id, by="admin")
    assert revoked.revoked_at is not None
    again = await tokens.revoke(created.info.token_id, by="admin")  # records nothing more
    assert again.revoked_at == revoked.revoked_at
    with pytest.raises(CredentialRevoked) as caught:
        await ApiTokens(reviewer_db).authenticate(created.token)
    assert str(caught.value) != caught.value.PUBLIC_MESSAGE
    assert created.info.token_id not in {t.token_id for t in await tokens.list()}
    assert created.info.token_id in {t.token_id for t in await tokens.list(include_inactive=True)}
    with pytest.raises(UnknownCredential):
        await tokens.revoke("0" * 16, by="admin")


async def test_an_expired_token_authenticates_nobody(db: Database, reviewer_db: Database) -> None:
    created = await ApiTokens(db).create(reviewer_name(), by="admin")
    async with db.connection() as conn:  # as if made two days ago for one day
        await conn.execute(
            "UPDATE api_tokens SET created_at = now() - interval '2 days',"
            " expires_at = now() - interval '1 day' WHERE token_id = $1",
            created.info.token_id,
        )
    with pytest.raises(CredentialExpired):
        await ApiTokens(reviewer_db).authenticate(created.token)


async def test_creation_and_revocation_are_journaled_without_the_secret(
    db: Database, journal: Journal
) -> None:
    tokens = ApiTokens(db)
    created = await tokens.create(reviewer_name(), scope=Scope.AUDITOR, by="admin-x")
    await tokens.revoke(created.info.token_id, by="admin-y")
    events = await journal.read_stream(f"token:{created.info.token_id}")
    assert [(e.type, e.actor) for e in events] == [
        ("token.created", "admin-x"),
        ("token.revoked", "admin-y"),
    ]
    assert events[0].data["scope"] == "auditor"
    _, secret = parse_token(created.token)
    secret_text = created.token.rsplit("_", 1)[1]
    for event in events:
        text = json.dumps(event.data)
        assert secret_text not in text and secret_hash(secret).hex() not in text


async def test_bad_requests_record_nothing(db: Database) -> None:
    tokens = ApiTokens(db)
    with pytest.raises(InvalidReviewerId):
        await tokens.create("al ice", by="admin")
    with pytest.raises(InvalidApprovalRequest):
        await tokens.create(reviewer_name(), scope="owner", by="admin")
    with pytest.raises(InvalidApprovalRequest):
        await tokens.create(reviewer_name(), expires_in=timedelta(days=400), by="admin")
    with pytest.raises(InvalidApprovalRequest):
        await tokens.create(reviewer_name(), expires_in=timedelta(0), by="admin")


async def test_only_the_owner_makes_tokens_and_writes_their_streams(
    db: Database, reviewer_db: Database, database_url: str
) -> None:
    created = await ApiTokens(db).create(reviewer_name(), by="admin")
    with pytest.raises(PermissionDenied):
        await ApiTokens(reviewer_db).create(reviewer_name(), by="me")
    with pytest.raises(PermissionDenied):
        await ApiTokens(reviewer_db).list()
    stream = f"token:{created.info.token_id}"
    with pytest.raises(EventNotPermitted):  # not even an event type the login may append
        await Journal(reviewer_db).append(
            stream, [NewEvent("ledger.revealed", {"x": 1}, actor="me")], expected_version=1
        )
    with pytest.raises(EventNotPermitted):
        await Journal(reviewer_db).append(
            stream, [NewEvent("token.revoked", {"x": 1}, actor="me")], expected_version=1
        )
    async with (
        temporary_login(database_url, "signoff_app") as url,
        await Database.connect(url, pool_size=1) as worker_db,
    ):
        # A worker checks tokens for the MCP gateway, which lets in agents alone.
        with pytest.raises(CredentialScopeRefused):
            await ApiTokens(worker_db).authenticate_agent(created.token)
        with pytest.raises(PermissionDenied):
            await ApiTokens(worker_db).get(created.info.token_id)


async def test_the_cli_prints_a_token_once_and_lists_none(
    database_url: str, reviewer_db: Database
) -> None:
    who = reviewer_name()
    made = await run_cli(
        "tokens", "create", "--reviewer", who, "--expires", "2h", "--json",
        database_url=database_url,
    )  # fmt: skip
    assert made.code == 0, made.stderr
    created = json.loads(made.stdout)
    assert created["reviewer"] == who and created["scope"] == "reviewer"
    identity = await ApiTokens(reviewer_db).authenticate(created["token"])
    assert identity.reviewer == who

    listed = await run_cli("tokens", "list", "--json", database_url=database_url)
    assert listed.code == 0, listed.stderr
    assert created["token"] not in listed.stdout
    row = next(t for t in json.loads(listed.stdout)["tokens"] if t["reviewer"] == who)
    assert row["last_used_at"] is not None and "token" not in row

    revoked = await run_cli("tokens", "revoke", created["token_id"], database_url=database_url)
    assert revoked.code == 0, revoked.stderr
    assert "revoked" in revoked.stdout
    with pytest.raises(CredentialRevoked):
        await ApiTokens(reviewer_db).authenticate(created["token"])

    bad = await run_cli("tokens", "create", "--reviewer", who, "--expires", "forever")
    assert bad.code == 2 and bad.stderr.startswith("error: ") and len(bad.stderr.splitlines()) == 1
    unknown = await run_cli("tokens", "revoke", "0" * 16, database_url=database_url)
    assert unknown.code == 2 and "no API token" in unknown.stderr


def test_a_token_has_one_spelling() -> None:
    """43 base64url characters hold 258 bits for a 256-bit secret: the last character's two low
    bits are padding. A token whose last character differs only in those bits names the same
    secret, so it would be a second spelling of one credential; only the canonical one parses."""
    secret = bytes(range(32))
    text = base64.urlsafe_b64encode(secret).decode().rstrip("=")
    head = "sgf_0123456789abcdef_"
    token = head + text
    assert parse_token(token) == ("0123456789abcdef", secret)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(text[-1])
    others = [alphabet[(last & ~3) | low] for low in range(4) if (last & ~3) | low != last]
    assert len(others) == 3
    for other in others:
        spelled = token[:-1] + other
        assert base64.urlsafe_b64decode(spelled.removeprefix(head) + "=") == secret
        with pytest.raises(InvalidCredential):
            parse_token(spelled)
