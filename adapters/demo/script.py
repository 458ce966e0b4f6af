"""What the demo's processes agree on, without importing LangChain: the customer's message, the
call ids the scripted model uses, who approves refunds and where the payments go."""

from __future__ import annotations

__all__ = [
    "CUSTOMER_MESSAGE",
    "LEADS",
    "LOOKUP_CALL",
    "REFUND_CALL",
    "REVIEWER",
    "payments_stream",
]

CUSTOMER_MESSAGE = "Hi, order A-1042 arrived broken. Can I get my money back?"
LEADS = "support-leads"  # the group whose members may approve refunds
REVIEWER = "alice"  # a member of LEADS; approves from `signoff demo`'s own process
LOOKUP_CALL = "call-lookup"
REFUND_CALL = "call-refund"


def payments_stream(run_id: str) -> str:
    """The journal stream where the demo's payment system records the refunds of a run."""
    return f"demo-payments:{run_id}"
