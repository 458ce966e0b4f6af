"""A database of a test's own for policy sets (a published set governs every call of its
database), its reviewer-side ring, a policy administrator and the tools the tests register."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from approvals import ApprovalStore, ReviewerDirectory
from approvals.policies import ADMIN_GROUP, PolicyPoint, PolicySets, RegisteredTool
from ledger.calls import Effect, ToolLedger
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.settings import Settings

from .processes import TEST_KEK, TEST_REVIEWER_KEK
from .scratch import scratch_database

__all__ = ["ADMIN", "TOOLS", "PolicyWorld", "policy_world"]

ADMIN = "carol"
"""A policy administrator (the directory group `policy-admins`)."""

TOOLS = (
    RegisteredTool(
        "refund",
        Effect.SINGLE_ATTEMPT,
        {
            "type": "object",
            "properties": {
                "amount": {"type": "integer"},
                "currency": {"type": "string"},
                "rate": {"type": "number"},
            },
            "required": ["amount"],
        },
    ),
    RegisteredTool(
        "deploy",
        Effect.IDEMPOTENT_WRITE,
        {"type": "object", "properties": {"env": {"type": "string"}}, "required": ["env"]},
    ),
    RegisteredTool(
        "lookup",
        Effect.READ,
        {"type": "object", "properties": {"order": {"type": "string"}}},
    ),
)


@dataclass
class PolicyWorld:
    url: str
    db: Database
    ring: KeyRing  # the reviewer side's: it signs
    sets: PolicySets
    point: PolicyPoint
    store: ApprovalStore
    ledger: ToolLedger


@asynccontextmanager
async def policy_world(
    server_url: str, *, prefix: str = "signoff_policy"
) -> AsyncIterator[PolicyWorld]:
    """A fresh database with `TOOLS` registered, `ADMIN` and the reviewers alice and bob (alice
    in `support-lead`) in the directory, and the services the tests judge and run calls with."""
    async with scratch_database(server_url, prefix=prefix) as url:
        settings = Settings(
            database_url=url, kek=LocalKek(TEST_KEK), reviewer_kek=LocalKek(TEST_REVIEWER_KEK)
        )
        async with await Database.connect(url, settings=settings) as db:
            ring = await KeyRing.open(db)
            directory = ReviewerDirectory(db)
            await directory.add(ADMIN, [ADMIN_GROUP], by="owner")
            await directory.add("alice", ["support-lead"], by="owner")
            await directory.add("bob", ["support-lead"], by="owner")
            sets = PolicySets(db, ring)
            await sets.register(TOOLS)
            point = PolicyPoint(sets)
            store = ApprovalStore(db, ring, poll_interval=0.05)
            ledger = ToolLedger(db, ring, poll_interval=0.05)
            try:
                yield PolicyWorld(url, db, ring, sets, point, store, ledger)
            finally:
                await ledger.close()
                await store.close()
                await point.close()
