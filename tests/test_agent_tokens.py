"""Agents' API tokens (scope agent): what an MCP client presents to the gateway, `signoff mcp`,
which runs on a worker's login (only `signoff_app`) and checks them with
`ApiTokens.authenticate_agent`. No other scope lets an agent in, and the migration that allows
them goes down without touching the journal."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from approvals import (
    ApiTokens,
    CredentialError,
    CredentialExpired,
    CredentialRevoked,
    CredentialScopeRefused,
    InvalidCredential,
    ReviewerDirectory,
    Scope,
)
from approvals.credentials import parse_token
from ledger.errors import PermissionDenied
from ledger.journal import Journal
from ledger.keys import LocalKek
from ledger.store import Database, migrate
from ledger.store.logins import temporary_login

from .support.processes import TEST_KEK, run_cli
from .support.worker_login import worker_login


def agent_name() -> str:
    return f"agent-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
async def worker_db(database_url: str) -> AsyncIterator[Database]:
    """The gateway's login: only signoff_app."""
    async with (
        temporary_login(database_url, "signoff_app") as url,
        await Database.connect(url, pool_size=2) as db,
    ):
        yield db


async def test_an_agent_token_made_by_the_cli_authenticates_on_a_worker_login(
    server_url: str,
) -> None:
    async with worker_login(server_url, LocalKek(TEST_KEK), prefix="signoff_agents") as login:
        name = agent_name()
        made = await run_cli(
            "tokens", "create", "--reviewer", f" {name} ", "--scope", "agent", "--json",
            database_url=login.owner_url,
        )  # fmt: skip
        assert made.code == 0, made.stderr
        created = json.loads(made.stdout)
        assert (created["reviewer"], created["scope"]) == (name, "agent")  # normalised
        async with await Database.connect(login.url, pool_size=1) as gateway:
            identity = await ApiTokens(gateway).authenticate_agent(created["token"])
        async with await Database.connect(login.owner_url, pool_size=1) as owner:
            used = await ApiTokens(owner).get(created["token_id"])
    assert identity.reviewer == name and identity.scope is Scope.AGENT
    assert identity.credential == f"token:{created['token_id']}"
    assert not identity.may_decide and identity.groups == frozenset() and not identity.listed
    assert used.last_used_at is not None


async def test_an_agent_token_is_journaled_and_read_in_the_directory_never(
    db: Database, worker_db: Database, journal: Journal
) -> None:
    name = agent_name()
    # A reviewer of the same name in the directory lends the agent none of its groups.
    await ReviewerDirectory(db).add(name, ["support-leads"], by="admin")
    created = await ApiTokens(db).create(name, scope=Scope.AGENT, by="admin")
    assert created.info.scope is Scope.AGENT
    events = await journal.read_stream(f"token:{created.info.token_id}")
    assert [(e.type, e.data["scope"], e.data["reviewer"]) for e in events] == [
        ("token.created", "agent", name)
    ]
    identity = await ApiTokens(worker_db).authenticate_agent(created.token)
    assert identity.groups == frozenset() and not identity.listed


@pytest.mark.parametrize("scope", [Scope.REVIEWER, Scope.AUDITOR])
async def test_a_reviewer_or_an_auditor_token_lets_no_agent_in(
    db: Database, worker_db: Database, scope: Scope
) -> None:
    created = await ApiTokens(db).create(agent_name(), scope=scope, by="admin")
    with pytest.raises(CredentialScopeRefused) as caught:
        await ApiTokens(worker_db).authenticate_agent(created.token)
    assert isinstance(caught.value, CredentialError)
    assert caught.value.scope == scope and caught.value.credential.endswith(created.info.token_id)
    assert created.token not in str(caught.value)


async def test_a_revoked_an_expired_or_a_wrong_agent_token_is_refused(
    db: Database, worker_db: Database
) -> None:
    tokens, gateway = ApiTokens(db), ApiTokens(worker_db)
    revoked = await tokens.create(agent_name(), scope="agent", by="admin")
    await tokens.revoke(revoked.info.token_id, by="admin")
    with pytest.raises(CredentialRevoked):
        await gateway.authenticate_agent(revoked.token)

    expired = await tokens.create(agent_name(), scope="agent", by="admin")
    async with db.connection() as conn:  # as if made two days ago for one day
        await conn.execute(
            "UPDATE api_tokens SET created_at = now() - interval '2 days',"
            " expires_at = now() - interval '1 day' WHERE token_id = $1",
            expired.info.token_id,
        )
    with pytest.raises(CredentialExpired):
        await gateway.authenticate_agent(expired.token)

    good = await tokens.create(agent_name(), scope="agent", by="admin")
    token_id, _ = parse_token(good.token)
    for wrong in ("not-a-token", f"sgf_{token_id}_" + "B" * 43):
        with pytest.raises(InvalidCredential):
            await gateway.authenticate_agent(wrong)
    assert (await tokens.get(token_id)).last_used_at is None
    assert (await gateway.authenticate_agent(good.token)).scope is Scope.AGENT


async def test_the_worker_checks_tokens_and_still_reads_no_token_row(
    db: Database, worker_db: Database
) -> None:
    created = await ApiTokens(db).create(agent_name(), scope="agent", by="admin")
    assert (await ApiTokens(worker_db).authenticate_agent(created.token)).scope is Scope.AGENT
    with pytest.raises(PermissionDenied):
        await ApiTokens(worker_db).list()
    with pytest.raises(PermissionDenied):
        await ApiTokens(worker_db).get(created.info.token_id)
    with pytest.raises(PermissionDenied):
        await ApiTokens(worker_db).create(agent_name(), scope="agent", by="me")
    with pytest.raises(PermissionDenied):
        async with worker_db.connection() as conn:
            await conn.fetchval("SELECT count(*) FROM api_tokens")


_TOKEN_USE_BY_WORKERS = (
    "SELECT has_function_privilege('signoff_app', 'signoff_token_use(text, bytea)', 'EXECUTE')"
)


async def test_the_downgrade_drops_agent_tokens_and_keeps_their_events(
    fresh_database_url: str,
) -> None:
    url = fresh_database_url
    async with await Database.connect(url, pool_size=1) as db:
        tokens = ApiTokens(db)
        agent = await tokens.create(agent_name(), scope="agent", by="admin")
        await tokens.revoke(agent.info.token_id, by="admin")
        live = await tokens.create(agent_name(), scope="agent", by="admin")
        person = await tokens.create(agent_name(), by="admin")
    conn = await asyncpg.connect(url)
    try:
        assert await conn.fetchval(_TOKEN_USE_BY_WORKERS)
        events_before = await conn.fetchval("SELECT count(*) FROM events")

        await asyncio.to_thread(migrate.downgrade, url, "0003_reviewers")
        rows = await conn.fetch("SELECT token_id, scope FROM api_tokens")
        assert [(r["token_id"], r["scope"]) for r in rows] == [(person.info.token_id, "reviewer")]
        assert await conn.fetchval("SELECT count(*) FROM events") == events_before
        streams = await conn.fetch(
            "SELECT stream_id, type FROM events WHERE stream_id = ANY($1::text[])"
            " ORDER BY stream_id, version",
            [f"token:{agent.info.token_id}", f"token:{live.info.token_id}"],
        )
        assert sorted((r["stream_id"], r["type"]) for r in streams) == sorted(
            [
                (f"token:{agent.info.token_id}", "token.created"),
                (f"token:{agent.info.token_id}", "token.revoked"),
                (f"token:{live.info.token_id}", "token.created"),
            ]
        )
        assert not await conn.fetchval(_TOKEN_USE_BY_WORKERS)
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute("UPDATE api_tokens SET scope = 'agent'")

        await asyncio.to_thread(migrate.upgrade, url, "head")
        assert await conn.fetchval(_TOKEN_USE_BY_WORKERS)
    finally:
        await conn.close()
