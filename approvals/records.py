"""The approval store's recorder: rows of the `approvals` projection, their streams, and the
sealed arguments, edits and answers. What a decision may do is `ApprovalStore`'s business.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import asyncpg

from ledger.errors import VersionConflict
from ledger.journal import Journal, NewEvent
from ledger.keys import KeyRing, Purpose
from ledger.store import Database

from . import _sql
from .model import Approval, ApprovalPolicy, ApprovalStatus, Review
from .projection import apply, approval_id_of, stream_of

__all__ = ["NOTIFY_CHANNEL", "ApprovalRecorder", "row_to_approval"]

NOTIFY_CHANNEL = "signoff_approvals"


def row_to_approval(row: asyncpg.Record) -> Approval:
    config = row["thread_config"]
    return Approval(
        approval_id=row["approval_id"],
        run_id=row["run_id"],
        thread_id=row["thread_id"],
        tool=row["tool"],
        kind=row["kind"],
        call_id=row["call_id"],
        args_digest=row["args_digest"],
        binding=row["binding"],
        requested_by=row["requested_by"],
        policy=ApprovalPolicy.from_json(json.loads(row["policy"])),
        status=ApprovalStatus(row["status"]),
        requested_at=row["requested_at"],
        expires_at=row["expires_at"],
        decided_by=tuple(row["decided_by"] or ()),
        decided_at=row["decided_at"],
        consumed_by=row["consumed_by"],
        consumed_at=row["consumed_at"],
        reviews=tuple(Review.from_json(r) for r in json.loads(row["reviews"])),
        thread_config=None if config is None else json.loads(config),
        version=row["version"],
    )


class ApprovalRecorder:
    """Reads and writes approvals: rows, their streams, their sealed values."""

    def __init__(self, db: Database, ring: KeyRing) -> None:
        self.db = db
        self.ring = ring
        self.journal = Journal(db)

    async def commit(
        self,
        conn: asyncpg.Connection,
        approval_id: str,
        state: Approval | None,
        events: list[NewEvent],
    ) -> Approval | None:
        """Append `events` and write the approval they make (folded by `apply`), in `conn`'s
        transaction. None when a new request lost the race to an identical one."""
        approval = state
        base = 0 if state is None else state.version
        for offset, event in enumerate(events, start=1):
            approval = apply(
                approval, approval_id, base + offset, event.type, event.data, event.actor
            )
        if approval is None:
            raise ValueError("an approval commit needs at least one event")
        if state is None:
            if await conn.fetchval(_sql.INSERT, *_insert_params(approval)) is None:
                return None
        elif (
            await conn.execute(_sql.UPDATE, *_update_params(approval), state.version) != "UPDATE 1"
        ):
            # Callers hold the row lock, so this means a bug, not a race: write nothing.
            raise VersionConflict(stream_of(approval_id), state.version, None)
        # Wake waiters only for what they wait for: a request becoming final.
        became_final = approval.status.final and (state is None or not state.status.final)
        await self.journal.append(
            stream_of(approval_id),
            events,
            expected_version=base,
            notify=NOTIFY_CHANNEL if became_final else None,
            connection=conn,
        )
        return approval

    def seal(self, text: str, approval_id: str, part: str) -> str:
        context = f"approval:{approval_id}:{part}".encode()
        sealed = self.ring.encrypt(Purpose.RESULT, text.encode(), context)
        return base64.b64encode(sealed).decode()

    async def open(self, sealed: str, approval_id: str, part: str) -> str:
        context = f"approval:{approval_id}:{part}".encode()
        where = f"approval {approval_id} ({part})"
        opened = await self.ring.decrypt_fresh(
            Purpose.RESULT, base64.b64decode(sealed), context, where
        )
        return opened.decode()

    async def locked(self, conn: asyncpg.Connection, approval_id: str) -> Approval | None:
        """The approval, its row locked until `conn`'s transaction ends; None if unknown."""
        row = await conn.fetchrow(_sql.BY_ID_FOR_UPDATE, approval_id)
        return None if row is None else row_to_approval(row)

    async def verify_projection(self) -> list[str]:
        """Rebuild every approval from its stream and compare with the `approvals` table;
        return the differences (none when the projection is true to the journal)."""
        rebuilt: dict[str, Approval] = {}
        async with self.db.transaction() as conn:
            for row in await conn.fetch(_sql.STREAM_EVENTS):
                approval_id = approval_id_of(row["stream_id"])
                rebuilt[approval_id] = apply(
                    rebuilt.get(approval_id),
                    approval_id,
                    row["version"],
                    row["type"],
                    json.loads(row["data"]),
                    row["actor"],
                )
            live = {r["approval_id"]: row_to_approval(r) for r in await conn.fetch(_sql.ALL)}
        problems = [f"{i}: in the table, not in the journal" for i in live.keys() - rebuilt.keys()]
        problems += [f"{i}: in the journal, not in the table" for i in rebuilt.keys() - live.keys()]
        problems += [
            f"{i}: table {live[i]} != journal {rebuilt[i]}"
            for i in live.keys() & rebuilt.keys()
            if live[i] != rebuilt[i]
        ]
        return problems


def _reviews_json(a: Approval) -> str:
    return json.dumps([r.to_json() for r in a.reviews])


def _insert_params(a: Approval) -> tuple[Any, ...]:
    return (
        a.approval_id,
        a.run_id,
        a.thread_id,
        a.tool,
        a.kind,
        a.call_id,
        a.args_digest,
        a.binding,
        a.requested_by,
        json.dumps(a.policy.to_json()),
        a.status,
        _reviews_json(a),
        list(a.decided_by) or None,
        a.decided_at,
        a.expires_at,
        a.consumed_by,
        a.consumed_at,
        None if a.thread_config is None else json.dumps(a.thread_config),
        a.requested_at,
        a.version,
    )


def _update_params(a: Approval) -> tuple[Any, ...]:
    return (
        a.approval_id,
        a.status,
        _reviews_json(a),
        list(a.decided_by) or None,
        a.decided_at,
        a.consumed_by,
        a.consumed_at,
        a.version,
    )
