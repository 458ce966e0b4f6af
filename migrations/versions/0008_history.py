"""History losses: a loss of committed history (a failover to a standby behind the primary, a
restore to an earlier time) that a process found or an operator recorded is kept in
`history_losses`, and while one is open signoff_commit_call starts no call, in any process, old
or new, until an operator settles it.

Revision ID: 0008_history
Revises: 0007_telemetry
Create Date: 2026-12-05

`SOURCES` are frozen copies of the package sources of the same path. The downgrade runs `UNDO`,
then the newest earlier frozen copy of every source this revision replaced.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ledger.store.sqlscript import execute_script

revision: str = "0008_history"
down_revision: str | None = "0007_telemetry"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FROZEN = Path(__file__).with_suffix("")
EARLIER = (FROZEN.with_name("0007_telemetry"),)

SOURCES: tuple[str, ...] = (
    "ledger/store/sql/history_losses.sql",
    "ledger/store/sql/report_history_lost.sql",
    "ledger/store/sql/history_privileges.sql",
    "ledger/calls/sql/commit_call.sql",
)

UNDO: tuple[str, ...] = ("history.sql",)


def upgrade() -> None:
    execute_script("SET LOCAL check_function_bodies = off")
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
