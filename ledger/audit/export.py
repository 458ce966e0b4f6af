"""The audit export: every journal event in the global order, with what a verifier needs to
recompute its chain hash (the stored hash of its stream's previous event).

Incremental and gap-free: export after the last exported position, and nothing committed in
between is ever skipped (the order is `Journal.read_all`'s).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from ..canonical import GENESIS_HASH
from ..journal import Event, Journal
from ..store import Database
from . import _sql as sql
from .digest import export_event
from .verifier import ExportedEvent

__all__ = ["export_events"]


async def export_events(
    db: Database, *, after: int = 0, batch_size: int = 1000
) -> AsyncIterator[ExportedEvent]:
    """Exported events after position `after`, in the journal's global order."""
    batch: list[Event] = []
    async for event in Journal(db).read_all(after=after, batch_size=batch_size):
        batch.append(event)
        if len(batch) == batch_size:
            for exported in await _with_previous(db, batch):
                yield exported
            batch = []
    for exported in await _with_previous(db, batch):
        yield exported


async def _with_previous(db: Database, events: list[Event]) -> list[ExportedEvent]:
    wanted = [e for e in events if e.version > 1]
    async with db.connection() as conn:
        rows = await conn.fetch(
            sql.PREVIOUS, [e.stream_id for e in wanted], [e.version - 1 for e in wanted]
        )
    previous = {(r["stream_id"], r["version"]): r["hash"] for r in rows}
    return [
        export_event(e, GENESIS_HASH if e.version == 1 else previous[(e.stream_id, e.version - 1)])
        for e in events
    ]
