-- signoff_commit_call takes the call's tally (p_tally): the old signature goes, the source of
-- the new one follows.
DROP FUNCTION signoff_commit_call(boolean, text, text, text, text, boolean, text, text, text,
    text, text, integer, text, text, text, timestamp with time zone, timestamp with time zone,
    text[], text, bytea, bytea, double precision, bytea, text, integer, text[], json[], text[],
    text);
-- The reviewer side publishes policy sets, signed.
INSERT INTO event_rights (type_pattern, role, when_field, stream_prefix) VALUES
    ('policy.published', 'signoff_reviewer', 'signature', 'policy:');
