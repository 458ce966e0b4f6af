"""A plain install (no extras) gives the core, approvals, the CLI and the verifier; what needs an
extra says which one, in one line. Checked in processes where the extras' modules cannot be
imported (tests/support/without_extras.py), so nothing has to be uninstalled."""

from __future__ import annotations

import asyncio
import re
import sys
import tomllib

import pytest

from ledger.journal import Journal, NewEvent
from ledger.store import Database

from .support.processes import ROOT, CliResult, kek_env

CORE_MODULES = [
    "ledger",
    "ledger.store",
    "ledger.journal",
    "ledger.keys",
    "ledger.calls",
    "ledger.audit.queries",
    "ledger.audit.digest",
    "ledger.audit.export",
    "ledger.audit.verifier",
    "approvals",
    "adapters.cli",
    "adapters.extras",
]


async def without_extras(*args: str, database_url: str | None = None) -> CliResult:
    env = {**kek_env(), "PYTHONPATH": str(ROOT)}
    env.pop("SIGNOFF_DATABASE_URL", None)
    env.pop("DATABASE_URL", None)
    if database_url is not None:
        env["SIGNOFF_DATABASE_URL"] = database_url
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.without_extras",
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return CliResult(process.returncode, stdout.decode(), stderr.decode())


async def test_the_extras_modules_cannot_be_imported_there() -> None:
    for module in ("langgraph", "langchain_core.messages", "dex", "psycopg_pool", "agents"):
        result = await without_extras("import", module)
        assert result.code == 3 and result.stdout.startswith("ImportError"), result


async def test_the_core_approvals_and_the_cli_import_without_any_extra() -> None:
    result = await without_extras("import", *CORE_MODULES)
    assert (result.code, result.stdout) == (0, "imported\n"), result.stderr


async def test_signoff_help_needs_no_extra() -> None:
    result = await without_extras("cli", "--help")
    assert result.code == 0 and "ledger" in result.stdout, result.stderr


async def test_ledger_verify_needs_no_extra(fresh_database_url: str) -> None:
    async with await Database.connect(fresh_database_url) as db:
        await Journal(db).append(
            "extras:1", [NewEvent("noted", {"n": 1}, actor="tester")], expected_version=0
        )
    result = await without_extras("cli", "ledger", "verify", database_url=fresh_database_url)
    assert result.code == 0, result.stdout + result.stderr
    assert re.search(r"\b1 event", result.stdout), result.stdout


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["demo"], "error: signoff demo needs the demo extra: pip install 'signoff[demo]'"),
        (
            ["checkpoints", "status"],
            "error: signoff checkpoints needs the langgraph extra: "
            "pip install 'signoff[langgraph]'",
        ),
    ],
)
async def test_a_command_without_its_extra_names_the_extra_in_one_line(
    command: list[str], message: str, database_url: str
) -> None:
    result = await without_extras("cli", *command, database_url=database_url)
    assert (result.code, result.stderr) == (2, message + "\n"), result.stdout


@pytest.mark.parametrize(
    ("module", "extra"),
    [
        ("adapters.langgraph", "langgraph"),
        ("adapters.dex", "dex"),
        ("adapters.welt", "welt"),
        ("adapters.openai_agents", "openai-agents"),
        ("adapters.pydantic_ai", "pydantic-ai"),
    ],
)
async def test_importing_an_adapter_without_its_extra_names_the_extra(
    module: str, extra: str
) -> None:
    result = await without_extras("import", module)
    assert result.code == 3, result.stdout + result.stderr
    assert result.stdout == (
        f"ImportError {module} needs the {extra} extra: pip install 'signoff[{extra}]'\n"
    )


def test_a_plain_install_pulls_no_agent_framework_and_test_installs_every_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[\[<>=!~ ;]", d, maxsplit=1)[0] for d in project["dependencies"]}
    assert names == {
        "sqlalchemy",
        "alembic",
        "asyncpg",
        "cryptography",
        "structlog",
        "tqdm",
        "jsonschema",
        "cedarpy",  # the policy decision point is core: verify and every adapter judge calls
        "opentelemetry-api",  # spans and metrics, a no-op until the application adds an SDK
    }
    extras = project["optional-dependencies"]
    assert {"langgraph", "dex", "welt", "embedded", "demo", "test"} <= extras.keys()
    assert any(d.startswith("langgraph") for d in extras["langgraph"])
    assert any(d.startswith("dex-python-sdk") for d in extras["dex"])
    assert any(d.startswith("openai-agents") for d in extras["openai-agents"])
    assert any(d.startswith("pydantic-ai-slim") for d in extras["pydantic-ai"])
    test_extra = next(d for d in extras["test"] if d.startswith("signoff["))
    assert set(test_extra[len("signoff[") : -1].split(",")) >= {
        "langgraph",
        "dex",
        "welt",
        "embedded",
        "demo",
        "openai-agents",
        "pydantic-ai",
    }
