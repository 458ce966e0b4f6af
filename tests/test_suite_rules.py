"""The rules the suite keeps for itself: helpers live in tests/support, every test has a time
limit, and scratch databases are copies of the session's migrated template."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from tests.support.scratch import scratch_database, template_of, with_database

TESTS = Path(__file__).resolve().parent


def test_the_tests_folder_holds_tests_only_and_helpers_live_in_support() -> None:
    others = sorted(
        p.name
        for p in TESTS.glob("*.py")
        if not p.name.startswith("test_") and p.name not in ("conftest.py", "__init__.py")
    )
    assert others == [], f"helpers belong in tests/support: {others}"


def test_every_test_has_a_time_limit(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.pluginmanager.hasplugin("timeout"), "pytest-timeout is not installed"
    assert 60 <= float(pytestconfig.getini("timeout")) <= 900


async def test_a_scratch_database_is_a_copy_of_a_template_that_takes_no_connections(
    server_url: str,
) -> None:
    """PostgreSQL refuses to copy a database anyone is connected to: the template must not
    accept a connection, or one test holding it open would fail every later copy."""
    template = template_of(server_url)
    assert template is not None, "the session opened no template on its server"
    async with scratch_database(server_url, prefix="signoff_test") as url:
        conn = await asyncpg.connect(url)
        try:
            allowed = await conn.fetchval(
                "SELECT datallowconn FROM pg_database WHERE datname = $1", template
            )
            assert await conn.fetchval("SELECT count(*) FROM alembic_version") == 1
        finally:
            await conn.close()
    assert allowed is False
    with pytest.raises(asyncpg.ObjectNotInPrerequisiteStateError):  # nobody can connect
        await asyncpg.connect(with_database(server_url, template))
