"""The settings: every variable is read in one place, once, checked, and passed on; the KEK of
the embedded server is the settings' choice, never a guess from the database URL's shape."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlencode, urlsplit

import pytest

from adapters.cli import main
from adapters.demo.keys import Keys
from adapters.demo.processes import worker_env as _worker_env
from ledger import ConfigurationError
from ledger.errors import KekMissing
from ledger.keys import KeyRing, LocalKek
from ledger.keys.kek import create_kek_file
from ledger.store import Database, migrate
from ledger.store.settings import Settings

from .support.embedded_homes import private_home

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("ledger", "approvals", "adapters", "migrations")
READS = re.compile(r"\bos\.environ\b|\bgetenv\b|\benviron\.get\b|\benviron\[")
# (file name, line) -> why that line may read the environment outside the settings module.
ALLOWED = {
    (
        "embedded.py",
        "kept = {k: v for k, v in os.environ.items() if _LOCALE_VARS.fullmatch(k)}",
    ): "the server and its tools get the caller's locale and time zone, nothing else",
    (
        "processes.py",
        'path = os.pathsep.join(p for p in (source, os.environ.get("PYTHONPATH")) if p)',
    ): "the demo's worker processes get this environment, their settings come from it",
    (
        "processes.py",
        'env = {**os.environ, "PYTHONPATH": path, **keys.env}',
    ): "the demo's worker processes get this environment, their settings come from it",
}


def b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def test_the_environment_is_read_only_by_the_settings() -> None:
    found = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "ledger" / "store" / "settings.py" or path.parent.name == "settings":
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if READS.search(line) and (path.name, line.strip()) not in ALLOWED:
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "read the environment in ledger.store.settings instead:\n" + "\n".join(found)


def test_the_settings_read_every_variable(tmp_path: Path) -> None:
    key = os.urandom(32)
    settings = Settings.from_env(
        {
            "SIGNOFF_DATABASE_URL": "postgresql+asyncpg://app@db.internal/signoff",
            "DATABASE_URL": "postgresql://other@elsewhere/x",
            "SIGNOFF_KEK": b64(key),
            "SIGNOFF_KEY_REFRESH_SECONDS": "0.5",
            "SIGNOFF_EMBEDDED_DIR": str(tmp_path / "home"),
            "SIGNOFF_HOST_CONNECT_SECONDS": "2.5",
        }
    )
    assert settings.database_url == "postgresql://app@db.internal/signoff"
    assert settings.kek is not None and settings.kek.kek_id == LocalKek(key).kek_id
    assert settings.key_refresh_seconds == 0.5
    assert settings.host_connect_seconds == 2.5
    assert settings.embedded_home == tmp_path / "home"
    assert not settings.embedded and settings.embedded_kek_file is None
    assert b64(key) not in repr(settings) and settings.kek.kek_id not in repr(settings)

    assert (
        Settings.from_env({"DATABASE_URL": "postgres://a@h/d"}).database_url == "postgresql://a@h/d"
    )
    given = Settings.from_env(
        {"SIGNOFF_DATABASE_URL": "postgresql://a@h/d"}, database_url="postgresql://b@h/e"
    )
    assert given.database_url == "postgresql://b@h/e"  # a command line's URL wins
    reads = Settings.from_env({"SIGNOFF_READ_DATABASE_URL": "postgres+asyncpg://r@standby/d"})
    assert reads.read_database_url == "postgresql://r@standby/d"
    assert reads.database_url is None, "a read URL is never where writes go"
    assert (
        Settings.from_env(
            {"SIGNOFF_READ_DATABASE_URL": "postgresql://r@a/d"},
            read_database_url="postgresql://r@b/d",
        ).read_database_url
        == "postgresql://r@b/d"
    )

    kek_file = tmp_path / "kek"
    kek_file.write_text(b64(key) + "\n")
    from_file = Settings.from_env({"SIGNOFF_KEK_FILE": str(kek_file)}).kek
    assert from_file is not None and from_file.kek_id == LocalKek(key).kek_id

    direct = Settings(database_url="postgresql+psycopg://a@h/d")  # checked as from_env checks
    assert direct.database_url == "postgresql://a@h/d"
    with pytest.raises(ConfigurationError, match="key_refresh_seconds"):
        Settings(key_refresh_seconds=-1.0)
    with pytest.raises(ConfigurationError, match="host_connect_seconds"):
        Settings(host_connect_seconds=0.0)

    defaults = Settings.from_env({"SIGNOFF_EMBEDDED_DIR": str(tmp_path / "home")})
    assert (defaults.database_url, defaults.kek, defaults.key_refresh_seconds) == (None, None, 10)
    assert defaults.embedded and defaults.embedded_kek_file == tmp_path / "home" / "kek"
    assert defaults.horizon_ready_seconds is None  # readiness only warns unless asked
    assert defaults.host_connect_seconds == 10
    ready = Settings.from_env({"SIGNOFF_HORIZON_READY_SECONDS": "0.5"}).horizon_ready_seconds
    assert ready == 0.5
    assert defaults.pooler_check, "the pooler check is on unless turned off"
    assert not Settings.from_env({"SIGNOFF_POOLER_CHECK": " OFF "}).pooler_check
    assert Settings.from_env({"SIGNOFF_POOLER_CHECK": "on"}).pooler_check


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SIGNOFF_KEY_REFRESH_SECONDS", "soon"),
        ("SIGNOFF_KEY_REFRESH_SECONDS", "-1"),
        ("SIGNOFF_KEY_REFRESH_SECONDS", "nan"),
        ("SIGNOFF_HORIZON_READY_SECONDS", "0"),
        ("SIGNOFF_HOST_CONNECT_SECONDS", "0"),
        ("SIGNOFF_HOST_CONNECT_SECONDS", "soon"),
        ("SIGNOFF_HOST_CONNECT_SECONDS", "inf"),
        ("SIGNOFF_POOLER_CHECK", "no"),
        ("SIGNOFF_KEK", "not base64!"),
        ("SIGNOFF_KEK", b64(b"short")),
        ("SIGNOFF_KEK_FILE", "/nonexistent/signoff/kek"),
        ("SIGNOFF_DATABASE_URL", "mysql://app@db.internal/signoff"),
        ("DATABASE_URL", "http://db.internal/"),
        ("SIGNOFF_READ_DATABASE_URL", "mysql://app@standby/signoff"),
    ],
)
def test_a_malformed_value_is_a_configuration_error_that_names_its_variable(
    variable: str, value: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env({variable: value})
    assert variable in str(caught.value)


def _socket_folder(url: str) -> Path:
    """The folder of the unix socket of the server `url` names (a TCP URL: the local server's)."""
    parts = urlsplit(url)
    hosts = [
        v for k, v in (p.split("=", 1) for p in parts.query.split("&") if "=" in p) if k == "host"
    ]
    if hosts:
        return Path(hosts[0])
    for folder in (Path("/var/run/postgresql"), Path("/tmp")):
        if (folder / f".s.PGSQL.{parts.port or 5432}").exists():
            return folder
    pytest.skip(f"no unix socket of the server of {parts.hostname}:{parts.port} on this machine")


def _port(url: str) -> int:
    parts = urlsplit(url)
    query = dict(p.split("=", 1) for p in parts.query.split("&") if "=" in p)
    return int(query.get("port") or parts.port or 5432)


async def test_a_url_that_looks_like_an_embedded_home_selects_no_kek_file(
    fresh_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A configured URL whose socket folder is `<home>/run` beside a `<home>/data` (what the
    embedded server's URLs look like) gets no KEK but a configured one, and no file appears."""
    monkeypatch.delenv("SIGNOFF_KEK", raising=False)
    monkeypatch.delenv("SIGNOFF_KEK_FILE", raising=False)
    port = _port(fresh_database_url)
    socket = _socket_folder(fresh_database_url) / f".s.PGSQL.{port}"
    home = tmp_path / "lookalike"
    (home / "data").mkdir(parents=True)
    (home / "run").mkdir()
    (home / "run" / socket.name).symlink_to(socket)
    name = urlsplit(fresh_database_url).path.lstrip("/")
    user = urlsplit(fresh_database_url).username or "postgres"
    query = urlencode({"host": str(home / "run"), "port": port}, safe="/")
    url = f"postgresql://{user}@/{name}?{query}"

    async with await Database.connect(url) as db:  # the environment's settings, for this URL
        with pytest.raises(KekMissing):
            await KeyRing.open(db)
    async with await Database.from_settings(Settings.from_env({"SIGNOFF_DATABASE_URL": url})) as db:
        with pytest.raises(KekMissing):
            await KeyRing.open(db)
    assert sorted(p.name for p in home.iterdir()) == ["data", "run"]  # no kek file made


async def test_the_key_ring_refreshes_as_often_as_the_settings_say(
    fresh_database_url: str,
) -> None:
    settings = Settings(database_url=fresh_database_url, key_refresh_seconds=0.25)
    async with await Database.connect(fresh_database_url, settings=settings) as db:
        ring = await KeyRing.open(db, LocalKek(os.urandom(32)))
        assert ring.refresh_seconds == 0.25
        assert KeyRing(db, None, refresh_seconds=3.0).refresh_seconds == 3.0


@pytest.fixture
def settings_home() -> Iterator[Path]:
    """A private embedded home; its server is stopped and the folder removed afterwards."""
    with private_home() as home:
        yield home


async def test_the_embedded_server_makes_its_kek_file_once_and_a_url_to_it_does_not_use_it(
    settings_home: Path,
) -> None:
    environ = {"SIGNOFF_EMBEDDED_DIR": str(settings_home)}  # no URL, no KEK configured
    settings = Settings.from_env(environ)
    url = await asyncio.to_thread(settings.resolve_url)
    await asyncio.to_thread(migrate.upgrade, url)
    kek_file = settings_home / "kek"
    async with await Database.from_settings(settings) as db:
        first = await KeyRing.open(db)
    assert first.kek is not None and kek_file.is_file()
    assert stat.S_IMODE(kek_file.stat().st_mode) == 0o600
    text = kek_file.read_text()

    async with await Database.from_settings(Settings.from_env(environ)) as db:
        again = await KeyRing.open(db)
    assert again.kek is not None and again.kek.kek_id == first.kek.kek_id
    assert kek_file.read_text() == text  # reused, not replaced

    # The very same server named by a URL: only a configured KEK opens its keys.
    configured = Settings.from_env({**environ, "SIGNOFF_DATABASE_URL": url})
    async with await Database.from_settings(configured) as db:
        with pytest.raises(KekMissing, match=first.kek.kek_id):
            await KeyRing.open(db)


def test_the_demo_hands_its_workers_the_embedded_home_not_its_url(tmp_path: Path) -> None:
    """A worker given the embedded server's URL would take it for a configured database and
    find no KEK; given the home, its settings name the server's KEK file as the demo's do."""
    keys = Keys(cast(Any, None))
    embedded = Settings(embedded_home=tmp_path / "home")
    env = _worker_env(embedded, "postgresql://postgres@/signoff?host=/x/run", keys)
    assert "SIGNOFF_DATABASE_URL" not in env and "DATABASE_URL" not in env
    assert Settings.from_env(env).embedded_kek_file == tmp_path / "home" / "kek"
    configured = Settings(database_url="postgresql://app@db/signoff")
    env = _worker_env(configured, "postgresql://app@db/signoff", keys)
    assert Settings.from_env(env).database_url == "postgresql://app@db/signoff"


def test_a_demo_worker_with_a_login_of_its_own_gets_it_and_the_servers_kek_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A URL never selects the embedded server's KEK file, so the demo names it."""
    monkeypatch.delenv("SIGNOFF_KEK", raising=False)
    monkeypatch.delenv("SIGNOFF_KEK_FILE", raising=False)
    keys = Keys(cast(Any, None))
    login = "postgresql://signoff_demo_worker_1:pw@/signoff?host=/x/run"
    embedded = Settings(embedded_home=tmp_path / "home")
    assert embedded.embedded_kek_file is not None
    embedded.embedded_kek_file.parent.mkdir()
    create_kek_file(embedded.embedded_kek_file)
    worker = Settings.from_env(_worker_env(embedded, "postgresql://postgres@/x", keys, login))
    assert worker.database_url == login
    assert worker.kek is not None
    assert worker.kek.kek_id == LocalKek.from_file(embedded.embedded_kek_file).kek_id
    configured = Settings(database_url="postgresql://app@db/signoff")
    worker = Settings.from_env(_worker_env(configured, "postgresql://app@db/signoff", keys, login))
    assert worker.database_url == login


def test_the_cli_reads_its_settings_with_the_command_line_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SIGNOFF_DATABASE_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("SIGNOFF_EMBEDDED_DIR", str(tmp_path / "home"))
    url = "postgresql://app@db.internal/signoff"
    assert main(["embedded", "status", "--json", "--database-url", url]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["home"] == str(tmp_path / "home") and status["used"] is False
    assert main(["embedded", "status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["used"] is True


def test_a_command_that_needs_no_settings_runs_with_malformed_ones(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`keys new-kek` is how one replaces a malformed SIGNOFF_KEK."""
    monkeypatch.setenv("SIGNOFF_KEK", "not base64!")
    assert main(["keys", "new-kek"]) == 0
    assert len(base64.b64decode(capsys.readouterr().out.strip())) == 32
    assert main(["db", "current"]) == 2
    assert "SIGNOFF_KEK is not base64" in capsys.readouterr().err
