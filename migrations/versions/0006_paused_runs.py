"""Paused runs: the sealed paused state of agent runs whose framework keeps it in the
application (the OpenAI Agents SDK, Pydantic AI), resumed once by any worker.

Revision ID: 0006_paused_runs
Revises: 0005_policies
Create Date: 2026-12-05

`SOURCES` are frozen copies of the package sources of the same path; the downgrade runs `UNDO`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ledger.store.sqlscript import execute_script

revision: str = "0006_paused_runs"
down_revision: str | None = "0005_policies"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FROZEN = Path(__file__).with_suffix("")

SOURCES: tuple[str, ...] = (
    "ledger/pauses/sql/paused_runs.sql",
    "ledger/pauses/sql/pause_run.sql",
    "ledger/pauses/sql/claim_pause.sql",
    "ledger/pauses/sql/finish_pause.sql",
    "ledger/pauses/sql/renew_pause.sql",
    "ledger/pauses/sql/release_pause.sql",
    "ledger/pauses/sql/pause_again.sql",
    "ledger/pauses/sql/privileges.sql",
)

UNDO: tuple[str, ...] = ("paused_runs.sql",)


def upgrade() -> None:
    execute_script("SET LOCAL check_function_bodies = off")
    for source in SOURCES:
        execute_script((FROZEN / source).read_text(encoding="utf-8"))
    execute_script("SET LOCAL check_function_bodies = on")


def downgrade() -> None:
    for script in UNDO:
        execute_script((FROZEN / "undo" / script).read_text(encoding="utf-8"))
