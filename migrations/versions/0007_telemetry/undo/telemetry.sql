DROP FUNCTION signoff_delivery_state(text[]);
DROP INDEX webhook_deliveries_failed_idx;
DROP INDEX tool_calls_unknown_idx;
-- The json-returning signoff_commit_call goes; the earlier one and its grants come back from
-- their frozen copies (0005_policies).
DROP FUNCTION signoff_commit_call(boolean, text, text, text, text, boolean, text, text, text,
    text, text, integer, text, text, text, timestamp with time zone, timestamp with time zone,
    text[], text, bytea, bytea, double precision, bytea, jsonb, text, integer, text[], json[],
    text[], text);
