"""Starting the test workers as real OS processes."""

from __future__ import annotations

import asyncio
import base64
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from .forks import fork_program, forks_enabled

ROOT = Path(__file__).resolve().parents[2]

# One KEK for the whole test session: every database the tests make (the shared one included)
# has its data keys wrapped by it, and child processes get it as SIGNOFF_KEK.
TEST_KEK = os.urandom(32)
# The reviewer side's KEK (it wraps the decision signing key). The test session is both sides, so
# conftest puts it in this process's environment as SIGNOFF_REVIEWER_KEK and children inherit it;
# tests of a worker without it leave it out.
TEST_REVIEWER_KEK = os.urandom(32)
REVIEWER_KEK_ENV = {"SIGNOFF_REVIEWER_KEK": base64.b64encode(TEST_REVIEWER_KEK).decode()}


def kek_env() -> dict[str, str]:
    """This process's environment plus the session's KEKs, for child processes."""
    return {**os.environ, **REVIEWER_KEK_ENV, "SIGNOFF_KEK": base64.b64encode(TEST_KEK).decode()}


def worker_env() -> dict[str, str]:
    """`kek_env()` as an agent worker holds it: the KEK, never the reviewer side's (an empty
    variable counts as unset, and overrides this process's own)."""
    return {**kek_env(), "SIGNOFF_REVIEWER_KEK": ""}


async def start_program(
    module: str, *args: str, env: dict[str, str] | None = None
) -> asyncio.subprocess.Process:
    """Start `python -m MODULE ARGS...` (a program under tests/) with stdout and stderr piped;
    `env` is added to this process's environment. Forked from a process that has imported the
    libraries already (`support.forks`), unless SIGNOFF_TEST_FORKS=0."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    if forks_enabled():
        return cast(
            asyncio.subprocess.Process,
            await fork_program(ROOT, module, args, environment),
        )
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=environment,
    )


async def start_worker(*args: str) -> asyncio.subprocess.Process:
    """Start `python -m tests.support.workers ARGS...`."""
    return await start_program("tests.support.workers", *args)


async def start_mcp_upstream(
    env: dict[str, str] | None = None,
) -> tuple[str, asyncio.subprocess.Process]:
    """The test MCP server (`support.mcp_upstream`) over Streamable HTTP on a free port, in a
    process of its own, once it accepts connections: its endpoint URL and its process (the
    caller kills it). `env` is added to this process's environment (the log path, the hold)."""
    process = await start_program("tests.support.mcp_upstream", "http", "--port", "0", env=env)
    assert process.stdout is not None and process.stderr is not None
    line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
    if not line.startswith("listening on "):
        process.kill()
        stderr = (await asyncio.wait_for(process.stderr.read(), 10)).decode()
        raise AssertionError(f"the MCP upstream did not listen: {line!r} {stderr[-2000:]}")
    return line.removeprefix("listening on ").strip(), process


async def finish(process: asyncio.subprocess.Process, within: float = 120) -> str:
    """Wait for a worker; return its stdout, failing with its stderr if it failed."""
    stdout, stderr = await asyncio.wait_for(process.communicate(), within)
    if process.returncode != 0:
        raise AssertionError(f"worker exited {process.returncode}: {stderr.decode()[-2000:]}")
    return stdout.decode()


@dataclass(frozen=True)
class CliResult:
    code: int
    stdout: str
    stderr: str


async def run_cli(
    *args: str,
    database_url: str | None = None,
    env: dict[str, str] | None = None,
    within: float = 120,
) -> CliResult:
    """Run `signoff ARGS...` in its own process, against `database_url` when given, with the
    environment `env` (default: this process's)."""
    env = {**(os.environ if env is None else env), "PYTHONPATH": str(ROOT)}
    if database_url is not None:
        env["SIGNOFF_DATABASE_URL"] = database_url
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "adapters.cli",
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), within)
    assert process.returncode is not None
    return CliResult(process.returncode, stdout.decode(), stderr.decode())
