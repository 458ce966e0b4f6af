"""Telemetry: what `signoff serve` reads for its metrics on each scrape, cheaply: the state of
its own deliveries through a function (its login never reads the table) and two small partial
indexes, one of the calls waiting for a person's resolution and one of the deliveries that
failed.

Revision ID: 0007_telemetry
Revises: 0006_paused_runs
Create Date: 2026-12-05

`SOURCES` are frozen copies of the package sources of the same path; the downgrade runs `UNDO`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ledger.store.sqlscript import execute_script

revision: str = "0007_telemetry"
down_revision: str | None = "0006_paused_runs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FROZEN = Path(__file__).with_suffix("")

SOURCES: tuple[str, ...] = (
    "ledger/calls/sql/unknown_index.sql",
    "adapters/http/sql/webhook_failed_index.sql",
    "adapters/http/sql/delivery_state.sql",
    "adapters/http/sql/delivery_privileges.sql",
)

UNDO: tuple[str, ...] = ("telemetry.sql",)


def upgrade() -> None:
    execute_script("SET LOCAL check_function_bodies = off")
    for source in SOURCES:
        execute_script((FROZEN / source).read_text(encoding="utf-8"))
    execute_script("SET LOCAL check_function_bodies = on")


def downgrade() -> None:
    for script in UNDO:
        execute_script((FROZEN / "undo" / script).read_text(encoding="utf-8"))
