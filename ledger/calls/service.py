"""The once-per-run tool-call ledger: a finished call never runs twice, in any process.

`ToolLedger.execute(call, fn, policy)` is the one entry point adapters use:

1. Claim. A new call's intent (and, through `gate`, its approval's consumption) is recorded in
   one transaction; without an approval it is one statement, whose commit concurrent calls of
   this process share (`ledger.store.group`). A call that finished replays its
   recorded outcome. A call another live worker is running is waited for. A call whose worker
   died (its lease lapsed) runs again if its effect allows another attempt, and otherwise becomes
   `outcome_unknown` (a write that may have happened) or `failed` (a read out of attempts).
2. Run the tool with a lease renewed in the background.
3. Record the outcome, fenced by the stream version the worker holds and by its lease token: a
   worker whose call was taken over records nothing (`LeaseLost`). A write that meets a lost
   database connection is tried again, with backoff, while the worker's lease runs; only then
   is the call left to become `outcome_unknown`.

Rows never outrank streams. Every step that acts on an existing row (replay, wait, retry after a
lapsed lease, settling as `outcome_unknown`, resolving) first folds the call's stream, read in
the statement that locks the row, and refuses with `CallTampered` (nothing runs, a warning is
logged) when the row says anything else: an edited row cannot make a finished call run again.
A new call reads no stream: its insert is the whole claim.

Leases: 30 s by default (1 to `MAX_LEASE_SECONDS`), renewed every 10 s, measured on the database
server's clock. Long enough that a slow round trip or a pause of the worker never makes a live
call look dead (for a single-attempt write that would cost a person's time to resolve), short
enough that a read whose worker died runs again within half a minute. A lease is fenced: the
worker makes a random token when it starts or takes over a call, and the database keeps only its
SHA-256; only the token's holder renews the lease or moves the call while the lease runs, and
after it lapses others may only take the call over or settle it (`signoff_commit_call`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NoReturn

import asyncpg

from ..canonical import canonical_json
from ..errors import (
    CallStateError,
    CallTampered,
    ClaimRaced,
    ConfigurationError,
    DatabaseUnavailable,
    InvalidToolCall,
    LeaseLost,
    ResultNotSerializable,
    UnknownCall,
)
from ..journal import NewEvent
from ..journal.projection import Fact, disagreement, verify_projection
from ..journal.reader import read_stream
from ..keys import KeyRing
from ..keys.digests import matches, text_digest
from ..keys.values import seal_value
from ..limits import INT8, int_problem, name_problem, text_problem
from ..log import get_logger
from ..store import Database
from ..store.notify import Listener, woken
from . import _sql as sql
from .history import Judgment, tally_of
from .leases import MAX_LEASE_SECONDS, Backoff, Leases, new_token
from .model import (
    CallContext,
    CallOutcome,
    CallRecord,
    CallStatus,
    Effect,
    GateDeny,
    GateRespond,
    GateRun,
    ToolCall,
    ToolFailed,
    ToolPolicy,
    call_record,
    call_stream,
)
from .projection import CALLS
from .records import CallRecorder, open_call_value, outcome_of
from .resolution import sign_resolution
from .tracing import committed_event, tool_span, traced_outcome

__all__ = ["DEFAULT_LEASE_SECONDS", "MAX_LEASE_SECONDS", "Gate", "ToolFunction", "ToolLedger"]

DEFAULT_LEASE_SECONDS = 30.0
Gate = Callable[[asyncpg.Connection], Awaitable[GateRun | GateDeny | GateRespond]]
"""Runs in the intent's transaction: consumes an approval and says what to do."""
ToolFunction = Callable[[dict[str, Any], CallContext], Awaitable[Any]]

log = get_logger(__name__)


@dataclass(frozen=True)
class _Run:
    record: CallRecord
    args: dict[str, Any]
    lease_token: bytes = field(repr=False)  # this worker's, from its start or takeover


@dataclass(frozen=True)
class _Replay:
    outcome: CallOutcome


@dataclass(frozen=True)
class _Wait:
    record: CallRecord


_Step = _Run | _Replay | _Wait


@dataclass(frozen=True)
class _Facts:
    """What recording a new call needs besides the call: its tool's policy, its judgment, the
    request's arguments as canonical text and their digest."""

    policy: ToolPolicy
    judgment: Judgment | None
    request_digest: str
    args_text: str
    # This `execute`'s lease token, for the call it starts or takes over: a try whose answer
    # was lost (the database lost under it) finds its own lease on the row and goes on.
    token: bytes = field(repr=False)


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _stream_facts(stream_id: str, entries: list[Any]) -> list[Fact]:
    """(version, type, data, actor) entries of one stream as a fold sees them."""
    return [Fact(stream_id, v, t, d, a) for v, t, d, a in entries]


def _check_id(value: object, what: str) -> None:
    if (problem := name_problem(value)) is not None:
        raise InvalidToolCall(f"{what} {problem}")


def _validate(call: ToolCall, policy: ToolPolicy) -> str:
    if not isinstance(call, ToolCall):
        raise InvalidToolCall(f"not a ToolCall: {type(call).__name__}")
    for value, what in (
        (call.run_id, "run_id"),
        (call.call_id, "call_id"),
        (call.tool, "tool"),
        (call.turn_id, "turn_id"),
    ):
        _check_id(value, what)
    if len(call_stream(call.run_id, call.call_id)) > 200:
        raise InvalidToolCall("run_id and call_id together may be at most 193 characters")
    if not isinstance(policy, ToolPolicy) or not isinstance(policy.effect, Effect):
        raise InvalidToolCall(f"not a ToolPolicy with an Effect: {policy!r}")
    if not isinstance(call.args, dict):
        raise InvalidToolCall(f"arguments must be a JSON object, not {type(call.args).__name__}")
    try:
        return canonical_json(call.args)
    except ValueError as e:
        raise InvalidToolCall(f"arguments of {call.tool} are not JSON: {e}") from e


async def _same_request(ring: KeyRing, recorded: str, digest: str, args_text: str) -> bool:
    """Whether a call's recorded request digest is that of these arguments: the same text
    under the active key, else recomputed under the key it names (written before a rotation)."""
    return recorded == digest or await matches(ring, recorded, args_text)


class ToolLedger:
    """Run tool calls at most as often as their effect allows, across every process."""

    def __init__(
        self,
        db: Database,
        ring: KeyRing,
        *,
        worker_id: str | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        poll_interval: float = 0.2,
    ) -> None:
        if (
            isinstance(lease_seconds, bool)
            or not isinstance(lease_seconds, int | float)
            or not 1 <= lease_seconds <= MAX_LEASE_SECONDS
        ):
            raise ConfigurationError(
                f"a lease lasts 1 to {MAX_LEASE_SECONDS:g} seconds, not {lease_seconds!r}"
            )
        self.db = db
        self.ring = ring
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        self.records = CallRecorder(db, ring, lease_seconds)
        # Connects on first wait only: most processes never wait.
        self._listener = Listener.shared(db, sql.CHANNEL)
        self._leases = Leases(self.records, lease_seconds)  # of the calls running here

    async def close(self) -> None:
        await self._listener.close()
        await self._leases.close()

    async def execute(
        self,
        call: ToolCall,
        fn: ToolFunction,
        policy: ToolPolicy | None = None,
        *,
        gate: Gate | None = None,
        judgment: Judgment | None = None,
    ) -> CallOutcome:
        """Run `fn(args, context)` for `call` unless the ledger says otherwise.

        Args:
            policy: the tool's effect and whether it runs once per run (default: a
                single-attempt write).
            gate: consumes the call's approval inside the intent's transaction and says whether
                to run (perhaps with edited arguments), deny, or answer instead.
            judgment: what a policy decided of the call, recorded in its `call.started`; with
                `seen`, the intent is refused (`HistoryMoved`) if other calls of the run
                started since the policy counted them.

        Returns:
            The outcome: run here, replayed from the ledger, or waited for.

        Raises:
            InvalidToolCall: malformed call, or a call id reused with other arguments.
            ResultNotSerializable: the tool returned something that is not JSON (nothing is
                recorded; the call's lease lapses as if its worker had died).
            DatabaseUnavailable: the database could not be reached (for the outcome of a tool
                that ran: not while this worker's lease ran, so the call becomes
                `outcome_unknown` or runs again, by its effect).
            LeaseLost: this worker's lease lapsed while the tool ran and another worker took
                the call over or settled it; this outcome is not recorded.
            ResultTampered: a recorded result is missing or does not match its digest.
            UnknownKey, DecryptionFailed: a recorded value cannot be opened.
            HistoryMoved: the judgment counted the run's calls and more have started since;
                nothing was written (judge the call again).
            HistoryLost: committed history was lost (`ledger.store.history`): this process saw
                it, or a loss is open and the call neither starts nor runs again (its
                approval is not consumed).
            Whatever the gate raises (an approval still pending, or used by another call).

        Cancelling the task while the tool runs leaves the call running until its lease lapses
        (then it is retried or becomes `outcome_unknown`, by its effect); once the tool has
        returned, its outcome is recorded even if the task is cancelled.
        """
        policy = policy or ToolPolicy()
        args_text = _validate(call, policy)
        with tool_span(call, policy, judgment) as span:
            # The ring readied for the digest, and for the seals and MACs of this call.
            async with self.ring.sealing():
                facts = _Facts(
                    policy, judgment, text_digest(self.ring, args_text), args_text, new_token()
                )
                retrying = Backoff(self.lease_seconds)
                while True:
                    try:
                        step = await self._claim(call, gate, facts)
                        # The database answered (and an earlier try's claim that committed was
                        # found): a later outage, in the wait or the next claim, gets a whole
                        # lease again.
                        retrying = Backoff(self.lease_seconds)
                        if isinstance(step, _Wait):
                            await self._wait(step.record)
                            continue
                    except DatabaseUnavailable as e:
                        # Safe to try again: nothing ran yet, and an intent that committed
                        # though its answer was lost carries this try's token (`_claim_locked`).
                        await self._claim_again(call, retrying, e)
                        continue
                    if isinstance(step, _Replay):
                        outcome = step.outcome
                        break
                    if isinstance(step, _Run):
                        outcome = await self._run(step, fn)
                        break
                    # None: a concurrent claim won the insert; look again
            if not outcome.replayed and (event := committed_event()) is not None:
                self.db.fence.saw(*event)  # checked on every new connection from now on
            await traced_outcome(self.db, span, call, outcome)
            return outcome

    async def get(self, run_id: str, call_id: str) -> CallRecord:
        _check_id(run_id, "run_id")
        _check_id(call_id, "call_id")
        async with self.db.connection() as conn:
            row = await conn.fetchrow(sql.BY_ID, run_id, call_id)
        if row is None:
            raise UnknownCall(run_id, call_id)
        return call_record(row)

    async def answering(
        self, run_id: str, call_id: str, once_per_run_tool: str | None = None
    ) -> CallRecord | None:
        """The entry that answers a call without running it: its own, else, when the call is
        of a once-per-run tool (named here), the run's call of that tool, which `execute`
        replays for it. None: no entry yet (`execute` would start the call).

        Raises:
            CallTampered: the entry's row disagrees with its stream (as `execute` would).
        """
        _check_id(run_id, "run_id")
        _check_id(call_id, "call_id")
        async with self.db.connection() as conn:
            row = await conn.fetchrow(sql.BY_ID_CHECKED, run_id, call_id)
            if row is not None:
                return await self._confirmed(conn, row, locked=False)
            if once_per_run_tool is None:
                return None
            row = await conn.fetchrow(sql.ONCE_PER_RUN, run_id, once_per_run_tool)
            # A row found by tool comes without its stream: `locked` reads it here.
            return None if row is None else await self._confirmed(conn, row)

    async def outcome(self, run_id: str, call_id: str) -> CallOutcome:
        """The recorded outcome of a finished call (decrypted), or its running state."""
        _check_id(run_id, "run_id")
        _check_id(call_id, "call_id")
        async with self.db.connection() as conn:
            row = await conn.fetchrow(sql.BY_ID_CHECKED, run_id, call_id)
            if row is None:
                raise UnknownCall(run_id, call_id)
            await self._confirmed(conn, row, locked=False)
        return await self.records.outcome(row, replayed=True)

    async def resolve(
        self,
        run_id: str,
        call_id: str,
        *,
        succeeded: bool,
        by: str,
        note: str | None = None,
        request_id: str | None = None,
    ) -> CallRecord:
        """A person's verdict on an `outcome_unknown` call (it is never run again), signed by
        the reviewer side (`resolution`). `request_id`, a client's id for this request (the
        HTTP service's), is recorded in the `call.resolved` event, so a retry finds its answer
        (`resolution_of_request`), as a decision's does.

        Raises:
            UnknownCall; CallStateError when the call's outcome is known; ReviewerKekMissing
            when this ledger's ring cannot sign (an agent worker's).
        """
        _check_id(run_id, "run_id")
        _check_id(call_id, "call_id")
        if name_problem(by) is not None:
            raise InvalidToolCall("resolving needs the name of who resolves it")
        if note is not None and (not isinstance(note, str) or text_problem(note) is not None):
            raise InvalidToolCall(f"a note must be text without NUL or lone surrogates: {note!r}")
        if request_id is not None and name_problem(request_id, 200) is not None:
            raise InvalidToolCall("a request id is text of 1 to 200 characters")
        self.ring.require_decision_signer()
        await self.reap()
        # The ring readied for the sealed note, its digest and the resolution's signature.
        async with self.ring.sealing(), self.db.transaction() as conn:
            row = await conn.fetchrow(sql.BY_ID_FOR_UPDATE, run_id, call_id)
            if row is None:
                raise UnknownCall(run_id, call_id)
            record = await self._confirmed(conn, row)
            if record.status is not CallStatus.OUTCOME_UNKNOWN:
                raise CallStateError(
                    f"call {call_id} of run {run_id} is {record.status}, not outcome_unknown"
                )
            status = CallStatus.SUCCEEDED if succeeded else CallStatus.FAILED
            text = note or f"resolved as {status} by {by}"
            sealed, digest = self.records.seal(record.stream_id, "result", text)
            data = {"status": str(status), "by": by, "result_digest": digest, "at": _now()}
            stream = call_stream(record.run_id, record.call_id)
            data = sign_resolution(self.ring, stream, record.request_digest, data)
            if request_id is not None:  # unsigned: it only names the client's request
                data["request_id"] = request_id
            resolved = await self.records.advance(
                conn, record, [NewEvent("call.resolved", data, actor=by)], sealed
            )
        if resolved is None:
            raise CallStateError(f"call {call_id} of run {run_id} changed while resolving")
        log.info("call resolved", run_id=run_id, call_id=call_id, by=by, status=str(status))
        return resolved

    async def resolution_of_request(
        self, run_id: str, call_id: str, by: str, request_id: str
    ) -> CallStatus | None:
        """The verdict `by` recorded on this call with a client's `request_id`
        (`resolve(..., request_id=)`), or None: how a retried request finds its answer."""
        async with self.db.connection() as conn:
            events = await read_stream(conn, call_stream(run_id, call_id))
        for event in events:
            data = event.data
            if (
                event.type == "call.resolved"
                and data.get("by") == by
                and data.get("request_id") == request_id
            ):
                return CallStatus(data["status"])
        return None

    async def reap(self, limit: int = 1000) -> int:
        """Settle calls whose worker died and that may not run again: `outcome_unknown` for
        writes, `failed` for reads out of attempts. Retryable calls are left for the next
        worker that reaches them. Returns how many were settled."""
        if (problem := int_problem(limit, (0, INT8[1]))) is not None:
            raise InvalidToolCall(f"limit {problem}")
        settled = 0
        async with self.db.connection() as conn:
            rows = await conn.fetch(sql.LAPSED, limit)
        for row in rows:
            record = call_record(row)
            if record.attempts < record.effect.max_attempts:
                continue
            async with self.db.transaction() as conn:
                locked = await conn.fetchrow(sql.BY_ID_FOR_UPDATE, record.run_id, record.call_id)
                if locked is None or not locked["lapsed"]:
                    continue
                try:
                    confirmed = await self._confirmed(conn, locked)
                except CallTampered:
                    continue  # logged; left for a person, never settled from its row
                await self._give_up(conn, confirmed)
                settled += 1
        return settled

    async def verify_projection(self) -> list[str]:
        """Rebuild every call from its stream and compare with the `tool_calls` table; return
        the differences (none when the projection is true to the journal)."""
        return await verify_projection(self.db, CALLS)

    # -- claiming --------------------------------------------------------------------------

    async def _claim_again(
        self, call: ToolCall, retrying: Backoff, error: DatabaseUnavailable
    ) -> None:
        """Pause before claiming `call` again after a lost connection, while a lease would
        run; past that, raise `error`."""
        pause = retrying.pause()
        bound = log.bind(run_id=call.run_id, call_id=call.call_id, tries=retrying.tries)
        if pause is None:
            bound.error(
                "call not claimed: the database stayed unreachable",
                error_type="DatabaseUnavailable",
            )
            raise error
        bound.warning(
            "claiming the call failed; retrying",
            retry_in=round(pause, 3),
            error_type=type(error).__name__,
        )
        await asyncio.sleep(pause)

    async def _claim(self, call: ToolCall, gate: Gate | None, facts: _Facts) -> _Step | None:
        if gate is None:  # the common case: one statement, committed on its own
            step = await self._start(None, call, facts, GateRun(call.args))
            if step is not None:
                return step
        try:
            async with self.db.transaction() as conn:
                return await self._claim_locked(conn, call, facts, gate)
        except ClaimRaced:
            return None

    async def _claim_locked(
        self,
        conn: asyncpg.Connection,
        call: ToolCall,
        facts: _Facts,
        gate: Gate | None,
    ) -> _Step:
        policy, request_digest, args_text = facts.policy, facts.request_digest, facts.args_text
        row = await conn.fetchrow(sql.BY_ID_FOR_UPDATE, call.run_id, call.call_id)
        if row is None and policy.once_per_run:
            row = await conn.fetchrow(sql.ONCE_PER_RUN_FOR_UPDATE, call.run_id, call.tool)
        if row is None:
            decision = await gate(conn) if gate is not None else GateRun(call.args)
            step = await self._start(conn, call, facts, decision)
            if step is None:
                raise ClaimRaced  # rolls the gate's consumption back too
            return step
        record = await self._confirmed(conn, row)
        if record.call_id == call.call_id and not await _same_request(
            self.ring, record.request_digest, request_digest, args_text
        ):
            raise InvalidToolCall(
                f"call id {call.call_id!r} of run {call.run_id!r} was used before with other "
                "arguments"
            )
        if record.status.final:
            return _Replay(await self.records.outcome(row, replayed=True))
        if not row["lapsed"]:
            if row.get("lease_token_hash") == hashlib.sha256(facts.token).digest():
                # This execute's own start (or take-over), committed though its answer was
                # lost: the tool has not run; run it under that lease, renewed first (it ran
                # from the lost commit, and the renewal's commit waits for a synchronous
                # standby as any write does: the intent is replicated before the tool runs).
                renewed = await conn.fetchval(
                    sql.RENEW,
                    [record.run_id],
                    [record.call_id],
                    [record.version],
                    [facts.token],
                    self.lease_seconds,
                )
                if renewed != 1:
                    raise ClaimRaced  # taken over meanwhile: look again
                log.info(
                    "call claimed before its answer was lost",
                    run_id=record.run_id,
                    call_id=record.call_id,
                )
                return _Run(record, await self._recorded_args(record, row), facts.token)
            await conn.execute(sql.ADD_WAITER, record.run_id, record.call_id)
            return _Wait(record)
        if record.attempts >= record.effect.max_attempts:
            return _Replay(await self._give_up(conn, record))
        args = await self._recorded_args(record, row)
        data = {
            "attempt": record.attempts + 1,
            "worker_id": self.worker_id,
            "previous_worker": record.worker_id,
            "reason": "the previous worker stopped renewing its lease",
            "at": _now(),
        }
        token = facts.token  # the lease is this worker's now: a token of its own
        retried = await self.records.advance(
            conn, record, [NewEvent("call.retried", data, self.worker_id)], lease_token=token
        )
        if retried is None:
            raise ClaimRaced
        log.info(
            "call taken over",
            run_id=record.run_id,
            call_id=record.call_id,
            attempt=retried.attempts,
        )
        return _Run(retried, args, token)

    async def _recorded_args(self, record: CallRecord, row: asyncpg.Record) -> dict[str, Any]:
        """The arguments the call runs with, as its row seals them (a reviewer's edit too),
        checked against its stream's digest."""
        args_text = await open_call_value(self.ring, record.stream_id, "args", row["args_sealed"])
        if not await matches(self.ring, record.args_digest, args_text):  # the stream's digest
            self._refuse(record, ("args_sealed",))
        args: dict[str, Any] = json.loads(args_text)
        return args

    async def _confirmed(
        self, conn: asyncpg.Connection, row: asyncpg.Record, *, locked: bool = True
    ) -> CallRecord:
        """The record of `row` once its stream confirms it.

        The stream comes with the row (`sql.BY_ID_CHECKED`'s `stream` column) or, for a row
        found by tool (once per run), is read here. A row locked after waiting for another
        writer is newer than the statement's snapshot of its stream: a `locked` row that
        disagrees is compared again with its stream read afresh (the lock keeps both still).

        Raises:
            CallTampered: the row and its stream disagree; logged, nothing written.
        """
        record = call_record(row)
        stream_id = record.stream_id
        text = row.get("stream")
        problem: tuple[str, ...] = ("stream",)
        if text is not None:
            problem = disagreement(CALLS, record, _stream_facts(stream_id, json.loads(text)))
        if problem and locked:
            entries = [
                (v, t, json.loads(d), a) for v, t, d, a in await conn.fetch(sql.STREAM, stream_id)
            ]
            problem = disagreement(CALLS, record, _stream_facts(stream_id, entries))
        if problem:
            self._refuse(record, problem)
        return record

    def _refuse(self, record: CallRecord, fields: tuple[str, ...]) -> NoReturn:
        log.warning(
            "call row disagrees with its stream; refusing to act on it",
            run_id=record.run_id,
            call_id=record.call_id,
            fields=list(fields),
        )
        raise CallTampered(record.run_id, record.call_id, fields)

    async def _start(
        self,
        conn: asyncpg.Connection | None,
        call: ToolCall,
        facts: _Facts,
        decision: GateRun | GateDeny | GateRespond,
    ) -> _Step | None:
        """Write a new call, in `conn`'s transaction, else committed on its own, as `facts`
        say (the request's arguments as canonical text and their digest, its judgment)."""
        policy, request_digest, args_text = facts.policy, facts.request_digest, facts.args_text
        args = decision.args if isinstance(decision, GateRun) else call.args
        stream = call_stream(call.run_id, call.call_id)
        asked_digest = request_digest
        if decision.approval_stream is not None and conn is not None:
            asked_digest = await self._asked_digest(
                conn, decision.approval_stream, request_digest, args_text
            )
        if args is call.args:  # the request's own: its text and digest are in hand
            sealed_args, args_digest = (
                seal_value(self.ring, stream, "args", args_text),
                request_digest,
            )
        else:  # a reviewer's edit: sealing gives the digest of the arguments that run
            sealed_args, args_digest = self.records.seal(stream, "args", args)
        started = {
            "run_id": call.run_id,
            "call_id": call.call_id,
            "tool": call.tool,
            "effect": str(policy.effect),
            "once_per_run": policy.once_per_run,
            "request_digest": asked_digest,
            "args_digest": args_digest,
            "idempotency_key": call.idempotency_key,
            "approval_id": decision.approval_id,
            "approval_stream": decision.approval_stream,
            "approved_by": list(decision.approved_by) if isinstance(decision, GateRun) else [],
            "worker_id": self.worker_id,
            "at": _now(),
        }
        if facts.judgment is not None:
            started["policy_decision"] = dict(facts.judgment.record)
        events = [NewEvent("call.started", started, actor=self.worker_id)]
        sealed_result: bytes | None = None
        value: Any = None
        if not isinstance(decision, GateRun):
            value = decision.reason if isinstance(decision, GateDeny) else decision.message
            sealed_result, digest = self.records.seal(stream, "result", value)
            kind = "call.denied" if isinstance(decision, GateDeny) else "call.responded"
            data = {"approval_id": decision.approval_id, "result_digest": digest, "at": _now()}
            events.append(NewEvent(kind, data, actor=self.worker_id))
        token = facts.token if isinstance(decision, GateRun) else None
        tally = tally_of(args, facts.judgment)
        record = await self.records.insert(
            conn, stream, events, sealed_args, sealed_result, token, tally
        )
        if record is None:
            return None
        if token is not None and record.status is CallStatus.RUNNING:
            return _Run(record, args, token)
        log.info(
            "call settled by its approval",
            run_id=call.run_id,
            call_id=call.call_id,
            status=str(record.status),
        )
        return _Replay(outcome_of(record, value, replayed=False))

    async def _asked_digest(
        self, conn: asyncpg.Connection, approval_stream: str, digest: str, args_text: str
    ) -> str:
        """The request digest a call allowed by an approval records: the approval's own digest
        when it names these arguments, which the database compares with the call's. It differs
        from `digest` (theirs under the active key) only when the value-MAC key rotated between
        the request and the call; one of other arguments is left for the database to refuse."""
        asked: str | None = await conn.fetchval(sql.ASKED_DIGEST, approval_stream)
        if asked is None or asked == digest:
            return digest
        return asked if await matches(self.ring, asked, args_text) else digest

    async def _give_up(self, conn: asyncpg.Connection, record: CallRecord) -> CallOutcome:
        """Settle a call whose worker died and that may not run again."""
        unknown = record.effect is not Effect.READ
        status = CallStatus.OUTCOME_UNKNOWN if unknown else CallStatus.FAILED
        text = (
            f"the worker running this call ({record.worker_id}) stopped during attempt "
            f"{record.attempts}; "
            + ("the tool may or may not have taken effect" if unknown else "no attempts left")
        )
        sealed, digest = self.records.seal(record.stream_id, "result", text)
        data = {"attempt": record.attempts, "result_digest": digest, "at": _now()}
        event = NewEvent(f"call.{status}", data, actor=self.worker_id)
        settled = await self.records.advance(conn, record, [event], sealed)
        if settled is None:
            raise ClaimRaced
        log.warning(
            "call settled after its worker died",
            run_id=record.run_id,
            call_id=record.call_id,
            status=str(status),
        )
        return outcome_of(settled, text, replayed=False)

    # -- running ---------------------------------------------------------------------------

    async def _run(self, step: _Run, fn: ToolFunction) -> CallOutcome:
        record, args, token = step.record, step.args, step.lease_token
        bound = log.bind(run_id=record.run_id, call_id=record.call_id, tool=record.tool)
        # The lease was set by the statement that just returned: it runs a lease from now on.
        self._leases.hold(record, token, time.monotonic())
        try:
            while True:
                context = CallContext(
                    record.run_id, record.call_id, record.idempotency_key, record.attempts
                )
                try:
                    value: Any = await fn(args, context)
                    status = CallStatus.SUCCEEDED
                except ToolFailed as e:
                    value, status = str(e) or type(e).__name__, CallStatus.FAILED
                except Exception as e:
                    value = f"{type(e).__name__}: {e}"
                    if record.attempts < record.effect.max_attempts:
                        bound.warning(
                            "tool raised; retrying",
                            attempt=record.attempts,
                            error_type=type(e).__name__,
                        )
                        data = {
                            "attempt": record.attempts + 1,
                            "worker_id": self.worker_id,
                            "previous_worker": self.worker_id,
                            "reason": type(e).__name__,
                            "at": _now(),
                        }
                        sent = time.monotonic()
                        retried = await self.records.advance(
                            None,
                            record,
                            [NewEvent("call.retried", data, self.worker_id)],
                            lease_token=token,
                        )
                        if retried is None:
                            await self._lost(record)
                        record = retried
                        self._leases.hold(record, token, sent)
                        continue
                    unknown = record.effect is not Effect.READ
                    status = CallStatus.OUTCOME_UNKNOWN if unknown else CallStatus.FAILED
                    bound.warning("tool raised", status=str(status), error_type=type(e).__name__)
                break
            try:
                sealed, digest = self.records.seal(record.stream_id, "result", value)
            except (TypeError, ValueError) as e:
                raise ResultNotSerializable(
                    f"{record.tool} returned a value that is not JSON ({e}); no outcome recorded"
                ) from e
        except BaseException:
            self._leases.release(record)
            raise
        data = {"attempt": record.attempts, "result_digest": digest, "at": _now()}
        event = NewEvent(f"call.{status}", data, self.worker_id)
        # The tool has run: record what it did even if this task is cancelled meanwhile (the
        # call stays held, its lease renewed, until then).
        done = await asyncio.shield(self._leases.record_outcome(record, token, event, sealed))
        if done is None:
            await self._lost(record)
        bound.info("call finished", status=str(status), attempts=done.attempts)
        return outcome_of(done, value, replayed=False)

    async def _lost(self, record: CallRecord) -> NoReturn:
        """This worker's lease lapsed and another worker took the call over or settled it."""
        try:
            status = str((await self.get(record.run_id, record.call_id)).status)
        except DatabaseUnavailable:
            status = "unknown"
        log.warning(
            "call was taken over while it ran; its result is not recorded",
            run_id=record.run_id,
            call_id=record.call_id,
            status=status,
        )
        raise LeaseLost(record.run_id, record.call_id, status)

    async def _wait(self, record: CallRecord) -> None:
        """Until the call finishes or its worker's lease lapses (then claim again)."""
        listener = self._listener
        await listener.start()
        try:
            with listener.waiting(record.stream_id) as event:
                while True:
                    event.clear()
                    async with self.db.connection() as conn:
                        row = await conn.fetchrow(sql.BY_ID, record.run_id, record.call_id)
                    if row is None or row["status"] != "running" or row["lapsed"]:
                        return
                    await woken(event, self.poll_interval)
        finally:
            # No longer waiting: the worker stops notifying once nobody does. (If this fails,
            # the worst is one NOTIFY too many.)
            with contextlib.suppress(DatabaseUnavailable):
                async with self.db.connection() as conn:
                    await conn.execute(sql.DROP_WAITER, record.run_id, record.call_id)
