-- Workers and reviewers read calls and write them only through signoff_commit_call (reviewers
-- resolve outcome_unknown calls); leases and waiter counts are the workers'. Even row locks go
-- through functions: FOR UPDATE needs UPDATE rights, which no role but the owner has.
REVOKE EXECUTE ON FUNCTION signoff_commit_call(boolean, text, text, text, text, boolean, text,
    text, text, text, text, integer, text, text, text, timestamp with time zone,
    timestamp with time zone, text[], text, bytea, bytea, double precision, bytea, jsonb, text,
    integer, text[], json[], text[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_commit_call(boolean, text, text, text, text, boolean, text,
    text, text, text, text, integer, text, text, text, timestamp with time zone,
    timestamp with time zone, text[], text, bytea, bytea, double precision, bytea, jsonb, text,
    integer, text[], json[], text[], text) TO signoff_app, signoff_reviewer;
REVOKE EXECUTE ON FUNCTION signoff_count_waiter(text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_count_waiter(text, text, integer) TO signoff_app;
GRANT SELECT ON tool_calls TO signoff_app, signoff_reviewer;
REVOKE EXECUTE ON FUNCTION signoff_lock_call(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_lock_call(text, text) TO signoff_app, signoff_reviewer;
REVOKE EXECUTE ON FUNCTION signoff_lock_once_per_run(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_lock_once_per_run(text, text) TO signoff_app, signoff_reviewer;
REVOKE EXECUTE ON FUNCTION signoff_renew_leases(text[], text[], integer[], bytea[],
    double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_renew_leases(text[], text[], integer[], bytea[],
    double precision) TO signoff_app;
GRANT SELECT ON audit_tool_calls TO signoff_auditor;
