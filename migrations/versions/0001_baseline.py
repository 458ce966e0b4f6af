"""Signoff 0.1: the whole schema, from the SQL sources as they were when it was written.

Revision ID: 0001_baseline
Revises:
Create Date: 2026-12-05

Each file this revision runs is a frozen copy, in the folder beside it, of the package's source of
the same path (for example `ledger/journal/sql/append.sql`). A later revision that changes an
object carries a frozen copy of its new text in a folder of its own; it never edits this one.
`tests/test_sql_sources.py` checks that the database at head matches the sources.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ledger.store.sqlscript import execute_script

revision: str = "0001_baseline"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FROZEN = Path(__file__).with_suffix("")

# In order: what a file names must exist before it (the journal's trigger function before its
# table, tables before the functions that return their rows). Function bodies are checked when
# first called, not when created (`check_function_bodies` off, as pg_dump restores them).
SOURCES = (
    "ledger/store/sql/roles.sql",
    "ledger/journal/sql/domains.sql",
    "ledger/calls/sql/domains.sql",
    "approvals/sql/domains.sql",
    "ledger/journal/sql/refuse_change.sql",
    "ledger/journal/sql/events.sql",
    "ledger/journal/sql/event_rights.sql",
    "ledger/keys/sql/data_keys.sql",
    "ledger/calls/sql/tool_calls.sql",
    "ledger/audit/sql/tree_state.sql",
    "ledger/audit/sql/tree_tiles.sql",
    "approvals/sql/approvals.sql",
    "approvals/sql/approval_grants.sql",
    "approvals/sql/reviewers.sql",
    "approvals/sql/api_tokens.sql",
    "adapters/http/sql/webhook_deliveries.sql",
    "adapters/langgraph/sql/checkpoints.sql",
    "adapters/langgraph/sql/checkpoint_blobs.sql",
    "adapters/langgraph/sql/checkpoint_writes.sql",
    "adapters/langgraph/sql/checkpoint_migrations.sql",
    "ledger/journal/sql/append.sql",
    "ledger/journal/sql/write_events.sql",
    "ledger/keys/sql/key_create.sql",
    "ledger/keys/sql/key_rotate.sql",
    "ledger/keys/sql/key_retire.sql",
    "ledger/keys/sql/key_rewrap.sql",
    "ledger/keys/sql/reserve_nonces.sql",
    "ledger/calls/sql/lock_call.sql",
    "ledger/calls/sql/lock_once_per_run.sql",
    "ledger/calls/sql/commit_call.sql",
    "ledger/calls/sql/renew_leases.sql",
    "ledger/calls/sql/count_waiter.sql",
    "ledger/audit/sql/tree_integrate.sql",
    "approvals/sql/lock_approval.sql",
    "approvals/sql/commit_approval.sql",
    "approvals/sql/commit_reviewer.sql",
    "approvals/sql/grant.sql",
    "approvals/sql/token_use.sql",
    "approvals/sql/api_tokens_active.sql",
    "adapters/http/sql/webhook_latest.sql",
    "adapters/http/sql/webhook_record.sql",
    "adapters/http/sql/webhook_claim.sql",
    "adapters/http/sql/webhook_attempted.sql",
    "ledger/journal/sql/audit_events.sql",
    "ledger/calls/sql/audit_tool_calls.sql",
    "approvals/sql/audit_approvals.sql",
    "approvals/sql/audit_reviewers.sql",
    "approvals/sql/audit_api_tokens.sql",
    "adapters/http/sql/audit_webhook_deliveries.sql",
    "ledger/store/sql/privileges.sql",
    "ledger/journal/sql/privileges.sql",
    "ledger/keys/sql/privileges.sql",
    "ledger/calls/sql/privileges.sql",
    "ledger/audit/sql/privileges.sql",
    "approvals/sql/privileges.sql",
    "adapters/http/sql/privileges.sql",
    "adapters/langgraph/sql/privileges.sql",
)

# Everything but the roles, which belong to the cluster (their grants go with the objects).
DOWNGRADE = """
DROP VIEW audit_events, audit_tool_calls, audit_approvals, audit_reviewers, audit_api_tokens,
    audit_webhook_deliveries;
DROP FUNCTION signoff_append, signoff_write_events, signoff_key_create,
    signoff_key_rotate, signoff_key_retire, signoff_key_rewrap, signoff_reserve_nonces,
    signoff_lock_call, signoff_lock_once_per_run, signoff_commit_call, signoff_renew_leases,
    signoff_count_waiter, signoff_tree_integrate, signoff_lock_approval, signoff_commit_approval,
    signoff_commit_reviewer, signoff_grant, signoff_token_use, signoff_api_tokens_active,
    signoff_webhook_latest, signoff_webhook_record, signoff_webhook_claim,
    signoff_webhook_attempted;
DROP TABLE events, event_rights, data_keys, tool_calls, tree_state, tree_tiles, approvals,
    approval_grants, reviewers, api_tokens, webhook_deliveries, checkpoints, checkpoint_blobs,
    checkpoint_writes, checkpoint_migrations;
DROP FUNCTION signoff_refuse_change;
DROP DOMAIN signoff_stream_id, signoff_event_version, signoff_event_type, signoff_actor,
    signoff_hash, signoff_tag_version, signoff_call_effect, signoff_call_status,
    signoff_approval_status;
REVOKE SELECT ON alembic_version FROM signoff_app, signoff_reviewer, signoff_key_admin,
    signoff_auditor;
REVOKE USAGE ON SCHEMA public FROM signoff_auditor;
"""


def upgrade() -> None:
    execute_script("SET LOCAL check_function_bodies = off")
    for source in SOURCES:
        execute_script((FROZEN / source).read_text(encoding="utf-8"))
    execute_script("SET LOCAL check_function_bodies = on")


def downgrade() -> None:
    execute_script(DOWNGRADE)
