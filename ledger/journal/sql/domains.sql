-- The rules of the journal's checked columns, as domains rather than table CHECKs: PostgreSQL
-- parses a table's CHECK expressions again in every statement that writes a row, a domain's
-- once per session, and on the append path that parsing is a large share of the work. Every
-- value written is checked all the same, by the database, whoever writes.
CREATE DOMAIN signoff_stream_id AS text
    CONSTRAINT signoff_stream_id_check CHECK (VALUE <> '' AND length(VALUE) <= 200);

CREATE DOMAIN signoff_event_version AS integer
    CONSTRAINT signoff_event_version_check CHECK (VALUE > 0);

CREATE DOMAIN signoff_event_type AS text
    CONSTRAINT signoff_event_type_check CHECK (VALUE <> '' AND length(VALUE) <= 100);

CREATE DOMAIN signoff_actor AS text
    CONSTRAINT signoff_actor_check CHECK (VALUE <> '' AND length(VALUE) <= 200);

CREATE DOMAIN signoff_hash AS bytea
    CONSTRAINT signoff_hash_check CHECK (length(VALUE) = 32);

-- The events' tag version (ledger/canonical.py): 3, the one every event is written under now,
-- whose canonical bytes cover the login that wrote it; 2, events written before logins were
-- recorded. A new canonical form would be a new tag and a new value here.
CREATE DOMAIN signoff_tag_version AS smallint
    CONSTRAINT signoff_tag_version_check CHECK (VALUE = ANY (ARRAY[2, 3]));
