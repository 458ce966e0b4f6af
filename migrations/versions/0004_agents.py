"""Agents' tokens: API tokens of scope agent, which MCP clients present to the gateway
(`signoff mcp`), and the worker role checks them.

Revision ID: 0004_agents
Revises: 0003_reviewers
Create Date: 2026-12-05

`CHANGES` are this revision's own scripts, run in order; the downgrade runs `UNDO`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ledger.store.sqlscript import execute_script

revision: str = "0004_agents"
down_revision: str | None = "0003_reviewers"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FROZEN = Path(__file__).with_suffix("")

CHANGES: tuple[str, ...] = ("agent_tokens.sql",)
UNDO: tuple[str, ...] = ("agent_tokens.sql",)


def upgrade() -> None:
    for script in CHANGES:
        execute_script((FROZEN / "changes" / script).read_text(encoding="utf-8"))


def downgrade() -> None:
    for script in UNDO:
        execute_script((FROZEN / "undo" / script).read_text(encoding="utf-8"))
