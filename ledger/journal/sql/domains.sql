-- The rules of the journal's checked columns, as domains rather than table CHECKs: PostgreSQL
-- parses a table's CHECK expressions again in every statement that writes a row, a domain's
-- once per session, and on the append path that parsing is a large share of the work. Every
-- value written is checked all the same, by the database, whoever writes. NOT VALID only means
-- PostgreSQL never scanned stored values against a check; a domain no column uses yet has none.
CREATE DOMAIN signoff_stream_id AS text;
ALTER DOMAIN signoff_stream_id
    ADD CONSTRAINT signoff_stream_id_check
    CHECK (((VALUE <> ''::text) AND (length(VALUE) <= 200))) NOT VALID;

CREATE DOMAIN signoff_event_version AS integer;
ALTER DOMAIN signoff_event_version
    ADD CONSTRAINT signoff_event_version_check CHECK ((VALUE > 0)) NOT VALID;

CREATE DOMAIN signoff_event_type AS text;
ALTER DOMAIN signoff_event_type
    ADD CONSTRAINT signoff_event_type_check
    CHECK (((VALUE <> ''::text) AND (length(VALUE) <= 100))) NOT VALID;

CREATE DOMAIN signoff_actor AS text;
ALTER DOMAIN signoff_actor
    ADD CONSTRAINT signoff_actor_check
    CHECK (((VALUE <> ''::text) AND (length(VALUE) <= 200))) NOT VALID;

CREATE DOMAIN signoff_hash AS bytea;
ALTER DOMAIN signoff_hash
    ADD CONSTRAINT signoff_hash_check CHECK ((length(VALUE) = 32)) NOT VALID;

-- The events' tag version: every event the append functions write is hashed under tag 2.
CREATE DOMAIN signoff_tag_version AS smallint;
ALTER DOMAIN signoff_tag_version
    ADD CONSTRAINT signoff_tag_version_check CHECK ((VALUE = 2)) NOT VALID;
