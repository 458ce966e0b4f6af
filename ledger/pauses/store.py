"""Paused runs kept server-side: the state a framework hands the application when a run waits
for approvals (the OpenAI Agents SDK's `RunState` JSON, Pydantic AI's message history and
deferred tool requests), sealed with the key ring and resumed once, by any worker.

```
pause_id = await pauses.pause(run_id, "openai_agents", state_text, approval_ids)
paused = await pauses.claim(pause_id)   # one worker at a time; PauseTaken for any other
async with pauses.holding(paused):      # the lease renewed while the run goes on
    ...                                 # resume the run with paused.state
await pauses.finish(paused)             # it ran on; or pause_again(paused, state, ids)
                                        # (one statement); or release(paused): nothing applied
```

A claim is a lease (`lease_seconds`, the server's clock): a worker that dies while resuming
leaves the pause to the next claim once the lease lapses, and the tool-call ledger replays
whatever that worker's calls finished. The client never supplies the state: it names the pause
(or the run), and the state it resumes with is the one kept here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from ..errors import InvalidToolCall, SignoffError
from ..keys import KeyRing
from ..keys.values import open_value, seal_value
from ..limits import name_problem
from ..log import get_logger
from ..store import Database

__all__ = ["PauseTaken", "PausedRun", "PausedRuns", "UnknownPause"]

log = get_logger(__name__)

_PAUSE = "SELECT signoff_pause_run($1, $2, $3, $4, $5)"
_CLAIM = (
    "SELECT pause_id, run_id, framework, approval_ids, state_sealed"
    " FROM signoff_claim_pause($1, $2, $3)"
)
_FINISH = "SELECT signoff_finish_pause($1, $2)"
_RENEW = "SELECT signoff_renew_pause($1, $2, $3)"
_RELEASE = "SELECT signoff_release_pause($1, $2)"
_AGAIN = "SELECT signoff_pause_again($1, $2, $3, $4, $5)"
_STATUS = "SELECT status FROM paused_runs WHERE pause_id = $1"
_OPEN = (
    "SELECT pause_id FROM paused_runs WHERE run_id = $1 AND status <> 'resumed'"
    " ORDER BY paused_at DESC LIMIT 1"
)


class UnknownPause(SignoffError, LookupError):
    """No paused run has this id."""

    def __init__(self, pause_id: str) -> None:
        super().__init__(f"no paused run {pause_id!r}")
        self.pause_id = pause_id


class PauseTaken(SignoffError):
    """The paused run was resumed already, or another worker is resuming it now: only one
    resume of a paused state runs."""

    def __init__(self, pause_id: str, status: str) -> None:
        where = "was resumed already" if status == "resumed" else "is being resumed elsewhere"
        super().__init__(f"paused run {pause_id} {where}; nothing was resumed here")
        self.pause_id = pause_id
        self.status = status


@dataclass(frozen=True)
class PausedRun:
    """A paused run this worker holds: its state (opened) and the approvals it waits on."""

    pause_id: str
    run_id: str
    framework: str
    approval_ids: tuple[str, ...]
    state: str = field(repr=False)


def _stream(pause_id: str) -> str:
    return f"pause:{pause_id}"


class PausedRuns:
    """The paused runs of one database, for one worker."""

    def __init__(
        self,
        db: Database,
        ring: KeyRing,
        *,
        worker_id: str | None = None,
        lease_seconds: float = 60.0,
    ) -> None:
        self.db = db
        self.ring = ring
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.lease_seconds = lease_seconds

    async def pause(
        self, run_id: str, framework: str, state: str, approval_ids: Sequence[str]
    ) -> str:
        """Keep `state` (text) of `run_id`, sealed; its new pause id.

        Raises:
            InvalidToolCall: a run id or framework name that cannot be stored.
        """
        for value, what in ((run_id, "run_id"), (framework, "framework")):
            if (problem := name_problem(value)) is not None:
                raise InvalidToolCall(f"{what} {problem}")
        pause_id = f"pause-{uuid.uuid4().hex}"
        async with self.ring.sealing():
            sealed = seal_value(self.ring, _stream(pause_id), "state", state)
        async with self.db.connection() as conn:
            await conn.execute(_PAUSE, pause_id, run_id, framework, list(approval_ids), sealed)
        log.info("run paused", run_id=run_id, pause_id=pause_id, approvals=len(approval_ids))
        return pause_id

    async def claim(self, pause_id: str) -> PausedRun:
        """The paused run, held by this worker until `finish` (or its lease lapses).

        Raises:
            UnknownPause: no such pause.
            PauseTaken: it was resumed already, or another worker holds it.
            DecryptionFailed, UnknownKey: its state does not open (it is never used then).
        """
        async with self.db.connection() as conn:
            row = await conn.fetchrow(_CLAIM, pause_id, self.worker_id, self.lease_seconds)
            if row is None:
                status = await conn.fetchval(_STATUS, pause_id)
        if row is None:
            if status is None:
                raise UnknownPause(pause_id)
            raise PauseTaken(pause_id, status)
        state = await open_value(self.ring, _stream(pause_id), "state", row["state_sealed"])
        log.info("paused run claimed", run_id=row["run_id"], pause_id=pause_id)
        return PausedRun(
            pause_id, row["run_id"], row["framework"], tuple(row["approval_ids"]), state
        )

    async def finish(self, paused: PausedRun) -> None:
        """End `paused`: the run went on from it.

        Raises:
            PauseTaken: this worker's lease lapsed and another worker took the pause over.
        """
        async with self.db.connection() as conn:
            done = await conn.fetchval(_FINISH, paused.pause_id, self.worker_id)
        if not done:
            raise PauseTaken(paused.pause_id, "resuming")

    async def release(self, paused: PausedRun) -> None:
        """Give `paused` back unresumed (nothing of it was applied), so the next resume takes it
        at once rather than when this worker's lease lapses."""
        async with self.db.connection() as conn:
            released = await conn.fetchval(_RELEASE, paused.pause_id, self.worker_id)
        log.info("paused run released", pause_id=paused.pause_id, held=bool(released))

    async def pause_again(self, paused: PausedRun, state: str, approval_ids: Sequence[str]) -> str:
        """End `paused` and keep the run's next pause, at once (a crash between the two would
        lose the run or leave two pauses of it); the new pause id.

        Raises:
            PauseTaken: this worker's lease lapsed and another worker took the pause over;
                nothing was written.
        """
        pause_id = f"pause-{uuid.uuid4().hex}"
        async with self.ring.sealing():
            sealed = seal_value(self.ring, _stream(pause_id), "state", state)
        async with self.db.connection() as conn:
            done = await conn.fetchval(
                _AGAIN, paused.pause_id, self.worker_id, pause_id, list(approval_ids), sealed
            )
        if not done:
            raise PauseTaken(paused.pause_id, "resuming")
        log.info("run paused again", run_id=paused.run_id, pause_id=pause_id)
        return pause_id

    @asynccontextmanager
    async def holding(self, paused: PausedRun) -> AsyncIterator[None]:
        """Renew this worker's lease on `paused` while the block runs (every third of the
        lease), so a resume that runs longer than the lease is not taken over by another
        worker. A renewal that finds the pause taken over logs it; `finish` then refuses."""

        async def renew() -> None:
            while True:
                await asyncio.sleep(self.lease_seconds / 3)
                async with self.db.connection() as conn:
                    held = await conn.fetchval(
                        _RENEW, paused.pause_id, self.worker_id, self.lease_seconds
                    )
                if not held:
                    log.warning("paused run taken over while resuming", pause_id=paused.pause_id)
                    return

        task = asyncio.create_task(renew(), name=f"signoff-pause-{paused.pause_id}")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, SignoffError):
                await task

    async def open_pause(self, run_id: str) -> str | None:
        """The newest pause of `run_id` not resumed yet, if any."""
        async with self.db.connection() as conn:
            found: str | None = await conn.fetchval(_OPEN, run_id)
        return found
