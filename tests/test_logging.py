"""The library logs to `signoff.*` loggers that stay silent until the application configures them;
the CLI configures its own output, on stderr."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap

from .support.processes import ROOT, kek_env, run_cli

# A user's script: open the database and the key ring (which log at DEBUG and INFO), then log a
# warning of our own through the library, with an id bound.
_SCRIPT = """
import asyncio, logging, sys
{setup}
from ledger.store import Database
from ledger.keys import KeyRing
from ledger.log import get_logger

async def main() -> None:
    async with await Database.connect(sys.argv[1]) as db:
        await KeyRing.open(db)
    get_logger("user_script", run_id="run-42").warning("something to see")

asyncio.run(main())
"""


async def _run_script(database_url: str, setup: str) -> tuple[str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _SCRIPT.format(setup=textwrap.dedent(setup)),
        database_url,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**kek_env(), "PYTHONPATH": str(ROOT)},
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()
    return stdout.decode(), stderr.decode()


async def test_the_library_prints_nothing_when_the_application_configures_no_logging(
    database_url: str,
) -> None:
    stdout, stderr = await _run_script(database_url, "")
    assert stdout == ""
    assert stderr == ""


async def test_the_library_logs_where_the_application_says_and_never_to_stdout(
    database_url: str,
) -> None:
    setup = 'logging.basicConfig(level=logging.DEBUG, format="%(name)s|%(levelname)s|%(message)s")'
    stdout, stderr = await _run_script(database_url, setup)
    assert stdout == ""
    assert "signoff.ledger.store.db|DEBUG|database pool opened" in stderr
    assert "signoff.user_script|WARNING|something to see" in stderr


async def test_a_warning_level_application_sees_no_debug_lines(database_url: str) -> None:
    stdout, stderr = await _run_script(database_url, "logging.basicConfig(level=logging.WARNING)")
    assert stdout == ""
    assert "database pool opened" not in stderr
    assert "something to see" in stderr


async def test_bound_ids_reach_the_application_as_record_attributes(database_url: str) -> None:
    setup = 'logging.basicConfig(level=logging.WARNING, format="%(message)s run=%(run_id)s")'
    _, stderr = await _run_script(database_url, setup)
    assert "something to see run=run-42" in stderr


async def test_the_cli_logs_json_lines_on_stderr_only(database_url: str) -> None:
    env = kek_env()
    result = await run_cli(
        "--log-level", "debug", "keys", "list", "--json", database_url=database_url, env=env
    )
    assert result.code == 0, result.stderr
    json.loads(result.stdout)  # stdout is the command's result alone
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    opened = [line for line in lines if line["event"] == "database pool opened"]
    assert opened, result.stderr
    assert opened[0]["level"] == "debug"
    assert opened[0]["logger"] == "signoff.ledger.store.db"
    assert "pool_size" in opened[0]
    assert env["SIGNOFF_KEK"] not in result.stderr
