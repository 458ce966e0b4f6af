"""A stolen worker login cannot drain a sealing key's nonce budget: the database caps each
reservation and bounds what one login reserves in a minute, and a worker on the same login
keeps sealing on credit. Written as the attacker acts: SQL on a login that holds only
`signoff_app`, and no KEK. A key near its budget is rotated by a ring that may rotate keys."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from approvals import ApprovalStore
from ledger.keys import KeyRing, LocalKek, Purpose
from ledger.keys.budget import MAX_RESERVATION, RATE_PER_MINUTE, ROTATE_AT
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings

from .support.processes import TEST_KEK
from .support.scratch import scratch_database

RESULT_KEY = "SELECT key_id FROM data_keys WHERE purpose = 'result' AND state = 'active'"
SEALED = "SELECT sealed FROM data_keys WHERE key_id = $1"
ATTEMPTS = 2047  # what drained a key in eight seconds before


@pytest.fixture
async def owner_url(server_url: str) -> AsyncIterator[str]:
    """A fresh database whose data keys the owner made."""
    async with scratch_database(server_url, prefix="signoff_nonces") as url:
        async with await Database.connect(url) as db:
            await KeyRing.open(db, LocalKek(TEST_KEK))
        yield url


async def _request(url: str) -> str:
    """An approval request by an agent worker logged in at `url`; it seals the arguments."""
    async with await Database.from_settings(
        Settings(database_url=url, kek=LocalKek(TEST_KEK))
    ) as db:
        store = ApprovalStore(db, await KeyRing.open(db, create_missing=False))
        try:
            approval = await store.request(
                run_id=f"nonce-{uuid.uuid4().hex[:8]}",
                tool="refund",
                args={"amount": 120},
                call_id="c1",
                requested_by="agent",
            )
        finally:
            await store.close()
    return approval.approval_id


async def test_a_worker_login_cannot_drain_a_keys_budget(owner_url: str) -> None:
    async with temporary_login(owner_url, "signoff_app") as url:
        attacker = await asyncpg.connect(url)
        try:
            key_id = await attacker.fetchval(RESULT_KEY)
            before = await attacker.fetchval(SEALED, key_id)
            # One call takes at most a block and a process's credit.
            with pytest.raises(asyncpg.InvalidParameterValueError):
                await attacker.fetchval("SELECT signoff_reserve_nonces($1, 1048576)", key_id)
            granted = refused = 0
            for _ in range(ATTEMPTS):
                try:
                    await attacker.fetchval(
                        "SELECT signoff_reserve_nonces($1, $2)", key_id, MAX_RESERVATION
                    )
                    granted += 1
                except asyncpg.ConfigurationLimitExceededError:
                    refused += 1
            taken = await attacker.fetchval(SEALED, key_id) - before
        finally:
            await attacker.close()
        # At most a minute's worth (two, when the attempts straddle the turn of a minute).
        assert taken == granted * MAX_RESERVATION <= 2 * RATE_PER_MINUTE
        assert refused >= ATTEMPTS - 2 * (RATE_PER_MINUTE // MAX_RESERVATION + 1)
        # A worker on that very login, whose rate is spent, still requests approvals (its
        # seals run on credit until the next minute).
        assert await _request(url)
    async with temporary_login(owner_url, "signoff_app") as other:
        assert await _request(other)


async def test_a_key_near_its_budget_is_rotated_by_a_key_administrators_ring(
    owner_url: str,
) -> None:
    owner = await asyncpg.connect(owner_url)
    try:
        key_id = await owner.fetchval(RESULT_KEY)
        await owner.execute("UPDATE data_keys SET sealed = $2 WHERE key_id = $1", key_id, ROTATE_AT)
    finally:
        await owner.close()
    async with temporary_login(owner_url, "signoff_key_admin") as url:
        settings = Settings(database_url=url, kek=LocalKek(TEST_KEK))
        async with await Database.from_settings(settings) as db:
            ring = await KeyRing.open(db, create_missing=False)
            rotated = ring.active_key_id(Purpose.RESULT)
            async with db.connection() as conn:
                assert await conn.fetchval(RESULT_KEY) == rotated != key_id
                assert (
                    await conn.fetchval(
                        "SELECT count(*) FROM events WHERE stream_id = 'keys:result'"
                        " AND type = 'key.rotated' AND data->>'replaces' = $1",
                        key_id,
                    )
                    == 1
                )
    # The old key still opens what it sealed: it is decrypt-only.
    async with await Database.connect(owner_url) as db:
        state = await KeyRing.open(db, LocalKek(TEST_KEK), create_missing=False)
        assert {k.key_id: k.state.value for k in state.all_keys()}[key_id] == "decrypt_only"
