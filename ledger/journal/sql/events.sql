CREATE TABLE events (
    "position" bigint GENERATED ALWAYS AS IDENTITY,
    txid xid8 DEFAULT pg_current_xact_id() NOT NULL,
    stream_id signoff_stream_id NOT NULL,
    version signoff_event_version NOT NULL,
    type signoff_event_type NOT NULL,
    data json NOT NULL,
    actor signoff_actor NOT NULL,
    recorded_at timestamp with time zone NOT NULL,
    hash signoff_hash NOT NULL,
    tag_version signoff_tag_version DEFAULT 2,
    CONSTRAINT events_pkey PRIMARY KEY ("position"),
    CONSTRAINT events_stream_version_key UNIQUE (stream_id, version)
);
CREATE INDEX events_txid_position_idx ON events (txid, "position");
CREATE TRIGGER events_append_only BEFORE DELETE OR UPDATE ON events
    FOR EACH ROW EXECUTE FUNCTION signoff_refuse_change();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION signoff_refuse_change();
