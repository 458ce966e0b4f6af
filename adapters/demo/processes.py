"""The demo's other processes: the logins they use (one role each, made for the run) and the
worker processes themselves, run to their end while what they report is shown."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg

import adapters
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings

from .keys import Keys
from .screen import DemoFailed, Screen

__all__ = [
    "WORKER_TIMEOUT",
    "Launch",
    "Logins",
    "Worker",
    "open_logins",
    "run_worker",
    "user_of",
    "worker_env",
]

WORKER_TIMEOUT = 300.0


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
            f"workers  {user_of(self.worker)} (only signoff_app)",
            f"reviewer {user_of(self.reviewer)} (only signoff_reviewer); both for this run",
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
class Launch:
    """How to start a worker: its environment, log level and the file the refund pays into."""

    env: dict[str, str]
    log_level: str
    payments: Path


def user_of(url: str) -> str:
    return urlsplit(url).username or "?"


@asynccontextmanager
async def open_logins(url: str) -> AsyncIterator[Logins]:
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


def worker_env(
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


async def run_worker(screen: Screen, launch: Launch, number: int, what: str, *args: str) -> Worker:
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
                show_event(screen, event)
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


def show_event(screen: Screen, event: dict[str, Any]) -> None:
    kind = event["event"]
    if kind == "customer":
        screen.detail("customer", event["text"])
    elif kind == "asks":
        args = ", ".join(f"{k}={v!r}" for k, v in event["args"].items())
        screen.detail("agent", f"calls {event['tool']}({args})")
    elif kind == "says":  # the agent's words to the customer: whole, they say what happened
        screen.detail("agent", event["text"])
    elif kind == "tool":
        failed = " (error)" if event.get("status") == "error" else ""
        screen.detail("tool", f"{event['tool']}{failed}: {_short(event['content'])}")
    elif kind == "paused":
        screen.detail("paused", f"{event['name']} waits for approval {event['approval_id']}")
    elif kind == "resumes":
        screen.detail("resumes", f"thread {event['thread_id']}, approval {event['status']}")
