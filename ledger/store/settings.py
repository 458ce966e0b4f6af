"""Signoff's settings: every environment variable the library reads, read once here and checked.

| variable                                      | setting                                       |
|-----------------------------------------------|-----------------------------------------------|
| `SIGNOFF_DATABASE_URL`, else `DATABASE_URL`   | `database_url` (None: the embedded server)    |
| `SIGNOFF_KEK`, else `SIGNOFF_KEK_FILE`        | `kek` (base64 of 32 bytes, or a file of it)   |
| `SIGNOFF_REVIEWER_KEK`, else `..._KEK_FILE`   | `reviewer_kek` (the reviewer side only)       |
| `SIGNOFF_KEY_REFRESH_SECONDS`                 | `key_refresh_seconds` (default 10)            |
| `SIGNOFF_EMBEDDED_DIR`, `XDG_DATA_HOME`       | `embedded_home`                               |

Everything else takes these values: `Database.from_settings(settings)` keeps them, and the key
ring takes its KEK and refresh interval from its database's settings. With no URL configured the
database is the embedded server of `embedded_home`, and the KEK (unless one is configured) is that
home's `kek` file. A configured URL never selects a KEK file, whatever it looks like.

The reviewer KEK wraps the key that signs decisions. Only the reviewer side (the HTTP service,
the admin CLI) is given it; agent workers run without it and only verify. It has no embedded
default: a process holds it only when told to.
"""

from __future__ import annotations

import math
import os
import pwd
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigurationError
from ..keys.kek import LocalKek
from .config import normalize_url

__all__ = ["Settings", "embedded_home_from_env"]

_REFRESH_DEFAULT = 10.0


def embedded_home_from_env(environ: Mapping[str, str] = os.environ) -> Path:
    """Folder of the embedded server: $SIGNOFF_EMBEDDED_DIR, else a system or per-user default."""
    if env := environ.get("SIGNOFF_EMBEDDED_DIR"):
        return Path(env).expanduser().absolute()
    if os.geteuid() == 0:
        return Path("/var/lib/signoff/embedded")
    data_home = environ.get("XDG_DATA_HOME") or str(_user_home(environ) / ".local" / "share")
    return Path(data_home).absolute() / "signoff" / "embedded"


def _user_home(environ: Mapping[str, str]) -> Path:
    if home := environ.get("HOME"):
        return Path(home)
    return Path(pwd.getpwuid(os.geteuid()).pw_dir)


@dataclass(frozen=True, slots=True)
class Settings:
    """Where the database is, which KEK wraps its keys, how often keys are reloaded.

    `database_url` None means the embedded server of `embedded_home`; `kek` None means no KEK is
    configured (then only the embedded server has one: its home's `kek` file).
    """

    database_url: str | None = None
    kek: LocalKek | None = field(default=None, repr=False)
    reviewer_kek: LocalKek | None = field(default=None, repr=False)
    key_refresh_seconds: float = _REFRESH_DEFAULT
    embedded_home: Path = field(default_factory=lambda: embedded_home_from_env({}))

    def __post_init__(self) -> None:
        if self.database_url is not None:  # as psql takes it, or SQLAlchemy's
            object.__setattr__(self, "database_url", normalize_url(self.database_url))
        if not math.isfinite(self.key_refresh_seconds) or self.key_refresh_seconds < 0:
            raise ConfigurationError(
                f"key_refresh_seconds is {self.key_refresh_seconds}: expected 0 or more"
            )

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] = os.environ, *, database_url: str | None = None
    ) -> Settings:
        """The settings of `environ`; `database_url` (a command line's) wins over its URL.

        Raises:
            ConfigurationError: a value is malformed; the message names its variable.
        """
        return cls(
            database_url=_url(environ, database_url),
            kek=_kek(environ),
            reviewer_kek=_kek(environ, "SIGNOFF_REVIEWER_KEK"),
            key_refresh_seconds=_refresh(environ.get("SIGNOFF_KEY_REFRESH_SECONDS")),
            embedded_home=embedded_home_from_env(environ),
        )

    @property
    def embedded(self) -> bool:
        """Whether the database is the embedded server (no URL configured)."""
        return self.database_url is None

    @property
    def embedded_kek_file(self) -> Path | None:
        """The KEK file to use (and create for a database without keys): the embedded server's,
        only when the database is the embedded server and no KEK is configured."""
        return self.embedded_home / "kek" if self.embedded and self.kek is None else None

    def resolve_url(self) -> str:
        """The configured URL, or the embedded server's (started on first use)."""
        if self.database_url is not None:
            return self.database_url
        from . import embedded  # imported late: only this path needs the `embedded` extra

        return embedded.ensure_server(self.embedded_home)


def _url(environ: Mapping[str, str], given: str | None) -> str | None:
    if given:
        return normalize_url(given)
    for name in ("SIGNOFF_DATABASE_URL", "DATABASE_URL"):
        if url := environ.get(name):
            try:
                return normalize_url(url)
            except ConfigurationError as e:
                raise ConfigurationError(f"{name}: {e}") from e
    return None


def _kek(environ: Mapping[str, str], name: str = "SIGNOFF_KEK") -> LocalKek | None:
    if text := environ.get(name):
        return LocalKek.from_base64(text, name)
    if path := environ.get(f"{name}_FILE"):
        return LocalKek.from_file(Path(path), variable=f"{name}_FILE")
    return None


def _refresh(text: str | None) -> float:
    if text is None or not text.strip():
        return _REFRESH_DEFAULT
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise ConfigurationError(
            f"SIGNOFF_KEY_REFRESH_SECONDS is {text!r}: expected a number of seconds, 0 or more"
        )
    return seconds
