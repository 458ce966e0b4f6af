"""The Slack notifier of `signoff serve`: a Block Kit message for each new approval request,
posted to an incoming webhook (`SIGNOFF_SLACK_WEBHOOK_URL`) or with a bot token through
`chat.postMessage` (`SIGNOFF_SLACK_BOT_TOKEN`, `SIGNOFF_SLACK_CHANNEL`); delivered once across
replicas and retried as webhooks are (`deliveries.Deliveries`).

The message (`slack_message`, pure) has a header, the request's facts as section fields, its
headline values, and one link button that opens the approval in the inbox: no button decides,
so a decision always carries an authenticated reviewer. Every text that comes from the request
(a tool name, a value) is escaped for mrkdwn (`&`, `<`, `>`) and shown `verbatim`, so it can
neither mention (`<!channel>`) nor link; lengths stay within Block Kit's limits (a header's
150 characters, a field's 2,000, 50 blocks).

A delivery is made when the incoming webhook answers 2xx, or `chat.postMessage` answers
`{"ok": true}`; its `error` (`channel_not_found`, `ratelimited`, ...) is recorded otherwise.
Logs never carry the token, the webhook's URL or the message.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import asyncpg
import httpx

from approvals import ApprovalStore
from ledger.store import Database
from ledger.store.notifier_settings import SlackSettings

from .deliveries import Deliveries, NotSent, http_client
from .notices import Notice, notice_for
from .webhook_bodies import encoded

__all__ = ["ACTOR", "MAX_BLOCKS", "MAX_FIELD_CHARS", "MAX_HEADER_CHARS", "SlackNotifier"]

ACTOR = "notifier:slack"
"""Its name in the journal, where it records the headline values it sends."""
MAX_HEADER_CHARS = 150
MAX_FIELD_CHARS = 2000
MAX_SECTION_CHARS = 3000
MAX_FIELDS_PER_SECTION = 10
MAX_BLOCKS = 50
_ANSWER_BYTES = 64 * 1024  # of chat.postMessage's answer, read for its `ok` and `error`
_ERROR_CODE = re.compile(r"[a-z0-9_]{1,100}")  # Slack's codes; anything else is not recorded


def mrkdwn(text: str) -> str:
    """`text` as Slack mrkdwn that mentions and links nothing: `&`, `<`, `>` escaped."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _field(label: str, value: str) -> dict[str, Any]:
    """A section field: a bold label over its value, both escaped, within a field's limit."""
    label_text = f"*{mrkdwn(_cut(label, 100))}*\n"
    text = label_text + _fit(mrkdwn(value), MAX_FIELD_CHARS - len(label_text))
    return {"type": "mrkdwn", "text": text, "verbatim": True}


def _fit(escaped: str, limit: int) -> str:
    """Escaped mrkdwn cut to `limit` characters with an ellipsis, never an escape in half."""
    if len(escaped) <= limit:
        return escaped
    kept = escaped[: limit - 1]
    amp = kept.rfind("&", max(len(kept) - 4, 0))  # `&amp;` is the longest, 5 characters
    if amp != -1 and ";" not in kept[amp:]:
        kept = kept[:amp]
    return kept + "…"


def _when(notice: Notice) -> str:
    expires = "never" if notice.expires_at is None else notice.expires_at.isoformat()
    return f"requested {notice.requested_at.isoformat()}, expires {expires}"


def slack_message(notice: Notice) -> dict[str, Any]:
    """The message of `notice`: `text` (what a notification shows) and `blocks`."""
    title = f"Approval requested: {notice.tool}"
    facts = [
        _field("Tool", notice.tool),
        _field("Run", notice.run_id),
        _field("Requested by", notice.requested_by),
        _field("Decided by", notice.deciders),
        _field("Requested", notice.requested_at.isoformat()),
        _field("Expires", "never" if notice.expires_at is None else notice.expires_at.isoformat()),
    ]
    if notice.status != "pending":  # decided (or expired) before this was sent
        facts.append(_field("Status", notice.status))
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _cut(title, MAX_HEADER_CHARS)}},
        {"type": "section", "fields": facts},
    ]
    if notice.irreversible:
        blocks.append(
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": ":warning: *Irreversible:* this tool's effect cannot be undone.",
                },
            }
        )
    if notice.description:
        text = _fit(mrkdwn(notice.description), MAX_SECTION_CHARS)
        described = {"type": "mrkdwn", "text": text, "verbatim": True}
        blocks.append({"type": "section", "text": described})
    headline = [_field(name, value) for name, value in notice.fields]
    for start in range(0, len(headline), MAX_FIELDS_PER_SECTION):
        chunk = headline[start : start + MAX_FIELDS_PER_SECTION]
        blocks.append({"type": "section", "fields": chunk})
    blocks.append(
        {
            "type": "actions",
            "elements": [
                {
                    "type": "button",
                    "text": {"type": "plain_text", "text": "Open in Signoff"},
                    "url": notice.link,
                    "action_id": "open_approval",
                }
            ],
        }
    )
    blocks.append(
        {
            "type": "context",
            "elements": [
                {
                    "type": "mrkdwn",
                    "text": mrkdwn(f"Approval {_cut(notice.approval_id, 200)} · {_when(notice)}"),
                    "verbatim": True,
                }
            ],
        }
    )
    summary = f"Approval requested: {notice.tool} in run {notice.run_id}"
    return {"text": _fit(mrkdwn(summary), MAX_SECTION_CHARS), "blocks": blocks[:MAX_BLOCKS]}


class SlackNotifier(Deliveries):
    """The Slack task of one service process: `start()` it, `close()` it."""

    noun = "slack notification"
    channel = "slack"

    def __init__(
        self,
        db: Database,
        store: ApprovalStore,
        settings: SlackSettings,
        public_url: str,
        *,
        poll_interval: float = 1.0,
    ) -> None:
        super().__init__(db, store, settings.target, settings, poll_interval=poll_interval)
        self.settings = settings
        self.public_url = public_url
        self._client: httpx.AsyncClient | None = None

    async def _open(self) -> None:
        self._client = http_client(
            self.settings.url,
            self.settings.timeout_seconds,
            "the Slack URL cannot be posted to (its host)",
        )

    async def _shut(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _described(self) -> dict[str, Any]:
        if self.settings.webhook_url is not None:
            return {"via": "incoming webhook"}
        return {"via": "chat.postMessage", "channel": self.settings.channel}

    async def _send(self, row: asyncpg.Record) -> int:
        if self._client is None:
            raise RuntimeError("SlackNotifier.start() first")
        notice = await notice_for(
            self.db,
            self.store,
            row["position"],
            row["delivery_id"],
            public_url=self.public_url,
            notifier=ACTOR,
        )
        message = slack_message(notice)
        headers = {"Content-Type": "application/json; charset=utf-8"}
        if self.settings.bot_token is not None:
            message = {"channel": self.settings.channel, "unfurl_links": False, **message}
            headers["Authorization"] = f"Bearer {self.settings.bot_token}"
        # The whole attempt is timed, not each read: a slow answer must not outlive the lease.
        async with (
            asyncio.timeout(self.settings.timeout_seconds),
            self._client.stream(
                "POST", self.settings.url, content=encoded(message), headers=headers
            ) as response,
        ):
            status = response.status_code
            if self.settings.bot_token is None or not 200 <= status < 300:
                return status
            answer = b""
            async for chunk in response.aiter_bytes():
                answer += chunk
                if len(answer) > _ANSWER_BYTES:
                    break
        return _posted(status, answer)


def _posted(status: int, answer: bytes) -> int:
    """`status` when chat.postMessage's answer says `ok`; else NotSent with its error code."""
    try:
        data = json.loads(answer)
    except ValueError:
        raise NotSent("chat.postMessage answered no JSON", status) from None
    if isinstance(data, dict) and data.get("ok") is True:
        return status
    error = data.get("error") if isinstance(data, dict) else None
    code = error if isinstance(error, str) and _ERROR_CODE.fullmatch(error) else "not ok"
    raise NotSent(f"chat.postMessage: {code}", status)
