"""The MCP errors the gateway answers with. Each has a code in JSON-RPC's range for
implementation-defined server errors and a `data.reason` a client can branch on; the message is
one line for the person reading it. Nothing ran when one of these is the answer, except
`outcome_unknown`, which says the call may have run once."""

from __future__ import annotations

import re
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR

from ledger.errors import DatabaseUnavailable, LeaseLost, ResultNotSerializable, SignoffError

__all__ = [
    "APPROVAL_REFUSED",
    "CALL_REFUSED",
    "OUTCOME_UNKNOWN",
    "POLICY_REFUSED",
    "UPSTREAM_REFUSALS",
    "refused",
    "signoff_refusal",
]

APPROVAL_REFUSED = -32051
"""The approval did not allow the call: rejected, expired, cancelled, or declined here."""
OUTCOME_UNKNOWN = -32052
"""A write of this call may have happened and was not recorded; a reviewer resolves it."""
POLICY_REFUSED = -32053
"""Signoff's policy set denied the call (`data.reason` `policy_denied`); nothing ran."""
CALL_REFUSED = INVALID_PARAMS
"""The request itself is refused: an unknown tool, a requestState used already or for another
run, a run or call id that is malformed."""
UPSTREAM_REFUSALS = frozenset({PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS})
"""An upstream's errors that say it refused the request, so nothing ran there; any other
(`Connection closed`, a timeout, its internal error) leaves a write's outcome unknown."""


def refused(code: int, reason: str, message: str, **data: Any) -> MCPError:
    """An MCP error with `data = {"reason": reason, **data}`."""
    return MCPError(code=code, message=message, data={"reason": reason, **data})


def signoff_refusal(error: SignoffError) -> MCPError:
    """A Signoff error as the client's answer, `data.reason` its name in snake case: a tool that
    ran and whose outcome was not recorded is `outcome_unknown`; the database out of reach an
    internal error (try again); the rest refuse the request, in one line."""
    reason = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", type(error).__name__).lower()
    if isinstance(error, LeaseLost | ResultNotSerializable):
        return refused(OUTCOME_UNKNOWN, "outcome_unknown", f"the call may have run: {error}")
    if isinstance(error, DatabaseUnavailable):
        return refused(INTERNAL_ERROR, reason, f"try again: {error}")
    return refused(CALL_REFUSED, reason, f"refused: {error}")
