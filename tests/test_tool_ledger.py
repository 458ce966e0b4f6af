"""The tool-call ledger: once per run, in any process, through crashes; results sealed."""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import pytest

from approvals import ApprovalStore, Decision, approval_gate
from ledger.calls.model import CallContext, CallStatus, Effect, ToolCall, ToolFailed, ToolPolicy
from ledger.calls.service import ToolLedger
from ledger.errors import (
    CallStateError,
    DecryptionFailed,
    InvalidToolCall,
    ResultNotSerializable,
    UnknownCall,
    VersionConflict,
)
from ledger.journal import Journal, NewEvent
from ledger.keys import KeyRing, LocalKek, Purpose
from ledger.store import Database
from ledger.store.logins import temporary_login

from .support.processes import TEST_KEK, finish, start_program, worker_env

READ, WRITE, IDEMPOTENT = (
    ToolPolicy(Effect.READ),
    ToolPolicy(Effect.SINGLE_ATTEMPT),
    ToolPolicy(Effect.IDEMPOTENT_WRITE),
)


@pytest.fixture(scope="module")
async def side_effects(db: Database) -> None:
    async with db.connection() as conn:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS side_effects "
            "(run_id text, call_id text, pid int, attempt int)"
        )


@pytest.fixture(scope="module")
async def worker_url(database_url: str, db: Database, side_effects: None) -> AsyncIterator[str]:
    """A login with only `signoff_app`, which may also record the test tool's side effects."""
    async with temporary_login(database_url, "signoff_app") as url:
        async with db.connection() as conn:  # the name is ours: [a-z0-9_]
            await conn.execute(f"GRANT INSERT ON side_effects TO {urlsplit(url).username}")
        yield url


def new_run() -> str:
    return f"run-{uuid.uuid4().hex[:10]}"


class Counter:
    """A tool that counts its runs and returns its arguments doubled."""

    def __init__(self, fail_times: int = 0, error: Exception | None = None) -> None:
        self.calls: list[CallContext] = []
        self.fail_times = fail_times
        self.error = error or RuntimeError("flaky")

    async def __call__(self, args: dict[str, Any], context: CallContext) -> dict[str, Any]:
        self.calls.append(context)
        if len(self.calls) <= self.fail_times:
            raise self.error
        return {"doubled": args["n"] * 2}


async def test_a_finished_call_replays_without_running(ledger: ToolLedger) -> None:
    tool = Counter()
    call = ToolCall(new_run(), "c1", "double", {"n": 21})
    first = await ledger.execute(call, tool, READ)
    again = await ledger.execute(call, tool, READ)
    assert (first.status, first.result, first.replayed) == (
        CallStatus.SUCCEEDED,
        {"doubled": 42},
        False,
    )
    assert (again.status, again.result, again.replayed) == (
        CallStatus.SUCCEEDED,
        {"doubled": 42},
        True,
    )
    assert len(tool.calls) == 1
    assert tool.calls[0].idempotency_key == f"{call.run_id}/0/c1"


async def test_effects_decide_retries(ledger: ToolLedger) -> None:
    flaky_read = Counter(fail_times=2)
    outcome = await ledger.execute(ToolCall(new_run(), "c", "t", {"n": 1}), flaky_read, READ)
    assert (outcome.status, outcome.attempts, len(flaky_read.calls)) == (CallStatus.SUCCEEDED, 3, 3)

    broken_read = Counter(fail_times=5)
    outcome = await ledger.execute(ToolCall(new_run(), "c", "t", {"n": 1}), broken_read, READ)
    assert (outcome.status, len(broken_read.calls)) == (CallStatus.FAILED, 3)

    idempotent = Counter(fail_times=1)
    outcome = await ledger.execute(ToolCall(new_run(), "c", "t", {"n": 1}), idempotent, IDEMPOTENT)
    assert outcome.status is CallStatus.SUCCEEDED
    assert len({c.idempotency_key for c in idempotent.calls}) == 1, "same key on every attempt"
    assert [c.attempt for c in idempotent.calls] == [1, 2]

    write = Counter(fail_times=1)
    outcome = await ledger.execute(ToolCall(new_run(), "c", "t", {"n": 1}), write, WRITE)
    assert (outcome.status, len(write.calls)) == (CallStatus.OUTCOME_UNKNOWN, 1)
    assert outcome.error is not None and "flaky" in outcome.error

    declared = Counter(fail_times=1, error=ToolFailed("card declined"))
    outcome = await ledger.execute(ToolCall(new_run(), "c", "t", {"n": 1}), declared, IDEMPOTENT)
    assert (outcome.status, outcome.error, len(declared.calls)) == (
        CallStatus.FAILED,
        "card declined",
        1,
    )


async def test_once_per_run_tools_run_once_whatever_the_call_id(ledger: ToolLedger) -> None:
    run, tool = new_run(), Counter()
    policy = ToolPolicy(Effect.SINGLE_ATTEMPT, once_per_run=True)
    first = await ledger.execute(ToolCall(run, "c1", "close_account", {"n": 1}), tool, policy)
    second = await ledger.execute(ToolCall(run, "c2", "close_account", {"n": 1}), tool, policy)
    other_run = await ledger.execute(
        ToolCall(new_run(), "c1", "close_account", {"n": 1}), tool, policy
    )
    assert len(tool.calls) == 2
    assert (second.replayed, second.call_id, second.result) == (True, "c1", first.result)
    assert other_run.replayed is False


async def test_the_entry_answering_a_call_is_its_own_or_its_once_per_run_tools(
    ledger: ToolLedger,
) -> None:
    run, tool = new_run(), Counter()
    assert await ledger.answering(run, "c1", "close_account") is None  # nothing started yet
    once = ToolPolicy(Effect.SINGLE_ATTEMPT, once_per_run=True)
    await ledger.execute(ToolCall(run, "c1", "close_account", {"n": 1}), tool, once)
    await ledger.execute(ToolCall(run, "r1", "lookup", {"n": 2}), tool, ToolPolicy(Effect.READ))
    own = await ledger.answering(run, "r1")
    assert own is not None and (own.call_id, own.status) == ("r1", CallStatus.SUCCEEDED)
    later = await ledger.answering(run, "c2", "close_account")
    assert later is not None and later.call_id == "c1"
    assert await ledger.answering(run, "c2") is None, "only a once-per-run tool is answered so"
    assert await ledger.answering(run, "r2", "lookup") is None, "lookup is not once per run"


async def test_results_are_sealed_and_digested(ledger: ToolLedger, db: Database) -> None:
    call = ToolCall(new_run(), "c1", "lookup", {"n": 1})

    async def secret(args: dict[str, Any], context: CallContext) -> str:
        return "SECRET-RESULT-4111"

    await ledger.execute(call, secret, READ)
    async with db.connection() as conn:
        row = await conn.fetchrow(
            "SELECT result_sealed, result_digest FROM tool_calls WHERE run_id = $1", call.run_id
        )
        dump = await conn.fetchval(
            "SELECT string_agg(data::text, '') FROM events WHERE stream_id = $1",
            f"call:{call.run_id}/c1",
        )
    assert b"SECRET-RESULT" not in row["result_sealed"]
    assert "SECRET-RESULT" not in dump and row["result_digest"] in dump
    # A result moved from another call does not open.
    other = ToolCall(new_run(), "c1", "lookup", {"n": 1})
    await ledger.execute(other, secret, READ)
    async with db.connection() as conn:
        await conn.execute(
            "UPDATE tool_calls SET result_sealed = $2 WHERE run_id = $1",
            other.run_id,
            row["result_sealed"],
        )
    with pytest.raises(DecryptionFailed):
        await ledger.execute(other, secret, READ)


async def test_an_approval_is_consumed_with_the_intent(
    ledger: ToolLedger, db: Database, ring: KeyRing
) -> None:
    store = ApprovalStore(db, ring)
    run = new_run()
    cases = {
        "approve": (Decision.approve(), CallStatus.SUCCEEDED, {"doubled": 2}),
        "edit": (Decision.edit({"n": 5}), CallStatus.SUCCEEDED, {"doubled": 10}),
        "reject": (Decision.reject("not today"), CallStatus.DENIED, None),
        "respond": (Decision.respond("ask the customer"), CallStatus.RESPONDED, "ask the customer"),
    }
    for call_id, (decision, status, result) in cases.items():
        args = {"n": 1}
        approval = await store.request(
            run_id=run, tool="refund", args=args, call_id=call_id, requested_by="agent"
        )
        await store.decide(approval.approval_id, decision, "alice")
        tool = Counter()
        gate = approval_gate(store, approval.approval_id, f"{run}/{call_id}", args)
        outcome = await ledger.execute(
            ToolCall(run, call_id, "refund", args), tool, WRITE, gate=gate
        )
        assert (outcome.status, outcome.result) == (status, result), call_id
        assert outcome.approval_id == approval.approval_id
        assert len(tool.calls) == (1 if status is CallStatus.SUCCEEDED else 0)
        assert (await store.get(approval.approval_id)).consumed_by == f"{run}/{call_id}"
        if call_id == "reject":
            assert outcome.error == "not today"
        # Running the call again replays it: the approval is not consumed twice.
        again = await ledger.execute(ToolCall(run, call_id, "refund", args), tool, WRITE, gate=gate)
        assert again.replayed and again.status is status
    await store.close()


async def test_resolving_an_unknown_outcome(ledger: ToolLedger, db: Database) -> None:
    call = ToolCall(new_run(), "c1", "wire", {"n": 1})
    await ledger.execute(call, Counter(fail_times=1), WRITE)
    record = await ledger.resolve(
        call.run_id, "c1", succeeded=True, by="alice", note="bank says ok"
    )
    assert (record.status, record.resolved_by) == (CallStatus.SUCCEEDED, "alice")
    replay = await ledger.execute(call, Counter(), WRITE)
    assert (replay.status, replay.result, replay.replayed) == (
        CallStatus.SUCCEEDED,
        "bank says ok",
        True,
    )
    with pytest.raises(CallStateError):
        await ledger.resolve(call.run_id, "c1", succeeded=False, by="bob")
    types = [e.type for e in await Journal(db).read_stream(f"call:{call.run_id}/c1")]
    assert types == ["call.started", "call.outcome_unknown", "call.resolved"]


async def test_bad_input_records_nothing(ledger: ToolLedger, db: Database) -> None:
    run = new_run()
    with pytest.raises(UnknownCall):
        await ledger.get(run, "nope")
    with pytest.raises(UnknownCall):
        await ledger.resolve(run, "nope", succeeded=True, by="alice")
    with pytest.raises(InvalidToolCall, match="JSON object"):
        await ledger.execute(ToolCall(run, "c1", "t", ["x"]), Counter(), READ)  # type: ignore[arg-type]
    with pytest.raises(InvalidToolCall, match="not JSON"):
        await ledger.execute(ToolCall(run, "c1", "t", {"x": {1}}), Counter(), READ)
    with pytest.raises(InvalidToolCall, match="non-empty"):
        await ledger.execute(ToolCall(run, "", "t", {}), Counter(), READ)

    async def unserializable(args: dict[str, Any], context: CallContext) -> object:
        return object()

    with pytest.raises(ResultNotSerializable):
        await ledger.execute(ToolCall(run, "c2", "t", {}), unserializable, READ)
    types = [e.type for e in await Journal(db).read_stream(f"call:{run}/c2")]
    assert types == ["call.started"], "no outcome recorded"

    await ledger.execute(ToolCall(run, "c3", "t", {"n": 1}), Counter(), READ)
    with pytest.raises(InvalidToolCall, match="used before with other arguments"):
        await ledger.execute(ToolCall(run, "c3", "t", {"n": 2}), Counter(), READ)


async def test_the_tool_calls_table_equals_its_rebuild(ledger: ToolLedger, db: Database) -> None:
    call = ToolCall(new_run(), "c1", "lookup", {"n": 1})
    await ledger.execute(call, Counter(), READ)
    assert await ledger.verify_projection() == []
    # The check can fail: change the table behind the journal's back.
    async with db.connection() as conn:
        await conn.execute("UPDATE tool_calls SET attempts = 9 WHERE run_id = $1", call.run_id)
    try:
        problems = await ledger.verify_projection()
        assert len(problems) == 1 and call.run_id in problems[0]
    finally:
        async with db.connection() as conn:
            await conn.execute("UPDATE tool_calls SET attempts = 1 WHERE run_id = $1", call.run_id)


async def test_a_stream_that_moved_under_a_running_call_raises_version_conflict(
    fresh_database_url: str,
) -> None:
    """The outcome's append fails inside the statement that writes the row: the error is typed,
    and neither the outcome event nor the row change is written."""
    async with await Database.connect(fresh_database_url) as db:
        ring = await KeyRing.open(db, LocalKek(TEST_KEK))
        ledger = ToolLedger(db, ring)
        call = ToolCall(new_run(), "c1", "t", {})
        stream = f"call:{call.run_id}/{call.call_id}"
        journal = Journal(db)

        async def intrude(args: dict[str, Any], context: CallContext) -> str:
            at = {"at": "2026-01-01T00:00:00+00:00"}
            await journal.append(stream, [NewEvent("intruder", at, "x")], expected_version=1)
            return "done"

        with pytest.raises(VersionConflict):
            await ledger.execute(call, intrude, WRITE)
        assert [e.type for e in await journal.read_stream(stream)] == ["call.started", "intruder"]
        assert (await ledger.get(call.run_id, call.call_id)).status is CallStatus.RUNNING
        await ledger.close()


# -- real processes ---------------------------------------------------------------------------


async def runs_of(db: Database, run_id: str) -> int:
    async with db.connection() as conn:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM side_effects WHERE run_id = $1", run_id
        )
    return count


async def start_call(
    database_url: str, run_id: str, effect: Effect, sleep: float = 0.0, lease: float = 1.0
) -> asyncio.subprocess.Process:
    return await start_program(
        "tests.support.tool_workers",
        "execute",
        database_url,
        run_id,
        "c1",
        str(effect),
        str(sleep),
        str(lease),
        env=worker_env(),
    )


@pytest.mark.usefixtures("ring")
async def test_eight_processes_reach_the_same_call_and_it_runs_once(
    worker_url: str, db: Database, route: Callable[[str], str]
) -> None:
    """Eight worker processes, on a worker's login, directly or through a session pooler."""
    run = new_run()
    workers = [
        await start_call(route(worker_url), run, Effect.SINGLE_ATTEMPT, sleep=0.5) for _ in range(8)
    ]
    outcomes = [json.loads((await finish(w)).splitlines()[-1]) for w in workers]
    assert await runs_of(db, run) == 1
    assert all(o["result"] == outcomes[0]["result"] for o in outcomes)
    assert sorted(o["replayed"] for o in outcomes) == [False] + [True] * 7
    assert {o["status"] for o in outcomes} == {"succeeded"}


@pytest.mark.usefixtures("side_effects", "ring")
async def test_a_new_process_replays_a_finished_call(database_url: str, db: Database) -> None:
    run = new_run()
    first = json.loads(
        (await finish(await start_call(database_url, run, Effect.READ))).splitlines()[-1]
    )
    second = json.loads(
        (await finish(await start_call(database_url, run, Effect.READ))).splitlines()[-1]
    )
    assert (first["replayed"], second["replayed"]) == (False, True)
    assert second["result"] == first["result"]
    assert await runs_of(db, run) == 1


async def kill_while_running(database_url: str, run: str, effect: Effect) -> None:
    victim = await start_call(database_url, run, effect, sleep=60)
    assert victim.stdout is not None
    assert (await asyncio.wait_for(victim.stdout.readline(), 30)).strip() == b"started"
    victim.send_signal(signal.SIGKILL)
    await victim.wait()


@pytest.mark.usefixtures("side_effects", "ring")
async def test_sigkill_during_a_single_attempt_write_is_outcome_unknown(
    database_url: str, db: Database
) -> None:
    run = new_run()
    await kill_while_running(database_url, run, Effect.SINGLE_ATTEMPT)
    successor = await finish(await start_call(database_url, run, Effect.SINGLE_ATTEMPT))
    outcome = json.loads(successor.splitlines()[-1])
    assert outcome["status"] == "outcome_unknown"
    assert "may or may not have taken effect" in outcome["error"]
    assert await runs_of(db, run) == 1, "the write was not run again"
    again = json.loads(
        (await finish(await start_call(database_url, run, Effect.SINGLE_ATTEMPT))).splitlines()[-1]
    )
    assert (again["status"], again["replayed"]) == ("outcome_unknown", True)


@pytest.mark.usefixtures("side_effects", "ring")
async def test_sigkill_during_a_read_runs_it_again(database_url: str, db: Database) -> None:
    run = new_run()
    await kill_while_running(database_url, run, Effect.READ)
    successor = await finish(await start_call(database_url, run, Effect.READ))
    outcome = json.loads(successor.splitlines()[-1])
    assert (outcome["status"], outcome["attempts"], outcome["replayed"]) == ("succeeded", 2, False)
    assert await runs_of(db, run) == 2


async def test_a_result_sealed_under_a_key_made_elsewhere_still_replays(
    fresh_database_url: str,
) -> None:
    async with await Database.connect(fresh_database_url) as db:
        mine = await KeyRing.open(db, LocalKek(TEST_KEK))
        mine.refresh_seconds = 3600.0  # this process would not look for new keys on its own
        theirs = await KeyRing.open(db, LocalKek(TEST_KEK))
        await theirs.rotate(Purpose.RESULT)
        call = ToolCall(new_run(), "c1", "lookup", {"n": 2})
        writer, reader = ToolLedger(db, theirs), ToolLedger(db, mine)
        try:
            first = await writer.execute(call, Counter(), READ)
            replay = await reader.execute(call, Counter(), READ)
        finally:
            await writer.close()
            await reader.close()
    assert (replay.replayed, replay.result) == (True, first.result)
