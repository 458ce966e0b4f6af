"""Reviewers' notifiers and history: e-mail deliveries are recorded under an smtp:// target,
and decided approvals are read newest first from an index.

Revision ID: 0003_reviewers
Revises: 0002_evidence
Create Date: 2026-12-05

`CHANGES` are this revision's own scripts, run in order; the downgrade runs `UNDO`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ledger.store.sqlscript import execute_script

revision: str = "0003_reviewers"
down_revision: str | None = "0002_evidence"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FROZEN = Path(__file__).with_suffix("")

CHANGES: tuple[str, ...] = ("smtp_targets.sql", "history_index.sql")
UNDO: tuple[str, ...] = ("history_index.sql", "smtp_targets.sql")


def upgrade() -> None:
    for script in CHANGES:
        execute_script((FROZEN / "changes" / script).read_text(encoding="utf-8"))


def downgrade() -> None:
    for script in UNDO:
        execute_script((FROZEN / "undo" / script).read_text(encoding="utf-8"))
