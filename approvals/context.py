"""What led to a call, as the adapter saw it: the agent's stated reason and the last thing the
user said. Sealed into the request like the arguments, opened only by a reveal.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ledger.canonical import canonical_json
from ledger.limits import text_problem

from .errors import InvalidApprovalRequest
from .model import MAX_TEXT_BYTES

__all__ = ["CONTEXT_KEEP", "RequestContext"]

CONTEXT_KEEP = 2000
"""Characters of each text an adapter keeps (`RequestContext.captured`): enough for a reviewer
to read, far below `MAX_TEXT_BYTES`, so a long chat never fails a request."""
_ELLIPSIS = "…"
# A NUL or a surrogate cannot be stored (`ledger.limits.text_problem`): shown as U+FFFD.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


@dataclass(frozen=True)
class RequestContext:
    """What led to a call, shown to reviewers who may see the approval.

    Attributes:
        reason: the agent's stated reason: the text of the model message that asked for the
            call (None: it said nothing).
        last_user_message: the last message of the person the agent works for, before the
            call (None: none).

    Raises:
        InvalidApprovalRequest: a text that is not a string, cannot be stored (a NUL, a lone
            surrogate) or is longer than `MAX_TEXT_BYTES` (UTF-8).
    """

    reason: str | None = None
    last_user_message: str | None = None

    def __post_init__(self) -> None:
        for value, what in ((self.reason, "reason"), (self.last_user_message, "last message")):
            if value is None:
                continue
            if not isinstance(value, str):
                raise InvalidApprovalRequest(f"a context's {what} is text, not {type(value)}")
            if (problem := text_problem(value)) is not None:
                raise InvalidApprovalRequest(f"a context's {what} {problem}")
            if len(value.encode()) > MAX_TEXT_BYTES:
                raise InvalidApprovalRequest(
                    f"a context's {what} is longer than {MAX_TEXT_BYTES} bytes"
                )

    @classmethod
    def captured(
        cls, reason: str | None, last_user_message: str | None, *, keep: int = CONTEXT_KEEP
    ) -> RequestContext | None:
        """The context as an adapter should record it, whatever the conversation holds: the
        first `keep` characters of the reason and the last `keep` of the user's message (each
        cut marked with an ellipsis), characters that cannot be stored replaced, blank texts
        left out; None when nothing is left."""
        kept = cls(_clean(reason, keep, tail=False), _clean(last_user_message, keep, tail=True))
        return None if kept.empty else kept

    @property
    def empty(self) -> bool:
        return self.reason is None and self.last_user_message is None

    def to_json(self) -> dict[str, Any]:
        return {"reason": self.reason, "last_user_message": self.last_user_message}

    def sealed_text(self) -> str:
        """The text a request seals (canonical JSON)."""
        return canonical_json(self.to_json())

    @classmethod
    def from_text(cls, text: str) -> RequestContext:
        """The context from its opened `sealed_text`."""
        data = json.loads(text)
        return cls(data.get("reason"), data.get("last_user_message"))


def _clean(text: str | None, keep: int, *, tail: bool) -> str | None:
    if text is None or not text.strip():
        return None
    text = _UNSTORABLE.sub("\ufffd", text)
    if len(text) > keep:
        text = _ELLIPSIS + text[-keep:] if tail else text[:keep] + _ELLIPSIS
    return text
