"""What the policy benchmarks share: six tools, a 20-policy Cedar set that looks like a real
one (refund tiers on `context.input.amount`, per-tool permits, forbids, limits on the run's
history and on `context.now`) and one call per tool that it allows, and the calls through the
path every adapter takes (`runtime.judge` + `runtime.run`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from adapters import runtime
from adapters.runtime import ToolSpec
from approvals import ApprovalStore, ReviewerDirectory
from approvals.policies import (
    ADMIN_GROUP,
    Outcome,
    PolicyPoint,
    PolicySets,
    RegisteredTool,
    Verdict,
)
from ledger.calls import CallContext, CallStatus, Effect, ToolCall, ToolLedger
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.settings import Settings

__all__ = ["ADMIN", "POLICIES", "TOOLS", "Governed", "allowed_call", "governed", "publish"]

ADMIN = "admin"
"""The policy administrator who publishes the set (the directory group `policy-admins`)."""


def _schema(properties: Mapping[str, str], *required: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": kind} for name, kind in properties.items()},
        "required": list(required),
    }


TOOLS = (
    RegisteredTool(
        "refund",
        Effect.SINGLE_ATTEMPT,
        _schema({"amount": "integer", "currency": "string", "order": "string"}, "amount"),
    ),
    RegisteredTool("lookup", Effect.READ, _schema({"order": "string"}, "order")),
    RegisteredTool("search", Effect.READ, _schema({"query": "string"}, "query")),
    RegisteredTool("deploy", Effect.IDEMPOTENT_WRITE, _schema({"env": "string"}, "env")),
    RegisteredTool(
        "send_email", Effect.SINGLE_ATTEMPT, _schema({"to": "string", "subject": "string"}, "to")
    ),
    RegisteredTool(
        "create_ticket",
        Effect.IDEMPOTENT_WRITE,
        _schema({"priority": "integer", "title": "string"}, "priority"),
    ),
)

POLICIES = """
@id("refund-small")
permit(principal, action == Action::"refund", resource)
when { context.input.amount <= 50 };

@id("refund-lead")
@approval("Refunds over 50 need a support lead")
@approvers("group:support-lead")
permit(principal, action == Action::"refund", resource)
when { context.input.amount > 50 && context.input.amount <= 500 };

@id("refund-manager")
@approval("Refunds over 500 need two managers")
@approvers("group:managers")
@quorum("2")
@expires("3600")
permit(principal, action == Action::"refund", resource)
when { context.input.amount > 500 && context.input.amount <= 5000 };

@id("refund-cap")
@reason("refunds above 5000 are refused")
forbid(principal, action == Action::"refund", resource)
when { context.input.amount > 5000 };

@id("refund-currency")
@reason("refunds are made in EUR, USD or GBP")
forbid(principal, action == Action::"refund", resource)
when { context.input has currency && !(["EUR", "USD", "GBP"].contains(context.input.currency)) };

@id("refund-per-run")
@reason("a run makes at most 100000 refunds")
forbid(principal, action == Action::"refund", resource)
when { context.history.refund.calls >= 100000 };

@id("refund-daily-budget")
@reason("refunds of a run are capped at 10000000 a day")
forbid(principal, action == Action::"refund", resource)
when { context.history.refund.day.sums.amount + context.input.amount > 10000000 };

@id("reads")
permit(principal, action in Action::"effect:read", resource);

@id("lookup-rate")
@reason("at most 1000000 lookups an hour")
forbid(principal, action == Action::"lookup", resource)
when { context.history.lookup.hour.calls >= 1000000 };

@id("search-no-secrets")
@reason("searching for credentials is refused")
forbid(principal, action == Action::"search", resource)
when { context.input.query like "*password*" || context.input.query like "*api key*" };

@id("deploy-staging")
permit(principal, action == Action::"deploy", resource)
when { context.input.env == "staging" || context.input.env == "dev" };

@id("deploy-prod")
@approval("Production deploys need two approvers")
@approvers("alice, bob")
@quorum("2")
permit(principal, action == Action::"deploy", resource)
when { context.input.env == "prod" && context.now.weekday <= 5 };

@id("no-night-deploys")
@reason("no production deploys between 22:00 and 06:00")
forbid(principal, action == Action::"deploy", resource)
when { (context.now.hour >= 22 || context.now.hour < 6) && context.input.env == "prod" };

@id("email-internal")
permit(principal, action == Action::"send_email", resource)
when { context.input.to like "*@example.com" };

@id("email-external")
@approval("Mail outside the company is reviewed")
@any_reviewer
permit(principal, action == Action::"send_email", resource)
when { !(context.input.to like "*@example.com") };

@id("email-volume")
@reason("a run sends at most 100000 mails a day")
forbid(principal, action == Action::"send_email", resource)
when { context.history.send_email.day.calls >= 100000 };

@id("ticket-normal")
permit(principal, action == Action::"create_ticket", resource)
when { context.input.priority >= 1 && context.input.priority <= 4 };

@id("ticket-urgent")
@approval("Priority 0 tickets page the on-call engineer")
@approvers("group:on-call")
permit(principal, action == Action::"create_ticket", resource)
when { context.input.priority == 0 };

@id("ticket-range")
@reason("ticket priorities run from 0 to 4")
forbid(principal, action == Action::"create_ticket", resource)
when { context.input.priority < 0 || context.input.priority > 4 };

@id("suspended-agents")
@reason("this agent is suspended")
forbid(principal in Group::"suspended", action, resource);
"""

_ARGS: dict[str, dict[str, Any]] = {
    "refund": {"amount": 20, "currency": "EUR", "order": "A-1042"},
    "lookup": {"order": "A-1042"},
    "search": {"query": "late deliveries in March"},
    "deploy": {"env": "staging"},
    "send_email": {"to": "support@example.com", "subject": "Refund A-1042"},
    "create_ticket": {"priority": 2, "title": "Courier lost parcel A-1042"},
}
_SPECS = {tool.name: ToolSpec(tool.name, tool.effect) for tool in TOOLS}
_SCHEMAS = {tool.name: tool.args_schema for tool in TOOLS}


def allowed_call(run_id: str, n: int) -> ToolCall:
    """The `n`th call of a run: the tools in turn, each with arguments the set allows."""
    tool = TOOLS[n % len(TOOLS)].name
    return ToolCall(run_id, f"call-{n}", tool, _ARGS[tool])


async def publish(url: str, kek: LocalKek, reviewer_kek: LocalKek) -> None:
    """Register `TOOLS` in the database of `url` and publish `POLICIES` (mode enforce) as a
    policy administrator, with the reviewer side's ring."""
    settings = Settings(database_url=url, kek=kek, reviewer_kek=reviewer_kek)
    async with await Database.connect(url, pool_size=2, settings=settings) as db:
        ring = await KeyRing.open(db, kek, reviewer_kek=reviewer_kek)
        await ReviewerDirectory(db).add(ADMIN, [ADMIN_GROUP], by="bench")
        sets = PolicySets(db, ring)
        await sets.register(TOOLS)
        await sets.publish(POLICIES, by=ADMIN)


@dataclass
class Governed:
    """A worker's services, judging and running calls as an adapter does."""

    db: Database
    point: PolicyPoint
    ledger: ToolLedger
    store: ApprovalStore

    async def call(self, call: ToolCall) -> None:
        """Judge `call` and run it (an empty tool).

        Raises:
            AssertionError: the call was not allowed, or did not succeed.
        """
        spec = _SPECS[call.tool]
        schema = _SCHEMAS[call.tool]

        async def again(judged: ToolCall) -> Verdict:
            return await runtime.judge(self.point, spec, judged, "agent-7", args_schema=schema)

        verdict = await again(call)
        if verdict.outcome is not Outcome.ALLOW:
            raise AssertionError(f"{call.tool} was not allowed: {verdict.reason}")
        outcome = await runtime.run(
            self.ledger,
            self.store,
            runtime.governed(spec, verdict),
            call,
            _empty,
            verdict=verdict,
            judge_again=again,
        )
        if outcome.status is not CallStatus.SUCCEEDED:
            raise AssertionError(f"{call.tool} ended {outcome.status}: {outcome.error}")


async def _empty(args: dict[str, Any], context: CallContext) -> None:
    return None


@asynccontextmanager
async def governed(url: str, kek: LocalKek, pool_size: int) -> AsyncIterator[Governed]:
    """A worker of the database of `url` (a ring that cannot sign) with a `PolicyPoint`, as an
    adapter built with a database has it."""
    settings = Settings(database_url=url, kek=kek)
    async with await Database.connect(url, pool_size=pool_size, settings=settings) as db:
        ring = await KeyRing.open(db, kek)
        point = PolicyPoint(PolicySets(db, ring))
        ledger, store = ToolLedger(db, ring), ApprovalStore(db, ring)
        try:
            yield Governed(db, point, ledger, store)
        finally:
            await ledger.close()
            await store.close()
            await point.close()
