-- Policy sets: workers and the reviewer side read them; the reviewer side publishes them
-- (signoff_commit_policy: signed, naming a policy administrator); workers register the tools
-- whose arguments a set is validated against. Auditors read audit_policy_sets.
GRANT SELECT ON policy_sets TO signoff_app, signoff_reviewer;
REVOKE EXECUTE ON FUNCTION signoff_commit_policy(boolean, jsonb, text, integer, text[], json[],
    text[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_commit_policy(boolean, jsonb, text, integer, text[], json[],
    text[], text) TO signoff_reviewer;
GRANT SELECT ON policy_tools TO signoff_app, signoff_reviewer;
REVOKE EXECUTE ON FUNCTION signoff_register_tool(text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_register_tool(text, text, jsonb) TO signoff_app;
GRANT SELECT ON audit_policy_sets TO signoff_auditor;
