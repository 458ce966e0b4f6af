"""What a webhook delivery sends: its body in either format and its signature. Pure functions.

The signature is `X-Signoff-Signature: t=<unix seconds>,v1=<hex>`, the hex being the
HMAC-SHA256, under the webhook secret, of the ASCII timestamp, a dot, and the body's bytes
exactly as received. A receiver checks it with `verify_signature` (or the same few lines in its
own language) and refuses a timestamp too far from its clock, so a recorded request cannot be
replayed later; `X-Signoff-Delivery` (the delivery id, also the body's `id`) is the same on
every attempt of one delivery: a receiver that keeps the ids it has handled ignores a retry it
has already seen.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from datetime import datetime
from typing import Any

__all__ = [
    "DEFAULT_TOLERANCE_SECONDS",
    "encoded",
    "signature_header",
    "signoff_body",
    "slack_body",
    "verify_signature",
]

DEFAULT_TOLERANCE_SECONDS = 300
"""How far a signature's timestamp may be from the receiver's clock (either way)."""


def signature_header(secret: str, body: bytes, timestamp: int) -> str:
    """`X-Signoff-Signature` of `body`, signed at `timestamp` (unix seconds)."""
    return f"t={timestamp},v1={_digest(secret, body, timestamp)}"


def verify_signature(
    secret: str,
    header: str,
    body: bytes,
    *,
    tolerance_seconds: int = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> bool:
    """Whether `header` is a signature of `body` under `secret`, made within
    `tolerance_seconds` of `now` (default: this clock). Any `v1` of the header may match."""
    fields = [part.split("=", 1) for part in header.split(",") if "=" in part]
    stamps = [value for name, value in fields if name.strip() == "t"]
    if len(stamps) != 1 or not stamps[0].strip().isdigit():
        return False
    timestamp = int(stamps[0])
    if abs((time.time() if now is None else now) - timestamp) > tolerance_seconds:
        return False
    expected = _digest(secret, body, timestamp)
    return any(
        hmac.compare_digest(value.strip(), expected) for name, value in fields if name == "v1"
    )


def _digest(secret: str, body: bytes, timestamp: int) -> str:
    signed = str(timestamp).encode("ascii") + b"." + body
    return hmac.new(secret.encode("utf-8"), signed, hashlib.sha256).hexdigest()


def signoff_body(
    kind: str, delivery_id: int, position: int, at: datetime, subject: dict[str, Any]
) -> dict[str, Any]:
    """Our JSON: `approval` (`approval.requested`) or `call` (`call.outcome_unknown`) holds
    `subject`, which the caller makes without arguments."""
    key = "approval" if kind.startswith("approval.") else "call"
    return {
        "type": kind,
        "id": delivery_id,
        "position": position,
        "at": at.isoformat(),
        key: subject,
    }


def slack_body(
    kind: str, delivery_id: int, position: int, at: datetime, subject: dict[str, Any]
) -> dict[str, Any]:
    """A Slack incoming webhook's message: `text` (the notification's one line) and `blocks`."""
    if kind.startswith("approval."):
        headline = (
            f"Approval requested: {_plain(subject.get('tool'))} in run "
            f"{_plain(subject.get('run_id'))} ({_plain(subject.get('approval_id'))})"
        )
        detail = _plain(subject.get("description") or "")
    else:
        headline = (
            f"Call outcome unknown: {_plain(subject.get('tool'))} "
            f"{_plain(subject.get('call_id'))} in run {_plain(subject.get('run_id'))}"
        )
        detail = "It may or may not have run; a reviewer resolves it (signoff calls resolve)."
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{headline}*"}},
    ]
    if detail:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": detail[:2900]}})
    blocks.append(
        {
            "type": "context",
            "elements": [
                {
                    "type": "mrkdwn",
                    "text": f"{kind} · position {position} · delivery {delivery_id} · "
                    f"{at.isoformat()}",
                }
            ],
        }
    )
    return {"text": headline, "blocks": blocks}


def _plain(value: object) -> str:
    """`value` as Slack text that links and mentions nothing (`&`, `<`, `>` escaped)."""
    text = "" if value is None else str(value)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def encoded(body: dict[str, Any]) -> bytes:
    """The bytes sent and signed: compact UTF-8 JSON."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
