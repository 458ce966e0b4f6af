"""The wheel as a user gets it: built from the source, installed (not editable) into a fresh venv
and run from an application's folder that has a `migrations` package of its own (Flask-Migrate's
layout). CI's editable install cannot show what the wheel holds, nor whose `migrations` a
revision imports once installed.

For speed the fresh venv gets the wheel alone (`pip install --no-deps`) and a `.pth` file naming
this interpreter's site-packages folders, for the dependencies. A path line in a `.pth` adds that
folder to sys.path but runs none of that folder's own `.pth` files, so the editable install's
finder is not loaded and `ledger` comes from the wheel (checked below, with `ledger.__file__`).
The wheel is built with build isolation, as pip builds it for a user: pip fetches the setuptools
of `[build-system]` (or takes it from its cache).
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ledger.store import migrate
from tests.support.scratch import scratch_database

from .support.processes import ROOT

# What the build reads: the metadata, the README it embeds, and the folders it packages.
_SOURCES = ("pyproject.toml", "README.md", "ledger", "approvals", "adapters", "migrations")
_PACKAGED = ("ledger", "approvals", "adapters")
# Where the build puts the repository's `migrations/` (pyproject.toml's package-dir).
_MIGRATIONS_IN_WHEEL = "ledger/store/migrations"
_TIMEOUT = 300  # seconds for one command: the build may fetch setuptools


@dataclass(frozen=True)
class Installed:
    source: Path  # the copy of the source tree the wheel was built from
    wheel: Path
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def signoff(self) -> Path:
        return self.venv / "bin" / "signoff"


def _run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run `command`, fail the test with its output unless it succeeds, and return its stdout."""
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, (
        f"{' '.join(map(str, command))} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    )
    return done.stdout


def _files(folder: Path) -> set[str]:
    return {
        path.relative_to(folder).as_posix()
        for path in folder.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The wheel, built from a copy of the source (a build in the checkout would leave `build/`
    there, and files left in `build/lib` by an earlier build end up in the next wheel), and a
    fresh venv with it installed."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    for name in _SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(
                ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            source.mkdir(exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    dist = root / "dist"
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", dist, source, cwd=root)
    (wheel,) = dist.glob("signoff-*.whl")

    venv = root / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=root)
    python = venv / "bin" / "python"
    _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "-q",
        "--no-deps",
        wheel,
        cwd=root,
    )
    purelib = _run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=root)
    # The dependencies, from this interpreter (see the module's docstring).
    (Path(purelib.strip()) / "signoff_test_dependencies.pth").write_text(
        "".join(f"{folder}\n" for folder in site.getsitepackages())
    )
    return Installed(source=source, wheel=wheel, venv=venv)


@pytest.fixture
async def empty_database_url(server_url: str) -> AsyncIterator[str]:
    """A fresh database with no schema, on the server the suite uses."""
    async with scratch_database(server_url, prefix="signoff_wheel", migrated=False) as url:
        yield url


@pytest.fixture
def app_folder(tmp_path: Path) -> Path:
    """An application's folder with its own `migrations` package, as Flask-Migrate lays it out."""
    app = tmp_path / "app"
    (app / "migrations" / "versions").mkdir(parents=True)
    (app / "migrations" / "__init__.py").write_text('OWNER = "the application"\n')
    return app


def test_the_wheel_ships_the_migrations_inside_ledger_and_no_top_level_migrations(
    installed: Installed,
) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = {name for name in wheel.namelist() if not name.endswith("/")}
    top_level = {name.split("/", 1)[0] for name in names}
    assert {name for name in top_level if not name.endswith(".dist-info")} == set(_PACKAGED)
    # Every file of the packaged folders, and every file of `migrations/` (revision files, the
    # SQL files in a revision's folder at any depth, env.py, script.py.mako) in its place.
    expected = {
        f"{package}/{name}" for package in _PACKAGED for name in _files(installed.source / package)
    }
    expected |= {
        f"{_MIGRATIONS_IN_WHEEL}/{name}" for name in _files(installed.source / "migrations")
    }
    assert {name for name in names if ".dist-info/" not in name} == expected
    assert f"{_MIGRATIONS_IN_WHEEL}/env.py" in names
    assert f"{_MIGRATIONS_IN_WHEEL}/script.py.mako" in names


def test_the_installed_wheel_migrates_from_an_applications_folder(
    installed: Installed, empty_database_url: str, app_folder: Path
) -> None:
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"PYTHONPATH", "DATABASE_URL", "SIGNOFF_DATABASE_URL"}
    }
    # The application runs from its folder, its own packages importable (its `migrations` too).
    env |= {"SIGNOFF_DATABASE_URL": empty_database_url, "PYTHONPATH": str(app_folder)}

    probe = _run(
        installed.python,
        "-c",
        "import json, sys, ledger, migrations; print(json.dumps({'ledger': ledger.__file__, "
        "'migrations': migrations.OWNER, 'editable': [m for m in sys.modules if 'editable' in m]"
        "}))",
        cwd=app_folder,
        env=env,
    )
    found = json.loads(probe)
    assert Path(found["ledger"]).is_relative_to(installed.venv), found  # the wheel's
    assert found["migrations"] == "the application"
    assert found["editable"] == []  # the editable install's finder stayed out

    upgraded = _run(installed.signoff, "db", "upgrade", "--json", cwd=app_folder, env=env)
    assert json.loads(upgraded)["revision"] == migrate.head_revision()

    # From code, as in the application: down to base (a downgrade loads an earlier revision's
    # SQL by path) and up again.
    _run(
        installed.python,
        "-c",
        "import sys; from ledger.store import migrate; "
        "migrate.downgrade(sys.argv[1], 'base'); migrate.upgrade(sys.argv[1])",
        empty_database_url,
        cwd=app_folder,
        env=env,
    )
    current = _run(installed.signoff, "db", "current", "--json", cwd=app_folder, env=env)
    assert json.loads(current)["revision"] == migrate.head_revision()

    assert "usage: signoff demo" in _run(
        installed.signoff, "demo", "--help", cwd=app_folder, env=env
    )
