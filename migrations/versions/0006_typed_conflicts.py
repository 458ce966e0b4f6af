"""The journal's own errors carry their fields; a lost append race is always SG409.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

Clients type errors by SQLSTATE alone (`ledger.errors`), so each of our codes says what it is
about in DETAIL, as a JSON object: SG409 the stream and its expected and actual versions, SG403
the table and the refused operation. Two appends racing for one stream both pass the head check;
the later one used to fail on the unique (stream_id, version) index (23505, which says neither
stream nor versions). Its first insert now waits for the earlier one and, when that committed,
raises SG409 with the version it found. Only the first insert of a batch can meet a racing
append (every append starts right after a committed head), and ON CONFLICT needs no
subtransaction, so the common path costs one index probe more.
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger.store.sqlscript import execute_script, load_revision

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

REFUSE_CHANGES = """
CREATE OR REPLACE FUNCTION signoff_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the journal is append-only: % on % is refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'SG403',
              DETAIL = json_build_object('table', TG_TABLE_NAME, 'operation', TG_OP)::text;
END
$$;
"""

APPEND = """
CREATE OR REPLACE FUNCTION signoff_append(
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
    IF head_version = p_expected THEN
        head_hash := sha256(head_hash || p_canonical[1]);
        INSERT INTO events (stream_id, version, type, data, actor, recorded_at, hash)
            VALUES (p_stream, p_expected + 1, p_types[1], p_data[1], p_actors[1], p_times[1],
                    head_hash)
            ON CONFLICT (stream_id, version) DO NOTHING
            RETURNING position INTO pos;
        IF NOT FOUND THEN  -- a racing append committed first: this statement sees its head
            SELECT max(version) INTO head_version FROM events WHERE stream_id = p_stream;
        END IF;
    END IF;
    IF head_version <> p_expected OR pos IS NULL THEN
        RAISE EXCEPTION 'stream % is at version %, expected %', p_stream, head_version, p_expected
            USING ERRCODE = 'SG409',
                  DETAIL = json_build_object('stream_id', p_stream, 'expected_version',
                      p_expected, 'actual_version', head_version)::text;
    END IF;
    positions := positions || pos;
    FOR i IN 2 .. cardinality(p_types) LOOP
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


def upgrade() -> None:
    execute_script(REFUSE_CHANGES)
    execute_script(APPEND)


def downgrade() -> None:
    # Back to 0001's function bodies (its triggers and grants are untouched by this revision).
    journal = load_revision(__file__, "0001_journal")
    refuse = journal.REFUSE_CHANGES.split("CREATE TRIGGER", 1)[0]
    for script in (refuse, journal.APPEND):
        execute_script(script.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))
