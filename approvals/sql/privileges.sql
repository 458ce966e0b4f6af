-- Workers and reviewers read approvals, grants and the reviewer directory, and write approvals
-- only through signoff_commit_approval; grants are the reviewer side's. The directory is the
-- owner's: signoff_commit_reviewer is granted to no role. The service's login (a reviewer's or
-- an auditor's role) checks tokens through functions and never reads api_tokens; so does the
-- MCP gateway, a worker's login, which checks its clients' agent tokens with signoff_token_use.
-- Auditors read the audit_* views.
REVOKE EXECUTE ON FUNCTION signoff_api_tokens_active() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_api_tokens_active() TO signoff_reviewer, signoff_auditor;
REVOKE EXECUTE ON FUNCTION signoff_commit_approval(boolean, text, text, text, text, text, text,
    text, text, text, jsonb, text, jsonb, text[], timestamp with time zone,
    timestamp with time zone, text, timestamp with time zone, jsonb, timestamp with time zone,
    text, integer, text[], json[], text[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_commit_approval(boolean, text, text, text, text, text, text,
    text, text, text, jsonb, text, jsonb, text[], timestamp with time zone,
    timestamp with time zone, text, timestamp with time zone, jsonb, timestamp with time zone,
    text, integer, text[], json[], text[], text) TO signoff_app, signoff_reviewer;
REVOKE EXECUTE ON FUNCTION signoff_commit_reviewer(boolean, jsonb, text, integer, text[], json[],
    text[], text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION signoff_grant(text, text, text, text, timestamp with time zone,
    timestamp with time zone, json) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_grant(text, text, text, text, timestamp with time zone,
    timestamp with time zone, json) TO signoff_reviewer;
GRANT SELECT ON approvals TO signoff_app, signoff_reviewer;
REVOKE EXECUTE ON FUNCTION signoff_lock_approval(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_lock_approval(text) TO signoff_app, signoff_reviewer;
REVOKE EXECUTE ON FUNCTION signoff_token_use(text, bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_token_use(text, bytea)
    TO signoff_reviewer, signoff_auditor, signoff_app;
GRANT SELECT ON approval_grants TO signoff_app, signoff_reviewer;
GRANT SELECT ON audit_api_tokens TO signoff_auditor;
GRANT SELECT ON audit_approvals TO signoff_auditor;
GRANT SELECT ON reviewers TO signoff_app, signoff_reviewer;
GRANT SELECT ON audit_reviewers TO signoff_auditor;
