"""The lists `signoff ledger verify` works from: every projection Signoff keeps, and every check
of whole streams beyond their hash chains. A new projection (or stream check) is added here, and
only here; `tests/test_ledger_verify.py` fails when a projection is missing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ledger.audit.integrity import LedgerReport, StreamCheck, verify_ledger
from ledger.calls.projection import CALLS
from ledger.journal import Projection
from ledger.store import Database

from .projection import APPROVALS

__all__ = ["PROJECTIONS", "STREAM_CHECKS", "verify_all"]

PROJECTIONS: tuple[Projection[Any], ...] = (APPROVALS, CALLS)
"""Every table folded from the journal: each is rebuilt and compared with its table."""

STREAM_CHECKS: tuple[StreamCheck, ...] = ()
"""Checks run over whole streams after the projections, in order: the decision signatures and
policies of `approval:` streams belong here (`StreamCheck("decision signatures", "approval:",
prepare)`, where `prepare(db)` loads the public keys once and returns a function of a stream's
id and events that returns its problems)."""


async def verify_all(
    db: Database, *, progress: Callable[[int], None] | None = None
) -> LedgerReport:
    """Everything an auditor relies on: hash chains, the global order, `PROJECTIONS` against a
    rebuild and `STREAM_CHECKS`, in that order."""
    return await verify_ledger(db, PROJECTIONS, STREAM_CHECKS, progress=progress)
