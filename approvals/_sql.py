"""The approval store's queries, in one place (its row writes are `projection.APPROVALS`'s).

`BY_REQUEST` finds a request by its arguments' digest under any live value-MAC key: after a
rotation the same (run, call id, arguments) still finds its approval, in one statement. (Two
processes asking the same new question at the same moment within `key_refresh_seconds` of a
rotation, one still on the old key, may record two requests; the tool-call ledger still runs the
call at most once.)"""

from collections.abc import Callable
from functools import cache

from .projection import COLUMNS

BY_REQUEST = f"""
SELECT {COLUMNS} FROM approvals
WHERE run_id = $1 AND call_id = $2 AND args_digest = ANY($3::text[])
ORDER BY requested_at LIMIT 1
"""

# A new request looks for itself and for a sticky grant of its run and tool in one statement:
# `r` is empty (all NULL) when the request is new, `grant_id` NULL when no grant holds.
BY_REQUEST_WITH_GRANT = f"""
SELECT r.*, g.grant_id AS active_grant FROM (SELECT) AS one
LEFT JOIN LATERAL ({BY_REQUEST}) AS r ON true
LEFT JOIN LATERAL (
    SELECT grant_id FROM approval_grants
    WHERE run_id = $1 AND tool = $4 AND expires_at > $5
    ORDER BY expires_at DESC LIMIT 1
) AS g ON true
"""

BY_ID = f"SELECT {COLUMNS} FROM approvals WHERE approval_id = $1"

# A step on an approval (a decision, a cancellation, an expiry, a consumption) reads it without
# a lock and commits fenced at the version it read (`ApprovalStore._advance`): one read and one
# write, no transaction around them (a lock would need two more statements, BEGIN and COMMIT,
# and a lost race writes nothing anyway). A decision's read brings the directory's groups of
# the deciding reviewer ($2) and the decision that reviewer recorded before under the client's
# request id ($3), so a retry is answered from the read; a consumption's the approval's stream
# (a consumer proves the row by it). Row, groups and events are of one snapshot. One statement
# per kind of step, not one with a switch: a parameter that turns a subquery on or off is
# planned again on every call. Each brings the server's clock: a request is due (and may be
# expired) by it, as the database checks.
_STREAM = """(
SELECT json_agg(json_build_array(e.version, e.type, e.data, e.actor) ORDER BY e.version)::text
FROM events e WHERE e.stream_id = 'approval:' || t.approval_id)"""
TO_ADVANCE = f"""
SELECT {COLUMNS}, NULL::text AS stream, NULL::text[] AS reviewer_groups,
NULL::text AS request_decision, clock_timestamp() AS server_now
FROM approvals t WHERE t.approval_id = $1
"""
TO_DECIDE = f"""
SELECT {COLUMNS}, NULL::text AS stream,
(SELECT groups FROM reviewers WHERE reviewer_id = $2::text AND active) AS reviewer_groups,
(SELECT e.data->>'decision' FROM events e
 WHERE e.stream_id = 'approval:' || t.approval_id AND e.type = 'approval.decided'
 AND e.actor = $2::text AND e.data->>'request_id' = $3::text
 ORDER BY e.version LIMIT 1) AS request_decision,
clock_timestamp() AS server_now
FROM approvals t WHERE t.approval_id = $1
"""
TO_CONSUME = f"""
SELECT {COLUMNS}, {_STREAM} AS stream, NULL::text[] AS reviewer_groups,
NULL::text AS request_decision, clock_timestamp() AS server_now
FROM approvals t WHERE t.approval_id = $1
"""
# Inside a caller's transaction a consumer locks the row instead (the caller's later statements
# must meet no conflict), through the database's function (FOR UPDATE needs rights no worker
# has). The stream is the statement's snapshot, taken before the lock was granted: a row locked
# after waiting for another writer is newer than it, so the consumer reads the stream again when
# it does not prove the row (the lock keeps both still).
LOCKED_WITH_STREAM = f"""
SELECT {COLUMNS}, {_STREAM} AS stream, NULL::text[] AS reviewer_groups,
NULL::text AS request_decision, clock_timestamp() AS server_now
FROM signoff_lock_approval($1) t
"""


@cache
def listing(
    status: str | None,
    *,
    run_id: bool,
    after: bool,
    tool: bool,
    admitting: bool,
    requested_by: bool = False,
) -> str:
    """The query of a page of approvals, oldest first, with only the conditions asked for; its
    parameters, in order: the run id, the (requested_at, approval_id) the page starts after,
    the tool, the approver names that admit a reviewer (`policy->'approvers'`), who requested
    it, then the limit. A status is written in (one of `ApprovalStatus`'s values), so a pending
    list reads the pending rows' index. One statement per combination, each planned once: a
    condition made optional by its parameter (`$1 IS NULL OR ...`) is planned again on every
    call."""
    if status is not None and not status.isalpha():
        raise ValueError(f"not an approval status: {status!r}")
    where, parameter = _conditions(
        [] if status is None else [f"status = '{status}'"],
        run_id=run_id,
        after="(requested_at, approval_id) > ({}, {}::text)" if after else None,
        tool=tool,
        admitting=admitting,
        requested_by=requested_by,
    )
    return f"""
SELECT {COLUMNS} FROM approvals {where}
ORDER BY requested_at, approval_id
LIMIT {parameter()}
"""


_DECIDED = "COALESCE(decided_at, requested_at)"  # every final status has a decided_at


@cache
def history(
    statuses: tuple[str, ...],
    *,
    run_id: bool,
    after: bool,
    tool: bool,
    admitting: bool,
    requested_by: bool,
) -> str:
    """The query of a page of approvals in `statuses`, newest first by decision time (a pending
    one's by its request time), then id descending; parameters as `listing`'s, the cursor being
    that time and the id. The statuses are written in, each one of `ApprovalStatus`'s values."""
    if not statuses or not all(s.isalpha() for s in statuses):
        raise ValueError(f"not approval statuses: {statuses!r}")
    named = ", ".join(f"'{s}'" for s in statuses)
    conditions = [f"status IN ({named})"]
    if "pending" not in statuses:  # the history index's own predicate, so the planner uses it
        conditions.append("status::text <> 'pending'")
    where, parameter = _conditions(
        conditions,
        run_id=run_id,
        after=f"({_DECIDED}, approval_id) < ({{}}, {{}}::text)" if after else None,
        tool=tool,
        admitting=admitting,
        requested_by=requested_by,
    )
    return f"""
SELECT {COLUMNS} FROM approvals {where}
ORDER BY {_DECIDED} DESC, approval_id DESC
LIMIT {parameter()}
"""


def _conditions(
    conditions: list[str],
    *,
    run_id: bool,
    after: str | None,
    tool: bool,
    admitting: bool,
    requested_by: bool,
) -> tuple[str, Callable[[], str]]:
    """A WHERE clause of `conditions` and the optional ones asked for, numbering parameters
    in the order `listing` says, and the function that numbers the next (the limit)."""
    n = 0

    def parameter() -> str:
        nonlocal n
        n += 1
        return f"${n}"

    conditions = list(conditions)
    if run_id:
        conditions.append(f"run_id = {parameter()}")
    if after is not None:
        conditions.append(after.format(parameter(), parameter()))
    if tool:
        conditions.append(f"tool = {parameter()}")
    if admitting:
        conditions.append(
            f"(policy->'approvers' = '[]'::jsonb OR policy->'approvers' ?| {parameter()}::text[])"
        )
    if requested_by:
        conditions.append(f"requested_by = {parameter()}")
    where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
    return where, parameter


GRANT = "SELECT signoff_grant($1, $2, $3, $4, $5, $6, $7::json)"

# API tokens (`credentials.py`).
TOKEN_COLUMNS = (
    "token_id, reviewer, scope, created_by, created_at, expires_at, revoked_at, last_used_at"
)
TOKEN_INSERT = """
INSERT INTO api_tokens (token_id, secret_hash, reviewer, scope, created_by, created_at,
                        expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
"""
TOKEN_BY_ID = f"SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE token_id = $1"
TOKEN_LOCKED = f"SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE token_id = $1 FOR UPDATE"
TOKEN_LIST = f"""
SELECT {TOKEN_COLUMNS} FROM api_tokens
WHERE $1 OR (revoked_at IS NULL AND expires_at > now())
ORDER BY created_at, token_id
"""
TOKEN_REVOKE = "UPDATE api_tokens SET revoked_at = $2 WHERE token_id = $1"
TOKEN_USE = "SELECT status, reviewer, scope, expires_at FROM signoff_token_use($1, $2)"
TOKENS_ACTIVE = "SELECT signoff_api_tokens_active()"

# The reviewer directory (`reviewers.py`).
REVIEWER_COLUMNS = "reviewer_id, groups, active, changed_by, changed_at, version"
REVIEWER_BY_ID = f"SELECT {REVIEWER_COLUMNS} FROM reviewers WHERE reviewer_id = $1"
REVIEWER_LIST = f"SELECT {REVIEWER_COLUMNS} FROM reviewers WHERE $1 OR active ORDER BY reviewer_id"
# A decision reads the groups in its own transaction: a reviewer removed before it commits
# decides for no group.
GROUPS_OF = "SELECT groups FROM reviewers WHERE reviewer_id = $1 AND active"

# Every approval stream of the journal, for `ledger verify` (`integrity.every_approval_problem`).
EVERY_APPROVAL_EVENT = """
SELECT stream_id, version, type, data::text AS data, actor FROM events
WHERE stream_id LIKE 'approval:%' ORDER BY stream_id, version
"""
