-- signoff_commit_call returns the position and hash of the last event it appended (json) rather
-- than the positions: the old function goes, the source of the new one and its grants follow.
DROP FUNCTION signoff_commit_call(boolean, text, text, text, text, boolean, text, text, text,
    text, text, integer, text, text, text, timestamp with time zone, timestamp with time zone,
    text[], text, bytea, bytea, double precision, bytea, jsonb, text, integer, text[], json[],
    text[], text);
