"""Evidence needs its signature: what a worker or reviewer login may append, who wrote each event,
leases fenced by a token, a tree checked from its leaves, budgets and timeouts.

Revision ID: 0002_evidence
Revises: 0001_baseline
Create Date: 2026-12-05

`CHANGES` are this revision's own scripts (table changes a CREATE in a source cannot make on a
database that has the table), run first; `SOURCES` are frozen copies of the package sources of
the same path, as in the baseline. The downgrade runs `UNDO` (drops what is new, puts tables
back), then the baseline's frozen copy of every source this revision replaced.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ledger.store.sqlscript import execute_script

revision: str = "0002_evidence"
down_revision: str | None = "0001_baseline"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FROZEN = Path(__file__).with_suffix("")
BASELINE = FROZEN.with_name("0001_baseline")

CHANGES: tuple[str, ...] = (
    "journal_logins.sql",
    "signed_evidence.sql",
    "self_confirm.sql",
    "call_leases.sql",
)

SOURCES: tuple[str, ...] = (
    "ledger/journal/sql/append.sql",
    "ledger/journal/sql/write_events.sql",
    "ledger/calls/sql/commit_call.sql",
    "ledger/calls/sql/renew_leases.sql",
    "approvals/sql/commit_approval.sql",
    "ledger/audit/sql/tree_integrate.sql",
    "ledger/journal/sql/audit_events.sql",
    # After audit_events: a downgrade creates the baseline's view again, and its grant with it.
    "ledger/journal/sql/privileges.sql",
    "ledger/calls/sql/privileges.sql",
    "ledger/keys/sql/nonce_rates.sql",
    "ledger/keys/sql/reserve_nonces.sql",
    "ledger/store/sql/session_limits.sql",
)

# What is new goes first, then the changes are undone in the reverse order of CHANGES.
UNDO: tuple[str, ...] = (
    "session_limits.sql",
    "nonce_rates.sql",
    "call_leases.sql",
    "self_confirm.sql",
    "signed_evidence.sql",
    "journal_logins.sql",
)


def upgrade() -> None:
    execute_script("SET LOCAL check_function_bodies = off")
    for script in CHANGES:
        execute_script((FROZEN / "changes" / script).read_text(encoding="utf-8"))
    for source in SOURCES:
        execute_script((FROZEN / source).read_text(encoding="utf-8"))
    execute_script("SET LOCAL check_function_bodies = on")


def downgrade() -> None:
    execute_script("SET LOCAL check_function_bodies = off")
    for script in UNDO:
        execute_script((FROZEN / "undo" / script).read_text(encoding="utf-8"))
    for source in SOURCES:
        if (BASELINE / source).exists():
            execute_script((BASELINE / source).read_text(encoding="utf-8"))
    execute_script("SET LOCAL check_function_bodies = on")
