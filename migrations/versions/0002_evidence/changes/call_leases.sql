-- Leases fenced by a token: the row keeps the SHA-256 of the token only the lease's holder
-- knows. The functions that took no token go; their new forms (ledger/calls/sql) follow.
ALTER TABLE tool_calls ADD COLUMN lease_token_hash bytea;
DROP FUNCTION signoff_commit_call(boolean, text, text, text, text, boolean, text, text, text,
    text, text, integer, text, text, text, timestamp with time zone, timestamp with time zone,
    text[], text, bytea, bytea, double precision, text, integer, text[], json[], text[], text);
DROP FUNCTION signoff_renew_leases(text[], text[], integer[], double precision);
