"""The database's code is source: every function and view at head is the text of one `.sql` file
in the package that owns it, so a file cannot drift from what the migrations install."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

import asyncpg
from alembic.script import ScriptDirectory

from ledger.store import migrate
from tests.support.pg_tools import schema_of
from tests.support.scratch import scratch_database

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ledger", "approvals", "adapters")

_FUNCTION = re.compile(r"CREATE OR REPLACE FUNCTION public\.(\w+)\(")
_VIEW = re.compile(r"CREATE OR REPLACE VIEW (\w+) AS\n")

_FUNCTIONS = """
SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p
  JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'
"""
_VIEWS = """
SELECT c.relname, pg_get_viewdef(c.oid, true) FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'v'
"""


@dataclass(frozen=True)
class Source:
    path: Path
    kind: str  # "function" or "view"
    name: str
    text: str  # the definition as PostgreSQL prints it back


def statement(path: Path) -> str:
    """A file's statement: its leading `--` comments and its final `;` are not compared."""
    lines = path.read_text(encoding="utf-8").splitlines()
    while lines and (not lines[0].strip() or lines[0].startswith("--")):
        lines.pop(0)
    return "\n".join(lines).rstrip().removesuffix(";").rstrip()


def sources() -> list[Source]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).glob("**/sql/*.sql")):
            text = statement(path)
            if m := _FUNCTION.match(text):
                found.append(Source(path, "function", m.group(1), text))
            elif m := _VIEW.match(text):
                found.append(Source(path, "view", m.group(1), text[m.end() :]))
    return found


async def definitions(url: str) -> dict[tuple[str, str], str]:
    conn = await asyncpg.connect(url)
    try:
        functions = await conn.fetch(_FUNCTIONS)
        views = await conn.fetch(_VIEWS)
    finally:
        await conn.close()
    defined = {("function", r[0]): r[1].rstrip() for r in functions}
    defined.update({("view", r[0]): r[1].rstrip().removesuffix(";") for r in views})
    return defined


async def as_printed(url: str, files: list[Source]) -> list[Source]:
    """`files` with each view's text as this server prints it back: PostgreSQL versions deparse
    the same view differently (15 qualifies every column with its table, 16 and later do not),
    so a view's file is created as a temporary view, read back and rolled back. A function's
    text is kept as PostgreSQL keeps it, verbatim."""
    conn = await asyncpg.connect(url)
    try:
        printed = []
        for source in files:
            if source.kind == "view":
                scratch = conn.transaction()
                await scratch.start()
                try:
                    await conn.execute(f"CREATE TEMP VIEW signoff_source AS {source.text}")
                    text = await conn.fetchval(
                        "SELECT pg_get_viewdef('signoff_source'::regclass, true)"
                    )
                finally:
                    await scratch.rollback()
                source = replace(source, text=text.rstrip().removesuffix(";"))
            printed.append(source)
        return printed
    finally:
        await conn.close()


def test_every_function_and_view_has_one_file() -> None:
    names = [(s.kind, s.name) for s in sources()]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert ("function", "signoff_append") in names
    assert ("view", "audit_events") in names


def drift(defined: dict[tuple[str, str], str], files: list[Source]) -> list[str]:
    """What differs between the database and the files, one line each."""
    by_key = {(s.kind, s.name): s for s in files}
    missing = [f"no file for {kind} {name}" for kind, name in sorted(set(defined) - set(by_key))]
    extra = [
        f"{s.path.relative_to(ROOT)}: not in the database"
        for k, s in by_key.items()
        if k not in defined
    ]
    differ = [
        f"{s.path.relative_to(ROOT)}: differs"
        for k, s in by_key.items()
        if k in defined and defined[k] != s.text
    ]
    return missing + extra + differ


async def test_the_database_at_head_runs_the_text_of_the_files(database_url: str) -> None:
    # A file changed without a migration that installs a frozen copy of it shows here.
    assert drift(await definitions(database_url), await as_printed(database_url, sources())) == []


async def test_an_edited_file_or_a_missing_one_is_told_apart(database_url: str) -> None:
    defined = await definitions(database_url)
    files = await as_printed(database_url, sources())
    append = next(s for s in files if s.name == "signoff_append")
    edited = replace(append, text=append.text.replace("RETURN positions;", "RETURN NULL;"))
    assert edited.text != append.text
    others = [s for s in files if s is not append]
    assert drift(defined, [*others, edited]) == ["ledger/journal/sql/append.sql: differs"]
    assert drift(defined, others) == ["no file for function signoff_append"]
    view = next(s for s in sources() if s.name == "audit_events")
    narrowed = replace(view, text=view.text.replace("events.actor,", ""))
    assert narrowed.text != view.text
    narrowed = (await as_printed(database_url, [narrowed]))[0]
    others = [s for s in files if s.name != "audit_events"]
    assert drift(defined, [*others, narrowed]) == ["ledger/journal/sql/audit_events.sql: differs"]


def build_order() -> list[Path]:
    """Every source in the order the revisions install them: the baseline's list, then each
    later revision's new files. A database built from these alone is the database at head."""
    order: list[str] = []
    script = ScriptDirectory.from_config(migrate.alembic_config("postgresql://unused/db"))
    for revision in reversed(list(script.walk_revisions())):
        module = revision.module
        for source in getattr(module, "SOURCES", ()):
            if source not in order:
                order.append(source)
    return [ROOT / source for source in order]


_RIGHTS = "SELECT array_agg(r::text ORDER BY r::text) FROM event_rights r"

# What alembic makes before the first revision, which the schema grants refer to.
_ALEMBIC_VERSION = """
CREATE TABLE alembic_version (
    version_num varchar(32) NOT NULL,
    CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
)"""


def test_every_source_is_installed_by_a_revision() -> None:
    installed = set(build_order())
    files = {p for pkg in PACKAGES for p in (ROOT / pkg).glob("**/sql/*.sql")}
    assert sorted(str(p.relative_to(ROOT)) for p in files - installed) == []
    assert sorted(str(p.relative_to(ROOT)) for p in installed - files) == []


async def test_the_sources_alone_build_the_database_at_head(
    server_url: str, fresh_database_url: str
) -> None:
    # Tables, domains and rows included: a table changed by a revision's own script but not in
    # its source (or the other way round) shows here.
    async with scratch_database(server_url, prefix="signoff_sources", migrated=False) as url:
        conn = await asyncpg.connect(url)
        try:
            async with conn.transaction():
                await conn.execute(_ALEMBIC_VERSION)
                await conn.execute("SET LOCAL check_function_bodies = off")
                for path in build_order():
                    await conn.execute(path.read_text(encoding="utf-8"))
            built_rights = await conn.fetchval(_RIGHTS)
        finally:
            await conn.close()
        assert await schema_of(url) == await schema_of(fresh_database_url)
    conn = await asyncpg.connect(fresh_database_url)
    try:
        assert built_rights == await conn.fetchval(_RIGHTS)
    finally:
        await conn.close()
