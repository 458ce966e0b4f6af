"""Signed decisions: from here on approval decisions, sticky grants and resolutions carry
Ed25519 signatures by a `decision_signing` key, and other approval events carry MACs.

Revision ID: 0012
Revises: 0010
Create Date: 2026-12-01

The signatures and MACs live in the events' data, so the schema does not change: the
`decision_signing` purpose exists since 0007. Going back below this revision removes the decision
signing keys (0007's downgrade refuses that purpose, and the code before this revision neither
makes nor reads them); the signatures already in the journal then no longer verify.
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger.store.sqlscript import execute_script

revision: str = "0012"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    execute_script("DELETE FROM data_keys WHERE purpose = 'decision_signing';")
