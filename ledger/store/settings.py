"""Signoff's settings: every environment variable the library reads, read once here and checked.

| variable                                      | setting                                       |
|-----------------------------------------------|-----------------------------------------------|
| `SIGNOFF_DATABASE_URL`, else `DATABASE_URL`   | `database_url` (None: the embedded server)    |
| `SIGNOFF_READ_DATABASE_URL`                   | `read_database_url` (None: reads go there too)|
| `SIGNOFF_HOST_CONNECT_SECONDS`                | `host_connect_seconds` (default 10)           |
| `SIGNOFF_POOLER_CHECK`                        | `pooler_check` (default on; `off` skips it)   |
| `SIGNOFF_KEK`, else `SIGNOFF_KEK_FILE`        | `kek` (base64 of 32 bytes, or a file of it)   |
| `SIGNOFF_REVIEWER_KEK`, else `..._KEK_FILE`   | `reviewer_kek` (the reviewer side only)       |
| `SIGNOFF_KEY_REFRESH_SECONDS`                 | `key_refresh_seconds` (default 10)            |
| `SIGNOFF_EMBEDDED_DIR`, `XDG_DATA_HOME`       | `embedded_home`                               |
| `SIGNOFF_OIDC_*`                              | `oidc` (None: no OIDC bearer tokens)          |
| `SIGNOFF_WEBHOOK_*`                           | `webhook` (None: the service posts nothing)   |
| `SIGNOFF_PUBLIC_URL`                          | `public_url` (None: notifications link nowhere)|
| `SIGNOFF_SLACK_*`                             | `slack` (None: no Slack notifications)        |
| `SIGNOFF_SMTP_*`                              | `email` (None: no e-mail notifications)       |
| `SIGNOFF_LOG_ORIGIN`                          | `log_origin` (None: digests carry no checkpoint)|
| `SIGNOFF_HTTP_HEADER_SECONDS`                 | `http_header_seconds` (default 10)            |
| `SIGNOFF_HTTP_IDLE_SECONDS`                   | `http_idle_seconds` (default 15)              |
| `SIGNOFF_HORIZON_WARN_SECONDS`                | `horizon_warn_seconds` (default 30)           |
| `SIGNOFF_HORIZON_READY_SECONDS`               | `horizon_ready_seconds` (default: none)       |

Everything else takes these values: `Database.from_settings(settings)` keeps them, and the key
ring takes its KEK and refresh interval from its database's settings. With no URL configured the
database is the embedded server of `embedded_home`, and the KEK (unless one is configured) is that
home's `kek` file. A configured URL never selects a KEK file, whatever it looks like.

`read_database_url` is a hot standby of that database: the auditors' reads (`ledger verify`,
`ledger export`, proofs, the auditor endpoints of `signoff serve`) go there, read-only, and
say how far behind the primary it is (`ledger.store.standby`); every write still goes to
`database_url`.

`host_connect_seconds` is how long a connection to one host of a multi-host URL (a cluster's,
`postgresql://u@h1,h2,h3/db?target_session_attrs=read-write`) may take before the next host is
tried, for both drivers: a `Database`'s connections and `signoff db`'s
(`ledger.store.db.connect_each_host`), and the LangGraph checkpointer's (libpq's
`connect_timeout`, whole seconds, at least 2). A URL with one host keeps each driver's own
limit.

`pooler_check` off skips the connect-time check that refuses a connection pooler sharing server
sessions between clients (`ledger.store.pooling`), for a pooler or proxy it wrongly refuses;
whoever turns it off vouches that each client keeps its server session (a warning says so).

The reviewer KEK wraps the key that signs decisions. Only the reviewer side (the HTTP service,
the admin CLI) is given it; agent workers run without it and only verify. It has no embedded
default: a process holds it only when told to.

`oidc` (`OidcSettings`) says which OIDC / JWT bearer tokens the HTTP service accepts: its issuer,
audience and JWKS, and which claims name the reviewer and their groups. They are kept as plain
strings: the HTTP adapter builds its verifier from them.

`log_origin` names the journal as a transparency log: the origin line of its C2SP checkpoints
and the key name they are signed under (`example.com/signoff/prod`; no spaces, no '+'). It must
be unique to the deployment and never change, since witnesses track a log by it.

`http_header_seconds` and `http_idle_seconds` bound what `signoff serve` waits for from a client:
a request head must be complete within the first, and a client waited on (for a request or the
rest of its body) may stay silent for at most the second. `horizon_warn_seconds` is how long
the oldest open transaction may hold back the journal's global order before the service warns
and the health checks warn (`ledger.health`); only when `horizon_ready_seconds` is set does a
hold past it fail them (`/readyz` answers 503, `signoff doctor` fails). It is not set by default:
any login may hold the horizon, and failing readiness for it takes every replica out of
rotation at once, which stops reviewers deciding.

`webhook` (`WebhookSettings`) is where the HTTP service posts its notifications (a new approval
request, a call whose outcome is unknown), the secret that signs them and their format.

`slack` (`SlackSettings`) and `email` (`EmailSettings`) are where the HTTP service tells
reviewers of a new approval request, with a link to it under `public_url`, the address
reviewers open the service at (required with either).
"""

from __future__ import annotations

import math
import os
import pwd
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from ..audit.checkpoint import MalformedNote, check_key_name
from ..errors import ConfigurationError
from ..keys.kek import LocalKek
from .config import HOST_CONNECT_SECONDS, is_loopback, normalize_url
from .notifier_settings import SMTP_SECURITY, EmailSettings, SlackSettings, public_url

__all__ = [
    "OIDC_ALGORITHMS",
    "WEBHOOK_FORMATS",
    "EmailSettings",
    "OidcSettings",
    "Settings",
    "SlackSettings",
    "WebhookSettings",
    "embedded_home_from_env",
]

_REFRESH_DEFAULT = 10.0

OIDC_ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)
"""The signature algorithms an OIDC token may use: asymmetric only. `none` and the HMACs (HS*)
are never among them: with a published key, an HMAC "signature" is one anybody can make."""
_TREE_INTEGRATE_DEFAULT = 30.0
_HTTP_HEADER_DEFAULT = 10.0
_HTTP_IDLE_DEFAULT = 15.0
_HORIZON_WARN_DEFAULT = 30.0
# Past the database's one-minute idle-transaction limit (revision 0002): a transaction idle that
# long is ended by the server; only one that keeps running statements holds the horizon longer.
_OIDC_DEFAULT_ALGORITHMS = ("RS256", "ES256", "EdDSA")
_OIDC_LEEWAY_DEFAULT = 30.0
_OIDC_LEEWAY_MAX = 300.0  # clocks are kept in step; more leeway only stretches a stolen token
_OIDC_NAME_MAX = 256
# Which variable each field of `OidcSettings` comes from: its errors name it.
_OIDC_VARIABLES = {
    "issuer": "SIGNOFF_OIDC_ISSUER",
    "audiences": "SIGNOFF_OIDC_AUDIENCE",
    "jwks": "SIGNOFF_OIDC_JWKS",
    "reviewer_claim": "SIGNOFF_OIDC_REVIEWER_CLAIM",
    "groups_claim": "SIGNOFF_OIDC_GROUPS_CLAIM",
    "auditor_group": "SIGNOFF_OIDC_AUDITOR_GROUP",
    "agent_group": "SIGNOFF_OIDC_AGENT_GROUP",
    "algorithms": "SIGNOFF_OIDC_ALGORITHMS",
    "leeway_seconds": "SIGNOFF_OIDC_LEEWAY_SECONDS",
}


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

    database_url: str | None = field(default=None, repr=False)  # it may carry a password
    read_database_url: str | None = field(default=None, repr=False)
    """A hot standby of `database_url` that auditors read from (None: they read the primary)."""
    host_connect_seconds: float = HOST_CONNECT_SECONDS
    """How long connecting to one host of a multi-host URL may take before the next is tried."""
    pooler_check: bool = True
    """Whether connecting refuses a pooler that shares server sessions between clients
    (`ledger.store.pooling`); False: the operator vouches for the pooler, and it is not asked."""
    kek: LocalKek | None = field(default=None, repr=False)
    reviewer_kek: LocalKek | None = field(default=None, repr=False)
    key_refresh_seconds: float = _REFRESH_DEFAULT
    embedded_home: Path = field(default_factory=lambda: embedded_home_from_env({}))
    oidc: OidcSettings | None = None
    webhook: WebhookSettings | None = None
    public_url: str | None = None
    """The address reviewers open the service at (`https://signoff.example.com`): the base
    of the links notifications carry."""
    slack: SlackSettings | None = None
    email: EmailSettings | None = None
    log_origin: str | None = None
    tree_integrate_seconds: float = _TREE_INTEGRATE_DEFAULT
    """How often `signoff serve` integrates new events into the stored Merkle tree (0: never;
    digests still do)."""
    http_header_seconds: float = _HTTP_HEADER_DEFAULT
    """How long `signoff serve` waits for a request head to be complete."""
    http_idle_seconds: float = _HTTP_IDLE_DEFAULT
    """How long `signoff serve` waits for a silent client's next bytes."""
    horizon_warn_seconds: float = _HORIZON_WARN_DEFAULT
    """How long the oldest open transaction may hold back the global order before the
    service logs a warning."""
    horizon_ready_seconds: float | None = None
    """How long it may hold it back before the health checks fail (`/readyz`, `signoff
    doctor`); None: they only warn, past `horizon_warn_seconds`."""

    def __post_init__(self) -> None:
        if self.database_url is not None:  # as psql takes it, or SQLAlchemy's
            object.__setattr__(self, "database_url", normalize_url(self.database_url))
        if self.read_database_url is not None:
            object.__setattr__(self, "read_database_url", normalize_url(self.read_database_url))
        if not math.isfinite(self.tree_integrate_seconds) or self.tree_integrate_seconds < 0:
            raise ConfigurationError(
                f"tree_integrate_seconds is {self.tree_integrate_seconds}: expected 0 or more"
            )
        for name in (
            "host_connect_seconds",
            "http_header_seconds",
            "http_idle_seconds",
            "horizon_warn_seconds",
            "horizon_ready_seconds",
        ):
            value = getattr(self, name)
            if value is None and name == "horizon_ready_seconds":
                continue  # not set: the horizon check only warns
            if not math.isfinite(value) or value <= 0:
                raise ConfigurationError(f"{name} is {value}: expected more than 0 seconds")
        if not math.isfinite(self.key_refresh_seconds) or self.key_refresh_seconds < 0:
            raise ConfigurationError(
                f"key_refresh_seconds is {self.key_refresh_seconds}: expected 0 or more"
            )
        if self.public_url is not None:
            object.__setattr__(self, "public_url", public_url(self.public_url))
        elif self.slack is not None or self.email is not None:
            raise ConfigurationError(
                "Slack and e-mail notifications link to the approval: set SIGNOFF_PUBLIC_URL "
                "to the address reviewers open the service at (https://signoff.example.com)"
            )
        if self.log_origin is not None:
            try:
                check_key_name(self.log_origin)
            except MalformedNote as e:
                raise ConfigurationError(f"log_origin: {e}") from e

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] = os.environ,
        *,
        database_url: str | None = None,
        read_database_url: str | None = None,
    ) -> Settings:
        """The settings of `environ`; `database_url` and `read_database_url` (a command
        line's) win over its URLs.

        Raises:
            ConfigurationError: a value is malformed; the message names its variable.
        """
        return cls(
            database_url=_url(environ, database_url),
            read_database_url=_url(environ, read_database_url, ("SIGNOFF_READ_DATABASE_URL",)),
            host_connect_seconds=_positive(
                environ, "SIGNOFF_HOST_CONNECT_SECONDS", HOST_CONNECT_SECONDS
            ),
            pooler_check=_on_off(environ, "SIGNOFF_POOLER_CHECK", default=True),
            kek=_kek(environ),
            reviewer_kek=_kek(environ, "SIGNOFF_REVIEWER_KEK"),
            key_refresh_seconds=_refresh(environ.get("SIGNOFF_KEY_REFRESH_SECONDS")),
            embedded_home=embedded_home_from_env(environ),
            oidc=OidcSettings.from_env(environ),
            webhook=WebhookSettings.from_env(environ),
            public_url=(environ.get("SIGNOFF_PUBLIC_URL") or "").strip() or None,
            slack=_slack(environ),
            email=_email(environ),
            log_origin=_origin(environ.get("SIGNOFF_LOG_ORIGIN")),
            tree_integrate_seconds=_seconds(environ, "SIGNOFF_TREE_INTEGRATE_SECONDS"),
            http_header_seconds=_positive(
                environ, "SIGNOFF_HTTP_HEADER_SECONDS", _HTTP_HEADER_DEFAULT
            ),
            http_idle_seconds=_positive(environ, "SIGNOFF_HTTP_IDLE_SECONDS", _HTTP_IDLE_DEFAULT),
            horizon_warn_seconds=_positive(
                environ, "SIGNOFF_HORIZON_WARN_SECONDS", _HORIZON_WARN_DEFAULT
            ),
            horizon_ready_seconds=_positive_or_none(environ, "SIGNOFF_HORIZON_READY_SECONDS"),
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


def _url(
    environ: Mapping[str, str],
    given: str | None,
    names: tuple[str, ...] = ("SIGNOFF_DATABASE_URL", "DATABASE_URL"),
) -> str | None:
    if given:
        return normalize_url(given)
    for name in names:
        if url := environ.get(name):
            try:
                return normalize_url(url)
            except ConfigurationError as e:
                raise ConfigurationError(f"{name}: {e}") from e
    return None


def _on_off(environ: Mapping[str, str], name: str, *, default: bool) -> bool:
    """A switch: `on` or `off` (any case); unset or empty: `default`."""
    text = (environ.get(name) or "").strip()
    if not text:
        return default
    if text.lower() not in ("on", "off"):
        raise ConfigurationError(f"{name} is {text!r}: expected on or off")
    return text.lower() == "on"


def _kek(environ: Mapping[str, str], name: str = "SIGNOFF_KEK") -> LocalKek | None:
    if text := environ.get(name):
        return LocalKek.from_base64(text, name)
    if path := environ.get(f"{name}_FILE"):
        return LocalKek.from_file(Path(path), variable=f"{name}_FILE")
    return None


def _secret(environ: Mapping[str, str], name: str) -> str | None:
    """The secret in variable `name`, else in the file `name`_FILE names; None without
    either."""
    if secret := environ.get(name):
        return secret
    if path := environ.get(f"{name}_FILE"):
        try:
            return Path(path).read_text().strip()
        except (OSError, UnicodeDecodeError) as e:
            reason = e.strerror if isinstance(e, OSError) else "not text"
            raise ConfigurationError(f"cannot read {name}_FILE={path}: {reason}") from e
    return None


def _slack(environ: Mapping[str, str]) -> SlackSettings | None:
    """The Slack notifier's settings: None when none of its variables is set."""
    url = _secret(environ, "SIGNOFF_SLACK_WEBHOOK_URL")
    token = _secret(environ, "SIGNOFF_SLACK_BOT_TOKEN")
    channel = (environ.get("SIGNOFF_SLACK_CHANNEL") or "").strip() or None
    api = (environ.get("SIGNOFF_SLACK_API_URL") or "").strip() or None
    if url is None and token is None:
        if channel or api:
            raise ConfigurationError(
                "SIGNOFF_SLACK_CHANNEL or _API_URL is set, but neither "
                "SIGNOFF_SLACK_WEBHOOK_URL nor SIGNOFF_SLACK_BOT_TOKEN is"
            )
        return None
    if api is not None and token is None:
        raise ConfigurationError("SIGNOFF_SLACK_API_URL goes with SIGNOFF_SLACK_BOT_TOKEN")
    if api is None:
        return SlackSettings(webhook_url=url, bot_token=token, channel=channel)
    return SlackSettings(webhook_url=url, bot_token=token, channel=channel, api_url=api)


def _email(environ: Mapping[str, str]) -> EmailSettings | None:
    """The e-mail notifier's settings: None when SIGNOFF_SMTP_HOST is not set."""
    names = ("PORT", "SECURITY", "FROM", "TO", "USER", "PASSWORD", "PASSWORD_FILE")
    given = {n: v.strip() for n in names if (v := environ.get(f"SIGNOFF_SMTP_{n}")) and v.strip()}
    host = (environ.get("SIGNOFF_SMTP_HOST") or "").strip()
    if not host:
        if given:
            raise ConfigurationError(
                f"SIGNOFF_SMTP_{next(iter(given))} is set, but SIGNOFF_SMTP_HOST is not"
            )
        return None
    for required in ("FROM", "TO"):
        if required not in given:
            raise ConfigurationError(
                f"SIGNOFF_SMTP_HOST is set without SIGNOFF_SMTP_{required}: e-mail needs a "
                "sender and recipients"
            )
    port = 0
    if "PORT" in given:
        if not given["PORT"].isdigit() or int(given["PORT"]) == 0:
            raise ConfigurationError(f"SIGNOFF_SMTP_PORT is {given['PORT']!r}: expected a port")
        port = int(given["PORT"])
    security = given.get("SECURITY", "starttls").lower()
    if security not in SMTP_SECURITY:
        raise ConfigurationError(
            f"SIGNOFF_SMTP_SECURITY is {security!r}: expected one of {', '.join(SMTP_SECURITY)}"
        )
    return EmailSettings(
        host=host,
        sender=given["FROM"],
        recipients=tuple(r.strip() for r in given["TO"].split(",") if r.strip()),
        port=port,
        security=security,
        user=given.get("USER"),
        password=_secret(environ, "SIGNOFF_SMTP_PASSWORD"),
    )


def _origin(text: str | None) -> str | None:
    if text is None or not text.strip():
        return None
    try:
        return check_key_name(text.strip())
    except MalformedNote as e:
        raise ConfigurationError(f"SIGNOFF_LOG_ORIGIN: {e}") from e


def _seconds(environ: Mapping[str, str], name: str) -> float:
    text = environ.get(name)
    if text is None or not text.strip():
        return _TREE_INTEGRATE_DEFAULT
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise ConfigurationError(f"{name} is {text!r}: expected a number of seconds, 0 or more")
    return seconds


def _positive(environ: Mapping[str, str], name: str, default: float) -> float:
    text = environ.get(name)
    if text is None or not text.strip():
        return default
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigurationError(f"{name} is {text!r}: expected a number of seconds above 0")
    return seconds


def _positive_or_none(environ: Mapping[str, str], name: str) -> float | None:
    text = environ.get(name)
    return None if text is None or not text.strip() else _positive(environ, name, 0.0)


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


@dataclass(frozen=True, slots=True)
class OidcSettings:
    """Which OIDC / JWT bearer tokens are accepted, and how their claims name a reviewer.

    A token is accepted when it is signed with one of `algorithms` by a key of `jwks`, and its
    `iss` is `issuer`, its `aud` holds one of `audiences`, and it has not expired (`exp` is
    required; `nbf` is honoured), give or take `leeway_seconds`.

    - `jwks`: a JWKS file (an absolute path) or an `https://` URL; plain `http://` only to a
      loopback host, since whoever can change the keys in transit can sign any token.
    - `reviewer_claim`: the claim holding the reviewer id (`sub`, or e.g. `email`).
    - `groups_claim`: the claim holding the reviewer's groups, a list of strings (None: none).
    - `auditor_group`: members of this group get the auditor scope (read, never decide); every
      other identity (but the agent group's) gets the reviewer scope. A group rather than a
      `scope` claim because the identity provider's administrators decide who is in a group,
      person by person, whereas the scopes in a token are what the client asked for; and a
      group is what policies already name (`group:<name>` approvers). It needs `groups_claim`.
    - `agent_group`: members of this group get the agent scope: MCP clients of `signoff mcp`,
      which `signoff serve` refuses. It wins over `auditor_group` (an identity in both is an
      agent), must be another group than it (`OidcVerifier` compares their normal forms), and
      needs `groups_claim`.

    A claim name is looked up as a top-level claim first, then (when it has dots and no such
    claim exists) as a path into nested objects (`realm_access.roles`).
    """

    issuer: str
    audiences: tuple[str, ...]
    jwks: str
    reviewer_claim: str = "sub"
    groups_claim: str | None = None
    auditor_group: str | None = None
    agent_group: str | None = None
    algorithms: tuple[str, ...] = _OIDC_DEFAULT_ALGORITHMS
    leeway_seconds: float = _OIDC_LEEWAY_DEFAULT

    def __post_init__(self) -> None:
        _name("issuer", self.issuer, limit=2048)
        if isinstance(self.audiences, str) or not self.audiences:
            raise _oidc_error("audiences", "expected one audience or more, comma-separated")
        for audience in self.audiences:
            _name("audiences", audience, limit=2048)
        object.__setattr__(self, "jwks", _jwks(self.jwks))
        _name("reviewer_claim", self.reviewer_claim)
        if self.groups_claim is not None:
            _name("groups_claim", self.groups_claim)
        for group_field in ("auditor_group", "agent_group"):
            if (group := getattr(self, group_field)) is None:
                continue
            _name(group_field, group)
            if self.groups_claim is None:
                raise _oidc_error(
                    group_field,
                    "needs SIGNOFF_OIDC_GROUPS_CLAIM: the claim that holds the groups",
                )
        if isinstance(self.algorithms, str) or not self.algorithms:
            raise _oidc_error("algorithms", f"expected some of {', '.join(OIDC_ALGORITHMS)}")
        for algorithm in self.algorithms:
            if algorithm not in OIDC_ALGORITHMS:
                raise _oidc_error(
                    "algorithms",
                    f"{algorithm!r} is not an asymmetric signature algorithm; "
                    f"expected some of {', '.join(OIDC_ALGORITHMS)}",
                )
        leeway = self.leeway_seconds
        if not math.isfinite(leeway) or not 0 <= leeway <= _OIDC_LEEWAY_MAX:
            raise _oidc_error(
                "leeway_seconds", f"is {leeway}: expected 0 to {_OIDC_LEEWAY_MAX:g} seconds"
            )

    @property
    def jwks_url(self) -> str | None:
        """The JWKS URL, or None when the JWKS is a file."""
        return self.jwks if _is_url(self.jwks) else None

    @property
    def jwks_file(self) -> Path | None:
        """The JWKS file, or None when the JWKS is a URL."""
        return None if _is_url(self.jwks) else Path(self.jwks)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> OidcSettings | None:
        """The OIDC settings of `environ`: None when none of its variables is set.

        Raises:
            ConfigurationError: a value is malformed, or one of the issuer, audience and JWKS
                is set without the others; the message names the variable.
        """
        given = {
            name: value.strip()
            for name in _OIDC_VARIABLES.values()
            if (value := environ.get(name)) is not None and value.strip()
        }
        if not given:
            return None
        for required in ("issuer", "audiences", "jwks"):
            if _OIDC_VARIABLES[required] not in given:
                raise ConfigurationError(
                    f"{_OIDC_VARIABLES[required]} is not set, but "
                    f"{', '.join(sorted(given))} is: OIDC needs an issuer, an audience and a JWKS"
                )

        def get(name: str) -> str | None:
            return given.get(_OIDC_VARIABLES[name])

        return cls(
            issuer=given[_OIDC_VARIABLES["issuer"]],
            audiences=_listed("audiences", given[_OIDC_VARIABLES["audiences"]]),
            jwks=given[_OIDC_VARIABLES["jwks"]],
            reviewer_claim=get("reviewer_claim") or "sub",
            groups_claim=get("groups_claim"),
            auditor_group=get("auditor_group"),
            agent_group=get("agent_group"),
            algorithms=_algorithms(get("algorithms")),
            leeway_seconds=_leeway(get("leeway_seconds")),
        )


def _oidc_error(field_name: str, problem: str) -> ConfigurationError:
    return ConfigurationError(f"{_OIDC_VARIABLES[field_name]} ({field_name}) {problem}")


def _name(field_name: str, value: object, *, limit: int = _OIDC_NAME_MAX) -> None:
    """A name compared as it is (an issuer, an audience, a claim): visible text, no spaces."""
    if not isinstance(value, str) or not value:
        raise _oidc_error(field_name, f"is {value!r}: expected a non-empty string")
    if len(value) > limit:
        raise _oidc_error(field_name, f"is longer than {limit} characters")
    for char in value:
        if char.isspace() or unicodedata.category(char)[0] in ("C", "Z"):
            raise _oidc_error(
                field_name, f"is {value!r}: it holds whitespace or an invisible character"
            )


def _listed(field_name: str, text: str) -> tuple[str, ...]:
    items = tuple(item.strip() for item in text.split(","))
    if not all(items):
        raise _oidc_error(field_name, f"is {text!r}: an empty item in a comma-separated list")
    return items


def _algorithms(text: str | None) -> tuple[str, ...]:
    if text is None:
        return _OIDC_DEFAULT_ALGORITHMS
    known = {name.lower(): name for name in OIDC_ALGORITHMS}
    return tuple(known.get(item.lower(), item) for item in _listed("algorithms", text))


def _leeway(text: str | None) -> float:
    if text is None:
        return _OIDC_LEEWAY_DEFAULT
    try:
        return float(text)
    except ValueError:
        raise _oidc_error("leeway_seconds", f"is {text!r}: expected a number of seconds") from None


def _is_url(value: str) -> bool:
    return value.lower().startswith(("https://", "http://"))


def _jwks(value: object) -> str:
    """A JWKS URL as given, or a JWKS file's absolute path."""
    if not isinstance(value, str) or not value.strip():
        raise _oidc_error("jwks", f"is {value!r}: expected a file path or an https:// URL")
    value = value.strip()
    if not _is_url(value):
        if "://" in value:
            raise _oidc_error("jwks", f"is {value!r}: expected a file path or an https:// URL")
        return str(Path(value).expanduser().absolute())
    parts = urlsplit(value)
    try:
        host = parts.hostname
        parts.port  # noqa: B018 -- a malformed port raises here
    except ValueError as e:
        raise _oidc_error("jwks", f"is {value!r}: {e}") from None
    if not host:
        raise _oidc_error("jwks", f"is {value!r}: the URL names no host")
    if parts.username is not None or parts.password is not None:
        raise _oidc_error("jwks", "holds credentials: a JWKS is public, fetched without them")
    if parts.scheme.lower() == "http" and not is_loopback(host):
        raise _oidc_error(
            "jwks",
            f"is {value!r}: plain http only to a loopback host; whoever can change the keys "
            "in transit can sign any token, so use https://",
        )
    return value


WEBHOOK_FORMATS = ("signoff", "slack")
"""The bodies a webhook may be sent as: Signoff's own JSON, or a Slack incoming webhook's."""
_WEBHOOK_SECRET_MIN = 16
_WEBHOOK_URL_MAX = 2048


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    """Where the HTTP service posts its notifications, and how.

    - `url`: an `http://` or `https://` URL (no user or password in it: the body is signed).
    - `secret`: signs every body (`X-Signoff-Signature`); at least 16 characters.
    - `format`: `signoff` (our JSON) or `slack` (a Slack incoming webhook's `text` and
      `blocks`).

    How a delivery is retried is not configured from the environment; the defaults suit a
    receiver that is down for a while: a timeout of `timeout_seconds` per attempt, then
    `first_retry_seconds`, doubling up to `max_retry_seconds` (each with jitter), until
    `max_attempts` attempts have been made.
    """

    url: str
    secret: str = field(repr=False)
    format: str = "signoff"
    timeout_seconds: float = 10.0
    first_retry_seconds: float = 5.0
    max_retry_seconds: float = 900.0
    max_attempts: int = 10

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", _webhook_url(self.url))
        if not isinstance(self.secret, str) or len(self.secret) < _WEBHOOK_SECRET_MIN:
            raise ConfigurationError(
                f"SIGNOFF_WEBHOOK_SECRET is shorter than {_WEBHOOK_SECRET_MIN} characters: "
                "use a long random one (e.g. openssl rand -hex 32)"
            )
        if self.format not in WEBHOOK_FORMATS:
            raise ConfigurationError(
                f"SIGNOFF_WEBHOOK_FORMAT is {self.format!r}: expected one of "
                f"{', '.join(WEBHOOK_FORMATS)}"
            )
        for name in ("timeout_seconds", "first_retry_seconds", "max_retry_seconds"):
            seconds = getattr(self, name)
            if not math.isfinite(seconds) or seconds <= 0:
                raise ConfigurationError(f"webhook {name} is {seconds}: expected more than 0")
        if self.max_attempts < 1:
            raise ConfigurationError(f"webhook max_attempts is {self.max_attempts}: expected 1+")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> WebhookSettings | None:
        """The webhook settings of `environ`: None when `SIGNOFF_WEBHOOK_URL` is not set.

        Raises:
            ConfigurationError: a malformed URL or format, a URL without a secret (or a
                secret file that cannot be read), a secret or format without a URL.
        """
        url = (environ.get("SIGNOFF_WEBHOOK_URL") or "").strip()
        secret = environ.get("SIGNOFF_WEBHOOK_SECRET") or None
        secret_file = environ.get("SIGNOFF_WEBHOOK_SECRET_FILE") or None
        format_ = (environ.get("SIGNOFF_WEBHOOK_FORMAT") or "").strip().lower()
        if not url:
            if secret or secret_file or format_:
                raise ConfigurationError(
                    "SIGNOFF_WEBHOOK_SECRET or _FORMAT is set, but SIGNOFF_WEBHOOK_URL is not"
                )
            return None
        if secret is None and secret_file is not None:
            try:
                secret = Path(secret_file).read_text().strip()
            except (OSError, UnicodeDecodeError) as e:
                reason = e.strerror if isinstance(e, OSError) else "not text"
                raise ConfigurationError(
                    f"cannot read SIGNOFF_WEBHOOK_SECRET_FILE={secret_file}: {reason}"
                ) from e
        if not secret:
            raise ConfigurationError(
                "SIGNOFF_WEBHOOK_URL is set without a secret: set SIGNOFF_WEBHOOK_SECRET or "
                "SIGNOFF_WEBHOOK_SECRET_FILE (it signs every body)"
            )
        return cls(url=url, secret=secret, format=format_ or "signoff")


def _webhook_url(value: object) -> str:
    """A webhook URL as given, checked; errors never quote it (its path may be a secret)."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError("SIGNOFF_WEBHOOK_URL is empty: expected an http(s):// URL")
    value = value.strip()
    parts = urlsplit(value)
    if parts.scheme.lower() not in ("http", "https"):
        raise ConfigurationError("SIGNOFF_WEBHOOK_URL is not an http:// or https:// URL")
    try:
        host = parts.hostname
        parts.port  # noqa: B018 -- a malformed port raises here
    except ValueError:
        raise ConfigurationError("SIGNOFF_WEBHOOK_URL has a malformed host or port") from None
    if not host:
        raise ConfigurationError("SIGNOFF_WEBHOOK_URL names no host")
    if parts.username is not None or parts.password is not None:
        raise ConfigurationError(
            "SIGNOFF_WEBHOOK_URL holds a user or password: the body is signed instead"
        )
    if len(value) > _WEBHOOK_URL_MAX or any(c.isspace() or ord(c) < 32 for c in value):
        raise ConfigurationError(
            f"SIGNOFF_WEBHOOK_URL is longer than {_WEBHOOK_URL_MAX} characters or holds spaces"
        )
    return parts.scheme.lower() + value[len(parts.scheme) :]
