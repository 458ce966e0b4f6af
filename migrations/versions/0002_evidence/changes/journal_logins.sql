-- Every event records the login that wrote it, under tag version 3, whose canonical bytes
-- cover it; events written before (tag 2) have none. Event rights name the streams they apply
-- to (ledger/journal/sql/events.sql, domains.sql, event_rights.sql).
ALTER DOMAIN signoff_tag_version DROP CONSTRAINT signoff_tag_version_check;
ALTER DOMAIN signoff_tag_version
    ADD CONSTRAINT signoff_tag_version_check CHECK (VALUE = ANY (ARRAY[2, 3]));
ALTER TABLE events
    ALTER COLUMN tag_version SET DEFAULT 3,
    ADD COLUMN login text,
    ADD CONSTRAINT events_login_check CHECK ((login IS NULL) = (tag_version = 2));

ALTER TABLE event_rights ADD COLUMN stream_prefix text;
-- Each type into the streams the code that holds the right writes it to.
UPDATE event_rights SET stream_prefix = CASE
    WHEN type_pattern = 'approval.granted' THEN 'grant:'
    WHEN starts_with(type_pattern, 'approval.') THEN 'approval:'
    WHEN starts_with(type_pattern, 'call.') THEN 'call:'
    WHEN type_pattern = 'ledger.revealed' THEN 'reveal:'
    WHEN type_pattern = 'key.%' THEN 'keys:'
END;
DO $$
BEGIN
    IF EXISTS (SELECT FROM event_rights WHERE stream_prefix IS NULL) THEN
        RAISE EXCEPTION 'event_rights holds rows of types Signoff does not know: '
            'give each a stream_prefix before upgrading';
    END IF;
END
$$;
ALTER TABLE event_rights
    ALTER COLUMN stream_prefix SET NOT NULL,
    DROP CONSTRAINT event_rights_pkey,
    ADD CONSTRAINT event_rights_pkey PRIMARY KEY (type_pattern, role, when_field, stream_prefix),
    ADD CONSTRAINT event_rights_type_pattern_check
        CHECK (type_pattern <> '' AND strpos(left(type_pattern, -1), '%') = 0),
    ADD CONSTRAINT event_rights_stream_prefix_check CHECK (stream_prefix <> '');
