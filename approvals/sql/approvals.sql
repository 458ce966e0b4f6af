-- The projection of the `approval:<id>` streams, written by signoff_commit_approval in the same
-- transaction as the events it projects, and rebuildable from them. `version` is the stream
-- version the row reflects: the next append expects it.
CREATE TABLE approvals (
    approval_id text NOT NULL,
    run_id text NOT NULL,
    thread_id text,
    tool text NOT NULL,
    kind text NOT NULL,
    call_id text NOT NULL,
    args_digest text NOT NULL,
    binding text NOT NULL,
    requested_by text NOT NULL,
    policy jsonb NOT NULL,
    status signoff_approval_status NOT NULL,
    reviews jsonb DEFAULT '[]'::jsonb NOT NULL,
    decided_at timestamp with time zone,
    expires_at timestamp with time zone,
    consumed_by text,
    consumed_at timestamp with time zone,
    thread_config jsonb,
    requested_at timestamp with time zone NOT NULL,
    version integer NOT NULL,
    -- Who decided, each name whole (a name may hold a comma): every approver of an approved
    -- request, sorted; the one reviewer of any other decision; who expired or cancelled it.
    decided_by text[],
    CONSTRAINT approvals_pkey PRIMARY KEY (approval_id),
    -- Every new request first looks for itself (the same run, call id and arguments are the
    -- same approval). This index finds it at once and serves every query by run, so there is
    -- no index on run_id alone, which a planner with lagging statistics would choose, reading
    -- the whole run for each request.
    CONSTRAINT approvals_request_key UNIQUE (run_id, call_id, args_digest)
);
CREATE INDEX approvals_pending_idx ON approvals (requested_at)
    WHERE ((status)::text = 'pending'::text);
-- Reviewers' history, newest decision first (`approvals._sql.history`): read in index order,
-- never sorted whole; pending requests, the busiest rows, are not in it.
CREATE INDEX approvals_decided_idx ON approvals
    ((COALESCE(decided_at, requested_at)) DESC, approval_id DESC)
    WHERE ((status)::text <> 'pending'::text);
