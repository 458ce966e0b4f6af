"""Roles with one job each, and the key purposes signed decisions and keyed digests use.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

`signoff_app` (agent workers) and `signoff_auditor` exist since 0001 and 0004. This revision adds
`signoff_reviewer` (decide approvals, resolve `outcome_unknown` calls, reveal with a record) and
`signoff_key_admin` (data keys). Every role may read `alembic_version`, so the service's schema
probe works on any of their logins. `decision_signing` keys sign reviewers' decisions (wrapped
by the reviewer-side KEK, which workers never hold); `value_mac` keys make the digests auditors
and exports see keyed.
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger.store.sqlscript import execute_script

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ROLES = ("signoff_app", "signoff_reviewer", "signoff_key_admin", "signoff_auditor")

UPGRADE = (
    "\n".join(
        f"""
DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN
        CREATE ROLE {role} NOLOGIN;
    END IF;
END $$;"""
        for role in ROLES
    )
    + f"""
GRANT SELECT ON alembic_version TO {", ".join(ROLES)};
ALTER TABLE data_keys DROP CONSTRAINT data_keys_purpose_check;
ALTER TABLE data_keys ADD CONSTRAINT data_keys_purpose_check CHECK (purpose IN
    ('checkpoint', 'result', 'approval_mac', 'digest_signing', 'decision_signing', 'value_mac'));
"""
)

# Roles are shared by every database of the cluster, so they stay.
DOWNGRADE = f"""
REVOKE SELECT ON alembic_version FROM {", ".join(ROLES)};
ALTER TABLE data_keys DROP CONSTRAINT data_keys_purpose_check;
ALTER TABLE data_keys ADD CONSTRAINT data_keys_purpose_check
    CHECK (purpose IN ('checkpoint', 'result', 'approval_mac', 'digest_signing'));
"""


def upgrade() -> None:
    execute_script(UPGRADE)


def downgrade() -> None:
    execute_script(DOWNGRADE)
