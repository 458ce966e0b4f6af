"""Signed decisions: a decision forged in the database (as its owner, with correctly chained
events and a matching row) is refused before the tool runs; a decision signed by the reviewer
side but outside the policy is refused too; a worker's ring verifies and cannot sign."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from approvals import (
    Approval,
    ApprovalPolicy,
    ApprovalStatus,
    ApprovalStore,
    Decision,
    DecisionForged,
    DecisionKind,
    PolicyViolation,
    ProblemKind,
    Review,
    Reviewer,
    approval_gate,
)
from approvals.checks import verify_all
from approvals.integrity import (
    approval_problems,
    as_facts,
    review_statement,
    sign_review,
)
from approvals.projection import APPROVALS, stream_of
from approvals.reviewers import ReviewerDirectory
from ledger.calls.model import CallContext, CallStatus, Effect, ToolCall, ToolPolicy
from ledger.calls.resolution import every_resolution_problem, resolution_problem
from ledger.calls.service import ToolLedger
from ledger.errors import ConfigurationError, ReviewerKekMissing, UnknownCall
from ledger.journal import Journal, NewEvent
from ledger.journal.journal import append_arguments
from ledger.journal.projection import commit, fold
from ledger.keys import KeyRing, LocalKek, Purpose
from ledger.store import Database, migrate
from ledger.store.settings import Settings

from .support.processes import TEST_KEK, kek_env, run_cli

WRITE = ToolPolicy(Effect.SINGLE_ATTEMPT)
LEADS = ApprovalPolicy(approvers=frozenset({"group:leads"}))
QUORUM = ApprovalPolicy(approvers=frozenset({"group:leads"}), quorum=2)
LEAD_1 = Reviewer("lead-1", frozenset({"leads"}))
LEAD_2 = Reviewer("lead-2", frozenset({"leads"}))


class Tool:
    """A tool that counts its runs."""

    def __init__(self) -> None:
        self.runs = 0

    async def __call__(self, args: dict[str, Any], context: CallContext) -> dict[str, Any]:
        self.runs += 1
        return {"refunded": args["amount"]}


@pytest.fixture(scope="module", autouse=True)
async def leads_in_the_directory(db: Database) -> None:
    """The leads' groups, as the reviewer side reads them when they decide or grant."""
    directory = ReviewerDirectory(db)
    for lead in (LEAD_1, LEAD_2):
        await directory.add(lead.id, lead.groups, by="admin")


@pytest.fixture
def refusals(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The approval store's warnings (its logger does not propagate once configured)."""
    logger = logging.getLogger("signoff.approvals.store")
    logger.addHandler(caplog.handler)
    caplog.set_level(logging.WARNING, logger="signoff.approvals.store")
    yield caplog
    logger.removeHandler(caplog.handler)


@pytest.fixture
async def worker_db(database_url: str) -> AsyncIterator[Database]:
    """The session database as an agent worker opens it: the worker KEK, no reviewer KEK."""
    settings = Settings(database_url=database_url, kek=LocalKek(TEST_KEK))
    async with await Database.connect(database_url, settings=settings) as db:
        yield db


async def _ask(
    store: ApprovalStore, policy: ApprovalPolicy, requested_by: str = "agent"
) -> tuple[Approval, ToolCall]:
    run = f"run-{uuid.uuid4().hex[:8]}"
    call = ToolCall(run, "refund-1", "refund", {"amount": 120})
    approval = await store.request(
        run_id=run,
        tool="refund",
        args=call.args,
        call_id=call.call_id,
        requested_by=requested_by,
        policy=policy,
    )
    return approval, call


async def _forge(db: Database, approval: Approval, data: dict[str, Any]) -> Approval:
    """What the table owner can do: append a decision through `signoff_append` (which computes
    its canonical bytes and hash), and set the row to match it."""
    review = Review.from_json(data)
    stream = stream_of(approval.approval_id)
    event = NewEvent("approval.decided", data, actor=review.reviewer)
    arguments = append_arguments(stream, [event], approval.version)
    reviews = [*(r.to_json() for r in approval.reviews), review.to_json()]
    async with db.transaction() as conn:
        await conn.fetchval("SELECT signoff_append($1, $2, $3, $4, $5, $6)", *arguments, None)
        await conn.execute(
            "UPDATE approvals SET status = 'approved', decided_by = $2, decided_at = $3,"
            " reviews = $4::jsonb, version = version + 1 WHERE approval_id = $1",
            approval.approval_id,
            data["decided_by"],
            review.at,
            json.dumps(reviews),
        )
    events = await Journal(db).read_stream(stream)
    return fold(APPROVALS, as_facts(events))


def _vote(reviewer: Reviewer) -> Review:
    """An approval by `reviewer` with its groups, as `decide` makes it (unsigned)."""
    groups = tuple(sorted(reviewer.groups))
    return Review(reviewer.id, DecisionKind.APPROVE, datetime.now(UTC), groups=groups)


def _data(review: Review, deciders: list[str]) -> dict[str, Any]:
    return review.to_json() | {"final": True, "decided_by": deciders}


# (policy, requested by, the forged reviewer, who the forged event says decided)
FORGERIES = {
    "mallory on group:leads": (
        LEADS,
        "agent",
        Reviewer("mallory", frozenset({"leads"})),
        ["mallory"],
    ),
    "self-approval": (LEADS, "lead-1", LEAD_1, ["lead-1"]),
    "one vote for a quorum of 2": (QUORUM, "agent", LEAD_1, ["lead-1"]),
}


@pytest.mark.parametrize("case", FORGERIES)
async def test_a_decision_forged_in_the_database_is_refused_and_nothing_runs(
    case: str,
    db: Database,
    store: ApprovalStore,
    ledger: ToolLedger,
    refusals: pytest.LogCaptureFixture,
) -> None:
    policy, requested_by, reviewer, deciders = FORGERIES[case]
    approval, call = await _ask(store, policy, requested_by)
    forged = await _forge(db, approval, _data(_vote(reviewer), deciders))
    row = await store.get(approval.approval_id)
    assert (
        row == forged and row.status.runs_tool
    )  # the row is its stream's fold: only proof is missing
    tool = Tool()
    gate = approval_gate(store, approval.approval_id, f"{call.run_id}/{call.call_id}", call.args)
    with pytest.raises(DecisionForged, match="unsigned"):
        await ledger.execute(call, tool, WRITE, gate=gate)
    assert tool.runs == 0
    with pytest.raises(UnknownCall):  # no intent was recorded either
        await ledger.get(call.run_id, call.call_id)
    assert not (await store.get(approval.approval_id)).consumed
    warned = [
        r for r in refusals.records if getattr(r, "approval_id", None) == approval.approval_id
    ]
    assert warned and warned[0].levelno == logging.WARNING


@pytest.mark.parametrize("case", FORGERIES)
async def test_a_signed_decision_the_policy_does_not_allow_is_refused(
    case: str, db: Database, ring: KeyRing, store: ApprovalStore, ledger: ToolLedger
) -> None:
    """Even signed by the reviewer side's key, a decision is re-checked against the policy its
    request recorded: the worker trusts the key for who decided, not for whether they may."""
    policy, requested_by, reviewer, deciders = FORGERIES[case]
    if reviewer.id == "mallory":  # the reviewer side signs the groups mallory really has
        reviewer = Reviewer("mallory", frozenset({"support"}))
    approval, call = await _ask(store, policy, requested_by)
    signed = sign_review(ring, approval.binding, approval.approval_id, _vote(reviewer))
    await _forge(db, approval, _data(signed, deciders))
    tool = Tool()
    gate = approval_gate(store, approval.approval_id, f"{call.run_id}/{call.call_id}", call.args)
    with pytest.raises(PolicyViolation):
        await ledger.execute(call, tool, WRITE, gate=gate)
    assert tool.runs == 0
    kinds = {p.kind for p in await store.problems(approval.approval_id)}
    assert kinds == {ProblemKind.POLICY}


async def test_a_row_that_says_more_than_its_stream_is_refused(
    db: Database, store: ApprovalStore, ledger: ToolLedger
) -> None:
    approval, call = await _ask(store, QUORUM)
    await store.decide(approval.approval_id, Decision.approve(), LEAD_1.id)  # genuine, 1 of 2
    async with db.connection() as conn:
        await conn.execute(
            "UPDATE approvals SET status = 'approved', decided_by = '{lead-1}', decided_at = now()"
            " WHERE approval_id = $1",
            approval.approval_id,
        )
    tool = Tool()
    gate = approval_gate(store, approval.approval_id, f"{call.run_id}/{call.call_id}", call.args)
    with pytest.raises(DecisionForged, match="row is not its stream"):
        await ledger.execute(call, tool, WRITE, gate=gate)
    assert tool.runs == 0
    assert await store.problems(approval.approval_id) == []  # the stream itself is sound
    async with db.connection() as conn:  # the session's other tests rebuild every row
        await conn.execute(
            "UPDATE approvals SET status = 'pending', decided_by = NULL, decided_at = NULL"
            " WHERE approval_id = $1",
            approval.approval_id,
        )
    assert await store.verify_projection() == []


async def test_a_copied_signature_is_a_second_vote_of_the_same_reviewer(
    db: Database, store: ApprovalStore, ledger: ToolLedger
) -> None:
    approval, call = await _ask(store, QUORUM)
    voted = await store.decide(approval.approval_id, Decision.approve(), LEAD_1.id)
    await _forge(db, voted, _data(voted.reviews[0], ["lead-1"]))  # replayed with final=True
    gate = approval_gate(store, approval.approval_id, f"{call.run_id}/{call.call_id}", call.args)
    with pytest.raises(PolicyViolation, match="approved already"):
        await ledger.execute(call, Tool(), WRITE, gate=gate)


async def test_an_altered_signed_decision_does_not_verify(
    db: Database, ring: KeyRing, store: ApprovalStore, ledger: ToolLedger
) -> None:
    approval, call = await _ask(store, LEADS)
    signed = sign_review(ring, approval.binding, approval.approval_id, _vote(LEAD_1))
    await _forge(db, approval, _data(replace(signed, reviewer="mallory"), ["mallory"]))
    gate = approval_gate(store, approval.approval_id, f"{call.run_id}/{call.call_id}", call.args)
    with pytest.raises(DecisionForged, match="does not verify"):
        await ledger.execute(call, Tool(), WRITE, gate=gate)


async def test_genuine_decisions_run_once_and_verify(
    store: ApprovalStore, ledger: ToolLedger, worker_db: Database
) -> None:
    approval, call = await _ask(store, QUORUM)
    await store.decide(approval.approval_id, Decision.approve(), LEAD_1.id)
    decided = await store.decide(approval.approval_id, Decision.approve(), LEAD_2.id)
    assert decided.decided_by == ("lead-1", "lead-2")
    assert all(r.signature is not None for r in decided.reviews)
    # The worker holds no reviewer KEK: it checks with the public key and runs the call.
    worker_ring = await KeyRing.open(worker_db)
    assert not worker_ring.can_sign_decisions
    worker_store, worker_ledger = (
        ApprovalStore(worker_db, worker_ring),
        ToolLedger(worker_db, worker_ring),
    )
    tool = Tool()
    gate = approval_gate(
        worker_store, approval.approval_id, f"{call.run_id}/{call.call_id}", call.args
    )
    outcome = await worker_ledger.execute(call, tool, WRITE, gate=gate)
    assert (outcome.status, tool.runs) == (CallStatus.SUCCEEDED, 1)
    assert await worker_store.problems(approval.approval_id) == []
    await worker_store.close()
    await worker_ledger.close()


async def test_an_edit_rejects_and_answers_are_signed_and_verify(
    store: ApprovalStore, ledger: ToolLedger
) -> None:
    for decision in (Decision.edit({"amount": 60}), Decision.reject("no"), Decision.respond("ask")):
        approval, call = await _ask(store, LEADS)
        await store.decide(approval.approval_id, decision, LEAD_1.id)
        gate = approval_gate(
            store, approval.approval_id, f"{call.run_id}/{call.call_id}", call.args
        )
        tool = Tool()
        await ledger.execute(call, tool, WRITE, gate=gate)
        assert tool.runs == (1 if decision.kind == "edit" else 0)
        assert await store.problems(approval.approval_id) == []


async def test_a_worker_ring_cannot_sign_and_writes_nothing(
    store: ApprovalStore, worker_db: Database, fresh_database_url: str
) -> None:
    worker_ring = await KeyRing.open(worker_db)
    with pytest.raises(ReviewerKekMissing):
        worker_ring.sign(b"a decision", Purpose.DECISION_SIGNING)
    worker_store = ApprovalStore(worker_db, worker_ring)
    approval, _ = await _ask(worker_store, LEADS)  # workers request
    with pytest.raises(ReviewerKekMissing):
        await worker_store.decide(approval.approval_id, Decision.approve(), LEAD_1.id)
    with pytest.raises(ReviewerKekMissing):
        await worker_store.grant(
            run_id=approval.run_id,
            tool="refund",
            until=datetime.now(UTC) + timedelta(hours=1),
            granted_by=LEAD_1.id,
        )
    assert (await store.get(approval.approval_id)).version == approval.version
    await worker_store.close()
    # A worker opening a new database makes every key but the decision key: no reviewer KEK.
    settings = Settings(database_url=fresh_database_url, kek=LocalKek(TEST_KEK))
    async with await Database.connect(fresh_database_url, settings=settings) as fresh:
        await asyncio.to_thread(migrate.upgrade, fresh_database_url)
        fresh_ring = await KeyRing.open(fresh)
        assert Purpose.DECISION_SIGNING not in {k.purpose for k in fresh_ring.all_keys()}


async def test_a_sticky_grant_is_signed_and_its_approvals_verify(
    db: Database, store: ApprovalStore, ledger: ToolLedger
) -> None:
    run = f"run-{uuid.uuid4().hex[:8]}"
    await store.grant(
        run_id=run,
        tool="refund",
        until=datetime.now(UTC) + timedelta(hours=1),
        granted_by=LEAD_1.id,
    )
    call = ToolCall(run, "refund-1", "refund", {"amount": 5})
    approval = await store.request(
        run_id=run,
        tool="refund",
        args=call.args,
        call_id=call.call_id,
        requested_by="agent",
        policy=LEADS,
    )
    assert approval.status == "approved" and approval.reviews[0].grant_id is not None
    assert await store.problems(approval.approval_id) == []
    tool = Tool()
    gate = approval_gate(store, approval.approval_id, f"{run}/{call.call_id}", call.args)
    assert (await ledger.execute(call, tool, WRITE, gate=gate)).status is CallStatus.SUCCEEDED
    # A grant row a database login inserted, with no signed grant behind it, approves nothing.
    async with db.connection() as conn:
        await conn.execute(
            "INSERT INTO approval_grants"
            " (grant_id, run_id, tool, granted_by, granted_at, expires_at)"
            " VALUES ($1, $2, 'void', 'mallory', now(), now() + interval '1 hour')",
            f"grant-{uuid.uuid4().hex}",
            run,
        )
    pending = await store.request(
        run_id=run, tool="void", args={}, call_id="void-1", requested_by="agent", policy=LEADS
    )
    assert pending.status == "pending"
    # A quorum of 2 is not met by one grant.
    quorum = await store.request(
        run_id=run,
        tool="refund",
        args={"amount": 6},
        call_id="refund-2",
        requested_by="agent",
        policy=QUORUM,
    )
    assert quorum.status == "pending"


async def test_resolutions_are_signed(
    ledger: ToolLedger, ring: KeyRing, db: Database, worker_db: Database
) -> None:
    call = ToolCall(f"run-{uuid.uuid4().hex[:8]}", "c1", "wire", {"n": 1})

    async def dies(args: dict[str, Any], context: CallContext) -> None:
        raise RuntimeError("the bank did not answer")

    await ledger.execute(call, dies, WRITE)
    worker_ledger = ToolLedger(worker_db, await KeyRing.open(worker_db))
    with pytest.raises(ReviewerKekMissing):
        await worker_ledger.resolve(call.run_id, "c1", succeeded=True, by="alice")
    await worker_ledger.close()
    record = await ledger.resolve(call.run_id, "c1", succeeded=True, by="alice")
    stream = f"call:{call.run_id}/c1"
    resolved = (await Journal(db).read_stream(stream))[-1]
    assert resolved.type == "call.resolved"
    assert await resolution_problem(ring, stream, record.request_digest, resolved.data) is None
    assert stream not in {p.stream_id for p in await every_resolution_problem(db, ring)}
    forged = {**resolved.data, "by": "mallory"}
    assert "does not verify" in (
        await resolution_problem(ring, stream, record.request_digest, forged) or ""
    )


async def test_verify_reports_an_unsigned_decision_and_an_unsigned_resolution(
    fresh_database_url: str,
) -> None:
    """What only a writer without the reviewer side's key makes, as the table owner can: a
    decision and a resolution with no signature, through the same projection commits as the
    real ones. A worker refuses the decision, and `ledger verify` reports both (exit 1)."""
    url = fresh_database_url
    settings = Settings.from_env({**kek_env(), "SIGNOFF_DATABASE_URL": url})
    async with await Database.connect(url, settings=settings) as db:
        ring = await KeyRing.open(db)
        store, ledger = ApprovalStore(db, ring), ToolLedger(db, ring)
        run = f"run-{uuid.uuid4().hex[:8]}"
        call = ToolCall(run, "c1", "refund", {"amount": 1})
        approval = await store.request(
            run_id=run, tool="refund", args=call.args, call_id="c1", requested_by="agent"
        )
        decided = _data(_vote(Reviewer("alice")), ["alice"])
        async with db.transaction() as conn:
            await commit(
                conn,
                APPROVALS,
                stream_of(approval.approval_id),
                approval,
                [NewEvent("approval.decided", decided, "alice")],
                expected_version=approval.version,
            )
        assert (await store.get(approval.approval_id)).status == "approved"
        problems = await store.problems(approval.approval_id)
        assert [(p.kind, p.message) for p in problems] == [
            (ProblemKind.UNSIGNED, "alice's decision is unsigned")
        ]
        tool = Tool()
        gate = approval_gate(store, approval.approval_id, f"{run}/c1", call.args)
        with pytest.raises(DecisionForged, match="unsigned"):
            await ledger.execute(call, tool, WRITE, gate=gate)
        assert tool.runs == 0

        async def dies(args: dict[str, Any], context: CallContext) -> None:
            raise RuntimeError("the bank did not answer")

        wire = ToolCall(run, "c2", "wire", {"n": 1})
        await ledger.execute(wire, dies, WRITE)
        record = await ledger.get(run, "c2")
        assert record.status is CallStatus.OUTCOME_UNKNOWN
        sealed, digest = ledger.records.seal(record.stream_id, "result", "resolved by mallory")
        at = datetime.now(UTC).isoformat()
        data = {"status": "succeeded", "by": "mallory", "result_digest": digest, "at": at}
        async with db.transaction() as conn:
            resolved = NewEvent("call.resolved", data, actor="mallory")
            assert await ledger.records.advance(conn, record, [resolved], sealed) is not None
        [unsigned] = await every_resolution_problem(db, ring)
        assert (unsigned.stream_id, unsigned.message) == (record.stream_id, "unsigned")

        report = await verify_all(db)
        assert report.chains.ok and report.order.ok
        assert all(c.skipped is None for c in report.stream_checks)
        assert report.problems == [
            f"decision signatures and policies: {stream_of(approval.approval_id)}: "
            "alice's decision is unsigned",
            f"signed resolutions: {record.stream_id}: version 3: the resolution unsigned",
        ]
        await ledger.close()
        await store.close()

    result = await run_cli("ledger", "verify", database_url=url, env=kek_env())
    assert result.code == 1, result.stdout + result.stderr
    assert result.stdout.startswith("ledger TAMPERED: 2 problem(s)"), result.stdout


async def test_the_cli_decides_only_with_the_reviewer_kek(
    database_url: str, store: ApprovalStore
) -> None:
    approval, _ = await _ask(store, LEADS)
    decide = ("approvals", "decide", approval.approval_id, "--approve", "--by", "lead-1")
    worker = {k: v for k, v in kek_env().items() if not k.startswith("SIGNOFF_REVIEWER_KEK")}
    refused = await run_cli(*decide, database_url=database_url, env=worker)
    assert refused.code == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "SIGNOFF_REVIEWER_KEK" in refused.stderr
    assert (await store.get(approval.approval_id)).version == approval.version  # nothing written
    decided = await run_cli(*decide, database_url=database_url, env=kek_env())  # lead-1: a lead
    assert decided.code == 0, decided.stderr
    assert (await store.get(approval.approval_id)).status == "approved"
    assert await store.problems(approval.approval_id) == []


async def test_the_cli_cancels_a_pending_approval_signed_in_the_reviewer_s_name(
    database_url: str, store: ApprovalStore, journal: Journal
) -> None:
    """`signoff approvals cancel ID --by WHO`: refused without the reviewer KEK (a cancellation
    that names a person is signed), else cancelled and signed; a second cancel, and an unknown
    id, are one line and exit 2."""
    approval, _ = await _ask(store, LEADS)
    cancel = ("approvals", "cancel", approval.approval_id, "--by", "lead-1")
    worker = {k: v for k, v in kek_env().items() if not k.startswith("SIGNOFF_REVIEWER_KEK")}
    refused = await run_cli(*cancel, database_url=database_url, env=worker)
    assert refused.code == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "SIGNOFF_REVIEWER_KEK" in refused.stderr
    assert (await store.get(approval.approval_id)).version == approval.version  # nothing written

    reason = ("--reason", "asked twice")
    cancelled = await run_cli(*cancel, *reason, "--json", database_url=database_url, env=kek_env())
    assert cancelled.code == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["status"] == "cancelled"
    read = await store.get(approval.approval_id, reveal=True)
    assert read.status is ApprovalStatus.CANCELLED
    assert await store.problems(approval.approval_id) == []  # signed, and the signature holds
    events = await journal.read_stream(stream_of(approval.approval_id))
    [event] = [e for e in events if e.type == "approval.cancelled"]
    assert event.actor == "lead-1"
    assert "asked twice" not in json.dumps(event.data)  # sealed, never in clear
    assert await store.cancel_reason_of(read) == "asked twice"
    # The agent that waits is told why.
    assert read.decision == Decision.reject("the approval request was cancelled: asked twice")

    again = await run_cli(*cancel, database_url=database_url, env=kek_env())
    assert again.code == 2 and again.stderr.count("\n") == 1, again.stderr
    assert "already cancelled" in again.stderr
    unknown = ("approvals", "cancel", f"apr-{uuid.uuid4().hex}", "--by", "lead-1")
    missing = await run_cli(*unknown, database_url=database_url, env=kek_env())
    assert missing.code == 2 and missing.stderr.count("\n") == 1, missing.stderr


async def test_a_cancellation_s_reason_is_covered_by_its_signature(
    store: ApprovalStore, journal: Journal, ring: KeyRing
) -> None:
    """A reason swapped into a signed cancellation (another sealed text, or one added to a
    cancellation signed without one) is a forged event to `ledger verify`."""
    first, _ = await _ask(store, LEADS)
    second, _ = await _ask(store, LEADS)
    await store.cancel(first.approval_id, "lead-1", reason="asked twice")
    await store.cancel(second.approval_id, "lead-1")
    streams = [await journal.read_stream(stream_of(a.approval_id)) for a in (first, second)]
    sealed = streams[0][-1].data["reason_sealed"]
    assert await approval_problems(ring, as_facts(streams[0])) == []
    for events, swapped in (
        (streams[0], store.records.seal("no reason", first.approval_id, "reason:cancel")),
        (streams[1], sealed),
    ):
        facts = as_facts(events)
        last = facts[-1]
        forged = replace(last, data={**last.data, "reason_sealed": swapped})
        problems = await approval_problems(ring, [*facts[:-1], forged])
        assert problems and {p.kind for p in problems} == {ProblemKind.FORGED}, problems
        assert any("cancellation: its signature does not verify" in p.message for p in problems)


def test_the_reviewer_kek_is_read_from_its_own_variables(tmp_path: Path) -> None:
    key = os.urandom(32)
    text = base64.b64encode(key).decode()
    assert Settings.from_env({"SIGNOFF_REVIEWER_KEK": text}).reviewer_kek is not None
    (tmp_path / "reviewer-kek").write_text(text + "\n")
    from_file = Settings.from_env({"SIGNOFF_REVIEWER_KEK_FILE": str(tmp_path / "reviewer-kek")})
    assert from_file.reviewer_kek is not None
    assert from_file.reviewer_kek.kek_id == LocalKek(key).kek_id
    only_worker = Settings.from_env({"SIGNOFF_KEK": text})
    assert only_worker.kek is not None and only_worker.reviewer_kek is None
    with pytest.raises(ConfigurationError, match="SIGNOFF_REVIEWER_KEK"):
        Settings.from_env({"SIGNOFF_REVIEWER_KEK": "not a key"})


async def test_a_decision_key_the_journal_never_recorded_is_not_trusted(
    fresh_database_url: str,
) -> None:
    """Whoever can write `data_keys` (the owner, say) adds a decision key of their own and
    signs with it: the signature verifies under that row's public key, but the journal never
    recorded the key, so the worker refuses the decision and runs nothing."""
    url = fresh_database_url
    async with await Database.connect(url) as owner:
        ring = await KeyRing.open(owner, LocalKek(TEST_KEK), reviewer_kek=LocalKek(os.urandom(32)))
        store = ApprovalStore(owner, ring)
        approval, call = await _ask(store, ApprovalPolicy(approvers=frozenset({"alice"})))
        forger = Ed25519PrivateKey.generate()
        key_id = f"dsig-{uuid.uuid4().hex[:16]}"
        async with owner.connection() as conn:
            await conn.execute(
                "INSERT INTO data_keys (key_id, purpose, state, kek_id, wrapped, public_key)"
                " VALUES ($1, 'decision_signing', 'decrypt_only', 'kek-forger', '\\x00', $2)",
                key_id,
                forger.public_key().public_bytes_raw(),
            )
        vote = _vote(Reviewer("alice"))
        message = review_statement(approval.binding, approval.approval_id, vote).message(key_id)
        signature = base64.b64encode(forger.sign(message)).decode()
        signed = replace(vote, signature={"key_id": key_id, "signature": signature})
        await _forge(owner, approval, _data(signed, ["alice"]))
        await store.close()

    settings = Settings(database_url=url, kek=LocalKek(TEST_KEK))
    async with await Database.connect(url, settings=settings) as worker:
        worker_ring = await KeyRing.open(worker, create_missing=False)
        worker_store, ledger = ApprovalStore(worker, worker_ring), ToolLedger(worker, worker_ring)
        tool = Tool()
        gate = approval_gate(worker_store, approval.approval_id, "x/refund-1", call.args)
        with pytest.raises(DecisionForged, match="journal does not vouch"):
            await ledger.execute(call, tool, WRITE, gate=gate)
        assert tool.runs == 0
        await ledger.close()
        await worker_store.close()
