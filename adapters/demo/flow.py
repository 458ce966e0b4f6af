"""`signoff demo`: a support agent asks to refund an order, a support lead approves, the refund
runs once, and the ledger and a signed digest show it.

Three OS processes share one database: process 1 (`python -m adapters.demo.worker start`) runs
the agent until the refund pauses for approval; this process serves the HTTP API of `signoff
serve` on loopback (`review`) and approves with `POST /v1/approvals/{id}/decision` as the
reviewer of a short-lived API token, or with `--inbox` waits for a person to decide with that
token (a wait that times out or is stopped, Ctrl-C or SIGTERM, cancels the approval); process 2
(`... resume`) finds the thread stored with the approval and resumes it. Every
invocation uses a fresh run (and thread) id, so the demo runs again and again on one database.
The refund pays into a file of the run's (`script.record_payment`), which this process counts.

Each side logs in as a deployment's would: the workers with a login that has only `signoff_app`,
the service with one that has only `signoff_reviewer`, both made for this run and dropped after
it (`ledger.store.logins`). Migrating, the keys, the reviewer directory, the API token and the
digest stay on the demo's own login (the owner's jobs). A login that may not create roles runs
every process on itself, and the demo says so.

The key-encryption key: `SIGNOFF_KEK` / `SIGNOFF_KEK_FILE` when set (the workers inherit the
environment); else, on the embedded server, its local KEK file, which every process finds. A
database of your own with no KEK configured gets a KEK file of the demo's, named by its KEK id,
beside the embedded server's folder (`<embedded dir>/../keks/<kek id>`), but only while it has no
data keys yet; later runs use that file, and a database whose keys another KEK wrapped is refused
with the KEK it needs. Those kept files are the library's (`ledger.keys.kek_files`): every
command finds them by the KEK id the keys name, as the workers do.

The reviewer side's KEK wraps the key that signs decisions: this process's service (the reviewer)
holds it, the workers never do (it is taken out of their environment). It is
`SIGNOFF_REVIEWER_KEK` / `SIGNOFF_REVIEWER_KEK_FILE` when set, else a file of the demo's
(`<embedded dir>/../reviewer-keks/<kek id>`), made with the database's decision key and used by
later runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import tempfile
import time
import uuid
from collections.abc import Coroutine
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from approvals import Approval, ApprovalAlreadyDecided, ApprovalStatus, ReviewerDirectory
from ledger.audit.digest import DigestCheck, signing_keys, take_digest, verify_digest
from ledger.audit.queries import CallFilter, find_calls
from ledger.calls.model import CallRecord, CallStatus
from ledger.journal import Journal, VerifyReport
from ledger.keys import LocalKek
from ledger.store import Database, migrate
from ledger.store.config import masked
from ledger.store.migrating import migrate_database
from ledger.store.settings import Settings

from .keys import Keys, demo_keys
from .processes import Launch, Logins, open_logins, run_worker, worker_env
from .review import DECIDE_PATH, Review, open_review
from .screen import DemoFailed, Screen
from .script import LEADS, REFUND_CALL, REVIEWER, recorded_payments

__all__ = ["INBOX_WAIT", "DemoFailed", "run_demo"]

INBOX_WAIT = 15 * 60.0
"""How long `--inbox` waits for a person to decide, by default (seconds)."""
DEMO_ACTOR = "signoff-demo"  # who makes the token and withdraws an approval nobody decided
TOKEN_SLACK = timedelta(minutes=10)  # the token outlives the wait by this much, then expires


@dataclass
class Decided:
    """How the approval was decided, and what it then was."""

    via: str  # "http": the demo's POST; "inbox": a person, with the demo's token or otherwise
    approval: Approval

    def to_json(self, review: Review) -> dict[str, Any]:
        return {
            "endpoint": "POST " + DECIDE_PATH.format(approval_id=self.approval.approval_id),
            "service": review.url,
            "token_id": review.token.info.token_id,
            "token_reviewer": review.reviewer,
            "status": self.approval.status.value,
            "decided_by": list(self.approval.decided_by),
        }


def run_demo(
    database_url: str | None = None,
    *,
    settings: Settings | None = None,
    log_level: str = "WARNING",
    as_json: bool = False,
    inbox: bool = False,
    wait: float = INBOX_WAIT,
) -> int:
    """Run the demo with `settings` (default: the environment's, with `database_url` over its
    URL): their database, else the embedded server. The demo approves over the HTTP API; with
    `inbox` a person decides, within `wait` seconds. Exit code 0 when the refund ran once (or,
    rejected or answered, not at all) and the digest verified, else 1.

    Raises:
        DemoFailed: a step could not be done, or (`inbox`) nobody decided within `wait`.
    """
    started = time.perf_counter()
    screen = Screen(as_json)
    if inbox:
        screen.line("Signoff demo: a support agent asks to refund an order, you decide it in the")
        screen.line(
            "web inbox (or over the HTTP API), and a second worker process resumes the agent."
        )
    else:
        screen.line(
            "Signoff demo: a support agent asks to refund an order, a support lead approves"
        )
        screen.line("it over the HTTP API, and a second worker process resumes the agent.")
    screen.line()
    if settings is None:
        settings = Settings.from_env(database_url=database_url)
    url = settings.resolve_url()  # starts the embedded server if that is the database
    # Blocking (alembic runs its own event loop): before ours.
    migrate_database(url, "head", settings=settings)
    wait_for = wait if inbox else None
    try:
        return asyncio.run(
            _stoppable(_demo(settings, url, screen, started, log_level, as_json, wait_for))
        )
    except asyncio.CancelledError:  # SIGTERM (`_stoppable`): stopped as Ctrl-C stops it
        raise KeyboardInterrupt from None


async def _stoppable(demo: Coroutine[Any, Any, int]) -> int:
    """Run `demo`, cancelled on SIGTERM as asyncio cancels it on SIGINT, so that either signal
    lets it clean up (withdraw the approval it waits on, drop its logins, revoke its token)."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await demo
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


async def _demo(
    settings: Settings,
    url: str,
    screen: Screen,
    started: float,
    log_level: str,
    as_json: bool,
    inbox_wait: float | None,
) -> int:
    run_id = f"demo-{uuid.uuid4().hex[:8]}"
    home = settings.embedded_home if settings.embedded else None
    where = f"embedded PostgreSQL ({home})" if home else masked(url)
    # The owner's connection signs nothing: it only makes the decision key, on the first run.
    owner = dataclasses.replace(settings, reviewer_kek=None)
    async with (
        await Database.connect(url, pool_size=2, settings=owner) as db,
        open_logins(url) as logins,
        AsyncExitStack() as stack,
    ):
        keys = await demo_keys(db, settings.reviewer_kek)
        lifetime = TOKEN_SLACK + timedelta(seconds=inbox_wait or 0)
        service_settings = _service_settings(settings, url, keys, logins)
        review = await open_review(
            stack, db, service_settings, reviewer=REVIEWER, lifetime=lifetime
        )
        screen.line(f"  database  {where}")
        _show_lines(screen, "keys", keys.note.splitlines())
        _show_lines(screen, "logins", logins.lines(urlsplit(url).username or "you"))
        screen.line(f"  run       {run_id}")
        screen.line()
        screen.step(
            f"schema at head {migrate.head_revision()}, data keys ready",
            time.perf_counter() - started,
        )
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="signoff-demo-")))
        payments = folder / "payments.jsonl"
        launch = Launch(worker_env(settings, url, keys, logins.worker), log_level, payments)

        first = await run_worker(
            screen, launch, 1, "runs the agent until it pauses", "start", run_id
        )
        await ReviewerDirectory(db).add(REVIEWER, [LEADS], by="signoff-demo")
        if inbox_wait is None:
            decided = await _approve(screen, review, run_id)
        else:
            decided = await _person_decides(screen, review, run_id, inbox_wait)
        approval_id = decided.approval.approval_id
        what = "resumes the thread stored with the approval"
        second = await run_worker(screen, launch, 2, what, "resume", approval_id)
        pids = {first.pid: 1, second.pid: 2}

        paid = recorded_payments(payments)
        paid_by = [int(payment["pid"]) for payment in paid]
        calls = await find_calls(db, CallFilter(run_id=run_id))
        refund = next((c for c, _ in calls if c.call_id == REFUND_CALL), None)
        approved = decided.approval.status.runs_tool
        once = approved and (
            paid_by == [second.pid]
            and refund is not None
            and refund.status is CallStatus.SUCCEEDED
            and refund.attempts == 1
        )
        # Rejected or answered (with --inbox), the refund must not have run anywhere.
        untouched = paid_by == [] and (refund is None or refund.status is not CallStatus.SUCCEEDED)
        as_decided = once if approved else untouched
        _show_once(screen, as_decided, decided.approval.status, paid, pids)

        rows = [_call_row(call, approved_by, pids) for call, approved_by in calls]
        _show_ledger(screen, run_id, rows)
        report = await Journal(db).verify()
        digest = await take_digest(db, keys.ring)
        check = await verify_digest(db, digest, signing_keys(keys.ring))
        _show_digest(screen, report, check)

    seconds = time.perf_counter() - started
    ok = as_decided and report.ok and check.ok
    screen.line()
    screen.line(f"{'Done' if ok else 'FAILED'} in {seconds:.1f} s. The refund's story:")
    screen.line(f"  signoff ledger show {run_id} {REFUND_CALL}")
    if home is not None:
        screen.line(f"The embedded PostgreSQL in {home} keeps running for the next command.")
        screen.line("Stop it with: signoff embedded stop")
    if as_json:
        document = {
            "run_id": run_id,
            "database": where,
            "processes": {"1": first.pid, "2": second.pid, "reviewer": os.getpid()},
            "logins": {"1": first.login, "2": second.login, "reviewer": review.login},
            "approval_id": approval_id,
            "decided_via": decided.via,
            "decision": decided.to_json(review),
            "refund": {"payments": len(paid_by), "paid_by": paid_by, "ran_once": once},
            "calls": rows,
            "journal": {"events": report.events, "intact": report.ok},
            "digest": {
                "tree_size": digest.tree_size,
                "root": digest.root.hex(),
                "key_id": digest.key_id,
                "verified": check.ok,
                "problems": list(check.problems),
            },
            "seconds": round(seconds, 2),
        }
        print(json.dumps(document, indent=2))
    return 0 if ok else 1


def _show_lines(screen: Screen, label: str, lines: list[str]) -> None:
    for i, line in enumerate(lines):
        screen.line(f"  {label if i == 0 else '':<9} {line}")


def _service_settings(settings: Settings, url: str, keys: Keys, logins: Logins) -> Settings:
    """The service's settings: the reviewer's login (else the demo's own), and the KEKs this
    process holds, the reviewer side's too (it signs the decision)."""
    kek = keys.ring.kek
    return dataclasses.replace(
        settings,
        database_url=logins.reviewer or url,
        kek=kek if isinstance(kek, LocalKek) else settings.kek,  # the demo's KEKs are local
        reviewer_kek=keys.reviewer_kek,
    )


# -- the reviewer, the checks and the record -----------------------------------------------------


async def _the_refund(review: Review, run_id: str) -> str:
    """The id of the run's refund, as the token's reviewer finds it in `GET /v1/approvals`."""
    pending = await review.pending(run_id)
    if len(pending) != 1:
        raise DemoFailed(f"expected one approval waiting for {REVIEWER}, found {len(pending)}")
    approval_id: str = pending[0]["approval_id"]
    return approval_id


async def _approve(screen: Screen, review: Review, run_id: str) -> Decided:
    """Approve the run's pending refund as the token's reviewer (a support lead: the directory,
    kept by the owner, says alice is one), over HTTP: `GET /v1/approvals?run_id=...` finds it,
    `POST /v1/approvals/{id}/decision` decides it, idempotent by the run's request id."""
    started = time.perf_counter()
    approval_id = await _the_refund(review, run_id)
    await review.approve(approval_id, request_id=f"{run_id}/approve")
    approval = await review.service.store.get(approval_id)
    seconds = time.perf_counter() - started
    screen.step(
        f"{review.reviewer} of {LEADS} approves over HTTP, as the API token's reviewer", seconds
    )
    screen.detail("service", f"{review.url} in this process (pid {os.getpid()}), reviewer login")
    token_id = review.token.info.token_id
    screen.detail("token", f"{token_id} for {review.reviewer}, made now, revoked at the end")
    screen.detail("POST", f"{DECIDE_PATH.format(approval_id=approval_id)}: {approval.status}")
    return Decided("http", approval)


async def _person_decides(screen: Screen, review: Review, run_id: str, wait: float) -> Decided:
    """Serve the inbox and wait up to `wait` seconds for a person to decide the run's refund."""
    started = time.perf_counter()
    approval_id = await _the_refund(review, run_id)
    screen.step(f"waiting for a person to decide {approval_id} (up to {_minutes(wait)})")
    token = review.token.token
    screen.notice(f"      sign in   {review.inbox_link}")
    screen.notice(f"      token     {token}  (for {review.reviewer}, revoked at the end)")
    decide_url = review.url + DECIDE_PATH.format(approval_id=approval_id)
    curl = (
        f"curl -H 'Authorization: Bearer {token}' \\",
        f"  -H 'Idempotency-Key: {run_id}/1' -H 'Content-Type: application/json' \\",
        f"""  -d '{{"decision": "approve"}}' {decide_url}""",
    )
    for i, text in enumerate(curl):
        screen.notice(f"      {'or' if i == 0 else '':<9} {text}")
    try:
        approval = await review.wait_for_person(approval_id, wait)
    except asyncio.CancelledError:  # Ctrl-C, SIGTERM: nobody will resume it, so withdraw it
        await _withdraw(screen, review, approval_id, "interrupted")
        raise
    if approval is None:
        await _withdraw(screen, review, approval_id, None)
        raise DemoFailed(
            f"nobody decided approval {approval_id} within {_minutes(wait)}: it is withdrawn"
        )
    by = ", ".join(approval.decided_by) or "?"
    screen.done(f"{approval.status} by {by}", time.perf_counter() - started)
    return Decided("inbox", approval)


async def _withdraw(screen: Screen, review: Review, approval_id: str, why: str | None) -> None:
    """Cancel the approval nobody will resume (signed, as the service's cancellations are), so
    that it does not wait out its expiry among the next run's; decided meanwhile, it stays so."""
    try:
        reason = f"the demo was {why or 'not answered in time'}"
        await review.service.store.cancel(approval_id, by=DEMO_ACTOR, reason=reason)
    except ApprovalAlreadyDecided:
        return
    if why is not None:
        screen.notice(f"{why}: approval {approval_id} withdrawn (cancelled)")


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def _ran_in(worker_id: str, pids: dict[int, int]) -> tuple[int | None, str]:
    """The pid in a ledger worker id (`host:pid:nonce`) and which demo process that was."""
    parts = worker_id.split(":")
    pid = int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else None
    number = pids.get(pid) if pid is not None else None
    return pid, f"process {number} (pid {pid})" if number else worker_id


def _call_row(
    call: CallRecord, approved_by: tuple[str, ...], pids: dict[int, int]
) -> dict[str, Any]:
    pid, ran_in = _ran_in(call.worker_id, pids)
    return {
        "call_id": call.call_id,
        "tool": call.tool,
        "effect": str(call.effect),
        "status": str(call.status),
        "attempts": call.attempts,
        "approved_by": list(approved_by),
        "pid": pid,
        "ran_in": ran_in,
    }


def _show_once(
    screen: Screen,
    as_decided: bool,
    status: ApprovalStatus,
    paid: list[dict[str, Any]],
    pids: dict[int, int],
) -> None:
    if as_decided and not status.runs_tool:
        if status is ApprovalStatus.RESPONDED:
            screen.step("the reviewer answered instead: the refund did not run, no payment")
        else:
            screen.step(f"the refund was {status} and did not run: no payment")
        return
    if as_decided:
        pid = paid[0]["pid"]
        if status is ApprovalStatus.EDITED:
            amount = f"{float(paid[0]['amount']):.2f} {paid[0]['currency']}"
            screen.step(
                f"the refund ran once, as edited: 1 payment of {amount}, made by process 2 "
                f"(pid {pid}); process 1 made none"
            )
        else:
            screen.step(
                f"the refund ran once: 1 payment, made by process 2 (pid {pid}); "
                "process 1 made none"
            )
        return
    paid_by = [int(payment["pid"]) for payment in paid]
    where = ", ".join(f"process {pids.get(p, '?')} (pid {p})" for p in paid_by) or "nowhere"
    screen.step(f"FAILED: {len(paid_by)} payments for one refund, made by {where}")


def _show_ledger(screen: Screen, run_id: str, rows: list[dict[str, Any]]) -> None:
    screen.line()
    screen.line(f"Ledger of run {run_id}")
    header = ("CALL", "TOOL", "EFFECT", "STATUS", "ATTEMPTS", "APPROVED BY", "RAN IN")
    table = [header] + [
        (
            r["call_id"],
            r["tool"],
            r["effect"],
            r["status"],
            str(r["attempts"]),
            ", ".join(r["approved_by"]) or "-",
            r["ran_in"],
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    for row in table:
        cells = [f"{cell:<{w}}" for cell, w in zip(row, widths, strict=False)]
        screen.line("  " + "  ".join([*cells, row[-1]]))


def _show_digest(screen: Screen, report: VerifyReport, check: DigestCheck) -> None:
    digest = check.digest
    screen.line()
    screen.line("Signed digest of the journal")
    bad = report.first_bad
    chains = "every hash chain intact" if bad is None else f"BROKEN at position {bad.position}"
    screen.line(f"  events     {report.events}, {chains}")
    screen.line(f"  tree size  {digest.tree_size}")
    screen.line(f"  root       {digest.root.hex()[:16]}...")
    screen.line(f"  key        {digest.key_id} (Ed25519)")
    if check.ok:
        screen.line("  check      VERIFIED: the signature holds and the journal hashes to the root")
    for problem in check.problems:
        screen.line(f"  check      NOT VERIFIED: {problem}")
