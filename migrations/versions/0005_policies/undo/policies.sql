-- What 0005 added goes; the previous signoff_commit_call and its grants come back from their
-- frozen copies.
DROP VIEW audit_policy_sets;
DROP FUNCTION signoff_commit_policy(boolean, jsonb, text, integer, text[], json[], text[], text);
DROP FUNCTION signoff_register_tool(text, text, jsonb);
DROP FUNCTION signoff_commit_call(boolean, text, text, text, text, boolean, text, text, text,
    text, text, integer, text, text, text, timestamp with time zone, timestamp with time zone,
    text[], text, bytea, bytea, double precision, bytea, jsonb, text, integer, text[], json[],
    text[], text);
DROP TABLE policy_sets;
DROP TABLE policy_tools;
DROP TABLE call_tallies;
DELETE FROM event_rights WHERE type_pattern = 'policy.published';
