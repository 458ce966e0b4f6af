"""The leases of the calls one `ToolLedger` runs.

A lease is fenced by a token the worker makes when it starts or takes over a call (`new_token`)
and never shows: the database keeps its SHA-256 and lets only its holder renew the lease or
move the call while the lease runs (`signoff_commit_call`, `signoff_renew_leases`). `Leases`
renews every call held here in one statement every third of the lease, keeps until when each
lease surely runs by this process's clock, and records a finished call's outcome, trying the
write again after a lost connection for as long as the lease surely runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import secrets
import time
from dataclasses import dataclass, field

from ..errors import DatabaseUnavailable
from ..journal import NewEvent
from ..log import get_logger
from . import _sql as sql
from .model import CallRecord, call_record
from .records import CallRecorder

__all__ = ["MAX_LEASE_SECONDS", "Leases", "new_token"]

MAX_LEASE_SECONDS = 300.0
"""The longest lease the database grants (signoff_commit_call, signoff_renew_leases): a call
whose worker died is free again within five minutes at most."""
# Recording an outcome after a lost connection: the first wait, doubled up to the last.
_FIRST_RETRY_SECONDS = 0.05
_LONGEST_RETRY_SECONDS = 2.0

log = get_logger(__name__)

_Key = tuple[str, str]  # (run, call id)


def new_token() -> bytes:
    """A lease token: 32 random bytes, known only to the worker that made it."""
    return secrets.token_bytes(32)


class Backoff:
    """The pauses between tries of a step that met a lost connection: the first short, each
    doubled up to a longest, none past `seconds` from the first failure (nor past an `until`
    the step names). `tries` counts the failures."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.tries = 0
        self._wait = _FIRST_RETRY_SECONDS
        self._first: float | None = None

    def pause(self, until: float | None = None) -> float | None:
        """How long to wait before the next try; None: the time is up, give up. `until`: a
        time on the monotonic clock no try may start after (a lease's end)."""
        now = time.monotonic()
        if self._first is None:
            self._first = now
        self.tries += 1
        end = self._first + self.seconds
        left = (end if until is None else min(end, until)) - now
        if left <= 0:
            return None
        pause, self._wait = min(self._wait, left), min(self._wait * 2, _LONGEST_RETRY_SECONDS)
        return pause


@dataclass(frozen=True)
class _Held:
    """A call running here: the version and token its lease is renewed with, and until when
    (this process's monotonic clock) the lease surely runs, from the last renewal known."""

    version: int
    token: bytes = field(repr=False)
    runs_until: float


class Leases:
    """The calls one ledger runs, their leases renewed in the background."""

    def __init__(self, records: CallRecorder, lease_seconds: float) -> None:
        self.records = records
        self.lease_seconds = lease_seconds
        self._held: dict[_Key, _Held] = {}
        self._renewer: asyncio.Task[None] | None = None

    async def close(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer

    def hold(self, record: CallRecord, token: bytes, since: float) -> None:
        """Keep renewing this call's lease, which its last write (sent at `since`, monotonic)
        set: one task renews every call held here, in one statement, every third of the
        lease."""
        key = (record.run_id, record.call_id)
        self._held[key] = _Held(record.version, token, since + self.lease_seconds)
        if self._renewer is None or self._renewer.done():
            # A context of its own: not the trace (nor the call) that happened to start it.
            self._renewer = asyncio.create_task(
                self._renew_held(), name="signoff-leases", context=contextvars.Context()
            )

    def release(self, record: CallRecord) -> None:
        self._held.pop((record.run_id, record.call_id), None)

    async def record_outcome(
        self, record: CallRecord, token: bytes, event: NewEvent, sealed: bytes
    ) -> CallRecord | None:
        """Record a finished tool's outcome and release the call; None: the call was taken
        over or settled.

        A write that meets a lost connection (a database restart, say) is tried again, with
        backoff, while the lease surely runs (it is still renewed meanwhile): the worker holds
        the result, and the lease keeps any other worker from settling the call. A try that
        committed though its answer was lost is found by its version and digest.

        Raises:
            DatabaseUnavailable: the database stayed unreachable past the lease; the call is
                then settled as its effect allows.
        """
        try:
            return await self._record(record, token, event, sealed)
        finally:
            self.release(record)

    async def _record(
        self, record: CallRecord, token: bytes, event: NewEvent, sealed: bytes
    ) -> CallRecord | None:
        bound = log.bind(run_id=record.run_id, call_id=record.call_id)
        key = (record.run_id, record.call_id)
        retrying = Backoff(MAX_LEASE_SECONDS)  # no lease runs longer, however often renewed
        while True:
            try:
                done = await self.records.advance(None, record, [event], sealed, lease_token=token)
            except DatabaseUnavailable as e:
                held = self._held.get(key)
                # Not held (released meanwhile): no lease to try again under.
                pause = retrying.pause(held.runs_until if held is not None else 0.0)
                if pause is None:
                    bound.error(
                        "outcome not recorded: the database stayed unreachable while the lease "
                        "ran; the call will be settled as its effect allows",
                        tries=retrying.tries,
                        error_type=type(e).__name__,
                    )
                    raise
                bound.warning(
                    "recording the outcome failed; retrying while the lease runs",
                    tries=retrying.tries,
                    retry_in=round(pause, 3),
                    error_type=type(e).__name__,
                )
                await asyncio.sleep(pause)
                continue
            if retrying.tries:
                if done is None:
                    done = await self._recorded_before(record, event)
                bound.info(
                    "outcome write retried", tries=retrying.tries + 1, recorded=done is not None
                )
            return done

    async def _recorded_before(self, record: CallRecord, event: NewEvent) -> CallRecord | None:
        """The call as this worker's outcome left it, when an earlier try of that write
        committed though its answer was lost (the next step after `record`, by this worker,
        with this result digest); None otherwise."""
        async with self.records.db.connection() as conn:
            row = await conn.fetchrow(sql.BY_ID, record.run_id, record.call_id)
        if row is None:
            return None
        now = call_record(row)
        mine = (
            now.version == record.version + 1
            and str(now.status) == event.type.removeprefix("call.")
            and now.worker_id == event.actor
            and now.result_digest == event.data["result_digest"]
        )
        return now if mine else None

    async def _renew_held(self) -> None:
        while self._held:
            await asyncio.sleep(self.lease_seconds / 3)
            held = list(self._held.items())
            if not held:
                return
            sent = time.monotonic()
            try:
                renewed = await self.records.renew([(key, h.version, h.token) for key, h in held])
            except Exception as e:  # keep beating: the lease lasts three beats
                log.warning("lease renewal failed", calls=len(held), error_type=type(e).__name__)
                continue
            if renewed == len(held):  # each lease runs a full lease from `sent` on
                for key, h in held:
                    if self._held.get(key) is h:
                        self._held[key] = _Held(h.version, h.token, sent + self.lease_seconds)
