"""What the demo's processes agree on, without importing LangChain: the customer's message, the
call ids the scripted model uses, who approves refunds and how a payment is recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = [
    "CUSTOMER_MESSAGE",
    "LEADS",
    "LOOKUP_CALL",
    "REFUND_CALL",
    "REVIEWER",
    "record_payment",
    "recorded_payments",
]

CUSTOMER_MESSAGE = "Hi, order A-1042 arrived broken. Can I get my money back?"
LEADS = "support-leads"  # the group whose members may approve refunds
REVIEWER = "alice"  # a member of LEADS; approves from `signoff demo`'s own process
LOOKUP_CALL = "call-lookup"
REFUND_CALL = "call-refund"


def record_payment(payments: Path, payment: dict[str, Any]) -> None:
    """The demo's payment system: one JSON line per refund paid, appended to the run's file
    (outside the database, as a real payment is; one `write` of a line opened for appending,
    so two processes never interleave)."""
    line = json.dumps(payment, separators=(",", ":")) + "\n"
    with payments.open("a", encoding="utf-8") as file:
        file.write(line)


def recorded_payments(payments: Path) -> list[dict[str, Any]]:
    """The refunds paid so far, in order; none when the file was never written."""
    if not payments.exists():
        return []
    lines = payments.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]
