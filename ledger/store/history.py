"""Losses of committed history, as the database keeps them (`history_losses`).

A loss is opened by a process whose history fence found events it saw committed missing
(`ledger.store.fence`), or by an operator who found it another way (a digest that no longer
verifies, a restore to an earlier time). While one is open, no tool call starts or is taken
over, in any process (`HistoryLost`, SQLSTATE SG410); an operator who has accounted for the
lost calls settles it. Recording and settling take the owner's login; auditors read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from ..errors import SignoffError
from ..log import get_logger
from .db import Database

__all__ = ["HistoryLoss", "NoOpenLoss", "losses", "open_loss", "record_loss", "settle_loss"]

log = get_logger(__name__)

# Every column but `hashes`: what a process saw there serves the database's own check of later
# reports, not people.
_COLUMNS = "loss_id, found_at, found_by, missing, reason, settled_at, settled_by, settlement"
REASON_LIMIT = 2000


class NoOpenLoss(SignoffError):
    """There is no open loss of committed history to settle."""


@dataclass(frozen=True)
class HistoryLoss:
    loss_id: int
    found_at: datetime
    found_by: str
    missing: tuple[int, ...]  # the positions the reporter saw committed; () when recorded
    reason: str
    settled_at: datetime | None
    settled_by: str | None
    settlement: str | None

    @property
    def open(self) -> bool:
        return self.settled_at is None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> HistoryLoss:
        return cls(**{**dict(row), "missing": tuple(row["missing"])})


def _reason(text: str) -> str:
    reason = text.strip()
    if not reason or len(reason) > REASON_LIMIT:
        raise SignoffError(f"a reason of 1 to {REASON_LIMIT} characters is needed")
    return reason


async def losses(db: Database) -> list[HistoryLoss]:
    """Every loss recorded, the newest first."""
    async with db.connection() as conn:
        rows = await conn.fetch(f"SELECT {_COLUMNS} FROM history_losses ORDER BY loss_id DESC")
    return [HistoryLoss.from_row(row) for row in rows]


async def open_loss(db: Database) -> HistoryLoss | None:
    """The loss that is open, if any: while it is, no call starts."""
    async with db.connection() as conn:
        row = await conn.fetchrow(f"SELECT {_COLUMNS} FROM history_losses WHERE settled_at IS NULL")
    return None if row is None else HistoryLoss.from_row(row)


async def record_loss(db: Database, reason: str) -> tuple[HistoryLoss, bool]:
    """Open a loss found another way than by a process's fence (a digest that no longer
    verifies, a restore): from now on no call starts. The open loss, and whether it is this
    one (False: one was open already, and `reason` is not recorded)."""
    text = _reason(reason)
    async with db.transaction() as conn:
        row = await conn.fetchrow(
            "INSERT INTO history_losses (found_by, missing, hashes, reason)"
            " VALUES (session_user, '{}', '{}', $1)"
            " ON CONFLICT ((true)) WHERE settled_at IS NULL DO NOTHING"
            f" RETURNING {_COLUMNS}",
            text,
        )
        created = row is not None
        if row is None:
            row = await conn.fetchrow(
                f"SELECT {_COLUMNS} FROM history_losses WHERE settled_at IS NULL"
            )
    loss = HistoryLoss.from_row(row)
    if created:
        log.warning("history loss recorded", loss_id=loss.loss_id)
    return loss, created


async def settle_loss(db: Database, settlement: str) -> HistoryLoss:
    """Settle the open loss, saying what was decided: calls start again. Calls the lost
    history knew and the ledger does not are then unknown to it: run again if asked.

    Raises:
        NoOpenLoss: no loss is open.
    """
    text = _reason(settlement)
    async with db.transaction() as conn:
        row = await conn.fetchrow(
            "UPDATE history_losses SET settled_at = clock_timestamp(),"
            " settled_by = session_user, settlement = $1"
            f" WHERE settled_at IS NULL RETURNING {_COLUMNS}",
            text,
        )
    if row is None:
        raise NoOpenLoss("no loss of committed history is open")
    loss = HistoryLoss.from_row(row)
    log.warning("history loss settled", loss_id=loss.loss_id)
    return loss
