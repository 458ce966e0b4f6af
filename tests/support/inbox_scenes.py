"""What a reviewer meets in the inbox, for its browser tests and the docs' screenshots: a team
with a reviewer, a refund whose policy names headline, sensitive fields and an argument schema
(its effect cannot be undone), asked with the agent's reason and the user's last message, and
an e-mail of another run (no schema, no context)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from approvals import (
    Approval,
    ApprovalPolicy,
    ApprovalStore,
    RequestContext,
    ReviewerDirectory,
)
from ledger.store import Database

from .http import unique

REFUND_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "amount": {"type": "number", "title": "Amount", "exclusiveMinimum": 0},
        "currency": {"enum": ["EUR", "USD", "GBP"], "title": "Currency"},
        "order_id": {"type": "string", "title": "Order"},
        "iban": {"type": "string", "title": "IBAN"},
        "notify_customer": {"type": "boolean", "title": "Notify the customer"},
        "lines": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["amount", "currency", "order_id"],
    "additionalProperties": False,
}
REFUND_ARGS: dict[str, Any] = {
    "amount": 120,
    "currency": "EUR",
    "order_id": "A-1042",
    "iban": "DE89 3704 0044 0532 0130 00",
    "notify_customer": True,
    "lines": ["headphones"],
}
REFUND_CONTEXT = RequestContext(
    reason="The customer returned the headphones unopened; order A-1042 qualifies for a refund.",
    last_user_message="I sent the headphones back last week, where is my money?",
)


@dataclass(frozen=True)
class Team:
    """A group of its own and one member of it."""

    group: str
    member: str

    @property
    def approvers(self) -> frozenset[str]:
        return frozenset({f"group:{self.group}"})


async def a_team(db: Database, prefix: str = "leads") -> Team:
    team = Team(unique(prefix), unique("ann"))
    await ReviewerDirectory(db).add(team.member, [team.group], by="admin")
    return team


def refund_policy(team: Team, **changes: Any) -> ApprovalPolicy:
    fields: dict[str, Any] = {
        "approvers": team.approvers,
        "description": "Refund order A-1042 to the customer?",
        "headline": ("amount", "currency"),
        "sensitive": frozenset({"iban"}),
        "irreversible": True,
        "args_schema": REFUND_SCHEMA,
        **changes,
    }
    return ApprovalPolicy(**fields)


async def a_refund(
    store: ApprovalStore, team: Team, *, run_id: str | None = None, **changes: Any
) -> Approval:
    """A pending refund of 120 EUR for `team` (policy fields changed by `changes`)."""
    return await store.request(
        run_id=run_id or unique("r"),
        tool="refund",
        args=dict(REFUND_ARGS),
        call_id=unique("call"),
        requested_by="support-agent",
        policy=refund_policy(team, **changes),
        context=REFUND_CONTEXT,
    )


async def an_email(store: ApprovalStore, team: Team, *, run_id: str | None = None) -> Approval:
    """A pending e-mail for `team`, no schema, no headline."""
    return await store.request(
        run_id=run_id or unique("r"),
        tool="send_email",
        args={"to": "customer@example.com", "subject": "Your refund", "body": "It is on its way."},
        call_id=unique("call"),
        requested_by="mail-agent",
        policy=ApprovalPolicy(approvers=team.approvers, description="Send this e-mail?"),
    )
