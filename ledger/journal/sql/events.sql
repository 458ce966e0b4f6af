-- The event journal: append-only (the triggers below refuse any other change), hash-chained per
-- stream, written only through the append functions, which set `txid`, `recorded_at`, `login`
-- and `hash` themselves, so an event's place in the global order, its time and who wrote it
-- are the database's word.
-- `hash` is SHA-256(the stream's previous hash || the event's canonical bytes), from 32 zero
-- bytes (ledger/canonical.py). The unique (stream_id, version) fences racing appends. The
-- checked columns are of domains (domains.sql), whose checks stay parsed for the session.
CREATE TABLE events (
    "position" bigint GENERATED ALWAYS AS IDENTITY,
    -- The appending transaction. Positions are handed out at insert, not in commit order, so
    -- readers order by (txid, position) and read only below the oldest transaction still
    -- running: an event committed late never lands behind a reader's cursor.
    txid xid8 DEFAULT pg_current_xact_id() NOT NULL,
    stream_id signoff_stream_id NOT NULL,
    version signoff_event_version NOT NULL,
    type signoff_event_type NOT NULL,
    data json NOT NULL,
    actor signoff_actor NOT NULL,
    recorded_at timestamp with time zone NOT NULL,
    hash signoff_hash NOT NULL,
    -- Which tag starts the canonical bytes: 3, `signoff.event.v3`, every event written now; 2,
    -- `signoff.event.v2`, events written before `login` was recorded. The hash covers the tag,
    -- so the column is never taken on its word: an event whose tag version is changed fails
    -- verification.
    tag_version signoff_tag_version NOT NULL DEFAULT 3,
    -- The database login that wrote the event (`session_user`, whatever role it set), which
    -- the append functions take from the session, never from their caller; tag 3's canonical
    -- bytes cover it. Events of tag 2 were written before it was recorded and have none.
    login text,
    CONSTRAINT events_pkey PRIMARY KEY ("position"),
    CONSTRAINT events_stream_version_key UNIQUE (stream_id, version),
    CONSTRAINT events_login_check CHECK ((login IS NULL) = (tag_version = 2))
);
CREATE INDEX events_txid_position_idx ON events (txid, "position");
CREATE TRIGGER events_append_only BEFORE DELETE OR UPDATE ON events
    FOR EACH ROW EXECUTE FUNCTION signoff_refuse_change();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION signoff_refuse_change();
