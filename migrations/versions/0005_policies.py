"""Policy sets: Cedar policies published by administrators and journaled, the tools they are
validated against, and each run's history (calls and sums per tool) that policies read.

Revision ID: 0005_policies
Revises: 0004_agents
Create Date: 2026-12-05

`CHANGES` run first (the old signoff_commit_call signature goes, the new event right comes);
`SOURCES` are frozen copies of the package sources of the same path; `AFTER` fills the history
of the calls recorded before. The downgrade runs `UNDO`, then the newest earlier frozen copy of
every source this revision replaced.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ledger.store.sqlscript import execute_script

revision: str = "0005_policies"
down_revision: str | None = "0004_agents"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FROZEN = Path(__file__).with_suffix("")
EARLIER = (FROZEN.with_name("0002_evidence"), FROZEN.with_name("0001_baseline"))

CHANGES: tuple[str, ...] = ("call_tally_argument.sql",)

SOURCES: tuple[str, ...] = (
    "ledger/journal/sql/append.sql",
    "ledger/calls/sql/call_tallies.sql",
    "approvals/sql/policy_sets.sql",
    "approvals/sql/policy_tools.sql",
    "ledger/calls/sql/commit_call.sql",
    "approvals/sql/commit_policy.sql",
    "approvals/sql/register_tool.sql",
    "approvals/sql/audit_policy_sets.sql",
    "ledger/calls/sql/privileges.sql",
    "approvals/sql/policy_privileges.sql",
)

AFTER: tuple[str, ...] = ("tallies_so_far.sql",)

UNDO: tuple[str, ...] = ("policies.sql",)


def upgrade() -> None:
    execute_script("SET LOCAL check_function_bodies = off")
    for script in CHANGES:
        execute_script((FROZEN / "changes" / script).read_text(encoding="utf-8"))
    for source in SOURCES:
        execute_script((FROZEN / source).read_text(encoding="utf-8"))
    for script in AFTER:
        execute_script((FROZEN / "after" / script).read_text(encoding="utf-8"))
    execute_script("SET LOCAL check_function_bodies = on")


def downgrade() -> None:
    execute_script("SET LOCAL check_function_bodies = off")
    for script in UNDO:
        execute_script((FROZEN / "undo" / script).read_text(encoding="utf-8"))
    for source in SOURCES:
        earlier = next((d / source for d in EARLIER if (d / source).exists()), None)
        if earlier is not None:
            execute_script(earlier.read_text(encoding="utf-8"))
    execute_script("SET LOCAL check_function_bodies = on")
