"""Reviewer ids have one normal form and refuse hidden characters; a reviewer's groups come
from the reviewer directory Signoff keeps (journaled, rebuilt by `verify_projection`), never
from whoever asks to decide."""

from __future__ import annotations

import json
import uuid

import asyncpg
import pytest

from approvals import (
    ApprovalPolicy,
    ApprovalStatus,
    ApprovalStore,
    Decision,
    DecisionNotAllowed,
    InvalidApprovalRequest,
    InvalidReviewerId,
    Reviewer,
    ReviewerDirectory,
    UnknownReviewer,
    reviewer_id,
)
from approvals.reviewers import stream_of
from ledger.journal import Journal, NewEvent
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database

from .support.processes import TEST_KEK, kek_env, run_cli

LEADS = frozenset({"group:leads"})

# What an id may not hold once normalised, each with a printable name for the test id.
HOSTILE = {
    "tab": "m\t1",
    "NUL": "m\x001",
    "inner space": "m 1",
    "no-break space": "m\u00a01",
    "line separator U+2028": "m\u20281",
    "paragraph separator U+2029": "m\u20291",
    "zero-width space": "m\u200b1",
    "zero-width joiner": "m\u200d1",
    "byte-order mark": "\ufeffm1",
    "right-to-left override": "m\u202e1",
    "escape": "m\x1b[31m1",
    "lone surrogate": "m\ud8001",
    "only whitespace": " \t\n",
    "empty": "",
    "only a zero-width space": "\u200b",
    "too long": "m" * 129,
}
# NFKC, then trimmed: each of these is the reviewer `m1`.
SAME_AS_M1 = ["m1", "m1 ", " m1", "m1\n", "\uff4d\uff11", "\u3000m1", "m\u2081"]


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def _ask(store: ApprovalStore, policy: ApprovalPolicy, requested_by: str = "agent") -> str:
    approval = await store.request(
        run_id=_unique("run"),
        tool="refund",
        args={"amount": 10},
        call_id="c-1",
        requested_by=requested_by,
        policy=policy,
    )
    return approval.approval_id


# -- one normal form ------------------------------------------------------------------------------


@pytest.mark.parametrize("spelling", SAME_AS_M1)
def test_every_spelling_of_one_id_normalises_to_it(spelling: str) -> None:
    assert reviewer_id(spelling) == "m1"
    assert ApprovalPolicy(approvers=frozenset({spelling})).approvers == {"m1"}


@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_ids_are_refused_with_a_typed_error(value: str) -> None:
    with pytest.raises(InvalidReviewerId):
        reviewer_id(value)
    with pytest.raises(InvalidReviewerId):
        ApprovalPolicy(approvers=frozenset({value}))
    with pytest.raises(InvalidReviewerId):
        ApprovalPolicy(approvers=frozenset({f"group:{value}"}))
    with pytest.raises(InvalidReviewerId):
        Reviewer(value)
    assert issubclass(InvalidReviewerId, InvalidApprovalRequest)


@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
async def test_a_hostile_id_writes_nothing_anywhere(
    store: ApprovalStore, db: Database, value: str
) -> None:
    approval_id = await _ask(store, ApprovalPolicy())
    directory = ReviewerDirectory(db)
    with pytest.raises(InvalidReviewerId):
        await store.decide(approval_id, Decision.approve(), value)
    with pytest.raises(InvalidReviewerId):
        await directory.add(value, ["leads"], by="admin")
    with pytest.raises(InvalidReviewerId):
        await directory.add(_unique("ok"), [value], by="admin")
    approval = await store.get(approval_id)
    assert (approval.status, approval.reviews, approval.version) == (ApprovalStatus.PENDING, (), 1)


async def test_m1_and_m1_with_a_space_are_one_reviewer_and_do_not_meet_a_quorum_of_2(
    store: ApprovalStore,
) -> None:
    approval_id = await _ask(store, ApprovalPolicy(approvers=frozenset({"m1", "m2"}), quorum=2))
    first = await store.decide(approval_id, Decision.approve(), "m1")
    assert first.status is ApprovalStatus.PENDING
    for spelling in SAME_AS_M1[1:]:
        with pytest.raises(DecisionNotAllowed, match="approved already"):
            await store.decide(approval_id, Decision.approve(), spelling)
    approval = await store.get(approval_id)
    assert approval.status is ApprovalStatus.PENDING and approval.approvers == ("m1",)
    done = await store.decide(approval_id, Decision.approve(), "m2")
    assert done.status is ApprovalStatus.APPROVED and done.decided_by == ("m1", "m2")


async def test_the_requester_under_another_spelling_may_not_approve_itself(
    store: ApprovalStore,
) -> None:
    approval_id = await _ask(store, ApprovalPolicy(), requested_by="agent ")
    for spelling in ("agent", "\uff41\uff47\uff45\uff4e\uff54"):
        with pytest.raises(DecisionNotAllowed, match="may not decide"):
            await store.decide(approval_id, Decision.approve(), spelling)
    assert (await store.get(approval_id)).status is ApprovalStatus.PENDING


# -- groups come from the directory ---------------------------------------------------------------


async def test_a_claimed_group_does_not_approve_a_group_policy(
    store: ApprovalStore, database_url: str
) -> None:
    mallory = _unique("mallory")
    approval_id = await _ask(store, ApprovalPolicy(approvers=LEADS))
    with pytest.raises(InvalidApprovalRequest, match="groups come from the reviewer directory"):
        await store.decide(approval_id, Decision.approve(), Reviewer(mallory, frozenset({"leads"})))
    with pytest.raises(DecisionNotAllowed, match="not an approver"):
        await store.decide(approval_id, Decision.approve(), mallory)

    claimed = await run_cli(
        "approvals", "decide", approval_id, "--approve", "--by", mallory, "--group", "leads",
        database_url=database_url, env=kek_env(),
    )  # fmt: skip
    assert claimed.code == 2 and claimed.stdout == ""
    [line] = claimed.stderr.splitlines()
    assert "groups come from the reviewer directory" in line
    plain = await run_cli(
        "approvals", "decide", approval_id, "--approve", "--by", mallory,
        database_url=database_url, env=kek_env(),
    )  # fmt: skip
    assert plain.code == 2 and "not an approver" in plain.stderr
    assert len(plain.stderr.splitlines()) == 1
    approval = await store.get(approval_id)
    assert (approval.status, approval.reviews) == (ApprovalStatus.PENDING, ())


async def test_a_reviewer_s_pending_list_is_not_crowded_out_by_approvals_for_others(
    store: ApprovalStore, db: Database
) -> None:
    """More pending approvals for other reviewers than one page holds, all older: the
    reviewer's own still come on its first page (the query matches approvers)."""
    carol, group, run = _unique("carol"), _unique("crew"), _unique("run")
    await ReviewerDirectory(db).add(carol, [group], by="admin")

    async def ask(call: str, approvers: str) -> str:
        policy = ApprovalPolicy(approvers=frozenset({approvers}))
        approval = await store.request(
            run_id=run, tool="refund", args={}, call_id=call, requested_by="agent", policy=policy
        )
        return approval.approval_id

    for n in range(110):
        await ask(f"other-{n}", _unique("someone"))
    mine = {await ask("by-name", carol), await ask("by-group", f"group:{group}")}
    assert {a.approval_id for a in await store.pending(reviewer=carol, run_id=run)} == mine
    page, _ = await store.pending_page(reviewer=carol, run_id=run, limit=10, scan=50)
    assert {a.approval_id for a in page} == mine


async def test_a_reviewer_in_the_group_approves_and_a_removed_one_no_longer_can(
    store: ApprovalStore, db: Database
) -> None:
    directory = ReviewerDirectory(db)
    alice, bob = _unique("alice"), _unique("bob")
    await directory.add(alice, ["leads"], by="admin")
    await directory.add(bob, ["leads", "finance"], by="admin")

    approval_id = await _ask(store, ApprovalPolicy(approvers=LEADS))
    done = await store.decide(approval_id, Decision.approve(), f" {alice}")  # normalised
    assert done.status is ApprovalStatus.APPROVED and done.decided_by == (alice,)
    events = await Journal(db).read_stream(f"approval:{approval_id}")
    assert events[-1].data["reviewer_groups"] == ["leads"]  # what allowed it, for auditors

    await directory.remove(bob, by="admin")
    later = await _ask(store, ApprovalPolicy(approvers=LEADS))
    with pytest.raises(DecisionNotAllowed, match="reviewer directory"):
        await store.decide(later, Decision.approve(), bob)
    assert later not in [a.approval_id for a in await store.pending(reviewer=bob)]
    assert later in [a.approval_id for a in await store.pending(reviewer=alice)]

    # Groups changed: bob back in finance only decides for finance, not for leads.
    await directory.add(bob, ["finance"], by="admin")
    with pytest.raises(DecisionNotAllowed):
        await store.decide(later, Decision.approve(), bob)
    finance = await _ask(store, ApprovalPolicy(approvers=frozenset({"group:finance"})))
    assert (await store.decide(finance, Decision.approve(), bob)).status is (
        ApprovalStatus.APPROVED
    )


# -- the directory is a journaled projection ------------------------------------------------------


async def test_directory_changes_are_journaled_and_the_table_is_their_fold(
    fresh_database_url: str,
) -> None:
    async with await Database.connect(fresh_database_url) as db:
        directory, journal = ReviewerDirectory(db), Journal(db)
        added = await directory.add("\uff43arol ", ["leads", "group:finance"], by="admin")
        assert (added.reviewer_id, added.groups, added.active) == (
            "carol",
            ("finance", "leads"),
            True,
        )
        assert await directory.add("carol", ["finance", "leads"], by="admin") == added  # no-op
        await directory.set_groups("carol", ["leads"], by="ops")
        removed = await directory.remove("carol", by="ops")
        assert (removed.active, removed.groups, removed.changed_by) == (False, (), "ops")
        with pytest.raises(UnknownReviewer):
            await directory.remove("carol", by="ops")
        with pytest.raises(UnknownReviewer):
            await directory.set_groups("dave", ["leads"], by="ops")
        again = await directory.add("carol", ["support"], by="admin")

        events = await journal.read_stream(stream_of("carol"))
        assert [(e.type, e.actor) for e in events] == [
            ("reviewer.added", "admin"),
            ("reviewer.groups_changed", "ops"),
            ("reviewer.removed", "ops"),
            ("reviewer.added", "admin"),
        ]
        assert events[0].data["groups"] == ["finance", "leads"]
        assert again.version == 4 and (await directory.get("carol")) == again
        assert [e.reviewer_id for e in await directory.list()] == ["carol"]
        assert await directory.verify_projection() == []
        assert (await journal.verify()).ok

        # An event appended without its row (workers may append) gives nobody a group: decide
        # reads the row, and the rebuild names the difference.
        forged = NewEvent(
            "reviewer.added", {"groups": ["leads"], "at": "2026-12-01T00:00:00+00:00"}, "x"
        )
        await journal.append(stream_of("mallory"), [forged], expected_version=0)
        store = ApprovalStore(db, await KeyRing.open(db, LocalKek(TEST_KEK)))
        approval_id = await _ask(store, ApprovalPolicy(approvers=LEADS))
        with pytest.raises(DecisionNotAllowed):
            await store.decide(approval_id, Decision.approve(), "mallory")
        await store.close()
        assert await directory.verify_projection() == ["mallory: in the journal, not in the table"]

        async with db.connection() as conn:  # the owner, behind the journal's back
            await conn.execute(
                "UPDATE reviewers SET groups = '{leads}' WHERE reviewer_id = 'carol'"
            )
        problems = await directory.verify_projection()
        assert len(problems) == 2 and problems[1].startswith("carol: table"), problems


async def test_only_the_owner_writes_the_directory_and_every_role_reads_it(
    fresh_database_url: str,
) -> None:
    async with await Database.connect(fresh_database_url) as db:
        await ReviewerDirectory(db).add("erin", ["leads"], by="admin")
    conn = await asyncpg.connect(fresh_database_url)
    try:
        for role in ("signoff_app", "signoff_reviewer"):
            async with conn.transaction():
                await conn.execute(f"SET LOCAL ROLE {role}")
                assert await conn.fetchval("SELECT groups FROM reviewers") == ["leads"]
            for write in (
                "INSERT INTO reviewers VALUES ('mallory', '{leads}', true, 'm', now(), 1)",
                "UPDATE reviewers SET groups = '{leads}'",
                "DELETE FROM reviewers",
            ):
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    async with conn.transaction():
                        await conn.execute(f"SET LOCAL ROLE {role}")
                        await conn.execute(write)
        async with conn.transaction():
            await conn.execute("SET LOCAL ROLE signoff_auditor")
            row = await conn.fetchrow("SELECT reviewer_id, groups, active FROM audit_reviewers")
            assert tuple(row) == ("erin", ["leads"], True)
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            async with conn.transaction():
                await conn.execute("SET LOCAL ROLE signoff_auditor")
                await conn.execute("SELECT * FROM reviewers")
    finally:
        await conn.close()


async def test_the_reviewers_commands_add_list_and_remove_with_one_line_errors(
    fresh_database_url: str,
) -> None:
    async def cli(*args: str) -> tuple[int, str, str]:
        result = await run_cli(*args, database_url=fresh_database_url, env=kek_env())
        return result.code, result.stdout, result.stderr

    code, out, err = await cli("reviewers", "add", "dana", "--group", "leads", "--group", "ops")
    assert (code, err) == (0, ""), err
    assert out.strip() == "dana: leads, ops"
    code, out, _ = await cli("reviewers", "list", "--json")
    [row] = json.loads(out)["reviewers"]
    assert (row["reviewer_id"], row["groups"], row["active"]) == ("dana", ["leads", "ops"], True)
    code, out, _ = await cli("reviewers", "remove", "dana", "--by", "ops")
    assert code == 0 and "(removed)" in out
    code, out, _ = await cli("reviewers", "list")
    assert "dana" not in out
    code, out, _ = await cli("reviewers", "list", "--all")
    assert "dana (removed)" in out

    for args, says in (
        (("reviewers", "add", "a\u200bb"), "format character"),
        (("reviewers", "add", "a\tb"), "whitespace"),
        (("reviewers", "add", "ok", "--group", "bad\u2028group"), "line separator"),
        (("reviewers", "remove", "nobody"), "not in the reviewer directory"),
    ):
        code, out, err = await cli(*args)
        assert code == 2 and out == "" and len(err.splitlines()) == 1, (args, err)
        assert says in err, (args, err)
    async with await Database.connect(fresh_database_url) as db:
        directory = ReviewerDirectory(db)
        assert [e.reviewer_id for e in await directory.list(include_removed=True)] == ["dana"]
        assert await directory.verify_projection() == []
