-- The reverse of changes/call_leases.sql: the token-taking functions go (the baseline's are
-- made again from its frozen sources), and the column with them.
DROP FUNCTION signoff_commit_call(boolean, text, text, text, text, boolean, text, text, text,
    text, text, integer, text, text, text, timestamp with time zone, timestamp with time zone,
    text[], text, bytea, bytea, double precision, bytea, text, integer, text[], json[], text[],
    text);
DROP FUNCTION signoff_renew_leases(text[], text[], integer[], bytea[], double precision);
ALTER TABLE tool_calls DROP COLUMN lease_token_hash;
