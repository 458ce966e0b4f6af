"""`signoff demo`: a support agent asks to refund an order, a support lead approves, the refund
runs once, and the ledger and a signed digest show it.

Three OS processes share one database: process 1 (`python -m adapters.demo.worker start`) runs
the agent until the refund pauses for approval; this process serves the HTTP API of `signoff
serve` on loopback (`review`) and approves with `POST /v1/approvals/{id}/decision` as the
reviewer of a short-lived API token, or with `--inbox` waits for a person to decide with that
token; process 2 (`... resume`) finds the thread stored with the approval and resumes it. Every
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
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg

import adapters
from adapters.terminal import safe
from approvals import Approval, ReviewerDirectory
from ledger import SignoffError
from ledger.audit.digest import DigestCheck, signing_keys, take_digest, verify_digest
from ledger.audit.queries import CallFilter, find_calls
from ledger.calls.model import CallRecord, CallStatus
from ledger.errors import KekMissing
from ledger.journal import Journal, VerifyReport
from ledger.keys import KeyRing, KeyState, LocalKek, Purpose
from ledger.keys.kek_files import kept_kek, kept_kek_folder, new_kept_kek
from ledger.store import Database, migrate
from ledger.store.config import masked
from ledger.store.logins import temporary_login
from ledger.store.migrating import migrate_database
from ledger.store.settings import Settings

from .review import DECIDE_PATH, Review, open_review
from .script import LEADS, REFUND_CALL, REVIEWER, recorded_payments

__all__ = ["INBOX_WAIT", "DemoFailed", "run_demo"]

STEPS = 5
WIDTH = 88  # step times are right-aligned to this column
WORKER_TIMEOUT = 300.0
INBOX_WAIT = 15 * 60.0
"""How long `--inbox` waits for a person to decide, by default (seconds)."""
TOKEN_SLACK = timedelta(minutes=10)  # the token outlives the wait by this much, then expires


class DemoFailed(SignoffError):
    """A step of the demo could not be done."""


@dataclass
class Screen:
    """Progress on stdout, one line per step and per thing a worker reports; silent with
    `--json`."""

    quiet: bool
    step_no: int = 0

    def line(self, text: str = "") -> None:
        """Values from the model and the database are escaped for the terminal here."""
        if not self.quiet:
            print(safe(text), flush=True)

    def notice(self, text: str) -> None:
        """A line a person must see even with `--json` (then on stderr, so that stdout stays one
        JSON document)."""
        print(safe(text), flush=True, file=sys.stderr if self.quiet else sys.stdout)

    def step(self, text: str, seconds: float | None = None) -> None:
        self.step_no += 1
        head = f"[{self.step_no}/{STEPS}] {text}"
        if seconds is not None:
            head = f"{head:<{WIDTH - 7}}{seconds:>5.1f} s"
        self.line(head)

    def detail(self, label: str, text: str) -> None:
        self.line(f"      {label:<9} {text}")

    def done(self, text: str, seconds: float) -> None:
        self.line(f"{'      ' + text:<{WIDTH - 7}}{seconds:>5.1f} s")


@dataclass
class Keys:
    """The key ring, what the workers need added to the environment to open it, and a note."""

    ring: KeyRing
    env: dict[str, str] = field(default_factory=dict)
    note: str = ""
    reviewer_kek: LocalKek | None = None  # this process's: it decides, the workers never do


@dataclass
class Logins:
    """The URLs the workers and the reviewer log in with: logins of one role each, or None
    each when the demo's own login may not make them (then every process uses that one)."""

    worker: str | None
    reviewer: str | None

    def lines(self, own: str) -> list[str]:
        if self.worker is None or self.reviewer is None:
            return [
                f"every process logs in as {own}, which may not create roles (CREATEROLE):",
                "the workers hold all its rights, not only signoff_app's",
            ]
        return [
            f"workers  {_user(self.worker)} (only signoff_app)",
            f"reviewer {_user(self.reviewer)} (only signoff_reviewer); both for this run",
        ]


@dataclass
class Worker:
    number: int
    pid: int
    events: list[dict[str, Any]]

    @property
    def login(self) -> str | None:
        """The database's `session_user` of the process, as it reported it."""
        return next((e["user"] for e in self.events if e["event"] == "login"), None)


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


@dataclass
class Launch:
    """How to start a worker: its environment, log level and the file the refund pays into."""

    env: dict[str, str]
    log_level: str
    payments: Path


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
    rejected, not at all) and the digest verified, else 1.

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
    migrate_database(url, "head")  # blocking (alembic runs its own event loop): before ours
    wait_for = wait if inbox else None
    return asyncio.run(_demo(settings, url, screen, started, log_level, as_json, wait_for))


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
        _logins(url) as logins,
        AsyncExitStack() as stack,
    ):
        keys = await _keys(db, settings.reviewer_kek)
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
        launch = Launch(_worker_env(settings, url, keys, logins.worker), log_level, payments)

        first = await _worker(screen, launch, 1, "runs the agent until it pauses", "start", run_id)
        await ReviewerDirectory(db).add(REVIEWER, [LEADS], by="signoff-demo")
        if inbox_wait is None:
            decided = await _approve(screen, review, run_id)
        else:
            decided = await _person_decides(screen, review, run_id, inbox_wait)
        approval_id = decided.approval.approval_id
        what = "resumes the thread stored with the approval"
        second = await _worker(screen, launch, 2, what, "resume", approval_id)
        pids = {first.pid: 1, second.pid: 2}

        paid_by = [int(payment["pid"]) for payment in recorded_payments(payments)]
        calls = await find_calls(db, CallFilter(run_id=run_id))
        refund = next((c for c, _ in calls if c.call_id == REFUND_CALL), None)
        approved = decided.approval.status.runs_tool
        once = approved and (
            paid_by == [second.pid]
            and refund is not None
            and refund.status is CallStatus.SUCCEEDED
            and refund.attempts == 1
        )
        # Rejected (with --inbox), the refund must not have run anywhere.
        untouched = paid_by == [] and (refund is None or refund.status is not CallStatus.SUCCEEDED)
        as_decided = once if approved else untouched
        _show_once(screen, as_decided, approved, paid_by, pids)

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


# -- logins --------------------------------------------------------------------------------------


def _user(url: str) -> str:
    return urlsplit(url).username or "?"


@asynccontextmanager
async def _logins(url: str) -> AsyncIterator[Logins]:
    """A worker login (only `signoff_app`) and a reviewer login (only `signoff_reviewer`) for
    this run, dropped when it ends; none when `url`'s login may not make them."""
    async with AsyncExitStack() as stack:
        try:
            worker = await stack.enter_async_context(
                temporary_login(url, "signoff_app", prefix="signoff_demo_worker")
            )
            reviewer = await stack.enter_async_context(
                temporary_login(url, "signoff_reviewer", prefix="signoff_demo_reviewer")
            )
        except asyncpg.InsufficientPrivilegeError:
            logins = Logins(None, None)
        else:
            logins = Logins(worker, reviewer)
        yield logins


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


# -- keys ----------------------------------------------------------------------------------------


def _demo_kek_dir(settings: Settings) -> Path:
    return settings.embedded_home.parent / "keks"


async def _keys(db: Database, reviewer_kek: LocalKek | None) -> Keys:
    """The workers' key ring and the reviewer KEK this process signs with (see the module's
    docstring): `reviewer_kek` when one is configured. Makes the keys a new database lacks,
    the decision key too (a key administrator's job, and the reviewer side's: the owner's)."""
    keys = await _worker_keys(db)
    keys.reviewer_kek = reviewer_kek or _reviewer_kek(db.settings, keys.ring)
    await KeyRing.open(db, keys.ring.kek, reviewer_kek=keys.reviewer_kek)
    return keys


def _reviewer_kek(settings: Settings, ring: KeyRing) -> LocalKek:
    """The kept reviewer KEK that wraps this database's decision key, made now if it has none."""
    wrapping = {
        k.kek_id
        for k in ring.all_keys()
        if k.purpose is Purpose.DECISION_SIGNING and k.state is not KeyState.RETIRED
    }
    if not wrapping:
        return new_kept_kek(settings, reviewer=True)[1]
    kek = kept_kek(settings, min(wrapping), reviewer=True)
    if kek is None:
        raise DemoFailed(
            f"this database's decisions are signed by a key wrapped by reviewer KEK "
            f"{min(wrapping)}: set SIGNOFF_REVIEWER_KEK_FILE to it"
        )
    return kek


async def _worker_keys(db: Database) -> Keys:
    """The key ring, opened the way every worker will open it (see the module's docstring)."""
    settings = db.settings
    if settings.kek is not None:
        ring = await KeyRing.open(db)
        source = (settings.kek.source or "").partition("=")[0]  # the variable, not the path
        return Keys(ring, note=f"wrapped by KEK {_kek_id(ring)} from {source}")
    if (local := settings.embedded_kek_file) is not None:
        ring = await KeyRing.open(db)  # creates the local KEK file on first use, and says so
        return Keys(ring, note=f"wrapped by the embedded server's KEK file {local}")
    try:  # the library's resolver finds the kept KEK file of the KEK the keys need
        found = await KeyRing.open(db, create_missing=False)
    except KekMissing as e:
        raise DemoFailed(
            f"this database's data keys are wrapped by KEK {e.needed}: set SIGNOFF_KEK "
            "(base64 of 32 bytes) or SIGNOFF_KEK_FILE to it"
        ) from None
    if isinstance(found.kek, LocalKek):
        kek = found.kek
        path = kept_kek_folder(settings) / kek.kek_id
        note = f"wrapped by {path}\n(the demo's KEK file for this database: no KEK is configured)"
    else:  # no data keys yet: make a KEK for this database, and keep it
        path, kek = new_kept_kek(settings)
        note = (
            f"wrapped by {path}, made now: no KEK is configured\n"
            f"(back it up; SIGNOFF_KEK_FILE={path} lets other commands use it)"
        )
    ring = await KeyRing.open(db, kek)
    return Keys(ring, {"SIGNOFF_KEK_FILE": str(path)}, note)


def _kek_id(ring: KeyRing) -> str:
    return ring.kek.kek_id if ring.kek is not None else "(none)"


# -- the worker processes ------------------------------------------------------------------------


def _worker_env(
    settings: Settings, url: str, keys: Keys, login: str | None = None
) -> dict[str, str]:
    """This environment, the demo's database (on the workers' `login` when there is one), the
    demo's KEK file if it made one, and a PYTHONPATH that finds this package however it was
    installed. SIGNOFF_KEK passes through only when it is set. On the embedded server a worker
    with a login of its own is given the server's KEK file (a URL never selects it); one without
    gets the server's home, not its URL, so its settings name that file as the demo's do."""
    source = str(Path(adapters.__file__).resolve().parent.parent)
    path = os.pathsep.join(p for p in (source, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, **keys.env}
    for name in ("SIGNOFF_REVIEWER_KEK", "SIGNOFF_REVIEWER_KEK_FILE"):
        env.pop(name, None)  # workers verify decisions; only this process signs them
    env.pop("DATABASE_URL", None)
    if login is not None:
        env["SIGNOFF_DATABASE_URL"] = login
        if (local := settings.embedded_kek_file) is not None:
            env["SIGNOFF_KEK_FILE"] = str(local)
    elif settings.embedded:
        env.pop("SIGNOFF_DATABASE_URL", None)
        env["SIGNOFF_EMBEDDED_DIR"] = str(settings.embedded_home)
    else:
        env["SIGNOFF_DATABASE_URL"] = url
    return env


async def _worker(screen: Screen, launch: Launch, number: int, what: str, *args: str) -> Worker:
    """Run one worker process to its end, showing what it reports as it goes."""
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "adapters.demo.worker",
        "--log-level",
        launch.log_level,
        *args,
        str(launch.payments),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=launch.env,
    )
    screen.step(f"process {number} (pid {process.pid}) {what}")
    events: list[dict[str, Any]] = []
    assert process.stdout is not None and process.stderr is not None
    errors = asyncio.ensure_future(process.stderr.read())  # read along, so it never fills
    try:
        async with asyncio.timeout(WORKER_TIMEOUT):
            async for raw in process.stdout:
                text = raw.decode(errors="replace").rstrip()
                try:
                    event = json.loads(text)
                except ValueError:
                    screen.detail("", text)
                    continue
                events.append(event)
                _show_event(screen, event)
            code = await process.wait()
    except TimeoutError:
        raise DemoFailed(
            f"process {number} (pid {process.pid}) did not finish in {WORKER_TIMEOUT:g} s"
        ) from None
    finally:
        if process.returncode is None:  # timed out, interrupted, or we failed: stop it
            process.kill()
            await process.wait()
        stderr = (await errors).decode(errors="replace")
    if code != 0:
        # The worker's own one-line error says why; the demo's error carries it.
        last = next((ln for ln in reversed(stderr.splitlines()) if ln.strip()), "")
        why = last.removeprefix("error: ") if last else f"exit {code}"
        raise DemoFailed(f"process {number} (pid {process.pid}) failed: {why}")
    if stderr.strip():  # warnings of a worker that succeeded: pass them on
        sys.stderr.write(stderr)
    paused = any(e["event"] == "paused" for e in events)
    screen.done(
        f"process {number} exited{', paused: nothing refunded yet' if paused else ''}",
        time.perf_counter() - started,
    )
    return Worker(number, process.pid, events)


def _short(value: Any, width: int = 72) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _show_event(screen: Screen, event: dict[str, Any]) -> None:
    kind = event["event"]
    if kind == "customer":
        screen.detail("customer", event["text"])
    elif kind == "asks":
        args = ", ".join(f"{k}={v!r}" for k, v in event["args"].items())
        screen.detail("agent", f"calls {event['tool']}({args})")
    elif kind == "says":
        screen.detail("agent", _short(event["text"]))
    elif kind == "tool":
        failed = " (error)" if event.get("status") == "error" else ""
        screen.detail("tool", f"{event['tool']}{failed}: {_short(event['content'])}")
    elif kind == "paused":
        screen.detail("paused", f"{event['name']} waits for approval {event['approval_id']}")
    elif kind == "resumes":
        screen.detail("resumes", f"thread {event['thread_id']}, approval {event['status']}")


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
    approval = await review.wait_for_person(approval_id, wait)
    if approval is None:
        raise DemoFailed(f"nobody decided approval {approval_id} within {_minutes(wait)}")
    by = ", ".join(approval.decided_by) or "?"
    screen.done(f"{approval.status} by {by}", time.perf_counter() - started)
    return Decided("inbox", approval)


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
    screen: Screen, as_decided: bool, approved: bool, paid_by: list[int], pids: dict[int, int]
) -> None:
    if as_decided and not approved:
        screen.step("the refund was rejected and did not run: no payment")
        return
    if as_decided:
        screen.step(
            f"the refund ran once: 1 payment, made by process 2 (pid {paid_by[0]}); "
            "process 1 made none"
        )
        return
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
