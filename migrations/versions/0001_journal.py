"""The event journal: append-only, hash-chained, readable in a stable global order.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger.store.sqlscript import execute_script

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# `txid` is the id of the appending transaction. Readers order by (txid, position) and only read
# below the oldest transaction still running, so an event committed late never lands behind a
# reader's cursor: positions alone are handed out at insert, not in commit order.
CREATE_EVENTS = """
CREATE TABLE events (
    position    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    txid        xid8 NOT NULL DEFAULT pg_current_xact_id(),
    stream_id   text NOT NULL CHECK (stream_id <> '' AND length(stream_id) <= 200),
    version     integer NOT NULL CHECK (version > 0),
    type        text NOT NULL CHECK (type <> '' AND length(type) <= 100),
    data        json NOT NULL,
    actor       text NOT NULL CHECK (actor <> '' AND length(actor) <= 200),
    recorded_at timestamptz NOT NULL,
    hash        bytea NOT NULL CHECK (length(hash) = 32),
    CONSTRAINT events_stream_version_key UNIQUE (stream_id, version)
);
CREATE INDEX events_txid_position_idx ON events (txid, position);
"""

REFUSE_CHANGES = """
CREATE FUNCTION signoff_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the journal is append-only: % on % is refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'SG403';
END
$$;
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION signoff_refuse_change();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION signoff_refuse_change();
"""

# One call appends a batch to one stream: reads the head, checks the expected version, chains the
# hashes and inserts, in one round trip. Two racing appends both pass the head check; the unique
# (stream_id, version) index makes the later one fail (23505), which the client reports as a
# version conflict. The client computes each event's canonical bytes (ledger/canonical.py).
APPEND = """
CREATE FUNCTION signoff_append(
    p_stream text, p_expected integer, p_types text[], p_data json[], p_actors text[],
    p_times timestamptz[], p_canonical bytea[], p_notify text
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    head_version integer;
    head_hash bytea;
    positions bigint[] := '{}';
    pos bigint;
BEGIN
    SELECT version, hash INTO head_version, head_hash
        FROM events WHERE stream_id = p_stream ORDER BY version DESC LIMIT 1;
    IF NOT FOUND THEN
        head_version := 0;
        head_hash := decode(repeat('00', 32), 'hex');
    END IF;
    IF head_version <> p_expected THEN
        RAISE EXCEPTION 'stream % is at version %, expected %', p_stream, head_version, p_expected
            USING ERRCODE = 'SG409', DETAIL = head_version::text;
    END IF;
    FOR i IN 1 .. cardinality(p_types) LOOP
        head_hash := sha256(head_hash || p_canonical[i]);
        INSERT INTO events (stream_id, version, type, data, actor, recorded_at, hash)
            VALUES (p_stream, p_expected + i, p_types[i], p_data[i], p_actors[i], p_times[i],
                    head_hash)
            RETURNING position INTO pos;
        positions := positions || pos;
    END LOOP;
    IF p_notify IS NOT NULL THEN
        PERFORM pg_notify(p_notify, p_stream);
    END IF;
    RETURN positions;
END
$$;
"""

# Deployments grant this role to the login the service uses. It may append and read, never change.
APP_ROLE = """
DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'signoff_app') THEN
        CREATE ROLE signoff_app NOLOGIN;
    END IF;
END $$;
GRANT SELECT, INSERT ON events TO signoff_app;
GRANT EXECUTE ON FUNCTION signoff_append(text, integer, text[], json[], text[], timestamptz[],
    bytea[], text) TO signoff_app;
"""


def upgrade() -> None:
    execute_script(CREATE_EVENTS)
    execute_script(REFUSE_CHANGES)
    execute_script(APPEND)
    execute_script(APP_ROLE)


def downgrade() -> None:
    # Roles are shared by every database of the cluster, so the role stays; its grants go with
    # the objects dropped here.
    execute_script(
        """
        DROP FUNCTION signoff_append(text, integer, text[], json[], text[], timestamptz[], bytea[],
            text);
        DROP TABLE events;
        DROP FUNCTION signoff_refuse_change();
        """
    )
