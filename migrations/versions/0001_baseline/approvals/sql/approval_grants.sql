CREATE TABLE approval_grants (
    grant_id text NOT NULL,
    run_id text NOT NULL,
    tool text NOT NULL,
    granted_by text NOT NULL,
    granted_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    CONSTRAINT approval_grants_pkey PRIMARY KEY (grant_id)
);
CREATE INDEX approval_grants_run_tool_idx ON approval_grants (run_id, tool, expires_at);
