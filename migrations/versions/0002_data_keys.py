"""Data keys, wrapped by the key-encryption key, one active per purpose.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger.store.sqlscript import execute_script

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The key material is wrapped (AES-256-GCM under the KEK, bound to the key's id and purpose) and
# never leaves the database in clear; the KEK never enters it. `public_key` holds the Ed25519
# public half of signing keys, so auditors can check old digests after the key is retired.
UPGRADE = """
CREATE TABLE data_keys (
    key_id      text PRIMARY KEY CHECK (key_id ~ '^[a-z]+-[0-9a-f]{8,32}$'),
    purpose     text NOT NULL
        CHECK (purpose IN ('checkpoint', 'result', 'approval_mac', 'digest_signing')),
    state       text NOT NULL CHECK (state IN ('active', 'decrypt_only', 'retired')),
    kek_id      text NOT NULL,
    wrapped     bytea NOT NULL,
    public_key  bytea,
    created_at  timestamptz NOT NULL DEFAULT now(),
    rotated_at  timestamptz,
    retired_at  timestamptz
);
CREATE UNIQUE INDEX data_keys_one_active_per_purpose ON data_keys (purpose)
    WHERE state = 'active';
GRANT SELECT, INSERT, UPDATE ON data_keys TO signoff_app;
"""

DOWNGRADE = "DROP TABLE data_keys;"


def upgrade() -> None:
    execute_script(UPGRADE)


def downgrade() -> None:
    execute_script(DOWNGRADE)
