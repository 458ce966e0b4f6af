"""A call names only the approval that allowed it, and no lease is shortened.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01

Two gaps a worker login could use with the functions of 0010:
- a new call's row and `call.started` event carried whatever approval and reviewers the worker
  gave, so `ledger calls --approved-by alice` could list a call alice never saw. Now a call that
  names an approval (or reviewers) starts only in the transaction that consumed that approval,
  for the same run and call, and its reviewers are exactly the approval's deciders when the
  decision runs the tool (none otherwise);
- `signoff_renew_leases` set a running call's lease to what the caller asked, so one worker
  could cut another's lease to a second and take the call over while it still ran. A renewal
  now only lengthens a lease.

Both functions keep their signatures and grants (CREATE OR REPLACE); the downgrade puts 0010's
bodies back.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

from ledger.store.sqlscript import execute_script, load_revision

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INSERTED = """        r.waiters := 0;
"""
# After the row's own checks, before it is inserted: the approval it names, in this
# transaction's view (its consumption is in this transaction, just before).
_APPROVED_BY_ITS_APPROVAL = """        r.waiters := 0;
        IF r.approval_id IS NOT NULL OR r.approval_stream IS NOT NULL
                OR cardinality(r.approved_by) > 0 THEN
            SELECT * INTO a FROM approvals WHERE approval_id = r.approval_id;
            IF NOT FOUND OR a.consumed_at IS NULL OR a.run_id <> r.run_id
                    OR a.call_id <> r.call_id
                    OR r.approval_stream IS DISTINCT FROM 'approval:' || a.approval_id
                    OR r.approved_by IS DISTINCT FROM (CASE
                        WHEN a.status IN ('approved', 'edited') THEN coalesce(a.decided_by, '{}')
                        ELSE '{}' END) THEN
                RAISE EXCEPTION 'call % does not carry what approval % decided', p_stream,
                        coalesce(r.approval_id, 'null')
                    USING ERRCODE = 'SG422',
                          DETAIL = json_build_object('stream_id', p_stream,
                                                     'type', p_types[1])::text;
            END IF;
        END IF;
"""
_DECLARED = """    status_after text;
"""
_DECLARED_WITH_APPROVAL = """    status_after text;
    a approvals;
"""
_RENEWED = "SET lease_until = now() + make_interval("
_ONLY_LENGTHENED = "SET lease_until = greatest(t.lease_until, now() + make_interval("
_RENEWED_END = "least(greatest(p_seconds, 1), 86400))\n"
_ONLY_LENGTHENED_END = "least(greatest(p_seconds, 1), 86400)))\n"


def _least_privilege() -> ModuleType:
    return load_revision(__file__, "0010_least_privilege")


def _replaced(sql: str, old: str, new: str) -> str:
    if sql.count(old) != 1:
        raise RuntimeError(f"0010's function text changed: {old.strip()!r}")
    return sql.replace(old, new)


def _renew_leases(sql: str) -> str:
    """0010's lease functions with `signoff_renew_leases` only lengthening a lease."""
    return _replaced(_replaced(sql, _RENEWED, _ONLY_LENGTHENED), _RENEWED_END, _ONLY_LENGTHENED_END)


def upgrade() -> None:
    previous = _least_privilege()
    call = _replaced(previous.COMMIT_CALL, _DECLARED, _DECLARED_WITH_APPROVAL)
    call = _replaced(call, _INSERTED, _APPROVED_BY_ITS_APPROVAL)
    execute_script(call.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))
    renew = _renew_function(previous)
    execute_script(_renew_leases(renew).replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))


def downgrade() -> None:
    previous = _least_privilege()
    execute_script(previous.COMMIT_CALL.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))
    renew = _renew_function(previous)
    execute_script(renew.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))


def _renew_function(previous: ModuleType) -> str:
    """`signoff_renew_leases` alone, out of 0010's lease functions."""
    text: str = previous.LEASES
    start = text.index("CREATE FUNCTION signoff_renew_leases(")
    end = text.index("CREATE FUNCTION signoff_count_waiter(")
    return text[start:end]
