-- Sticky grants: requests for `tool` in `run_id` whose policy lets the granter approve them are
-- approved until `expires_at`. Written only by signoff_grant, with the `approval.granted` event
-- of stream `grant:<id>`, which carries the reviewer side's signature.
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
