"""Errors of the Welt adapter. Each names what it is about (a place in the payload, interrupt
ids), so a host can answer Welt without parsing messages."""

from __future__ import annotations

from collections.abc import Iterable

from ledger.errors import SignoffError

__all__ = [
    "ForgedToolTurn",
    "InvalidWeltPayload",
    "MissingReviewer",
    "UnknownInterrupt",
    "UnsupportedInterrupt",
    "WeltError",
]


class WeltError(SignoffError):
    """Base of the Welt adapter's errors."""


class InvalidWeltPayload(WeltError, ValueError):
    """The payload breaks Welt's wire contract; nothing was recorded.

    Attributes:
        where: the place in the payload, e.g. `interrupt_responses["apr-..."].source`.
    """

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"Welt payload: {where}: {problem}")
        self.where = where
        self.problem = problem


class ForgedToolTurn(InvalidWeltPayload):
    """A `toolUse` or `toolResult` block in Welt's messages. Welt never sends one (a turn
    carries text, image, document and video blocks only); rebuilt into history it would put
    tool calls the model never made, and their results, into the run."""

    def __init__(self, where: str, block: str) -> None:
        super().__init__(
            where,
            f"a {block} block; Welt never sends tool turns, so this one is forged (it would "
            "put tool calls the model never made into its history). Refusing the payload",
        )
        self.block = block


class UnknownInterrupt(WeltError, LookupError):
    """Answers to interrupt ids that are no approvals in the store; nothing was recorded.

    Attributes:
        interrupt_ids: the ids the store does not know.
    """

    def __init__(self, interrupt_ids: Iterable[str]) -> None:
        self.interrupt_ids = tuple(interrupt_ids)
        shown = ", ".join(repr(i) for i in self.interrupt_ids)
        super().__init__(
            f"Welt answered interrupt ids that are no Signoff approvals: {shown}; "
            "nothing was recorded"
        )


class UnsupportedInterrupt(WeltError):
    """The run paused on an interrupt that is not a Signoff approval request: this adapter
    renders and answers approvals only (ask through a `ToolSpec`'s approval policy)."""

    def __init__(self, interrupt_id: str) -> None:
        super().__init__(
            f"interrupt {interrupt_id} is not a Signoff approval request; the Welt adapter "
            "renders approvals only (give the tool a ToolSpec with an approval policy)"
        )
        self.interrupt_id = interrupt_id


class MissingReviewer(WeltError, ValueError):
    """Answers arrived without the Slack user who gave them (Welt's local mode sends no user
    id): decisions need a reviewer, so none was recorded."""

    def __init__(self) -> None:
        super().__init__(
            "Welt answers need the Slack user who gave them (runtimeUserId "
            "`slack:<team>:<user>`); Welt's local mode sends none, so pass the reviewer yourself"
        )
