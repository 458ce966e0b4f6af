"""`signoff demo`, the README's main job: a support agent's refund, approved by a person and run
once across two worker processes, on a fresh database and again on a used one; the workers on a
login that has only `signoff_app`, the reviewer's HTTP service on one that has only
`signoff_reviewer`, the decision made over HTTP with an API token (by the demo, or with
`--inbox` by whoever holds the token it prints)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from approvals import ApiTokens, ApprovalPolicy, ApprovalStatus, ApprovalStore
from ledger.calls.model import CallStatus
from ledger.calls.service import ToolLedger
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database, migrate
from ledger.store.config import configured_url
from ledger.store.db import open_raw_connection
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings
from tests.support.scratch import with_database

from .support.processes import ROOT, kek_env, run_cli
from .support.receivers import http_receiver, smtp_receiver

APPROVED_OVER_HTTP = re.compile(
    r"\[3/5\] alice of support-leads approves over HTTP, as the API token's reviewer.*\n"
    r" +service +http://127\.0\.0\.1:\d+ in this process \(pid \d+\), reviewer login\n"
    r" +token +([0-9a-f]+) for alice, made now, revoked at the end\n"
    r" +POST +/v1/approvals/(apr-[0-9a-f]+)/decision: approved\n"
)
RAN_ONCE = re.compile(r"the refund ran once: 1 payment, made by process 2 \(pid (\d+)\)")
RAN_ONCE_EDITED = re.compile(
    r"the refund ran once, as edited: 1 payment of 60\.00 EUR, made by process 2 \(pid (\d+)\)"
)
LOGINS = re.compile(
    r"logins +workers +(signoff_demo_worker_\w+) \(only signoff_app\)\n"
    r" +reviewer (signoff_demo_reviewer_\w+) \(only signoff_reviewer\); both for this run"
)


VARYING = (  # what differs between two runs of the demo, and the column padding it moves
    (re.compile(r"\b[0-9a-f]{8,}\b"), "<hex>"),
    (re.compile(r"pid \d+"), "pid <n>"),
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:<port>"),
    (re.compile(r"\d+\.\d s\b"), "<t> s"),
    (re.compile(r"(events|tree size) +\d+"), r"\1 <n>"),
    (re.compile(r" +"), " "),
)


def _steps(output: str) -> list[str]:
    """The demo's lines from its first step to its last line, less what varies."""
    lines = output[output.index("[1/5]") : output.index("\nDone in")].splitlines()
    for pattern, stand_in in VARYING:
        lines = [pattern.sub(stand_in, line) for line in lines]
    return lines


SAMPLED = ("README.md", "docs/pages/getting-started.md")  # the pages that show a run


def _sample(page: str) -> str:
    """The sample output of `signoff demo` on `page`."""
    text = (ROOT / page).read_text(encoding="utf-8")
    start = text.index("$ signoff demo\n")
    return text[start : text.index("```", start)]


async def _roles_like(server_url: str, pattern: str) -> list[str]:
    admin = await open_raw_connection(server_url)
    try:
        rows = await admin.fetch("SELECT rolname FROM pg_roles WHERE rolname LIKE $1", pattern)
    finally:
        await admin.close()
    return [r["rolname"] for r in rows]


async def _decided_over_http(url: str, approval_id: str, token_id: str, run_id: str) -> None:
    """The journal says the approval was decided by the token's reviewer with the request id
    the demo sends over HTTP, that the owner made the token and revoked it, and the token was
    used (the service authenticated it)."""
    async with await Database.connect(url, pool_size=1) as db:
        journal = Journal(db)
        events = await journal.read_stream(f"approval:{approval_id}")
        (decided,) = [e for e in events if e.type == "approval.decided"]
        assert decided.actor == "alice"
        assert decided.data["request_id"] == f"{run_id}/approve"
        token = [e.type for e in await journal.read_stream(f"token:{token_id}")]
        assert token == ["token.created", "token.revoked"]
        info = await ApiTokens(db).get(token_id)
    assert info.reviewer == "alice" and info.created_by == "signoff-demo"
    assert info.revoked_at is not None and info.last_used_at is not None


async def test_demo_on_a_fresh_then_a_used_database(
    fresh_database_url: str, server_url: str
) -> None:
    first = await run_cli("demo", database_url=fresh_database_url, env=kek_env(), within=300)
    assert first.code == 0, first.stdout + first.stderr
    ran_once = RAN_ONCE.search(first.stdout)
    assert ran_once, first.stdout
    logins = LOGINS.search(first.stdout)
    assert logins, first.stdout
    assert "check      VERIFIED" in first.stdout
    ledger = first.stdout[first.stdout.index("Ledger of run") :]
    assert re.search(r"call-refund +refund +single_attempt +succeeded +1 +alice +process 2", ledger)
    assert re.search(r"call-lookup +lookup_order +read +succeeded +1 +- +process 1", ledger)
    assert first.stderr == ""  # no log noise: the KEK comes from the environment
    # The pages' sample output is what the demo prints today (the schema's head included).
    for page in SAMPLED:
        assert _steps(first.stdout) == _steps(_sample(page)), page
        assert f"schema at head {migrate.head_revision()}," in _sample(page), page
    over_http = APPROVED_OVER_HTTP.search(first.stdout)
    assert over_http, first.stdout
    token_id, approval_id = over_http.groups()
    run_id = re.findall(r"run +(demo-[0-9a-f]+)", first.stdout)[0]
    await _decided_over_http(fresh_database_url, approval_id, token_id, run_id)

    second = await run_cli(
        "demo", "--json", database_url=fresh_database_url, env=kek_env(), within=300
    )
    assert second.code == 0, second.stdout + second.stderr
    report = json.loads(second.stdout)
    assert report["run_id"] not in first.stdout  # a new run on the used database
    assert report["decided_via"] == "http"
    decision = report["decision"]
    assert decision["endpoint"] == f"POST /v1/approvals/{report['approval_id']}/decision"
    assert decision["token_reviewer"] == "alice" and decision["decided_by"] == ["alice"]
    assert decision["status"] == "approved" and decision["token_id"] != token_id
    await _decided_over_http(
        fresh_database_url, report["approval_id"], decision["token_id"], report["run_id"]
    )
    assert report["refund"] == {
        "payments": 1,
        "paid_by": [report["processes"]["2"]],
        "ran_once": True,
    }
    calls = {c["call_id"]: c for c in report["calls"]}
    assert calls["call-refund"]["status"] == "succeeded"
    assert calls["call-refund"]["attempts"] == 1
    assert calls["call-refund"]["approved_by"] == ["alice"]
    assert calls["call-refund"]["pid"] == report["processes"]["2"]
    assert calls["call-lookup"]["pid"] == report["processes"]["1"]
    assert report["digest"]["verified"] is True
    assert report["journal"]["intact"] is True
    first_size = int(re.findall(r"tree size +(\d+)", first.stdout)[0])
    assert report["digest"]["tree_size"] > first_size

    # Each process said who the database took it for: the run's own logins, new each run and
    # dropped at its end.
    worker, reviewer = report["logins"]["1"], report["logins"]["reviewer"]
    assert worker.startswith("signoff_demo_worker_") and report["logins"]["2"] == worker
    assert reviewer.startswith("signoff_demo_reviewer_")
    assert {worker, reviewer}.isdisjoint(logins.groups())
    assert await _roles_like(server_url, "signoff_demo_%") == []


async def test_the_demo_tells_nobody_of_its_run(fresh_database_url: str) -> None:
    """The demo's own service, in its process, posts nothing to the environment's webhook,
    Slack or e-mail: its refund is nobody's to be told of."""
    with http_receiver("/hooks") as hooks, smtp_receiver() as smtp:
        env = {
            **kek_env(),
            "SIGNOFF_PUBLIC_URL": "https://signoff.example.com/",
            "SIGNOFF_WEBHOOK_URL": hooks.url,
            "SIGNOFF_WEBHOOK_SECRET": "s" * 32,
            "SIGNOFF_SLACK_WEBHOOK_URL": hooks.url,
            "SIGNOFF_SMTP_HOST": smtp.host,
            "SIGNOFF_SMTP_PORT": str(smtp.port),
            "SIGNOFF_SMTP_SECURITY": "none",
            "SIGNOFF_SMTP_FROM": "signoff@example.com",
            "SIGNOFF_SMTP_TO": "leads@example.com",
        }
        result = await run_cli("demo", database_url=fresh_database_url, env=env, within=300)
        assert result.code == 0, result.stdout + result.stderr
        assert RAN_ONCE.search(result.stdout), result.stdout
        # The demo has exited: its service, and whatever it would have sent, is gone.
        assert hooks.received == [] and smtp.attempts == 0


async def test_demo_on_a_login_that_may_not_create_roles_runs_every_process_on_it(
    server_url: str,
) -> None:
    """The database's owner without CREATEROLE (a member of `signoff_reviewer`, so it makes the
    decision key): the demo cannot make its logins, says so, and runs on the owner's."""
    name = f"signoff_test_owned_{uuid.uuid4().hex[:12]}"
    async with temporary_login(server_url, "signoff_reviewer", prefix="signoff_owner") as owner:
        admin = await open_raw_connection(server_url)
        user = owner.partition("://")[2].partition(":")[0]
        try:
            await admin.execute(f'CREATE DATABASE "{name}" OWNER {user}')
            url = with_database(owner, name)
            result = await run_cli("demo", "--json", database_url=url, env=kek_env(), within=300)
            shown = await run_cli("demo", database_url=url, env=kek_env(), within=300)
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await admin.close()
    assert result.code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["logins"] == {"1": user, "2": user, "reviewer": user}
    assert report["refund"]["ran_once"] is True
    assert shown.code == 0, shown.stdout + shown.stderr
    assert f"every process logs in as {user}, which may not create roles" in shown.stdout
    assert RAN_ONCE.search(shown.stdout), shown.stdout


@pytest.fixture
async def blank_database_url(server_url: str) -> AsyncIterator[str]:
    """An empty database (not migrated), dropped afterwards."""
    name = f"signoff_test_blank_{uuid.uuid4().hex[:12]}"
    admin = await open_raw_connection(server_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield with_database(server_url, name)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def test_demo_without_a_kek_keeps_one_for_the_database(
    blank_database_url: str, tmp_path: Path
) -> None:
    """A database of one's own and no KEK: the first demo migrates it and makes a KEK file named
    by its id (and a reviewer KEK file for its decision key), the next one uses those files, and
    a different KEK is refused."""
    if configured_url() is None:
        pytest.skip("on the embedded server the demo uses the server's own local KEK file")
    unset = ("SIGNOFF_KEK", "SIGNOFF_KEK_FILE", "SIGNOFF_REVIEWER_KEK", "SIGNOFF_REVIEWER_KEK_FILE")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env["SIGNOFF_EMBEDDED_DIR"] = str(tmp_path / "embedded")  # the KEK goes to its ../keks
    for _ in range(2):
        result = await run_cli("demo", database_url=blank_database_url, env=env, within=300)
        assert result.code == 0, result.stdout + result.stderr
        assert RAN_ONCE.search(result.stdout), result.stdout
    (kek_file,) = (tmp_path / "keks").iterdir()
    assert kek_file.name.startswith("kek-")
    assert kek_file.stat().st_mode & 0o777 == 0o600
    assert str(kek_file) in result.stdout
    (reviewer_kek,) = (tmp_path / "reviewer-keks").iterdir()
    assert reviewer_kek.name.startswith("kek-") and reviewer_kek.name != kek_file.name

    other = await run_cli("demo", database_url=blank_database_url, env=kek_env(), within=60)
    assert other.code == 2
    assert kek_file.name in other.stderr  # names the KEK the database needs


async def test_after_the_demo_decide_cancel_and_serve_find_its_reviewer_kek(
    blank_database_url: str, tmp_path: Path
) -> None:
    """Right after `signoff demo` on a database of one's own with no KEK configured, the
    reviewer side's commands (`approvals decide`, `approvals cancel`, `serve`, `serve --dev`)
    find the reviewer KEK the demo kept, by the id of the KEK its decision key names, as every
    command finds the workers' kept KEK; the demo says where that file is. Without the file,
    a command that signs says which file it looked for."""
    if configured_url() is None:
        pytest.skip("on the embedded server the demo uses the server's own local KEK file")
    unset = ("SIGNOFF_KEK", "SIGNOFF_KEK_FILE", "SIGNOFF_REVIEWER_KEK", "SIGNOFF_REVIEWER_KEK_FILE")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env["SIGNOFF_EMBEDDED_DIR"] = str(tmp_path / "embedded")
    url = blank_database_url
    demo = await run_cli("demo", database_url=url, env=env, within=300)
    assert demo.code == 0, demo.stdout + demo.stderr
    (kek_file,) = (tmp_path / "keks").iterdir()
    (reviewer_file,) = (tmp_path / "reviewer-keks").iterdir()
    assert f"reviewer KEK {reviewer_file}, made now" in demo.stdout, demo.stdout

    # Requests as the demo's agent makes them (no reviewer KEK: asking signs nothing), and a
    # token for alice, whom the demo listed as a support lead.
    settings = Settings(database_url=url, kek=LocalKek.from_file(kek_file))
    async with await Database.connect(url, pool_size=1, settings=settings) as db:
        store = ApprovalStore(db, await KeyRing.open(db, create_missing=False))
        ids = [
            (
                await store.request(
                    run_id=f"after-demo-{uuid.uuid4().hex[:8]}",
                    tool="refund",
                    args={"order_id": "A-1042", "amount": 120.0, "reason": "arrived broken"},
                    call_id="call-refund",
                    requested_by="support-agent",
                    policy=ApprovalPolicy(approvers=frozenset({"group:support-leads"})),
                )
            ).approval_id
            for _ in range(3)
        ]
        token = (await ApiTokens(db).create("alice", by="admin")).token

        decided = await run_cli(
            "approvals", "decide", ids[0], "--approve", "--by", "alice", database_url=url, env=env
        )
        assert decided.code == 0, decided.stderr
        cancelled = await run_cli(
            "approvals", "cancel", ids[1], "--by", "alice", database_url=url, env=env
        )
        assert cancelled.code == 0, cancelled.stderr
        served = await _serving(url, env, token)
        assert served["active_tokens"] == 1
        dev = await _serving(url, env, None, "--dev")
        assert dev["dev_reviewer"] == "dev"

        reviewer_file.rename(tmp_path / "elsewhere")
        refused = await run_cli(
            "approvals", "decide", ids[2], "--approve", "--by", "alice", database_url=url, env=env
        )
        assert refused.code == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert (
            str(reviewer_file) in refused.stderr and "SIGNOFF_REVIEWER_KEK_FILE" in refused.stderr
        )
        assert (await store.get(ids[0])).status is ApprovalStatus.APPROVED
        assert (await store.get(ids[1])).status is ApprovalStatus.CANCELLED
        assert (await store.get(ids[2])).status is ApprovalStatus.PENDING
        await store.close()


async def _serving(url: str, env: dict[str, str], token: str | None, *args: str) -> dict[str, Any]:
    """Start `signoff serve ARGS` on a free port; once it listens, ask it for the approvals
    (with `token`, else its --dev token), stop it, and return what it said when it started."""
    env = {**env, "PYTHONPATH": str(ROOT), "SIGNOFF_DATABASE_URL": url}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "adapters.cli", "serve", "--port", "0", "--json", *args,
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        assert line, (await process.stderr.read()).decode()
        started: dict[str, Any] = json.loads(line)
        auth = {"Authorization": f"Bearer {token or started['dev_token']}"}
        async with httpx.AsyncClient(base_url=started["url"], headers=auth, timeout=30) as client:
            listed = await client.get("/v1/approvals")
            assert listed.status_code == 200, listed.text
    finally:
        await _interrupt(process)
    return started


SIGN_IN = re.compile(r"sign in +(http://127\.0\.0\.1:(\d+))/inbox#token=(sgf_\w+_[\w-]+)")
TOKEN = re.compile(r"token +(sgf_\w+_[\w-]+) +\(for alice, revoked at the end\)")


async def _start_demo(database_url: str, *args: str) -> asyncio.subprocess.Process:
    env = {**kek_env(), "PYTHONPATH": str(ROOT), "SIGNOFF_DATABASE_URL": database_url}
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "adapters.cli",
        "demo",
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )


async def _interrupt(process: asyncio.subprocess.Process) -> None:
    """Stop a demo still running as Ctrl-C does, so that it drops its logins; kill it if that
    does not end it."""
    if process.returncode is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        await asyncio.wait_for(process.wait(), 30)
    except TimeoutError:
        process.kill()
        await process.wait()


async def _read_until(stream: asyncio.StreamReader, pattern: re.Pattern[str]) -> tuple[str, str]:
    """Lines of `stream` up to the first that `pattern` finds in: all of them, and that one."""
    seen = ""
    while line := (await stream.readline()).decode():
        seen += line
        if pattern.search(line):
            return seen, line
    raise AssertionError(f"the demo ended before printing {pattern.pattern}:\n{seen}")


ANSWER = "Refunds of broken goods go to store credit: I have sent a voucher."
DECISIONS: dict[str, dict[str, Any]] = {
    "approve": {"decision": "approve"},
    "reject": {"decision": "reject", "reason": "the photo shows no damage"},
    "edit": {
        "decision": "edit",
        "args": {"order_id": "A-1042", "amount": 60, "reason": "half: one of two items broke"},
    },
    "respond": {"decision": "respond", "message": ANSWER},
}
STATUS = {"approve": "approved", "reject": "rejected", "edit": "edited", "respond": "responded"}
AGENT_SAYS = re.compile(r"^ +agent +(.+)$", re.MULTILINE)


@pytest.mark.parametrize("kind", list(DECISIONS))
async def test_demo_inbox_waits_for_a_person_who_decides_with_the_printed_token(
    database_url: str, ledger: ToolLedger, kind: str
) -> None:
    """`signoff demo --inbox` as a real process: it prints a sign-in link and the token, and
    waits; whoever holds the token decides through the HTTP API (approve, reject, edit the
    amount, respond), and the demo resumes the agent, whose refund is paid once (approved,
    edited: the edited amount) or never (rejected, answered); the agent's last line says what
    the ledger recorded."""
    status = STATUS[kind]
    process = await _start_demo(database_url, "--inbox", "--wait", "3m")
    assert process.stdout is not None and process.stderr is not None
    try:
        async with asyncio.timeout(120):
            before, link_line = await _read_until(process.stdout, SIGN_IN)
            more, token_line = await _read_until(process.stdout, TOKEN)
            link = SIGN_IN.search(link_line)
            plain = TOKEN.search(token_line)
            assert link and plain, before + more
            base, token = link.group(1), plain.group(1)
            assert link.group(3) == token  # the link signs in with the printed token
            assert "waiting for a person to decide" in before
            auth = {"Authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(base_url=base, headers=auth, timeout=30) as client:
                listed = (await client.get("/v1/approvals")).json()["approvals"]
                ours = [a for a in listed if a["run_id"] in before]
                assert len(ours) == 1, listed
                approval_id = ours[0]["approval_id"]
                answer = await client.post(
                    f"/v1/approvals/{approval_id}/decision",
                    json=DECISIONS[kind],
                    headers={"Idempotency-Key": f"person-{uuid.uuid4().hex}"},
                )
                assert answer.status_code == 200, answer.text
                assert answer.json()["status"] == status
            rest, stderr = await process.communicate()
    finally:
        await _interrupt(process)
    stdout = before + more + rest.decode()
    assert process.returncode == 0, stdout + stderr.decode()
    assert re.search(rf"{status} by alice +\d+\.\d s", stdout), stdout
    assert "check      VERIFIED" in stdout

    run_id = re.findall(r"run +(demo-[0-9a-f]+)", stdout)[0]
    outcome = await ledger.outcome(run_id, "call-refund")
    last = AGENT_SAYS.findall(stdout)[-1]  # the agent's last line, as the demo showed it
    if kind in ("approve", "edit"):
        paid = "60.00" if kind == "edit" else "120.00"
        assert outcome.status is CallStatus.SUCCEEDED
        assert str(outcome.result).endswith(f"\nrefunded {paid} EUR on A-1042"[kind != "edit" :])
        assert last == f"Done: {paid} EUR for order A-1042 is on its way back to you.", stdout
        ran = RAN_ONCE if kind == "approve" else RAN_ONCE_EDITED
        assert ran.search(stdout), stdout
        assert re.search(r"call-refund +refund +single_attempt +succeeded +1 +alice", stdout)
    elif kind == "reject":
        assert outcome.status is CallStatus.DENIED
        assert last.startswith("I could not refund order A-1042: A reviewer rejected"), stdout
        assert last.endswith("It did not run."), stdout
        assert "the refund was rejected and did not run: no payment" in stdout
    else:
        assert outcome.status is CallStatus.RESPONDED and outcome.result == ANSWER
        assert last.startswith("I have not refunded order A-1042; a support lead answered:")
        assert "on its way" not in last, stdout
        assert "the reviewer answered instead: the refund did not run, no payment" in stdout
    if kind in ("reject", "respond"):
        assert not re.search(r"call-refund +refund +\w+ +succeeded", stdout), stdout

    token_id = token.split("_")[1]
    async with await Database.connect(database_url, pool_size=1) as own:
        info = await ApiTokens(own).get(token_id)
        events = await Journal(own).read_stream(f"approval:{approval_id}")
    assert info.revoked_at is not None  # the demo revoked its token when it ended
    (decided,) = [e for e in events if e.type == "approval.decided"]
    assert decided.actor == "alice" and decided.data["request_id"].startswith("person-")


async def test_demo_inbox_nobody_deciding_in_time_exits_2_with_one_line(
    database_url: str, store: ApprovalStore
) -> None:
    """Nobody decides in time: one line, exit 2, and the approval is withdrawn (it would
    otherwise wait out its expiry beside the next run's)."""
    result = await run_cli(
        "demo", "--inbox", "--wait", "1s", database_url=database_url, env=kek_env(), within=120
    )
    assert result.code == 2, result.stdout + result.stderr
    (line,) = result.stderr.splitlines()
    found = re.fullmatch(
        r"error: nobody decided approval (apr-[0-9a-f]+) within 1 s: it is withdrawn", line
    )
    assert found, line
    assert SIGN_IN.search(result.stdout), result.stdout
    assert "process 2" not in result.stdout  # the agent was never resumed
    await _withdrawn_by_the_demo(store, found.group(1))


WAITING = re.compile(r"waiting for a person to decide (apr-[0-9a-f]+)")


@pytest.fixture(autouse=True)
def ctrl_c_reaches_children() -> Iterator[None]:
    """SIGINT as a terminal gives it, to every demo these tests start and stop with it (as
    `_interrupt` does): a suite started in the background of a shell inherits it ignored, and
    so would the demo, which Ctrl-C would then not stop."""
    if signal.getsignal(signal.SIGINT) != signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)  # default again in a child
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
async def test_an_interrupted_inbox_demo_withdraws_its_approval(
    database_url: str, store: ApprovalStore, signum: signal.Signals
) -> None:
    """`signoff demo --inbox` stopped while it waits (Ctrl-C, or SIGTERM as a service manager
    or `timeout` sends it) cancels the approval it waited on, and says so."""
    process = await _start_demo(database_url, "--inbox", "--wait", "3m")
    assert process.stdout is not None and process.stderr is not None
    try:
        async with asyncio.timeout(120):
            before, _ = await _read_until(process.stdout, TOKEN)  # it waits for a person now
            waiting = WAITING.search(before)
            assert waiting, before
            approval_id = waiting.group(1)
            assert (await store.get(approval_id)).status is ApprovalStatus.PENDING
            process.send_signal(signum)
            rest, stderr = await process.communicate()
    finally:
        await _interrupt(process)
    stdout = before + rest.decode()
    assert process.returncode == 130, stdout + stderr.decode()
    assert f"interrupted: approval {approval_id} withdrawn (cancelled)" in stdout, stdout
    assert "Traceback" not in stderr.decode(), stderr.decode()
    await _withdrawn_by_the_demo(store, approval_id)


async def _withdrawn_by_the_demo(store: ApprovalStore, approval_id: str) -> None:
    assert (await store.get(approval_id)).status is ApprovalStatus.CANCELLED
    events = await Journal(store.db).read_stream(f"approval:{approval_id}")
    (cancelled,) = [e for e in events if e.type == "approval.cancelled"]
    assert cancelled.actor == "signoff-demo"


async def test_wait_without_inbox_is_refused_in_one_line(database_url: str) -> None:
    """Without --inbox nothing waits for a person: --wait there is a mistake, said before the
    demo starts anything."""
    result = await run_cli("demo", "--wait", "5m", database_url=database_url, env=kek_env())
    assert result.code == 2, result.stdout + result.stderr
    assert result.stdout == ""  # nothing ran
    (line,) = result.stderr.splitlines()
    assert line == "error: --wait goes with --inbox only (see `signoff demo --help`)"
