"""Auditors' reads from a hot standby (`settings.read_database_url`): which database an
auditor's read goes to, and how far behind the primary the standby is.

With a standby configured, the reads that only an auditor makes and that write nothing go to
it, read-only: the journal's export and proofs (`audit_api`), the calls and a call's story
(`calls_api`), the approvals' listing and one approval (`approvals_api`). Their answers carry
how far behind the standby was when they were read (`Signoff-Replica-Lag`: seconds, an upper
bound; `Signoff-Replica-Lag-Bytes`: WAL not replayed yet, when the primary answered). Whatever
writes (digests and checkpoints, which integrate the stored tree and sign; reveals, which are
recorded; decisions and resolutions) and whatever a reviewer reads before acting stays on the
primary.

The gauges `signoff_read_replica_lag_seconds` and `signoff_read_replica_lag_bytes` exist only
in a service that has a standby; they are measured on each scrape and each such read.
"""

from __future__ import annotations

import math

from fastapi import Request, Response
from prometheus_client import CollectorRegistry, Gauge

from approvals import ApprovalStore, Identity
from ledger.store import Database
from ledger.store.standby import StandbyLag, seconds_or_nan, standby_lag

__all__ = [
    "LAG_BYTES_HEADER",
    "LAG_HEADER",
    "StandbyWatch",
    "lag_gauges",
    "reading_database",
    "reading_store",
]

LAG_HEADER = "Signoff-Replica-Lag"
"""Seconds the standby that answered was behind the primary, at most (0: caught up, or no
standby); `unknown` before it has replayed any commit."""
LAG_BYTES_HEADER = "Signoff-Replica-Lag-Bytes"
"""Bytes of the primary's WAL the standby had not replayed (absent: the primary did not
answer)."""


def lag_gauges(registry: CollectorRegistry) -> tuple[Gauge, Gauge]:
    """The standby's two gauges (seconds, bytes), registered in `registry`."""
    seconds = Gauge(
        "signoff_read_replica_lag_seconds",
        "How far behind the primary the standby auditors read from is, at most (0: caught "
        "up; NaN: unknown)",
        registry=registry,
    )
    wal = Gauge(
        "signoff_read_replica_lag_bytes",
        "Bytes of the primary's WAL the standby had not replayed (NaN: the primary did not answer)",
        registry=registry,
    )
    return seconds, wal


class StandbyWatch:
    """The standby's lag, measured against the primary, and its gauges."""

    def __init__(self, reads: Database, primary: Database, registry: CollectorRegistry) -> None:
        self.reads, self.primary = reads, primary
        self.seconds, self.bytes = lag_gauges(registry)
        self.latest: StandbyLag | None = None

    async def sample(self) -> StandbyLag:
        """Measure now and set the gauges."""
        lag = await standby_lag(self.reads, self.primary)
        self.seconds.set(seconds_or_nan(lag))
        self.bytes.set(_bytes(lag))
        self.latest = lag
        return lag


def _bytes(lag: StandbyLag) -> float:
    """The WAL bytes behind: 0 for no standby, NaN when the primary did not answer."""
    if not lag.standby:
        return 0
    return math.nan if lag.bytes_behind is None else lag.bytes_behind


def headers_of(lag: StandbyLag) -> dict[str, str]:
    """The lag as response headers."""
    seconds = "unknown" if lag.seconds_behind is None else f"{lag.seconds_behind:.3f}"
    found = {LAG_HEADER: seconds}
    if not math.isnan(behind := _bytes(lag)):
        found[LAG_BYTES_HEADER] = str(int(behind))
    return found


async def reading_database(request: Request, response: Response, identity: Identity) -> Database:
    """The database an auditor's read-only request reads: the standby when one is configured
    (the answer then carries its lag), else, and for every reviewer, the primary."""
    service = request.app.state.service
    watch: StandbyWatch | None = service.standby
    if watch is None or identity.may_decide:
        db: Database = service.db
        return db
    response.headers.update(headers_of(await watch.sample()))
    return watch.reads


async def reading_store(request: Request, response: Response, identity: Identity) -> ApprovalStore:
    """The approval store an auditor's listing reads, as `reading_database` chooses."""
    service = request.app.state.service
    store: ApprovalStore = service.store
    if service.standby_store is None or identity.may_decide:
        return store
    await reading_database(request, response, identity)  # its lag, in the headers
    standby_store: ApprovalStore = service.standby_store
    return standby_store
