-- Back to events without logins and rights without streams. Events of tag 3 cannot go back:
-- the code before this revision cannot verify them, and dropping their logins would lose
-- evidence, so the downgrade is refused while any exists.
DO $$
BEGIN
    IF EXISTS (SELECT FROM events WHERE tag_version <> 2) THEN
        RAISE EXCEPTION 'the journal holds events of tag version 3 (with their logins), which '
            'the revision before cannot verify: a downgrade would lose evidence';
    END IF;
END
$$;
-- Its columns change: the baseline's view is created again after this.
DROP VIEW audit_events;
ALTER TABLE events
    DROP CONSTRAINT events_login_check,
    DROP COLUMN login,
    ALTER COLUMN tag_version SET DEFAULT 2;
ALTER DOMAIN signoff_tag_version DROP CONSTRAINT signoff_tag_version_check;
ALTER DOMAIN signoff_tag_version ADD CONSTRAINT signoff_tag_version_check CHECK (VALUE = 2);

ALTER TABLE event_rights
    DROP CONSTRAINT event_rights_stream_prefix_check,
    DROP CONSTRAINT event_rights_type_pattern_check,
    DROP CONSTRAINT event_rights_pkey,
    DROP COLUMN stream_prefix,
    ADD CONSTRAINT event_rights_pkey PRIMARY KEY (type_pattern, role, when_field);
