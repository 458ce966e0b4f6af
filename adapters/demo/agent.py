"""The demo's support agent: LangChain's `create_agent` with a scripted chat model (no API key),
a read tool and a refund tool that a support lead must approve, all through `SignoffMiddleware`.

The model follows its script from the conversation alone (look the order up, ask for the refund,
tell the customer), so any process can continue a thread another one started. The refund "pays"
by appending a line to the run's payments file (`script.record_payment`): the side effect the
demo counts, outside the database like a real payment.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph

from adapters.langgraph import SignoffMiddleware, SignoffTools, ToolSpec, get_idempotency_key
from approvals import ApprovalPolicy
from ledger.calls.model import Effect

from .model import ScriptedChatModel
from .script import LEADS, LOOKUP_CALL, REFUND_CALL, record_payment

__all__ = ["ORDERS", "SPECS", "SupportModel", "build_agent", "next_step", "support_tools"]

ORDERS: dict[str, dict[str, Any]] = {
    "A-1042": {"total": 120.0, "currency": "EUR", "status": "delivered"},
}
SPECS = (
    ToolSpec("lookup_order", effect=Effect.READ),
    ToolSpec(
        "refund",
        effect=Effect.SINGLE_ATTEMPT,
        approval=ApprovalPolicy(
            approvers=frozenset({f"group:{LEADS}"}),
            description="Refunds move money: a support lead approves each one.",
        ),
    ),
)


_REFUNDED = re.compile(r"refunded (-?\d+\.\d\d) ([A-Z]{3}) on (\S+)")
"""The refund tool's result (`support_tools`), which says what it paid."""


def _ask(name: str, args: dict[str, Any], call_id: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id}])


def next_step(messages: Sequence[BaseMessage]) -> AIMessage:
    """The script: look the order up, ask to refund its total, then tell the customer what the
    refund did: paid (the amount the tool paid), rejected, or answered by a reviewer instead."""
    asked = {
        call["id"]: call["name"]
        for message in messages
        if isinstance(message, AIMessage)
        for call in message.tool_calls
    }
    results = {
        asked[m.tool_call_id]: m
        for m in messages
        if isinstance(m, ToolMessage) and m.tool_call_id in asked
    }
    text = " ".join(str(m.content) for m in messages if isinstance(m, HumanMessage))
    found = re.search(r"\b[A-Z]-\d+\b", text)
    order_id = found.group() if found else "unknown"
    lookup = results.get("lookup_order")
    if lookup is None:
        return _ask("lookup_order", {"order_id": order_id}, LOOKUP_CALL)
    order = json.loads(str(lookup.content)) if lookup.status == "success" else {}
    if "total" not in order:
        return AIMessage(f"Sorry, I could not find order {order_id}.")
    refund = results.get("refund")
    if refund is None:
        args = {"order_id": order_id, "amount": order["total"], "reason": "arrived broken"}
        return _ask("refund", args, REFUND_CALL)
    if refund.status == "error":  # rejected (the message says it did not run), or it failed
        return AIMessage(f"I could not refund order {order_id}: {refund.content}")
    # The tool's own words are the last line (after a reviewer's edit, a note comes first).
    paid = _REFUNDED.fullmatch(str(refund.content).rpartition("\n")[2])
    if paid is None:  # a reviewer answered instead of running the tool: nothing was paid
        return AIMessage(
            f"I have not refunded order {order_id}; a support lead answered: {refund.content}"
        )
    # What the tool paid, which a reviewer's edit may have changed: not the order's total.
    amount, currency, paid_order = paid.groups()
    return AIMessage(f"Done: {amount} {currency} for order {paid_order} is on its way back to you.")


class SupportModel(ScriptedChatModel):
    """The scripted model, playing `next_step` from the conversation."""

    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        return next_step(messages)


def support_tools(payments: Path) -> list[BaseTool]:
    """`lookup_order` (a read) and `refund` (a payment, recorded in `payments`)."""

    @tool
    async def lookup_order(order_id: str) -> str:
        """Look up an order: its total and whether it was delivered."""
        order = ORDERS.get(order_id)
        found = {"order": order_id, **order} if order else {"error": f"no order {order_id}"}
        return json.dumps(found, separators=(",", ":"))

    @tool
    async def refund(order_id: str, amount: float, reason: str) -> str:
        """Refund an order's amount to the customer's original payment method."""
        payment = {
            "order_id": order_id,
            "amount": amount,
            "currency": "EUR",
            "reason": reason,
            "idempotency_key": get_idempotency_key(),
            "pid": os.getpid(),
        }
        record_payment(payments, payment)
        return f"refunded {amount:.2f} EUR on {order_id}"

    return [lookup_order, refund]


def build_agent(
    signoff: SignoffTools, checkpointer: BaseCheckpointSaver[Any], payments: Path
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The support agent, with Signoff's middleware first (the outermost tool wrapper)."""
    return create_agent(
        SupportModel(),
        tools=support_tools(payments),
        system_prompt="You are a support agent. Refunds need a support lead's approval.",
        middleware=[SignoffMiddleware(signoff, shape="per_call")],
        checkpointer=checkpointer,
    )
