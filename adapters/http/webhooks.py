"""Webhook notifications of `signoff serve`: a new approval request, a call whose outcome is
unknown, posted to `SIGNOFF_WEBHOOK_URL` and signed with its secret.

`Webhooks` is one `deliveries.Deliveries` task (recorded, claimed and retried there, once across
replicas) whose target is the URL: a 2xx answer delivers a post; anything else (another status,
a timeout, a refused connection, a redirect, which is not followed) is tried again.

A body is built when it is sent, from what the database holds then, and never carries
arguments. Logs name the delivery, the event's position, the attempt and the status; never the
body, the secret or the URL (whose path may be its secret).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx

from approvals import ApprovalStore, UnknownApproval
from approvals.projection import STREAM_PREFIX, approval_id_of
from ledger.journal.reader import event_at
from ledger.log import get_logger
from ledger.store import Database
from ledger.store.settings import WebhookSettings

from . import _sql as sql
from .deliveries import MIN_PASS_GAP, Deliveries, NotSent, http_client, retry_delay
from .shapes import approval_document
from .webhook_bodies import encoded, signature_header, signoff_body, slack_body

__all__ = ["KINDS", "MIN_PASS_GAP", "Webhooks", "retry_delay"]

log = get_logger(__name__)

KINDS = ("approval.requested", "call.outcome_unknown")
"""The journal events that are delivered."""


class Webhooks(Deliveries):
    """The webhook task of one service process: `start()` it, `close()` it."""

    noun = "webhook"
    channel = "webhook"
    kinds = KINDS

    def __init__(
        self,
        db: Database,
        store: ApprovalStore,
        settings: WebhookSettings,
        *,
        poll_interval: float = 1.0,
    ) -> None:
        super().__init__(db, store, settings.url, settings, poll_interval=poll_interval)
        self.settings = settings
        self._client: httpx.AsyncClient | None = None

    async def _open(self) -> None:
        self._client = http_client(
            self.settings.url,
            self.settings.timeout_seconds,
            "SIGNOFF_WEBHOOK_URL cannot be posted to (its host or port)",
        )

    async def _shut(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _described(self) -> dict[str, Any]:
        return {"host": urlsplit(self.settings.url).hostname, "format": self.settings.format}

    async def _send(self, row: asyncpg.Record) -> int:
        body = encoded(await self._body(row))
        return await self._post(row["delivery_id"], body)

    async def _post(self, delivery_id: int, body: bytes) -> int:
        if self._client is None:
            raise RuntimeError("Webhooks.start() first")
        headers = {
            "Content-Type": "application/json",
            "X-Signoff-Delivery": str(delivery_id),
            "X-Signoff-Signature": signature_header(self.settings.secret, body, int(time.time())),
        }
        # httpx times each read alone: a receiver answering a byte at a time would hold the
        # attempt past its lease (another replica posts it again) and every delivery after it.
        # The answer's body is never read: only its status counts.
        async with (
            asyncio.timeout(self.settings.timeout_seconds),
            self._client.stream(
                "POST", self.settings.url, content=body, headers=headers
            ) as response,
        ):
            return response.status_code

    async def _body(self, row: asyncpg.Record) -> dict[str, Any]:
        kind, position = row["kind"], row["position"]
        async with self.db.connection() as conn:
            event = await event_at(conn, position)
            if event is None:
                raise NotSent(f"no event at position {position}")
            stream_id, at = event.stream_id, event.recorded_at
            if kind == "call.outcome_unknown":
                subject = await _call(conn, stream_id)
        if kind == "approval.requested":
            if not stream_id.startswith(STREAM_PREFIX):
                raise NotSent(f"the event at {position} is not an approval's")
            try:
                approval = await self.store.get(approval_id_of(stream_id))
            except UnknownApproval:
                raise NotSent(f"no approval for the event at {position}") from None
            subject = approval_document(approval, args=None)
        make = slack_body if self.settings.format == "slack" else signoff_body
        return make(kind, row["delivery_id"], position, at, subject)


async def _call(conn: asyncpg.Connection, stream_id: str) -> dict[str, Any]:
    """The call of stream `stream_id`: its run, id, tool and status (never its arguments)."""
    run_id, _, call_id = stream_id.removeprefix("call:").partition("/")
    decoded = [part.replace("%2F", "/").replace("%25", "%") for part in (run_id, call_id)]
    row = await conn.fetchrow(sql.CALL, *decoded, stream_id)
    if row is None:
        raise NotSent("no call for the event")
    return {k: row[k] for k in ("run_id", "call_id", "tool", "status")}
