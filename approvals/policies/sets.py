"""Published policy sets: versioned, signed, journaled evidence.

A set is published by a policy administrator (an active reviewer of the directory group
`policy-admins`) on the reviewer side, which signs it with the decision key: stream
`policy:<version>`, one `policy.published` event whose data is the whole set (its Cedar text,
mode, time zone and the Cedar schema it was validated against) and its hash. The `policy_sets`
table is its projection; the highest version is the active set. Workers load a set only when
its signature and hash check out; a set that does not is unreadable, and calls judged under it
are denied.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import asyncpg
import cedarpy

from ledger.calls.model import Effect
from ledger.canonical import format_time, json_digest
from ledger.errors import ProjectionError, UnknownEventType
from ledger.journal import NewEvent
from ledger.journal.projection import Fact, Projection, commit, verify_projection
from ledger.keys import KeyRing
from ledger.keys.attest import Statement, sign_statement, statement_ok
from ledger.limits import name_problem
from ledger.store import Database

from ..errors import InvalidApprovalRequest
from ..identity import reviewer_id
from ..reviewers import directory_groups
from .cedar import Rules, parse_rules
from .model import (
    ADMIN_GROUP,
    InvalidPolicySet,
    Mode,
    PolicyConflict,
    PolicyError,
    PolicyNotPermitted,
    UnknownPolicySet,
)
from .schema import EFFECT_GROUP, RegisteredTool, cedar_schema

__all__ = [
    "CHANNEL",
    "POLICY_SETS",
    "STREAM_PREFIX",
    "ActiveSet",
    "PolicySets",
    "PolicyUnreadable",
    "PublishedSet",
    "policy_statement",
    "set_hash",
    "tools_json",
    "tools_of",
]

STREAM_PREFIX = "policy:"
CHANNEL = "signoff_policy_sets"
PUBLISHED = "policy.published"
MAX_POLICY_BYTES = 256 * 1024

_COLUMNS = (
    "version, set_hash, mode, policies, policy_ids, tools::text, timezone, published_by,"
    " published_at, signature::text"
)
_BY_VERSION = f"SELECT {_COLUMNS} FROM policy_sets WHERE version = $1"
_ALL = f"SELECT {_COLUMNS} FROM policy_sets ORDER BY version"
_HEAD = "SELECT coalesce(max(version), 0) FROM policy_sets"
_TOOLS = "SELECT tool, effect, args_schema::text FROM policy_tools ORDER BY tool"
_REGISTER = "SELECT signoff_register_tool($1, $2, $3::jsonb)"


class PolicyUnreadable(PolicyError):
    """A published set that cannot be used: its signature, hash or text does not check out."""

    def __init__(self, version: int, problem: str) -> None:
        super().__init__(f"policy set version {version} is unreadable: {problem}")
        self.version = version
        self.problem = problem


@dataclass(frozen=True)
class PublishedSet:
    """One row of `policy_sets`: a published set as its event says it."""

    version: int
    set_hash: str
    mode: Mode
    policies: str
    policy_ids: tuple[str, ...]
    tools: Mapping[str, Any]  # the registered tools it was validated against
    timezone: str
    published_by: str
    published_at: datetime
    signature: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "set_hash": self.set_hash,
            "mode": str(self.mode),
            "policies": self.policies,
            "policy_ids": list(self.policy_ids),
            "timezone": self.timezone,
            "published_by": self.published_by,
            "published_at": self.published_at.isoformat(),
        }


def set_hash(policies: str, mode: Mode, timezone: str, tools: Mapping[str, Any]) -> str:
    """What names a set's content: SHA-256 of the canonical JSON of all that decides."""
    return "sha256:" + json_digest(["signoff.policy.v1", policies, str(mode), timezone, tools])


def policy_statement(data: Mapping[str, Any]) -> Statement:
    """What the publisher's signature vouches for (`policy.published`'s data)."""
    return Statement(
        binding=json_digest(["signoff.policy.v1", data["version"]]),
        subject=f"{STREAM_PREFIX}{data['version']}",
        kind="policy",
        payload={"set_hash": data["set_hash"], "mode": data["mode"]},
        reviewer=data["published_by"],
        groups=(ADMIN_GROUP,),
        at=format_time(datetime.fromisoformat(data["at"])),
    )


class PolicySetProjection(Projection[PublishedSet]):
    """The `policy_sets` table: one row per `policy:<version>` stream."""

    table = "policy_sets"
    key = ("version",)
    stream_prefix = STREAM_PREFIX
    columns = _COLUMNS
    write_function = "signoff_commit_policy"

    def stream_of(self, record: PublishedSet) -> str:
        return f"{STREAM_PREFIX}{record.version}"

    def rows_of(self, stream_ids: Sequence[str]) -> tuple[str, tuple[Any, ...]]:
        versions = [int(s.removeprefix(STREAM_PREFIX)) for s in stream_ids]
        return "version = ANY($1::int[])", (versions,)

    def notify(self, before: PublishedSet | None, after: PublishedSet) -> str | None:
        return CHANNEL

    def from_row(self, row: Mapping[str, Any]) -> PublishedSet:
        tools, signature = row["tools"], row["signature"]
        return PublishedSet(
            version=row["version"],
            set_hash=row["set_hash"],
            mode=Mode(row["mode"]),
            policies=row["policies"],
            policy_ids=tuple(row["policy_ids"]),
            tools=json.loads(tools) if isinstance(tools, str) else tools,
            timezone=row["timezone"],
            published_by=row["published_by"],
            published_at=row["published_at"],
            signature=json.loads(signature) if isinstance(signature, str) else signature,
        )

    def to_row(self, record: PublishedSet) -> dict[str, Any]:
        return {
            "version": record.version,
            "set_hash": record.set_hash,
            "mode": str(record.mode),
            "policies": record.policies,
            "policy_ids": list(record.policy_ids),
            "tools": dict(record.tools),
            "timezone": record.timezone,
            "published_by": record.published_by,
            "published_at": record.published_at,
            "signature": dict(record.signature),
        }

    def apply(self, record: PublishedSet | None, event: Fact) -> PublishedSet:
        if event.type != PUBLISHED:
            raise UnknownEventType(event.stream_id, event.type)
        if record is not None:
            raise ProjectionError(event.stream_id, "a policy set is published once")
        data = event.data
        return PublishedSet(
            version=int(data["version"]),
            set_hash=data["set_hash"],
            mode=Mode(data["mode"]),
            policies=data["policies"],
            policy_ids=tuple(data["policy_ids"]),
            tools=data["tools"],
            timezone=data["timezone"],
            published_by=event.actor,
            published_at=datetime.fromisoformat(data["at"]),
            signature=data["signature"],
        )


POLICY_SETS = PolicySetProjection()


@dataclass(frozen=True)
class ActiveSet:
    """A published set ready to judge calls: its rules parsed, its schema and time zone, and
    the tools whose history its policies read (`schema` declares the history of those only)."""

    published: PublishedSet
    rules: Rules | None  # None: mode off
    tools: Mapping[str, RegisteredTool]
    actions: cedarpy.Entities | None  # each tool's action in its effect's group
    zone: ZoneInfo
    history_tools: Mapping[str, RegisteredTool] = field(default_factory=dict)


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidPolicySet([f"unknown time zone {name!r}"]) from None


def tools_json(tools: Mapping[str, RegisteredTool]) -> dict[str, Any]:
    """The registered tools as a set records them (its `tools`)."""
    return {
        name: {"effect": str(tool.effect), "args_schema": dict(tool.args_schema)}
        for name, tool in sorted(tools.items())
    }


def tools_of(recorded: Mapping[str, Any]) -> dict[str, RegisteredTool]:
    """A set's recorded `tools` as registered tools."""
    return {
        name: RegisteredTool(name, Effect(each["effect"]), each["args_schema"])
        for name, each in recorded.items()
    }


def activate(published: PublishedSet) -> ActiveSet:
    """`published` ready to judge calls.

    Raises:
        PolicyUnreadable: its hash, schema or text does not check out.
    """
    v = published.version
    expected = set_hash(published.policies, published.mode, published.timezone, published.tools)
    if expected != published.set_hash:
        raise PolicyUnreadable(v, "its content does not match its hash")
    try:
        zone = ZoneInfo(published.timezone)
        tools = tools_of(published.tools)
    except (ZoneInfoNotFoundError, ValueError, KeyError, TypeError, IndexError) as e:
        raise PolicyUnreadable(v, f"its schema or time zone cannot be read ({e})") from None
    if published.mode is Mode.OFF:
        return ActiveSet(published, None, tools, None, zone)
    rules, problems = parse_rules(published.policies)
    if rules is None or problems:
        raise PolicyUnreadable(v, "; ".join(problems))
    try:
        cedarpy.Schema.from_json_str(json.dumps(cedar_schema(tools)))
        actions = cedarpy.Entities.from_json_str(json.dumps(_actions(tools)))
    except ValueError as e:
        raise PolicyUnreadable(v, f"its schema: {e}") from None
    read = rules.history_tools
    history = {n: t for n, t in tools.items() if read is None or n in read}
    return ActiveSet(published, rules, tools, actions, zone, history)


def _actions(tools: Mapping[str, RegisteredTool]) -> list[dict[str, Any]]:
    """The action entities of `tools`: each in its effect's group (`Action::"effect:..."`)."""
    groups = [
        {"uid": {"type": "Action", "id": f"{EFFECT_GROUP}{e}"}, "attrs": {}, "parents": []}
        for e in Effect
    ]
    return groups + [
        {
            "uid": {"type": "Action", "id": name},
            "attrs": {},
            "parents": [{"type": "Action", "id": f"{EFFECT_GROUP}{tool.effect}"}],
        }
        for name, tool in sorted(tools.items())
    ]


def _checked_text(policies: str, mode: Mode, schema: Mapping[str, Any]) -> tuple[str, ...]:
    """The `@id`s of a set that may be published (in text order).

    Raises:
        InvalidPolicySet: Cedar's diagnostics, or Signoff's rules broken.
    """
    if not isinstance(policies, str) or len(policies.encode("utf-8")) > MAX_POLICY_BYTES:
        raise InvalidPolicySet([f"a policy set is text of at most {MAX_POLICY_BYTES} bytes"])
    if mode is Mode.OFF:
        if policies.strip():
            raise InvalidPolicySet(["a set of mode off has no policies"])
        return ()
    rules, problems = parse_rules(policies)
    if rules is None:
        raise InvalidPolicySet(problems)
    if not rules.order:
        problems.append("a set of mode enforce or log_only has at least one policy")
    validation = cedarpy.validate_policies(policies, json.dumps(schema))
    problems += [_diagnostic(e, validation.id_annotations_by_policy_id) for e in validation.errors]
    if problems:
        raise InvalidPolicySet(problems)
    return rules.order


def _diagnostic(error: cedarpy.ValidationError, ids: Mapping[str, str]) -> str:
    where = ids.get(error.policy_id, error.policy_id)
    text = error.error.replace(f"`{error.policy_id}`", f"`{where}`")
    return f"{where}: {text}" if where else text


class PolicySets:
    """The published sets and the registered tools of one database.

    Workers read sets and register tools; publishing is the reviewer side's (its ring signs)."""

    def __init__(self, db: Database, ring: KeyRing) -> None:
        self.db = db
        self.ring = ring
        self._loaded: dict[int, ActiveSet] = {}
        self.published_here = 0  # sets this object published: a point reads the head again

    async def register(self, tools: Iterable[RegisteredTool]) -> None:
        """Record the tools this worker runs and their arguments' schemas (the latest
        registration of a name counts; an unchanged one writes nothing)."""
        async with self.db.connection() as conn:
            for tool in tools:
                if (problem := name_problem(tool.name)) is not None:
                    raise InvalidApprovalRequest(f"tool name {problem}")
                schema = json.dumps(dict(tool.args_schema))
                await conn.execute(_REGISTER, tool.name, str(tool.effect), schema)

    async def registered(self) -> dict[str, RegisteredTool]:
        async with self.db.connection() as conn:
            rows = await conn.fetch(_TOOLS)
        return {
            r["tool"]: RegisteredTool(r["tool"], Effect(r["effect"]), json.loads(r["args_schema"]))
            for r in rows
        }

    async def head(self, conn: asyncpg.Connection | None = None) -> int:
        """The active set's version (0: none was ever published)."""
        async with self.db.connection(conn) as c:
            version: int = await c.fetchval(_HEAD)
        return version

    async def get(self, version: int) -> PublishedSet:
        """Raises:
        UnknownPolicySet: no set of that version."""
        async with self.db.connection() as conn:
            row = await conn.fetchrow(_BY_VERSION, version)
        if row is None:
            raise UnknownPolicySet(version)
        return POLICY_SETS.from_row(row)

    async def list(self) -> builtins.list[PublishedSet]:
        async with self.db.connection() as conn:
            return [POLICY_SETS.from_row(r) for r in await conn.fetch(_ALL)]

    async def load(self, version: int) -> ActiveSet:
        """Set `version` ready to judge calls, its signature checked (kept once loaded).

        Raises:
            PolicyUnreadable: its signature, hash, schema or text does not check out.
        """
        active = self._loaded.get(version)
        if active is not None:
            return active
        published = await self.get(version)
        data = {
            "version": published.version,
            "set_hash": published.set_hash,
            "mode": str(published.mode),
            "published_by": published.published_by,
            "at": published.published_at.isoformat(),
        }
        why = await statement_ok(self.ring, policy_statement(data), published.signature)
        if why is not None:
            raise PolicyUnreadable(version, f"the publisher's signature: {why}")
        active = activate(published)
        self._loaded[version] = active
        return active

    async def publish(
        self,
        policies: str,
        *,
        by: str,
        mode: Mode = Mode.ENFORCE,
        timezone: str = "UTC",
        expect_version: int | None = None,
    ) -> PublishedSet:
        """Publish `policies` as the next version, validated against the schema of the tools
        registered now, signed for `by` (a policy administrator).

        Args:
            expect_version: the active version this set replaces; another publish in between
                refuses this one (else it follows whatever is active then).

        Raises:
            InvalidPolicySet: Cedar's diagnostics or Signoff's rules; nothing written.
            PolicyNotPermitted: `by` is not an active reviewer of `policy-admins`.
            PolicyConflict: `expect_version` is not the active version.
            ReviewerKekMissing: this ring cannot sign (a worker's).
        """
        if (problem := name_problem(by)) is not None:
            raise InvalidApprovalRequest(f"by {problem}")
        publisher = reviewer_id(by)
        mode = Mode(mode)
        zone = _zone(timezone).key
        tools = tools_json(await self.registered())
        policy_ids = _checked_text(policies, mode, cedar_schema(tools_of(tools)))
        digest = set_hash(policies, mode, zone, tools)
        self.ring.require_decision_signer()
        while True:
            async with self.db.transaction() as conn:
                groups = await directory_groups(conn, publisher)
                if groups is None or ADMIN_GROUP not in groups:
                    raise PolicyNotPermitted(publisher)
                head = await self.head(conn)
                if expect_version is not None and head != expect_version:
                    raise PolicyConflict(expect_version, head)
                data: dict[str, Any] = {
                    "version": head + 1,
                    "set_hash": digest,
                    "mode": str(mode),
                    "policies": policies,
                    "policy_ids": list(policy_ids),
                    "tools": tools,
                    "timezone": zone,
                    "published_by": publisher,
                    "at": datetime.now(UTC).isoformat(),
                }
                async with self.ring.sealing():
                    data["signature"] = sign_statement(self.ring, policy_statement(data))
                stream = f"{STREAM_PREFIX}{head + 1}"
                event = NewEvent(PUBLISHED, data, actor=publisher)
                new = await commit(conn, POLICY_SETS, stream, None, [event], expected_version=0)
            if new is not None:
                self.published_here += 1
                return new
            if expect_version is not None:  # another set took the version first
                raise PolicyConflict(expect_version, await self.head())

    async def verify_projection(self) -> builtins.list[str]:
        return await verify_projection(self.db, POLICY_SETS)
