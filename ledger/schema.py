"""The tables as SQLAlchemy Core metadata.

Migrations are the source of truth for the schema; this module mirrors them for queries and a
test proves the two agree (alembic autogenerate finds no difference).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.dialects.postgresql.base import ischema_names
from sqlalchemy.types import UserDefinedType

__all__ = [
    "Xid8",
    "approval_grants",
    "approvals",
    "data_keys",
    "events",
    "metadata",
    "tool_calls",
]

metadata = MetaData()


class Xid8(UserDefinedType[int]):
    """PostgreSQL's 64-bit transaction id type."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "XID8"


events = Table(
    "events",
    metadata,
    Column("position", BigInteger, Identity(always=True), primary_key=True),
    Column("txid", Xid8(), nullable=False),
    Column("stream_id", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("type", Text, nullable=False),
    Column("data", JSON, nullable=False),
    Column("actor", Text, nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
    Column("hash", LargeBinary, nullable=False),
    UniqueConstraint("stream_id", "version", name="events_stream_version_key"),
    Index("events_txid_position_idx", "txid", "position"),
)


data_keys = Table(
    "data_keys",
    metadata,
    Column("key_id", Text, primary_key=True),
    Column("purpose", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("kek_id", Text, nullable=False),
    Column("wrapped", LargeBinary, nullable=False),
    Column("public_key", LargeBinary),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("rotated_at", DateTime(timezone=True)),
    Column("retired_at", DateTime(timezone=True)),
    Index(
        "data_keys_one_active_per_purpose",
        "purpose",
        unique=True,
        postgresql_where=text("state = 'active'"),
    ),
)


approvals = Table(
    "approvals",
    metadata,
    Column("approval_id", Text, primary_key=True),
    Column("run_id", Text, nullable=False),
    Column("thread_id", Text),
    Column("tool", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("call_id", Text, nullable=False),
    Column("args_digest", Text, nullable=False),
    Column("binding", Text, nullable=False),
    Column("requested_by", Text, nullable=False),
    Column("policy", JSONB, nullable=False),
    Column("status", Text, nullable=False),
    Column("reviews", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("decided_by", ARRAY(Text)),
    Column("decided_at", DateTime(timezone=True)),
    Column("expires_at", DateTime(timezone=True)),
    Column("consumed_by", Text),
    Column("consumed_at", DateTime(timezone=True)),
    Column("thread_config", JSONB),
    Column("requested_at", DateTime(timezone=True), nullable=False),
    Column("version", Integer, nullable=False),
    UniqueConstraint("run_id", "call_id", "args_digest", name="approvals_request_key"),
    Index("approvals_pending_idx", "requested_at", postgresql_where=text("status = 'pending'")),
    Index("approvals_run_idx", "run_id"),
)

approval_grants = Table(
    "approval_grants",
    metadata,
    Column("grant_id", Text, primary_key=True),
    Column("run_id", Text, nullable=False),
    Column("tool", Text, nullable=False),
    Column("granted_by", Text, nullable=False),
    Column("granted_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Index("approval_grants_run_tool_idx", "run_id", "tool", "expires_at"),
)

tool_calls = Table(
    "tool_calls",
    metadata,
    Column("run_id", Text, primary_key=True),
    Column("call_id", Text, primary_key=True),
    Column("tool", Text, nullable=False),
    Column("effect", Text, nullable=False),
    Column("once_per_run", Boolean, nullable=False),
    Column("request_digest", Text, nullable=False),
    Column("args_digest", Text, nullable=False),
    Column("args_sealed", LargeBinary, nullable=False),
    Column("idempotency_key", Text, nullable=False),
    Column("approval_id", Text),
    Column("status", Text, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("worker_id", Text, nullable=False),
    Column("lease_until", DateTime(timezone=True)),
    Column("result_digest", Text),
    Column("result_sealed", LargeBinary),
    Column("resolved_by", Text),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    Column("waiters", Integer, nullable=False, server_default=text("0")),
    Column("version", Integer, nullable=False),
    Column("approved_by", ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")),
    Column("approval_stream", Text),
    Index(
        "tool_calls_once_per_run_idx",
        "run_id",
        "tool",
        unique=True,
        postgresql_where=text("once_per_run"),
    ),
    Index("tool_calls_started_idx", "started_at"),
    Index("tool_calls_running_idx", "lease_until", postgresql_where=text("status = 'running'")),
)

# Let reflection (and so alembic's drift check) recognize the type instead of warning about it.
ischema_names["xid8"] = Xid8
