"""Telemetry: what `signoff serve` reads for its metrics on each scrape, cheaply: the state of
its own deliveries through a function (its login never reads the table) and two small partial
indexes, one of the calls waiting for a person's resolution and one of the deliveries that
failed.

signoff_commit_call returns the journal position and hash of the last event it appended, which
a call's trace names as its evidence.

Revision ID: 0007_telemetry
Revises: 0006_paused_runs
Create Date: 2026-12-05

`CHANGES` run first (the old signoff_commit_call goes); `SOURCES` are frozen copies of the
package sources of the same path. The downgrade runs `UNDO`, then the newest earlier frozen copy
of every source this revision replaced.
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
EARLIER = (FROZEN.with_name("0005_policies"),)

CHANGES: tuple[str, ...] = ("commit_call_evidence.sql",)

SOURCES: tuple[str, ...] = (
    "ledger/calls/sql/unknown_index.sql",
    "adapters/http/sql/webhook_failed_index.sql",
    "adapters/http/sql/delivery_state.sql",
    "adapters/http/sql/delivery_privileges.sql",
    "ledger/calls/sql/commit_call.sql",
    "ledger/calls/sql/privileges.sql",
)

UNDO: tuple[str, ...] = ("telemetry.sql",)


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
        earlier = next((d / source for d in EARLIER if (d / source).exists()), None)
        if earlier is not None:
            execute_script(earlier.read_text(encoding="utf-8"))
    execute_script("SET LOCAL check_function_bodies = on")
